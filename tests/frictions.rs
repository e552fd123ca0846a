//! Smaller frictions a new user meets, each end to end: the repo root that
//! sandbox-run chooses or refuses, `NO_COLOR` under `validate`, Java and a Python virtualenv
//! under `ci`, and a repo whose files belong to several users.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A directory with no git repository above it (the fixture base lies inside this checkout):
/// under the system's temp dir, 0700, removed when dropped.
struct NoGit(PathBuf);

impl NoGit {
    fn new(name: &str) -> NoGit {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("sandbox-run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let d = std::fs::canonicalize(&d).unwrap();
        assert!(
            !d.ancestors().any(|a| a.join(".git").exists()),
            "{} is inside a git repository",
            d.display()
        );
        NoGit(d)
    }
}

impl Drop for NoGit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `sandbox-run ARGS` in `cwd`, with a predictable environment.
fn sandbox_run(args: &[&str], cwd: &Path, home: &Path) -> Run {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
        .env("HOME", home)
        .current_dir(cwd)
        .stdin(Stdio::null());
    run_command(c, LIMIT)
}

fn assert_one_line_125(r: &Run, needle: &str) {
    r.assert_code(125);
    assert_eq!(r.stderr.lines().count(), 1, "one line expected:\n{r}");
    assert!(r.stderr.contains(needle), "expected {needle:?}:\n{r}");
}

/// `--repo` at `/`, a system directory, the caller's whole `$HOME` or above it is refused
/// with a reason (one line, 125), and so is `$HOME` chosen as the current directory for want
/// of git. Controls: a project inside `$HOME` and the same system path's project-like
/// neighbour run.
#[test]
fn system_directories_and_the_whole_home_are_refused_as_repo() {
    let t = NoGit::new("repo-refusal");
    let home = t.0.join("home");
    std::fs::create_dir_all(home.join("proj/src")).unwrap();
    let check = |repo: Option<&Path>, cwd: &Path| {
        let mut a = vec!["check", "--profile", "validate"];
        let r;
        if let Some(repo) = repo {
            r = repo.to_str().unwrap().to_string();
            a.extend(["--repo", r.as_str()]);
        }
        a.extend(["--", "node", "x.js"]);
        sandbox_run(&a, cwd, &home)
    };
    for (repo, why) in [
        ("/", "the whole file system"),
        ("/usr", "a system directory"),
        ("/etc", "a system directory"),
        ("/usr/lib", "a system directory"),
        ("/var", "a system directory"),
    ] {
        let r = check(Some(Path::new(repo)), &home);
        assert_one_line_125(&r, why);
        assert!(r.stderr.contains("given by --repo"), "{r}");
    }
    let r = check(Some(&home), &home);
    assert_one_line_125(&r, "the caller's whole home directory");
    let r = check(Some(&t.0), &home);
    assert_one_line_125(&r, "above the caller's home directory");
    // no --repo, no git, in $HOME: the current directory would be the repo
    let r = check(None, &home);
    assert_one_line_125(&r, "the caller's whole home directory");
    assert!(r.stderr.contains("no git repository above it"), "{r}");
    // controls
    check(Some(&home.join("proj")), &home).assert_code(0);
    check(None, &home.join("proj/src")).assert_code(0);
}

/// A project without git, run from a subdirectory: one stderr line says which directory
/// became the repo, how to choose another, and where the project's marker file is.
/// Control: inside a git repository nothing is said.
#[test]
fn without_git_the_chosen_repo_is_named() {
    let t = NoGit::new("nogit-notice");
    let proj = t.0.join("proj");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(proj.join("package.json"), "{}\n").unwrap();
    let r = sandbox_run(
        &["check", "--profile", "validate", "--", "node", "x.js"],
        &proj.join("src"),
        &t.0,
    );
    r.assert_code(0);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{r}");
    let src = proj.join("src");
    assert!(
        lines[0].contains(&format!("the repo is {}", src.display())),
        "{r}"
    );
    assert!(lines[0].contains("--repo DIR"), "{r}");
    assert!(
        lines[0].contains(&format!("package.json is in {}", proj.display())),
        "{r}"
    );
    // control: with git, the git top level is the repo and nothing is said
    std::fs::create_dir(proj.join(".git")).unwrap();
    let r = sandbox_run(
        &["check", "--profile", "validate", "--", "node", "x.js"],
        &proj.join("src"),
        &t.0,
    );
    r.assert_code(0);
    assert_eq!(r.stderr, "", "{r}");
}

/// `validate` sets `NO_COLOR=1` (captured tails stay readable; `CI=true` alone turns colours
/// on in mocha and others), whatever the caller's environment says.
#[test]
fn validate_sets_no_color() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("no-color");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let r = run_probe_with(&p, &repo, &[], &["getenv", "NO_COLOR"], |c| {
        c.env_remove("NO_COLOR");
    });
    assert_eq!(r.assert_ok(), "1", "{r}");
    let r = run_probe_with(&p, &repo, &[], &["getenv", "CI"], |c| {
        c.env_remove("CI");
    });
    assert_eq!(r.assert_ok(), "true", "{r}");
}

/// Under `ci`, Java works on Debian: its configuration (`java.security`, `jvm.cfg`) lives in
/// `/etc/java-*`, reached through links from the JDK's `conf` and `lib` directories. A
/// program that compiles from source and uses the security providers runs, as on the host.
#[test]
fn java_works_under_ci() {
    if !sandbox_works() {
        return;
    }
    if which("java").is_none() {
        skip_tool("java is not installed (Debian: apt-get install openjdk-17-jre-headless)");
        return;
    }
    let f = Fixture::new("java");
    let repo = f.repo("repo");
    std::fs::write(
        repo.join("Hello.java"),
        r#"public class Hello {
    public static void main(String[] args) throws Exception {
        byte[] d = java.security.MessageDigest.getInstance("SHA-256").digest("abc".getBytes("UTF-8"));
        StringBuilder hex = new StringBuilder();
        for (byte b : d) hex.append(String.format("%02x", b));
        new java.security.SecureRandom().nextInt();
        System.out.println("java ok " + hex);
    }
}
"#,
    )
    .unwrap();
    let want = "java ok ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let host = {
        let mut c = Command::new("java");
        c.arg("Hello.java").current_dir(&repo).stdin(Stdio::null());
        run_command(c, LIMIT)
    };
    if host.code != Some(0) {
        // a JRE without the compiler module cannot run a source file: not the sandbox's fault
        skip_tool(&format!(
            "java cannot run a source file on the host:\n{host}"
        ));
        return;
    }
    assert!(host.stdout.contains(want), "{host}");
    let p = f.profile(&Spec::extends("ci").no_probe());
    let r = run_command(
        sandbox_command(&p, &repo, &[], &["java", "Hello.java"]),
        LIMIT,
    );
    r.assert_code(0);
    assert!(r.stdout.contains(want), "{r}");
}

/// Under `ci`, a Python virtualenv works: `.venv/bin/python -m pytest` (a link in the repo
/// leading to the system python) runs as `.venv/bin/pytest` does, and sees the venv
/// (`sys.prefix` is the venv). pytest comes from the system's site-packages when installed
/// there, else the stdlib's unittest runs the same test.
#[test]
fn python_virtualenv_works_under_ci() {
    if !sandbox_works() {
        return;
    }
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        skip_tool("/usr/bin/python3 is not installed");
        return;
    }
    let f = Fixture::new("venv");
    let repo = f.repo("repo");
    let mut c = Command::new(python);
    c.args([
        "-m",
        "venv",
        "--without-pip",
        "--system-site-packages",
        ".venv",
    ])
    .current_dir(&repo);
    let made = run_command(c, LIMIT);
    if made.code != Some(0) {
        skip_tool(&format!("python3 -m venv failed on the host:\n{made}"));
        return;
    }
    std::fs::write(
        repo.join("test_venv.py"),
        "import sys, unittest\n\n\
         class T(unittest.TestCase):\n    def test_prefix(self):\n        \
         self.assertTrue(sys.prefix.endswith('.venv'), sys.prefix)\n\n\
         def test_plain():\n    assert sys.prefix != sys.base_prefix\n",
    )
    .unwrap();
    let has_pytest = {
        let mut c = Command::new(repo.join(".venv/bin/python"));
        c.args(["-c", "import pytest"]).current_dir(&repo);
        run_command(c, LIMIT).code == Some(0)
    };
    let argv: &[&str] = if has_pytest {
        &[
            ".venv/bin/python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
    } else {
        skip_tool("pytest is not importable by /usr/bin/python3: unittest runs instead");
        &[".venv/bin/python", "-m", "unittest", "-v", "test_venv"]
    };
    let p = f.profile(&Spec::extends("ci").no_probe());
    let r = run_command(sandbox_command(&p, &repo, &[], argv), LIMIT);
    r.assert_code(0);
    let passed = if has_pytest { "passed" } else { "OK" };
    assert!(r.all().contains(passed), "{r}");
    if has_pytest {
        assert!(r.stdout.contains("2 passed"), "{r}");
    }
}

/// A repo holding files of several users: one stderr line warns that the command can write
/// only the files of the user it runs as (root runs a repo as its owner). Controls: a repo of
/// one owner, without `.git` (sandbox-run's own placeholder `.git` does not count), says
/// nothing; the warning is a warning: the command still runs and writes its own files.
#[test]
fn a_repo_of_several_owners_warns() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("owners");
    let repo = f.repo("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/a.js"), "//\n").unwrap();
    let p = f.profile(&Spec::extends("ci"));
    let probe_write = |repo: &Path| {
        let target = repo.join("out.txt");
        run_probe(&p, repo, &[], &["write", target.to_str().unwrap()])
    };
    let warned = |r: &ProbeRun| {
        r.run
            .stderr
            .lines()
            .filter(|l| l.contains("the repo holds files of several users"))
            .count()
    };
    let r = probe_write(&repo);
    r.assert_ok();
    assert_eq!(warned(&r), 0, "a repo of one owner:\n{r}");
    if !is_root() {
        skip_tool("not root: cannot give a repo file to another user (the warning case)");
        return;
    }
    // the repo is uid 1001's (root runs it as 1001), one file is 1002's
    fn chown_tree(p: &Path, id: u32) {
        std::os::unix::fs::lchown(p, Some(id), Some(id)).unwrap();
        if p.symlink_metadata().unwrap().is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                chown_tree(&e.unwrap().path(), id);
            }
        }
    }
    chown_tree(&repo, 1001);
    let r = probe_write(&repo);
    r.assert_ok();
    assert_eq!(warned(&r), 0, "a repo of one owner, run by root:\n{r}");
    std::fs::write(repo.join("src/b.js"), "//\n").unwrap();
    std::os::unix::fs::lchown(repo.join("src/b.js"), Some(1002), Some(1002)).unwrap();
    let r = probe_write(&repo);
    r.assert_ok();
    assert_eq!(warned(&r), 1, "{r}");
    let line = r
        .run
        .stderr
        .lines()
        .find(|l| l.contains("several users"))
        .unwrap();
    assert!(
        line.contains(&format!(
            "{} is uid 1002's",
            repo.join("src/b.js").display()
        )) && line.contains("runs as uid 1001")
            && line.contains("can write only the files uid 1001 owns"),
        "{line}"
    );

    // Deep in a large repo, past what is looked at before a run: a run that fails (here on
    // that very file) looks deeper afterwards and warns.
    let big = f.repo("big");
    for i in 0..400 {
        std::fs::write(big.join(format!("f{i:03}.txt")), "").unwrap();
    }
    let deep = big.join("z/y/x/deep.txt");
    std::fs::create_dir_all(deep.parent().unwrap()).unwrap();
    std::fs::write(&deep, "").unwrap();
    chown_tree(&big, 1001);
    std::os::unix::fs::lchown(&deep, Some(1002), Some(1002)).unwrap();
    let r = run_probe(&p, &big, &[], &["write", deep.to_str().unwrap()]);
    r.assert_errno(&[libc::EACCES]);
    assert_eq!(warned(&r), 1, "{r}");
    assert!(
        r.run
            .stderr
            .contains(&format!("{} is uid 1002's", deep.display())),
        "{r}"
    );
}

//! Real programs under the shipped profiles (made cgroup best-effort until that layer lands):
//! the bundled node example under `validate`, and git, pytest and cargo under `ci`. Each run
//! is compared with the same command on the host where the counts matter.
//!
//! Toolchains that the current user cannot reach (root's ~/.cargo or ~/.pyenv in the rootless
//! runs) are skipped with a message; node and npm live in /usr/bin and must work rootless.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SLOW: Duration = Duration::from_secs(300);

fn hello_node() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello-node")
}

fn have_node_and_npm() -> bool {
    if which("node").is_none() || which("npm").is_none() {
        skip_tool("node or npm is not installed");
        return false;
    }
    true
}

/// `# pass N` / `# fail N` from node's TAP reporter.
fn tap_count(out: &str, key: &str) -> Option<u32> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("# {key} ")))
        .and_then(|n| n.trim().parse().ok())
}

fn host_run(program: &str, args: &[&str], dir: &Path) -> Run {
    let mut c = Command::new(program);
    c.args(args).current_dir(dir);
    run_command(c, SLOW)
}

fn sandboxed(profile: &Path, repo: &Path, argv: &[&str]) -> Run {
    run_command(sandbox_command(profile, repo, &[], argv), SLOW)
}

fn validate_like(f: &Fixture) -> PathBuf {
    f.profile(&Spec::extends("validate").no_probe())
}

fn ci_like(f: &Fixture) -> PathBuf {
    f.profile(&Spec::extends("ci").no_probe())
}

/// The bundled example's `npm test` passes under a validate-like profile, with the same
/// counts as on the host.
#[test]
fn hello_node_npm_test_passes_under_validate() {
    if !sandbox_works() || !have_node_and_npm() {
        return;
    }
    let f = Fixture::new("hello-node");
    let repo = f.path("hello-node");
    copy_tree(&hello_node(), &repo);
    let p = validate_like(&f);

    let h = host_run("npm", &["test"], &repo);
    h.assert_code(0);
    let r = sandboxed(&p, &repo, &["npm", "test"]);
    r.assert_code(0);
    let pass = tap_count(&r.stdout, "pass");
    assert!(pass.unwrap_or(0) > 0, "no passing tests reported:\n{r}");
    assert_eq!(tap_count(&r.stdout, "fail"), Some(0), "{r}");
    assert_eq!(
        (pass, tap_count(&r.stdout, "fail")),
        (tap_count(&h.stdout, "pass"), tap_count(&h.stdout, "fail")),
        "different counts inside and outside:\ninside:\n{r}\noutside:\n{h}"
    );
}

/// A copy of the example with a failing test: the failure shows and the exit code is not 0.
#[test]
fn hello_node_failing_test_is_a_failure() {
    if !sandbox_works() || !have_node_and_npm() {
        return;
    }
    let f = Fixture::new("hello-node-fail");
    let repo = f.path("hello-node");
    copy_tree(&hello_node(), &repo);
    std::fs::write(
        repo.join("test/zz_broken.test.js"),
        "const test = require('node:test');\nconst assert = require('node:assert');\n\
         test('sbx-e2e deliberately broken', () => { assert.strictEqual(1 + 1, 3); });\n",
    )
    .unwrap();
    let p = validate_like(&f);

    let r = sandboxed(&p, &repo, &["npm", "test"]);
    assert!(
        matches!(r.code, Some(c) if c != 0 && c < 124),
        "a failing test suite must exit with its own non-zero code:\n{r}"
    );
    assert!(
        r.stdout.contains("not ok") && r.stdout.contains("sbx-e2e deliberately broken"),
        "the failure is not shown:\n{r}"
    );
    assert_eq!(tap_count(&r.stdout, "fail"), Some(1), "{r}");
    assert!(tap_count(&r.stdout, "pass").unwrap_or(0) > 0, "{r}");
}

/// The built-in `validate` profile itself (cgroup required): the README's first command.
/// Where this host gives the user no cgroup it refuses with 125 naming the cgroup and
/// `--without cgroup`, and runs with that flag (reported degraded); the full run is then a
/// skip, or a failure when SANDBOX_RUN_TEST_REQUIRE names cgroup.
#[test]
fn hello_node_under_the_builtin_validate_profile() {
    if !sandbox_works() || !have_node_and_npm() {
        return;
    }
    let f = Fixture::new("hello-node-builtin");
    let repo = f.path("hello-node");
    copy_tree(&hello_node(), &repo);
    let readme = |opts: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(["--profile", "validate", "--repo"])
            .arg(&repo)
            .args(opts)
            .args(["--", "npm", "test"])
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
            .current_dir(&repo);
        run_command(c, SLOW)
    };
    let r = readme(&[]);
    if r.code == Some(125) && r.stderr.contains("cgroup") {
        // No cgroup for this user (rootless on a hybrid host): the refusal names the one flag
        // that runs the README's first command anyway, and with it the command works.
        assert!(r.stderr.contains("add --without cgroup"), "{r}");
        let w = readme(&["--without", "cgroup"]);
        w.assert_code(0);
        assert_eq!(tap_count(&w.stdout, "fail"), Some(0), "{w}");
        assert!(
            w.stderr
                .contains("degraded: running without the cgroup layer (--without cgroup)"),
            "{w}"
        );
        skip(
            "cgroup",
            &format!(
                "the validate profile requires the cgroup layer: {}",
                r.stderr.trim()
            ),
        );
        return;
    }
    r.assert_code(0);
    assert_eq!(tap_count(&r.stdout, "fail"), Some(0), "{r}");
}

fn git(repo: &Path, args: &[&str]) {
    let r = run_command(
        {
            let mut c = Command::new("git");
            c.args([
                "-c",
                "user.name=sbx-e2e",
                "-c",
                "user.email=sbx-e2e@example.invalid",
            ])
            .args(args)
            .current_dir(repo);
            c
        },
        SLOW,
    );
    r.assert_code(0);
}

/// `git status`, `git log` and a commit in a real repository under a ci-like profile (repo
/// read-write, `.git/config` protected).
#[test]
fn git_works_under_ci() {
    if !sandbox_works() {
        return;
    }
    if which("git").is_none() {
        skip_tool("git is not installed");
        return;
    }
    let f = Fixture::new("git");
    let repo = f.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["-c", "init.defaultBranch=main", "init", "-q"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "sbx-e2e initial"]);
    std::fs::write(repo.join("untracked.txt"), "u\n").unwrap();
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();
    let p = ci_like(&f);

    let r = sandboxed(&p, &repo, &["git", "status"]);
    r.assert_code(0);
    for want in ["On branch main", "modified:", "a.txt", "untracked.txt"] {
        assert!(r.stdout.contains(want), "{want:?} missing:\n{r}");
    }
    let r = sandboxed(&p, &repo, &["git", "log", "--oneline"]);
    r.assert_code(0);
    assert!(r.stdout.contains("sbx-e2e initial"), "{r}");
    let r = sandboxed(
        &p,
        &repo,
        &[
            "git",
            "-c",
            "user.name=sbx",
            "-c",
            "user.email=sbx@example.invalid",
            "commit",
            "-q",
            "-am",
            "sbx-e2e from inside",
        ],
    );
    r.assert_code(0);
    let log = host_run("git", &["log", "--oneline"], &repo);
    assert!(
        log.stdout.contains("sbx-e2e from inside"),
        "the commit made inside did not persist:\n{log}"
    );
}

/// `python3 -m pytest` on a tiny example under a ci-like profile: passes, and a failing copy
/// fails with the failure shown. Skips when pytest is not installed for this user's python3
/// (`.ci/run` installs it; the sandbox has no network to do it).
#[test]
fn python_pytest_works_under_ci() {
    if !sandbox_works() {
        return;
    }
    let Some(py) = which("python3") else {
        skip_tool("python3 is not installed");
        return;
    };
    let probe = host_run("python3", &["-c", "import pytest"], Path::new("/"));
    if probe.code != Some(0) {
        skip_tool(&format!(
            "pytest is not installed for {} (python3 -m pip install pytest; .ci/run does)",
            py.display()
        ));
        return;
    }
    let f = Fixture::new("pytest");
    let repo = f.path("repo");
    f.write("repo/calc.py", "def add(a, b):\n    return a + b\n");
    f.write(
        "repo/test_calc.py",
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n\
         def test_add_negative():\n    assert add(-1, 1) == 0\n",
    );
    let p = ci_like(&f);
    let argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"];

    let r = sandboxed(&p, &repo, &argv);
    r.assert_code(0);
    assert!(r.stdout.contains("2 passed"), "{r}");

    f.write(
        "repo/test_broken.py",
        "def test_sbx_e2e_broken():\n    assert 1 + 1 == 3\n",
    );
    let r = sandboxed(&p, &repo, &argv);
    r.assert_code(1);
    assert!(
        r.stdout.contains("1 failed") && r.stdout.contains("test_sbx_e2e_broken"),
        "{r}"
    );
}

/// `cargo test --offline` on a tiny crate without dependencies under a ci-like profile.
/// Skips when cargo is not reachable (root's ~/.cargo in the rootless runs).
#[test]
fn cargo_test_works_under_ci() {
    if !sandbox_works() {
        return;
    }
    let Some(cargo) = which("cargo") else {
        skip_tool("cargo is not in PATH for this user");
        return;
    };
    if host_run("cargo", &["--version"], Path::new("/")).code != Some(0) {
        skip_tool(&format!("{} does not run for this user", cargo.display()));
        return;
    }
    let f = Fixture::new("cargo");
    let repo = f.path("tiny");
    f.write(
        "tiny/Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    f.write(
        "tiny/src/lib.rs",
        "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n\n#[cfg(test)]\nmod tests {\n    \
         #[test]\n    fn doubles() {\n        assert_eq!(super::double(21), 42);\n    }\n}\n",
    );
    let p = ci_like(&f);
    let r = sandboxed(&p, &repo, &["cargo", "test", "--offline"]);
    r.assert_code(0);
    assert!(r.stdout.contains("test tests::doubles ... ok"), "{r}");
    assert!(r.stdout.contains("test result: ok. 1 passed"), "{r}");
    assert!(
        repo.join("target").is_dir(),
        "the build did not land in the repo"
    );
}

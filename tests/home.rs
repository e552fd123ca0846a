//! Agent CLIs as their users run them: a kept sandbox home
//! (`--home persist`) that is never the real one and is made without following a link; the
//! caller's git identity inside, and git in a linked worktree in every repo mode; a root
//! workload that is not uid 0 inside; a CLI installed under a `node_modules` outside the repo;
//! Codex's own sandbox turned off inside ours.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The ci profile (bash, git, node; repo read-write), as is.
fn ci(f: &Fixture) -> PathBuf {
    f.profile(&Spec::extends("ci").no_probe())
}

/// `bash -c script` inside, with `XDG_STATE_HOME` in the fixture (where kept homes go).
fn bash(f: &Fixture, p: &Path, repo: &Path, opts: &[&str], script: &str) -> Run {
    let mut c = sandbox_command(p, repo, opts, &["bash", "-c", script]);
    c.env("XDG_STATE_HOME", f.path("state"));
    run_command(c, LIMIT)
}

/// Where the kept home of profile `p` is (what `sandbox-run home P` prints).
fn kept_home(f: &Fixture, p: &Path) -> PathBuf {
    let mut c = Command::new(BIN);
    c.args(["home"])
        .arg(p)
        .env("XDG_STATE_HOME", f.path("state"))
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    PathBuf::from(r.stdout.trim())
}

fn git(f: &Fixture, dir: &Path, args: &[&str]) -> Run {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .env("HOME", &f.dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    run_command(c, Duration::from_secs(30))
}

fn real_repo(f: &Fixture, name: &str) -> PathBuf {
    let r = f.path(name);
    std::fs::create_dir_all(&r).unwrap();
    git(f, &r, &["init", "-q", "-b", "main"]).assert_code(0);
    std::fs::write(r.join("file.txt"), "one\n").unwrap();
    git(f, &r, &["add", "file.txt"]).assert_code(0);
    git(f, &r, &["commit", "-qm", "init"]).assert_code(0);
    r
}

fn have(tool: &str) -> bool {
    if which(tool).is_none() {
        skip_tool(&format!("{tool} is not installed"));
        return false;
    }
    true
}

/// A file written in `$HOME` is there in the next run with `--home persist`, not with
/// `--home tmp` (the default); the directory is the one `sandbox-run home` prints, made 0700
/// and owned by the caller, and never the caller's real home.
#[test]
fn a_kept_home_survives_runs_and_a_tmp_one_does_not() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home-kept");
    let repo = f.repo("repo");
    let p = ci(&f);
    let real_home = std::env::var("HOME").unwrap_or_default();
    bash(
        &f,
        &p,
        &repo,
        &["--home", "persist"],
        "echo kept > \"$HOME/seen\" && echo \"HOME=$HOME\"",
    )
    .assert_code(0);
    let r = bash(&f, &p, &repo, &["--home", "persist"], "cat \"$HOME/seen\"");
    r.assert_code(0);
    assert_eq!(r.stdout.trim(), "kept", "{r}");
    let r = bash(&f, &p, &repo, &["--home", "tmp"], "cat \"$HOME/seen\"");
    assert_ne!(r.code, Some(0), "a tmp home saw the kept file:\n{r}");
    let r = bash(&f, &p, &repo, &[], "cat \"$HOME/seen\"");
    assert_ne!(r.code, Some(0), "the default home is not tmp:\n{r}");

    let dir = kept_home(&f, &p);
    assert!(
        dir.starts_with(f.path("state/sandbox-run/home")),
        "{}",
        dir.display()
    );
    assert_eq!(std::fs::read_to_string(dir.join("seen")).unwrap(), "kept\n");
    let m = std::fs::symlink_metadata(&dir).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.mode() & 0o7777, 0o700, "mode of {}", dir.display());
    // SAFETY: geteuid cannot fail.
    assert_eq!(m.uid(), unsafe { libc::geteuid() });
    assert!(
        real_home.is_empty() || !Path::new(&real_home).join("seen").exists(),
        "the kept home is the real one"
    );
}

/// A symlink planted where the kept home (or a directory above it that sandbox-run owns)
/// should be is refused, never followed: nothing lands where it points.
#[test]
fn a_symlink_at_the_state_path_is_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home-link");
    let repo = f.repo("repo");
    let p = ci(&f);
    let dir = kept_home(&f, &p);
    let elsewhere = f.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let r = bash(
        &f,
        &p,
        &repo,
        &["--home", "persist"],
        "echo x > \"$HOME/planted\"",
    );
    r.assert_code(125);
    assert!(r.stderr.contains("symlink"), "{r}");
    assert!(!elsewhere.join("planted").exists());
    // variant: the link one level up (sandbox-run/home -> elsewhere)
    std::fs::remove_file(&dir).unwrap();
    let up = f.path("state/sandbox-run/home");
    std::fs::remove_dir_all(&up).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &up).unwrap();
    let r = bash(
        &f,
        &p,
        &repo,
        &["--home", "persist"],
        "echo x > \"$HOME/planted\"",
    );
    r.assert_code(125);
    assert!(r.stderr.contains("symlink"), "{r}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // control: with the link gone the kept home is made again
    std::fs::remove_file(&up).unwrap();
    bash(&f, &p, &repo, &["--home", "persist"], "true").assert_code(0);
}

/// A kept home owned by another user is refused (root only: only root can make one).
#[test]
fn a_kept_home_owned_by_someone_else_is_refused() {
    if !sandbox_works() {
        return;
    }
    if !is_root() {
        skip("root", "only root can give a directory to another user");
        return;
    }
    let f = Fixture::new("home-owner");
    let repo = f.repo("repo");
    let p = ci(&f);
    let dir = kept_home(&f, &p);
    std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
    let r = bash(&f, &p, &repo, &["--home", "persist"], "true");
    r.assert_code(125);
    assert!(r.stderr.contains("owned by uid 4242"), "{r}");
}

/// A commit inside, with no GIT_AUTHOR_* anywhere, gets the caller's user.name and
/// user.email (read from the caller's ~/.gitconfig without running git), and nothing else of
/// that config reaches the sandbox: not an alias, not a core.fsmonitor, not an include. What
/// a run writes into ~/.gitconfig of a kept home is replaced at the next run.
#[test]
fn the_callers_git_identity_commits_inside_and_nothing_else_of_its_config() {
    if !sandbox_works() || !have("git") {
        return;
    }
    let f = Fixture::new("home-git");
    let repo = real_repo(&f, "repo");
    let caller = f.path("caller");
    std::fs::create_dir_all(&caller).unwrap();
    let marker = f.path("fsmonitor-ran");
    std::fs::write(
        caller.join(".gitconfig"),
        format!(
            "[user]\n\tname = \"Ada Caller\"\n\temail = ada@example.invalid\n[core]\n\tfsmonitor = \"touch {}; false\"\n[alias]\n\tzz = log\n[include]\n\tpath = {}\n",
            marker.display(),
            f.path("included").display()
        ),
    )
    .unwrap();
    std::fs::write(f.path("included"), "[user]\n\tname = Included\n").unwrap();
    std::fs::set_permissions(&caller, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = ci(&f);
    let run = |opts: &[&str], script: &str| {
        let mut c = sandbox_command(&p, &repo, opts, &["bash", "-c", script]);
        c.env("HOME", &caller)
            .env("XDG_STATE_HOME", f.path("state"));
        run_command(c, LIMIT)
    };
    let r = run(
        &["--home", "persist"],
        "echo two >> file.txt && git commit -qam inside && git config --global --list; git zz >/dev/null 2>&1 && echo ALIAS; printf '[core]\\n\\tfsmonitor = \"touch /tmp/x\"\\n' >> ~/.gitconfig",
    );
    r.assert_code(0);
    assert!(r.stdout.contains("user.name=Ada Caller"), "{r}");
    assert!(r.stdout.contains("user.email=ada@example.invalid"), "{r}");
    assert!(!r.stdout.contains("fsmonitor"), "{r}");
    assert!(!r.stdout.contains("ALIAS"), "{r}");
    assert!(!r.stdout.contains("Included"), "{r}");
    let log = git(&f, &repo, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]);
    assert_eq!(
        log.stdout.trim(),
        "Ada Caller <ada@example.invalid>|Ada Caller <ada@example.invalid>",
        "{log}"
    );
    assert!(!marker.exists(), "the host's fsmonitor ran");
    // the next run of the kept home: the generated file again, not what the last run wrote
    let r = run(&["--home", "persist"], "git config --global --list");
    r.assert_code(0);
    assert!(!r.stdout.contains("fsmonitor"), "{r}");
    assert!(r.stdout.contains("user.name=Ada Caller"), "{r}");
    // what the last run left at ~/.gitconfig (a directory, a FIFO), or under the name pid 1
    // once used for its temporary file, neither stops the next run nor is written through
    for plant in [
        "rm -f ~/.gitconfig && mkdir -p ~/.gitconfig/x ~/.gitconfig.sandbox-run-1/y",
        "rm -rf ~/.gitconfig && mkfifo ~/.gitconfig",
    ] {
        run(&["--home", "persist"], plant).assert_code(0);
        let r = run(&["--home", "persist"], "git config --global user.name");
        r.assert_code(0);
        assert_eq!(r.stdout.trim(), "Ada Caller", "{plant}: {r}");
    }
    // a tmp home has it too
    let r = run(&[], "git config --global user.email");
    assert_eq!(r.stdout.trim(), "ada@example.invalid", "{r}");
}

/// A linked worktree (its common git dir outside the repo) works in every repo mode: a
/// commit with the read-write one (tests/git_boundary.rs checks its host boundary), a commit
/// that vanishes with the copy-on-write one, `git log` with the read-only one; before, the
/// last two said `fatal: not a git repository`.
#[test]
fn a_linked_worktree_works_in_every_repo_mode() {
    if !sandbox_works() || !have("git") {
        return;
    }
    let f = Fixture::new("home-worktree");
    let main = real_repo(&f, "main");
    let wt = f.path("wt");
    git(&f, &main, &["worktree", "add", "-q", wt.to_str().unwrap()]).assert_code(0);
    let commit = "echo more >> file.txt && git -c user.name=a -c user.email=a@b.invalid commit -qam in-sandbox && echo COMMITTED";
    for mode in ["overlay", "ro", "rw"] {
        let p = f.profile(&Spec::extends("ci").no_probe().repo(mode));
        let script = if mode == "ro" {
            "git log --oneline | grep -q init && echo LOGGED"
        } else {
            commit
        };
        let r = bash(&f, &p, &wt, &[], script);
        r.assert_code(0);
        assert!(
            r.stdout
                .contains(if mode == "ro" { "LOGGED" } else { "COMMITTED" }),
            "{mode}: {r}"
        );
        let log = git(&f, &main, &["log", "--oneline", "--all"]);
        assert_eq!(
            log.stdout.contains("in-sandbox"),
            mode == "rw",
            "{mode}: {log}"
        );
    }
    // the read-only mode keeps the common dir read-only
    let p = f.profile(&Spec::extends("ci").no_probe().repo("ro"));
    let r = bash(
        &f,
        &p,
        &wt,
        &[],
        &format!("echo x > {}/.git/planted", main.display()),
    );
    assert_ne!(r.code, Some(0), "{r}");
    assert!(!main.join(".git/planted").exists());
}

/// A root-owned repo run by root: uid 1000 inside (so a CLI's "not as root" check passes),
/// still root on the host (a file made inside is root's); `[process] uid_inside = 0` keeps
/// uid 0 inside. A caller that is not root is itself inside.
#[test]
fn a_root_workload_is_not_uid_0_inside() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home-uid");
    let repo = f.repo("repo");
    let p = ci(&f);
    let r = bash(&f, &p, &repo, &[], "id -u; id -g; touch made");
    r.assert_code(0);
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let made = std::fs::metadata(repo.join("made")).unwrap();
    assert_eq!(made.uid(), me, "the host uid changed");
    if !is_root() {
        assert_eq!(
            r.stdout.lines().next(),
            Some(me.to_string().as_str()),
            "{r}"
        );
        return;
    }
    assert_eq!(
        r.stdout.lines().collect::<Vec<_>>(),
        ["1000", "1000"],
        "{r}"
    );
    let root = f.write(
        "root.toml",
        &format!(
            "extends = {:?}\n[process]\nuid_inside = 0\n",
            p.display().to_string()
        ),
    );
    let r = bash(&f, &root, &repo, &[], "id -u");
    assert_eq!(r.stdout.trim(), "0", "{r}");
    // uid 0 does not exist inside: nothing can become it
    let r = bash(&f, &p, &repo, &[], "cat /proc/self/uid_map");
    let fields: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!(fields, ["1000", "0", "1"], "{r}");
}

/// A CLI installed under a `node_modules` outside the repo (`TOOLS/node_modules/.bin/agent ->
/// ../@x/agent/cli.js`) runs: its package and the packages it depends on are bound, and no
/// other package of that `node_modules`.
#[test]
fn a_cli_under_a_node_modules_outside_the_repo_runs() {
    if !sandbox_works() || !have("node") {
        return;
    }
    let f = Fixture::new("home-npm");
    let repo = f.repo("repo");
    let nm = f.path("tools/node_modules");
    f.write(
        "tools/node_modules/@x/agent/package.json",
        r#"{"name":"@x/agent","bin":{"agent":"cli.js"},"optionalDependencies":{"@x/agent-linux":"1"}}"#,
    );
    f.write(
        "tools/node_modules/@x/agent/cli.js",
        "#!/usr/bin/env node\nconst fs = require('fs');\nconsole.log(require('@x/agent-linux').hello);\nconsole.log(fs.existsSync(process.argv[2]) ? 'OTHER VISIBLE' : 'other hidden');\n",
    );
    f.write(
        "tools/node_modules/@x/agent-linux/package.json",
        r#"{"name":"@x/agent-linux","main":"index.js"}"#,
    );
    f.write(
        "tools/node_modules/@x/agent-linux/index.js",
        "exports.hello = 'platform package loaded';\n",
    );
    f.write(
        "tools/node_modules/unrelated/secret.txt",
        "not for the agent\n",
    );
    let cli = nm.join("@x/agent/cli.js");
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(nm.join(".bin")).unwrap();
    std::os::unix::fs::symlink("../@x/agent/cli.js", nm.join(".bin/agent")).unwrap();
    let p = f.profile(
        &Spec::extends("adapter")
            .no_probe()
            .net("none")
            .programs(&["agent", "node"]),
    );
    let path = format!(
        "{}:{}",
        nm.join(".bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let other = nm.join("unrelated/secret.txt");
    let mut c = sandbox_command(&p, &repo, &[], &["agent", other.to_str().unwrap()]);
    c.env("PATH", &path);
    let r = run_command(c, LIMIT);
    r.assert_code(0);
    assert!(r.stdout.contains("platform package loaded"), "{r}");
    assert!(r.stdout.contains("other hidden"), "{r}");
}

/// Codex brings its own bubblewrap sandbox, which cannot start inside ours (no new user
/// namespace); `-c sandbox_mode="danger-full-access"` (or `--sandbox danger-full-access` on
/// `codex exec`) turns it off, and sandbox-run is the sandbox. Needs a real Codex: from
/// `SANDBOX_RUN_TEST_CODEX` (its `node_modules/.bin`), else installed with npm into the
/// test's base dir; skipped with a line when neither works.
#[test]
fn codex_runs_inside_with_its_own_sandbox_off() {
    if !sandbox_works() || !have("npm") {
        return;
    }
    let Some(bin) = codex_bin() else {
        return;
    };
    let f = Fixture::new("home-codex");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("adapter").no_probe().net("none"));
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str]| {
        let mut c = sandbox_command(&p, &repo, &[], args);
        c.env("PATH", &path);
        run_command(c, Duration::from_secs(120))
    };
    let nested = run(&["codex", "sandbox", "--", "/bin/echo", "nested-ok"]);
    assert!(
        !nested.stdout.contains("nested-ok"),
        "codex's own sandbox started inside ours:\n{nested}"
    );
    let off = run(&[
        "codex",
        "sandbox",
        "-c",
        "sandbox_mode=\"danger-full-access\"",
        "--",
        "/bin/echo",
        "nested-ok",
    ]);
    off.assert_code(0);
    assert!(off.stdout.contains("nested-ok"), "{off}");
}

/// The `node_modules/.bin` of a real Codex, or `None` (and a skip line).
fn codex_bin() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SANDBOX_RUN_TEST_CODEX") {
        return Some(PathBuf::from(d));
    }
    // one installed by an earlier run (the root run's, for the rootless one), else install
    let dir = test_base().join("codex-npm");
    let bin = dir.join("node_modules/.bin");
    let earlier = Path::new(env!("CARGO_TARGET_TMPDIR")).join("codex-npm/node_modules/.bin");
    if !bin.join("codex").exists() && earlier.join("codex").exists() {
        return Some(earlier);
    }
    if !bin.join("codex").exists() {
        std::fs::create_dir_all(&dir).ok()?;
        let mut c = Command::new("npm");
        c.args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg("@openai/codex")
            .env("npm_config_cache", dir.join("cache"));
        let r = run_command(c, Duration::from_secs(300));
        if r.code != Some(0) {
            skip_tool(&format!(
                "@openai/codex could not be installed with npm (registry unreachable?): {}",
                r.stderr
                    .lines()
                    .find(|l| l.contains("npm error"))
                    .unwrap_or("")
            ));
            return None;
        }
    }
    Some(bin)
}

/// `sandbox-run home P` with `--seed` and the environment of [`kept_home`], run in `cwd`.
fn seed_cmd(f: &Fixture, p: &Path, cwd: &Path, extra: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.arg("home")
        .arg(p)
        .args(extra)
        .current_dir(cwd)
        .env("XDG_STATE_HOME", f.path("state"))
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
    run_command(c, LIMIT)
}

/// What a hostile run under `--home persist` leaves in its kept home for the user's next
/// seeding: `~/.claude.json` a link to a file of the repo, `~/.npmrc` a link to a host file
/// outside the repo, `~/.claude` a link to a directory of the repo, `~/.netrc` a FIFO, in a
/// real `~/.codex` `auth.json` a link to another file of the repo, and a `~/.gemini` of mode
/// 000.
fn plant(f: &Fixture, p: &Path, repo: &Path, outside: &Path) {
    std::fs::write(repo.join("leak.json"), "repo-original\n").unwrap();
    std::fs::write(repo.join("leak2.json"), "repo-original\n").unwrap();
    std::fs::create_dir_all(repo.join("leakdir")).unwrap();
    let script = format!(
        "cd \"$HOME\" && chmod -R u+rwx .codex .gemini 2>/dev/null; \
         rm -rf .claude .claude.json .npmrc .netrc .codex .gemini && \
         ln -s {repo}/leak.json .claude.json && ln -s {outside} .npmrc && \
         ln -s {repo}/leakdir .claude && mkfifo .netrc && \
         mkdir .codex .gemini && ln -s {repo}/leak2.json .codex/auth.json && \
         chmod 000 .gemini && ls -la",
        repo = repo.display(),
        outside = outside.display()
    );
    bash(f, p, repo, &["--home", "persist"], &script).assert_code(0);
}

/// The user's files to seed: a login's `~/.claude/` and `~/.claude.json`, an `~/.npmrc` and
/// an `~/.netrc` holding credentials.
fn user_files(f: &Fixture) -> PathBuf {
    let u = f.path("user");
    std::fs::create_dir_all(u.join(".claude")).unwrap();
    std::fs::write(u.join(".claude/.credentials.json"), "claude-oauth-secret\n").unwrap();
    std::fs::write(
        u.join(".claude.json"),
        "{\"userID\":\"claude-json-secret\"}\n",
    )
    .unwrap();
    std::fs::write(u.join(".npmrc"), "//registry/:_authToken=npm-secret\n").unwrap();
    std::fs::write(
        u.join(".netrc"),
        "machine h login u password netrc-secret\n",
    )
    .unwrap();
    std::fs::set_permissions(u.join(".netrc"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(u.join(".codex")).unwrap();
    std::fs::write(u.join(".codex/auth.json"), "{\"codex\":\"codex-secret\"}\n").unwrap();
    std::fs::create_dir_all(u.join(".gemini")).unwrap();
    std::fs::write(u.join(".gemini/settings.json"), "{}\n").unwrap();
    u
}

/// The way into a kept home: links, a directory link and a FIFO a hostile run left there are
/// replaced by `sandbox-run home P --seed`, never written through: the repo file, the host
/// file outside and the repo directory they named are unchanged, and the kept home holds
/// real files with the user's content, which the next run reads. Seeding a clean home works
/// (the positive control), and the same attack against the old recipe (`cp -r ... "$(sandbox-run
/// home P)/"`) leaks the credentials into the repo and the outside file (the attack is real).
#[test]
fn seeding_never_writes_through_what_a_hostile_run_left() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home-seed");
    let repo = f.repo("repo");
    let outside = f.write("outside/host-file", "outside-original\n");
    let user = user_files(&f);
    let seeds = [
        ".claude",
        ".claude.json",
        ".npmrc",
        ".codex",
        ".gemini",
        ".netrc",
    ];
    let unchanged = |what: &str| {
        assert_eq!(
            std::fs::read_to_string(repo.join("leak.json")).unwrap(),
            "repo-original\n",
            "{what}: the repo file changed"
        );
        assert_eq!(
            std::fs::read_to_string(&outside).unwrap(),
            "outside-original\n",
            "{what}: the host file outside changed"
        );
        assert_eq!(
            std::fs::read_to_string(repo.join("leak2.json")).unwrap(),
            "repo-original\n",
            "{what}: the repo file behind a link in a directory changed"
        );
        assert_eq!(
            std::fs::read_dir(repo.join("leakdir")).unwrap().count(),
            0,
            "{what}: something landed in the repo directory"
        );
    };

    // positive control: a clean kept home
    let clean = f.profile(&Spec::extends("ci").no_probe());
    let mut args = vec!["--seed"];
    args.extend(seeds);
    let r = seed_cmd(&f, &clean, &user, &args);
    r.assert_code(0);
    let dir = kept_home(&f, &clean);
    assert_eq!(r.stdout.trim(), dir.to_str().unwrap(), "{r}");
    assert!(r.stderr.contains("6 files"), "{r}");
    assert_eq!(
        std::fs::read_to_string(dir.join(".claude/.credentials.json")).unwrap(),
        "claude-oauth-secret\n"
    );
    let m = std::fs::metadata(dir.join(".netrc")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600, "the mode is kept");

    // the attack, then the seed
    let p = ci(&f);
    plant(&f, &p, &repo, &outside);
    let dir = kept_home(&f, &p);
    assert!(std::fs::symlink_metadata(dir.join(".claude.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    let mut args = vec!["-v", "--seed"];
    args.extend(seeds);
    let r = seed_cmd(&f, &p, &user, &args);
    r.assert_code(0);
    unchanged("after --seed");
    for (name, content) in [
        (".claude/.credentials.json", "claude-oauth-secret\n"),
        (".claude.json", "{\"userID\":\"claude-json-secret\"}\n"),
        (".npmrc", "//registry/:_authToken=npm-secret\n"),
        (".netrc", "machine h login u password netrc-secret\n"),
        (".codex/auth.json", "{\"codex\":\"codex-secret\"}\n"),
        (".gemini/settings.json", "{}\n"),
    ] {
        let at = dir.join(name);
        let m = std::fs::symlink_metadata(&at).unwrap();
        assert!(
            m.is_file(),
            "{} is not a regular file: {m:?}\n{r}",
            at.display()
        );
        assert_eq!(std::fs::read_to_string(&at).unwrap(), content);
    }
    assert!(std::fs::symlink_metadata(dir.join(".claude"))
        .unwrap()
        .is_dir());
    for was in [
        ".claude.json (was a symlink",
        ".claude (was a symlink",
        ".netrc (was a FIFO",
        ".codex/auth.json (was a symlink",
    ] {
        assert!(r.stderr.contains(was), "{was} not listed:\n{r}");
    }
    // the next run reads the seeded files
    let r = bash(
        &f,
        &p,
        &repo,
        &["--home", "persist"],
        "cat \"$HOME/.claude.json\" \"$HOME/.claude/.credentials.json\"",
    );
    r.assert_code(0);
    assert!(
        r.stdout.contains("claude-json-secret") && r.stdout.contains("claude-oauth-secret"),
        "{r}"
    );

    // a bad seed: one line naming it, exit 125, nothing copied
    let r = seed_cmd(&f, &p, &user, &["--seed", ".npmrc", "no-such-seed"]);
    r.assert_code(125);
    assert!(r.stderr.contains("no-such-seed"), "{r}");
    assert_eq!(r.stderr.trim().lines().count(), 1, "{r}");

    // the old recipe against the same attack: the credentials land in the repo and outside
    // (GNU cp refuses to copy a directory over the directory link, but writes through every
    // file link)
    plant(&f, &p, &repo, &outside);
    std::fs::remove_file(dir.join(".netrc")).unwrap(); // cp would block on the FIFO
    let mut c = Command::new("cp");
    c.arg("-r")
        .args(&seeds[..4])
        .arg(format!("{}/", dir.display()))
        .current_dir(&user);
    let r = run_command(c, LIMIT);
    assert!(
        std::fs::read_to_string(repo.join("leak.json"))
            .unwrap()
            .contains("claude-json-secret")
            && std::fs::read_to_string(&outside)
                .unwrap()
                .contains("npm-secret")
            && std::fs::read_to_string(repo.join("leak2.json"))
                .unwrap()
                .contains("codex-secret"),
        "cp -r did not write through the links, so this test proves nothing:\n{r}"
    );
}

/// Only root may name another user's kept home (rootless only: root may).
#[test]
fn seeding_another_users_home_needs_root() {
    if is_root() {
        return;
    }
    let f = Fixture::new("home-seed-user");
    let p = ci(&f);
    let r = seed_cmd(&f, &p, &f.dir, &["--user", "0", "--seed", "x"]);
    r.assert_code(125);
    assert!(r.stderr.contains("only root"), "{r}");
}

/// A toolchain under `$HOME` is bound over the kept home, so its mount point is made in the
/// kept home, which the last run wrote: a link it left on the way (`~/.local` -> a host
/// directory, as seen from the mount namespace while the root is built) is never followed:
/// the run is refused naming the path (exit 125), nothing is made where the link pointed, and
/// with the link removed the tool runs again.
#[test]
fn a_mount_point_in_the_kept_home_is_not_reached_through_a_link() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("home-mountpoint");
    let repo = f.repo("repo");
    let p = ci(&f);
    let home = f.path("h");
    let tool = home.join(".local/bin");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::write(tool.join("make"), "#!/bin/sh\necho tool-ran\n").unwrap();
    std::fs::set_permissions(tool.join("make"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outside = f.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let run = |path: &str, script: &str| {
        let mut c = sandbox_command(&p, &repo, &["--home", "persist"], &["bash", "-c", script]);
        c.env("XDG_STATE_HOME", f.path("state"))
            .env("HOME", &home)
            .env("PATH", path);
        run_command(c, LIMIT)
    };
    let with_tool = format!("{}:/usr/bin:/bin", tool.display());
    // positive control: the tool runs from its bind in the kept home
    let r = run(&with_tool, "make");
    r.assert_code(0);
    assert!(r.stdout.contains("tool-ran"), "{r}");
    // the hostile run (no tool bound): ~/.local becomes a link to a host directory, by the
    // path the host's tree has in the mount namespace while the new root is built
    let r = run(
        "/usr/bin:/bin",
        &format!(
            "rm -rf \"$HOME/.local\" && ln -s /oldroot{} \"$HOME/.local\" && ls -la \"$HOME\"",
            outside.display()
        ),
    );
    r.assert_code(0);
    let r = run(&with_tool, "make");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "a mount point was made through the link:\n{r}"
    );
    r.assert_code(125);
    assert!(
        r.stderr.contains(".local/bin") && r.stderr.contains("symbolic links"),
        "{r}"
    );
    std::fs::remove_file(kept_home(&f, &p).join(".local")).unwrap();
    let r = run(&with_tool, "make");
    r.assert_code(0);
    assert!(r.stdout.contains("tool-ran"), "{r}");
}

/// Root seeding another user's kept home (`--user`): the home is that user's (under their
/// passwd home, as a run of a repo they own uses it), and so is every copy (root only).
#[test]
fn root_seeds_another_users_home_as_that_user() {
    if !is_root() {
        return;
    }
    let user = std::env::var("SANDBOX_RUN_TEST_USER").unwrap_or_else(|_| "sbxtest".into());
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let Some((uid, home)) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[0] == user).then(|| (f[2].parse::<u32>().ok(), PathBuf::from(f[5])))
    }) else {
        skip(
            "test user",
            &format!("no user {user} to seed a kept home for"),
        );
        return;
    };
    let uid = uid.unwrap();
    if !home.is_dir() {
        skip("test user", &format!("{user} has no home directory"));
        return;
    }
    let f = Fixture::new("home-seed-root");
    let p = ci(&f);
    let files = user_files(&f);
    let r = seed_cmd(
        &f,
        &p,
        &files,
        &["--user", &user, "--seed", ".claude", ".netrc"],
    );
    r.assert_code(0);
    let dir = PathBuf::from(r.stdout.trim());
    assert!(dir.starts_with(&home), "{r}");
    for e in ["", ".claude", ".claude/.credentials.json", ".netrc"] {
        let m = std::fs::symlink_metadata(dir.join(e)).unwrap();
        assert_eq!(m.uid(), uid, "{} is not {user}'s", dir.join(e).display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

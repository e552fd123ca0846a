//! `-v` says what the sandbox did, one line each on stderr, prefixed `sandbox-run: `: the uid
//! and why, the repo and why, the mounts, the network, and the caller's variables that did not
//! pass (names only, never values). Without `-v`, none of it.

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{probe, BIN};

const PROXY_VALUE: &str = "http://proxy-value-sbx-4d1e:3128";
const SECRET_VALUE: &str = "secret-value-sbx-9c2b";

/// A validate-like profile allowing the probe; the cgroup best-effort, so that it runs
/// rootless too.
fn fixture(name: &str) -> PathBuf {
    let base = support::scratch(&format!("verbose-{name}"));
    support::probe_profile(
        &base,
        "validate",
        "",
        "[layers]\ncgroup = \"best-effort\"\n",
    );
    base
}

fn run(base: &Path, flags: &[&str], cwd: &Path, repo_flag: bool) -> Output {
    let mut c = Command::new(BIN);
    c.args(flags).arg("--profile").arg(base.join("p.toml"));
    if repo_flag {
        c.arg("--repo").arg(base.join("repo"));
    }
    c.arg("--")
        .arg(probe())
        .arg("whoami")
        .current_dir(cwd)
        .env("HTTPS_PROXY", PROXY_VALUE)
        .env("JAVA_HOME", "/opt/java-sbx-test")
        .env("SBX_PLANTED_API_TOKEN", SECRET_VALUE)
        .env("LANG", "C.UTF-8");
    c.output().unwrap()
}

fn lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(String::from)
        .collect()
}

fn find<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{}", lines.join("\n")))
}

#[test]
fn v_says_uid_repo_mounts_network_and_dropped_env() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("all");
    let repo = std::fs::canonicalize(base.join("repo")).unwrap();
    let root = nix::unistd::geteuid().is_root();
    // Root running a user's repo runs it as its owner.
    let uid = if root {
        std::os::unix::fs::chown(&repo, Some(1001), Some(1001)).unwrap();
        1001
    } else {
        nix::unistd::geteuid().as_raw()
    };
    let o = run(&base, &["-v"], &base, true);
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", l.join("\n"));
    // every line of ours is prefixed
    for line in &l {
        assert!(line.starts_with("sandbox-run: "), "unprefixed: {line}");
    }
    let why = if root {
        "the repo's owner (the caller is root"
    } else {
        "the caller (not root"
    };
    let u = find(&l, &format!("sandbox-run: uid {uid} "));
    assert!(u.contains(why), "{u}");
    let r = find(&l, "sandbox-run: repo ");
    assert_eq!(r, format!("sandbox-run: repo {}: --repo", repo.display()));
    // a system bind, the probe's directory (the profile's extra_ro), and the repo itself
    find(&l, "sandbox-run: bind /usr -> /usr ro");
    let dir = probe().parent().unwrap().to_path_buf();
    find(
        &l,
        &format!(
            "sandbox-run: bind {} -> {} ro",
            dir.display(),
            dir.display()
        ),
    );
    find(
        &l,
        &format!(
            "sandbox-run: bind {} -> {} copy-on-write",
            repo.display(),
            repo.display()
        ),
    );
    let n = find(&l, "sandbox-run: network ");
    assert!(n.starts_with("sandbox-run: network none"), "{n}");
    assert!(n.contains("tcp connect:") && n.contains("tcp bind:"), "{n}");
    let secret = find(&l, "sandbox-run: env removed as secret-looking: ");
    assert!(secret.contains("SBX_PLANTED_API_TOKEN"), "{secret}");
    let dropped = find(&l, "sandbox-run: env dropped, not on the keep list: ");
    assert!(
        dropped.contains("HTTPS_PROXY") && dropped.contains("JAVA_HOME"),
        "{dropped}"
    );
    // kept names are not listed as dropped
    assert!(
        !dropped.split(", ").any(|n| n.ends_with("LANG")),
        "{dropped}"
    );
    // names only, never values
    let all = l.join("\n");
    assert!(
        !all.contains(PROXY_VALUE)
            && !all.contains(SECRET_VALUE)
            && !all.contains("/opt/java-sbx-test"),
        "{all}"
    );
}

#[test]
fn without_v_nothing_of_it() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("quiet");
    let o = run(&base, &[], &base, true);
    assert_eq!(o.status.code(), Some(0));
    let l = lines(&o);
    for prefix in [
        "sandbox-run: uid ",
        "sandbox-run: repo ",
        "sandbox-run: bind ",
        "sandbox-run: network ",
        "sandbox-run: env ",
    ] {
        assert!(!l.iter().any(|x| x.starts_with(prefix)), "{prefix}: {l:?}");
    }
}

#[test]
fn v_says_the_repo_is_the_git_top_level() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("gittop");
    let repo = std::fs::canonicalize(base.join("repo")).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    let o = run(&base, &["-v"], &repo.join("src/deep"), false);
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", l.join("\n"));
    assert_eq!(
        find(&l, "sandbox-run: repo "),
        format!(
            "sandbox-run: repo {}: the git top level above the current directory",
            repo.display()
        )
    );
}

#[test]
fn vv_adds_the_setup_timings() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("vv");
    let o = run(&base, &["-vv"], &base, true);
    let l = lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}", l.join("\n"));
    let t = find(&l, "sandbox-run: timings: ");
    assert!(t.contains("workload") && t.contains("total"), "{t}");
    // -v alone does not
    let o = run(&base, &["-v"], &base, true);
    assert!(!lines(&o)
        .iter()
        .any(|x| x.starts_with("sandbox-run: timings")));
}

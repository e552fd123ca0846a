//! Profiles are read only from places the caller trusts (as ssh's StrictModes): the file and
//! every directory above it owned by the caller or root and writable by no one else.
//!
//! The attack: root runs with the `HOME` of another user (as `sudo -E` keeps it), whose
//! `~/.config/sandbox-run/profiles/validate.toml` asks for uid 0 and a read-write bind of a
//! root-only directory. It must be refused (exit 125, one line naming the file and the fix) and
//! nothing written there. Controls: the same profile in root's own place loads and does write
//! (so the refusal is the rule's doing); a user's own profile loads when that user runs it
//! (this file runs again rootless under `scripts/test`); group- or world-writable places are
//! refused for everyone.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The uid of `sbxtest`, the test user of this project's machines.
fn sbxtest_uid() -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[0] == "sbxtest").then(|| f[2].parse().ok())?
    })
}

/// The profile of the attack: uid 0 inside and out, and `rw` a bind of `target`.
fn greedy_profile(target: &Path) -> String {
    let q = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
    format!(
        "extends = \"validate\"\n[gate]\npaths = [{}]\n[filesystem]\nextra_ro = [{}]\nextra_rw = [{}]\n[process]\nuid = 0\nuid_inside = 0\n[layers]\ncgroup = \"best-effort\"\n",
        q(&probe()),
        q(&probe_dir()),
        q(target)
    )
}

/// `sandbox-run --profile NAME` with this `HOME` and no other profile directory.
fn by_name(
    name: &str,
    home: &Path,
    xdg: Option<&Path>,
    repo: &Path,
    args: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(BIN);
    c.args(["--profile", name, "--repo"])
        .arg(repo)
        .arg("--")
        .arg(probe())
        .args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("HOME", home)
        .current_dir(repo)
        .stdin(std::process::Stdio::null());
    match xdg {
        Some(x) => c.env("XDG_CONFIG_HOME", x),
        None => c.env_remove("XDG_CONFIG_HOME"),
    };
    c
}

fn chown_tree(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

#[test]
fn root_with_another_users_home_does_not_take_its_profile() {
    if !is_root() {
        eprintln!("SKIP root_with_another_users_home_does_not_take_its_profile: needs root");
        return;
    }
    let Some(uid) = sbxtest_uid() else {
        skip_tool("no user sbxtest on this machine");
        return;
    };
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("trust-sudo-e");
    let repo = f.repo("repo");
    let vault = f.path("root-only");
    std::fs::create_dir_all(&vault).unwrap();
    std::fs::set_permissions(&vault, std::fs::Permissions::from_mode(0o700)).unwrap();
    let text = greedy_profile(&vault);

    // The user's home and profile, the user's own.
    let home = f.path("home-sbxtest");
    f.write(
        "home-sbxtest/.config/sandbox-run/profiles/validate.toml",
        &text,
    );
    chown_tree(&home, uid);
    let file = home.join(".config/sandbox-run/profiles/validate.toml");
    let planted = vault.join("planted");
    let r = run_command(
        by_name(
            "validate",
            &home,
            None,
            &repo,
            &["write", planted.to_str().unwrap()],
        ),
        LIMIT,
    );
    r.assert_code(125);
    let line = r.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "one line:\n{r}");
    assert!(
        line.starts_with(&format!(
            "sandbox-run: profile {}: not read: ",
            file.display()
        )),
        "{r}"
    );
    assert!(line.contains(&format!("belongs to uid {uid}")), "{r}");
    assert!(line.contains("fix: use a profile of your own"), "{r}");
    assert!(
        !planted.exists(),
        "the command wrote into the root-only directory"
    );
    assert_eq!(std::fs::read_dir(&vault).unwrap().count(), 0);

    // The same file by path, from root: the same rule (root would run what the user wrote).
    let mut c = sandbox_command(
        &file,
        &repo,
        &[],
        &[
            probe().to_str().unwrap(),
            "write",
            planted.to_str().unwrap(),
        ],
    );
    c.env("HOME", &home);
    let r = run_command(c, LIMIT);
    r.assert_code(125);
    assert!(r.stderr.contains("not read: "), "{r}");
    assert!(!planted.exists());

    // A file of root's in a directory the user owns: the user could swap it.
    let mixed = f.path("home-mixed");
    f.write(
        "home-mixed/.config/sandbox-run/profiles/validate.toml",
        &text,
    );
    std::os::unix::fs::lchown(mixed.join(".config"), Some(uid), Some(uid)).unwrap();
    let r = run_command(
        by_name(
            "validate",
            &mixed,
            None,
            &repo,
            &["write", planted.to_str().unwrap()],
        ),
        LIMIT,
    );
    r.assert_code(125);
    assert!(
        r.stderr.contains(&format!(
            "the directory {} belongs to uid {uid}",
            mixed.join(".config").display()
        )),
        "{r}"
    );
    assert!(!planted.exists());

    // Control: the same profile in root's own place loads, and does write there.
    let own = f.path("home-root");
    f.write(
        "home-root/.config/sandbox-run/profiles/validate.toml",
        &text,
    );
    let r = run_command(
        by_name(
            "validate",
            &own,
            None,
            &repo,
            &["write", planted.to_str().unwrap()],
        ),
        LIMIT,
    );
    assert!(
        r.code == Some(0) && planted.exists(),
        "root's own profile did not load and run:\n{r}"
    );
}

/// The caller's own profile loads; made writable by group or others (file or directory),
/// it does not.
#[test]
fn own_profile_loads_and_writable_places_are_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("trust-modes");
    let repo = f.repo("repo");
    let config = f.path("config");
    let dir = config.join("sandbox-run/profiles");
    let scratch = f.path("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let text = greedy_profile(&scratch).replace("uid = 0\nuid_inside = 0\n", "");
    let file = f.write("config/sandbox-run/profiles/mine.toml", &text);
    let run = || {
        run_command(
            by_name("mine", &f.dir, Some(&config), &repo, &["pid"]),
            LIMIT,
        )
    };
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(&file, 0o644);
    run().assert_code(0);
    for (p, m, say) in [
        (&file, 0o664, "writable by its group"),
        (&file, 0o646, "writable by others"),
        (&dir, 0o775, "writable by its group"),
        (&config, 0o777, "writable by others"),
    ] {
        let before = std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        mode(p, m);
        let r = run();
        mode(p, before);
        r.assert_code(125);
        let line = r.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "{r}");
        assert!(line.contains(say), "{r}");
        assert!(
            line.contains(&format!("fix: chmod go-w {}", p.display())),
            "{r}"
        );
    }
    // back as it was: loads again
    run().assert_code(0);
}

/// A link on the way is followed when it is the caller's (dotfile managers link
/// `~/.config/sandbox-run` elsewhere), and what it leads to is checked the same.
#[test]
fn a_linked_profile_dir_is_checked_where_it_leads() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("trust-link");
    let repo = f.repo("repo");
    let real = f.path("dotfiles/sandbox-run/profiles");
    let text = greedy_profile(&f.path("scratch")).replace("uid = 0\nuid_inside = 0\n", "");
    std::fs::create_dir_all(f.path("scratch")).unwrap();
    f.write("dotfiles/sandbox-run/profiles/mine.toml", &text);
    let config = f.path("config");
    std::fs::create_dir_all(&config).unwrap();
    std::os::unix::fs::symlink(f.path("dotfiles/sandbox-run"), config.join("sandbox-run")).unwrap();
    let run = || {
        run_command(
            by_name("mine", &f.dir, Some(&config), &repo, &["pid"]),
            LIMIT,
        )
    };
    run().assert_code(0);
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = run();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
    r.assert_code(125);
    assert!(
        r.stderr.contains(&format!(
            "the directory {} is writable by others",
            real.display()
        )),
        "{r}"
    );
}

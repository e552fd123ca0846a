//! Toolchain binds: a fake home with the usual toolchain
//! layouts and the usual credentials, the sandbox run with that `HOME` and a PATH through the
//! toolchains. Each credential is read from inside and must be refused; the toolchains' own
//! files must be readable (and run). Then PATH entries and links that the repo controls, or
//! any local user does, must not steer what is bound. See `src/toolchain.rs` for the rules.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const TOKEN_NPMRC: &str = "//npm.example.invalid/:_authToken=sbx-e2e-secret-value-7f3a\n";
const PLAIN_NPMRC: &str = "fund=false\naudit=false\n";
const STABLE: &str = "stable-x86_64-unknown-linux-gnu";

fn symlink(target: &Path, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", at.display()));
}

/// A copy of the probe at `to`: a real executable that runs inside.
fn exe(to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(probe(), to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn path_of(dirs: &[&Path]) -> String {
    let mut v: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    v.push("/usr/bin:/bin".into());
    v.join(":")
}

/// The profile of these tests: validate, with the toolchain programs allowed by name.
fn profile(f: &Fixture) -> PathBuf {
    f.profile(
        &Spec::extends("validate")
            .programs(&["cargo", "rustc", "agent", "node", "python3", "tap", "tool"]),
    )
}

/// Run the probe with this `HOME` and `PATH`.
fn probe_in(
    profile: &Path,
    repo: &Path,
    home: &Path,
    path: &str,
    args: &[&str],
) -> common::ProbeRun {
    run_probe_with(profile, repo, &[], args, |c| {
        // what a rustup proxy running this test passes on must not point elsewhere
        c.env("HOME", home)
            .env("PATH", path)
            .env_remove("RUSTUP_HOME")
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO_HOME");
    })
}

fn refused(p: &Path, repo: &Path, home: &Path, path: &str, file: &Path) {
    let r = probe_in(p, repo, home, path, &["read", file.to_str().unwrap()]);
    assert!(
        !r.run.all().contains("sbx-e2e-secret"),
        "the secret leaked:\n{r}"
    );
    r.assert_errno(&[libc::ENOENT, libc::EACCES]);
}

fn readable(p: &Path, repo: &Path, home: &Path, path: &str, file: &Path) {
    probe_in(p, repo, home, path, &["read", file.to_str().unwrap()]).assert_ok();
}

/// The fake home: rustup (`~/.cargo/bin` proxies, `~/.rustup`), a native installer in
/// `~/.local/bin` -> `~/.local/share/agent/versions/1.2.3`, nvm, pyenv, and credentials.
fn fake_home(f: &Fixture) -> PathBuf {
    let h = f.path("home");
    exe(&h.join(".cargo/bin/rustup"));
    symlink(Path::new("rustup"), &h.join(".cargo/bin/cargo"));
    symlink(Path::new("rustup"), &h.join(".cargo/bin/rustc"));
    f.write("home/.cargo/credentials.toml", SECRET);
    f.write("home/.cargo/credentials", SECRET);
    f.write("home/.cargo/config.toml", "[net]\noffline = true\n");
    f.write(
        "home/.rustup/settings.toml",
        &format!("version = \"12\"\ndefault_toolchain = \"{STABLE}\"\n"),
    );
    exe(&h.join(format!(".rustup/toolchains/{STABLE}/bin/rustc")));
    exe(&h.join(".local/share/agent/versions/1.2.3/agent"));
    symlink(
        &h.join(".local/share/agent/versions/1.2.3/agent"),
        &h.join(".local/bin/agent"),
    );
    f.write("home/.local/share/keyrings/login.keyring", SECRET);
    f.write("home/.local/share/fish/fish_history", SECRET);
    exe(&h.join(".nvm/versions/node/v20/bin/node"));
    f.write("home/.nvm/versions/node/v20/etc/npmrc", TOKEN_NPMRC);
    f.write("home/.nvm/versions/node/v20/lib/node_modules/.keep", "");
    exe(&h.join(".nvm/versions/node/v18/bin/node"));
    f.write("home/.nvm/versions/node/v18/etc/npmrc", PLAIN_NPMRC);
    f.write(
        "home/.pyenv/shims/python3",
        "#!/bin/sh\nexec \"$PYENV_ROOT/libexec/pyenv\" exec python3 \"$@\"\n",
    );
    mode(&h.join(".pyenv/shims/python3"), 0o755);
    f.write("home/.pyenv/libexec/pyenv", "#!/bin/sh\n");
    f.write("home/.pyenv/version", "3.12.0\n");
    exe(&h.join(".pyenv/versions/3.12.0/bin/python3.12"));
    f.write("home/.pyenv/.git/config", "[core]\n");
    f.write("home/.npmrc", TOKEN_NPMRC);
    f.write("home/.ssh/id_ed25519", SECRET);
    f.write("home/.aws/credentials", SECRET);
    f.write("home/.kube/config", SECRET);
    f.write("home/.config/gcloud/credentials.db", SECRET);
    f.write("home/.docker/config.json", SECRET);
    f.write("home/.netrc", SECRET);
    f.write("home/.git-credentials", SECRET);
    f.write("home/.bash_history", SECRET);
    h
}

fn home_path(h: &Path) -> String {
    path_of(&[
        &h.join(".cargo/bin"),
        &h.join(".local/bin"),
        &h.join(".nvm/versions/node/v20/bin"),
        &h.join(".pyenv/shims"),
    ])
}

/// Finding 3: `~/.cargo/bin`, `~/.local/bin` and friends on PATH bind what the programs need
/// (the proxies, rustup's toolchains and settings, the installer's version dir, the node
/// prefix, pyenv's parts), never `~/.cargo`, `~/.local`, `~/.rustup`, `~/.pyenv` whole, and
/// no credential file of any kind.
#[test]
fn home_toolchains_bind_what_they_need_and_no_credentials() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tc-home");
    let repo = f.repo("repo");
    let h = fake_home(&f);
    let path = home_path(&h);
    let p = profile(&f);

    // controls: the toolchains are there and run
    for file in [
        ".cargo/bin/cargo",
        ".cargo/bin/rustup",
        ".rustup/settings.toml",
        &format!(".rustup/toolchains/{STABLE}/bin/rustc"),
        ".local/bin/agent",
        ".local/share/agent/versions/1.2.3/agent",
        ".nvm/versions/node/v20/bin/node",
        ".nvm/versions/node/v20/lib/node_modules/.keep",
        ".pyenv/shims/python3",
        ".pyenv/libexec/pyenv",
        ".pyenv/version",
        ".pyenv/versions/3.12.0/bin/python3.12",
    ] {
        readable(&p, &repo, &h, &path, &h.join(file));
    }
    for prog in [".cargo/bin/cargo", ".local/bin/agent"] {
        let r = probe_in(
            &p,
            &repo,
            &h,
            &path,
            &["exec", h.join(prog).to_str().unwrap()],
        );
        // the copy of the probe, run without arguments, prints its usage and exits 2
        assert_eq!(r.assert_ok(), "exit=2", "{r}");
    }
    // ~/.cargo inside holds the proxies' directory and nothing else
    let r = probe_in(
        &p,
        &repo,
        &h,
        &path,
        &["list", h.join(".cargo").to_str().unwrap()],
    );
    r.assert_ok();
    assert_eq!(r.lines, vec!["bin"], "{r}");

    // attacks: every credential, and the user's data next to the toolchains
    for file in [
        ".cargo/credentials.toml",
        ".cargo/credentials",
        ".cargo/config.toml",
        ".local/share/keyrings/login.keyring",
        ".local/share/fish/fish_history",
        ".nvm/versions/node/v20/etc/npmrc",
        ".pyenv/.git/config",
        ".npmrc",
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".kube/config",
        ".config/gcloud/credentials.db",
        ".docker/config.json",
        ".netrc",
        ".git-credentials",
        ".bash_history",
    ] {
        refused(&p, &repo, &h, &path, &h.join(file));
    }
}

/// npm's global config in a node prefix is hidden when it holds a token, and left readable
/// when it only holds settings that installs need.
#[test]
fn npm_global_config_is_hidden_only_with_credentials() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tc-npmrc");
    let repo = f.repo("repo");
    let h = fake_home(&f);
    let p = profile(&f);
    let v18 = path_of(&[&h.join(".nvm/versions/node/v18/bin")]);
    readable(
        &p,
        &repo,
        &h,
        &v18,
        &h.join(".nvm/versions/node/v18/etc/npmrc"),
    );
    let v20 = path_of(&[&h.join(".nvm/versions/node/v20/bin")]);
    readable(
        &p,
        &repo,
        &h,
        &v20,
        &h.join(".nvm/versions/node/v20/bin/node"),
    );
    refused(
        &p,
        &repo,
        &h,
        &v20,
        &h.join(".nvm/versions/node/v20/etc/npmrc"),
    );
}

/// A tool installed outside any home (a `CARGO_HOME` such as `/usr/local/cargo`, an app in
/// `/opt`) is bound whole, but the credential files and directories in it are covered.
#[test]
fn credentials_inside_a_bound_prefix_are_covered() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tc-prefix");
    let repo = f.repo("repo");
    let h = f.path("home");
    std::fs::create_dir_all(&h).unwrap();
    let cargo_home = f.path("opt/cargo");
    exe(&cargo_home.join("bin/rustup"));
    symlink(Path::new("rustup"), &cargo_home.join("bin/cargo"));
    f.write("opt/cargo/credentials.toml", SECRET);
    f.write("opt/cargo/credentials", SECRET);
    f.write("opt/cargo/registry/index/.keep", "");
    let tool = f.path("opt/tool");
    exe(&tool.join("bin/tool"));
    f.write("opt/tool/.ssh/id_ed25519", SECRET);
    f.write("opt/tool/etc/npmrc", TOKEN_NPMRC);
    f.write("opt/tool/share/data.txt", "data\n");
    let path = path_of(&[&cargo_home.join("bin"), &tool.join("bin")]);
    let p = profile(&f);

    for file in [
        "opt/cargo/bin/cargo",
        "opt/cargo/registry/index/.keep",
        "opt/tool/bin/tool",
        "opt/tool/share/data.txt",
    ] {
        readable(&p, &repo, &h, &path, &f.path(file));
    }
    for file in [
        "opt/cargo/credentials.toml",
        "opt/cargo/credentials",
        "opt/tool/.ssh/id_ed25519",
        "opt/tool/etc/npmrc",
    ] {
        refused(&p, &repo, &h, &path, &f.path(file));
    }
    // a covered directory cannot even be listed
    let r = probe_in(
        &p,
        &repo,
        &h,
        &path,
        &["list", tool.join(".ssh").to_str().unwrap()],
    );
    r.assert_errno(&[libc::EACCES]);
}

/// Finding 2c: `node_modules/.bin/tap -> /srv/app/bin/app` with the repo's `node_modules/.bin`
/// first in PATH (as under `npm run`) must not get `/srv/app` bound; nor the same link
/// reached from a PATH entry outside the repo, nor a PATH entry that resolves into the repo,
/// nor one under a world-writable directory (sticky or not). The control: the same link in
/// a trusted PATH directory does get the app's prefix bound, so the test can see a bind.
#[test]
fn repo_and_world_writable_path_entries_do_not_steer_binds() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tc-repo-links");
    let repo = f.repo("repo");
    let h = f.path("home");
    std::fs::create_dir_all(&h).unwrap();
    let app = f.path("srv/app");
    exe(&app.join("bin/app"));
    f.write("srv/app/secret.txt", SECRET);
    let secret = app.join("secret.txt");
    let p = profile(&f);

    // the control: a trusted PATH directory
    symlink(&app.join("bin/app"), &f.path("good/bin/tap"));
    let good = path_of(&[&f.path("good/bin")]);
    readable(&p, &repo, &h, &good, &secret);

    // a. the repo's node_modules/.bin first in PATH
    let nm = repo.join("node_modules/.bin");
    symlink(&app.join("bin/app"), &nm.join("tap"));
    refused(&p, &repo, &h, &path_of(&[&nm, &f.path("none")]), &secret);

    // b. a link outside the repo leading through a link inside it
    symlink(&app.join("bin/app"), &repo.join("lib/tap"));
    symlink(&repo.join("lib/tap"), &f.path("outside/bin/tap"));
    refused(&p, &repo, &h, &path_of(&[&f.path("outside/bin")]), &secret);

    // c. a PATH entry outside the repo that is a link to a directory in it
    symlink(&nm, &f.path("linked-bin"));
    refused(&p, &repo, &h, &path_of(&[&f.path("linked-bin")]), &secret);

    // e. a PATH entry reached through a directory link that lives in a world-writable
    //    directory (its resolved path is clean: only a walk that checks each lookup sees it)
    std::fs::create_dir_all(f.path("safe/c")).unwrap();
    symlink(&app.join("bin/app"), &f.path("safe/c/bin/tap"));
    symlink(&f.path("safe"), &f.path("ww2/l2"));
    symlink(&f.path("ww2/l2/c"), &f.path("a/l1"));
    mode(&f.path("ww2"), 0o777);
    refused(&p, &repo, &h, &path_of(&[&f.path("a/l1/bin")]), &secret);
    mode(&f.path("ww2"), 0o755);
    // and the same walk through trusted directories is followed
    readable(&p, &repo, &h, &path_of(&[&f.path("a/l1/bin")]), &secret);

    // d. under a world-writable directory, with and without the sticky bit
    for (dir, m) in [("ww", 0o777), ("sticky", 0o1777)] {
        symlink(&app.join("bin/app"), &f.path(&format!("{dir}/bin/tap")));
        mode(&f.path(dir), m);
        refused(
            &p,
            &repo,
            &h,
            &path_of(&[&f.path(&format!("{dir}/bin"))]),
            &secret,
        );
        mode(&f.path(dir), 0o755);
    }
}

/// `c` run where no user namespace can be made (as in tests/degraded.rs).
fn without_userns(c: std::process::Command) -> std::process::Command {
    under_zero_sysctl(c, "user/max_user_namespaces")
}

/// Without namespaces there is no new root to mount over credentials: landlock must leave
/// them out of the toolchain trees instead. Rootless only (as root such a run is refused).
#[test]
fn credentials_are_carved_out_without_namespaces() {
    if is_root() {
        eprintln!("SKIP credentials_are_carved_out_without_namespaces: runs only rootless");
        return;
    }
    if !sandbox_works() || !need_landlock(1, "a run without namespaces needs landlock") {
        return;
    }
    let f = Fixture::new("tc-nons");
    let repo = f.repo("repo");
    let h = f.path("home");
    std::fs::create_dir_all(&h).unwrap();
    let tmp = f.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tool = f.path("opt/tool");
    exe(&tool.join("bin/tool"));
    f.write("opt/tool/credentials.toml", SECRET);
    f.write("opt/tool/.ssh/id_ed25519", SECRET);
    f.write("opt/tool/share/data.txt", "data\n");
    let path = path_of(&[&tool.join("bin")]);
    let p = f.profile(
        &Spec::extends("validate")
            .programs(&["tool"])
            .layer("namespaces", "best-effort")
            .layer("filesystem", "best-effort"),
    );
    let run = |args: &[&str]| {
        let mut argv = vec![probe().into_os_string()];
        argv.extend(args.iter().map(Into::into));
        let mut c = sandbox_command(
            &p,
            &repo,
            &["--report", f.path("report.json").to_str().unwrap()],
            &argv,
        );
        c.env("TMPDIR", &tmp)
            .env("HOME", &h)
            .env("PATH", &path)
            .env_remove("RUSTUP_HOME");
        ProbeRun::parse(args[0], run_command(without_userns(c), LIMIT))
    };
    let r = run(&["read", tool.join("share/data.txt").to_str().unwrap()]);
    r.assert_ok();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(f.path("report.json")).unwrap()).unwrap();
    fn degraded(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(m) => m.iter().any(|(k, v)| {
                (k == "degraded"
                    && v.as_array()
                        .is_some_and(|a| a.iter().any(|x| x == "namespaces")))
                    || degraded(v)
            }),
            _ => false,
        }
    }
    assert!(
        degraded(&report),
        "the run was not without namespaces: {report}"
    );
    run(&["read", tool.join("bin/tool").to_str().unwrap()]).assert_ok();
    for file in ["opt/tool/credentials.toml", "opt/tool/.ssh/id_ed25519"] {
        let r = run(&["read", f.path(file).to_str().unwrap()]);
        assert!(!r.run.all().contains("sbx-e2e-secret"), "{r}");
        r.assert_errno(&[libc::EACCES]);
    }
}

/// A tool installed in a system directory (`CARGO_HOME=/usr/local/cargo`, as in the common
/// rust container images) is visible through that directory's bind: its cargo credentials
/// and an npm global config with a token are covered there too. The system directory here
/// is a fixture directory added to the profile's `system_ro`.
#[test]
fn credentials_of_a_tool_in_a_system_directory_are_covered() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("tc-system");
    let repo = f.repo("repo");
    let h = f.path("home");
    std::fs::create_dir_all(&h).unwrap();
    let sys = f.path("sysroot");
    exe(&sys.join("cargo/bin/rustup"));
    symlink(Path::new("rustup"), &sys.join("cargo/bin/cargo"));
    f.write("sysroot/cargo/credentials.toml", SECRET);
    f.write("sysroot/cargo/config.toml", "[net]\noffline = true\n");
    exe(&sys.join("node/bin/node"));
    f.write("sysroot/node/etc/npmrc", TOKEN_NPMRC);
    let path = path_of(&[&sys.join("cargo/bin"), &sys.join("node/bin")]);
    // validate's profile with the fixture's "system" directory added to system_ro
    let validate: toml::Table = toml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/validate.toml"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut system = validate["filesystem"]["system_ro"]
        .as_array()
        .unwrap()
        .clone();
    system.push(toml::Value::String(sys.display().to_string()));
    let mut t: toml::Table = toml::from_str(
        &Spec::extends("validate")
            .programs(&["cargo", "node"])
            .to_toml(),
    )
    .unwrap();
    t["filesystem"]
        .as_table_mut()
        .unwrap()
        .insert("system_ro".into(), toml::Value::Array(system));
    let p = f.path("profile-system.toml");
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();

    for file in [
        "sysroot/cargo/bin/cargo",
        "sysroot/cargo/config.toml",
        "sysroot/node/bin/node",
    ] {
        readable(&p, &repo, &h, &path, &f.path(file));
    }
    for file in ["sysroot/cargo/credentials.toml", "sysroot/node/etc/npmrc"] {
        refused(&p, &repo, &h, &path, &f.path(file));
    }
}

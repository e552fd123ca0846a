//! rustup proxies inside the sandbox, with a real rustup: `cargo` in `~/.cargo/bin` is either a
//! symlink to `rustup` beside it or a hard link to it (same inode; what rustup itself installs
//! where it can). Both must be recognised as rustup, so that rustup's toolchains and settings
//! are bound and `cargo --version` runs the toolchain's cargo inside. Without that, a hard-linked
//! proxy says "rustup could not choose a version of cargo to run".
//!
//! The rustup binary is copied from the host (`$SANDBOX_RUN_TEST_RUSTUP`, else `rustup` on
//! PATH, else `~/.cargo/bin/rustup`); the toolchain is a fake one (a shell script named
//! `cargo`), so nothing is downloaded. No rustup readable here: a skip.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn host_rustup() -> Option<PathBuf> {
    let readable = |p: &Path| std::fs::File::open(p).is_ok() && p.is_file();
    std::env::var_os("SANDBOX_RUN_TEST_RUSTUP")
        .map(PathBuf::from)
        .into_iter()
        .chain(which("rustup"))
        .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/rustup")))
        .find(|p| readable(p))
}

/// A home with `~/.cargo/bin/rustup` (a copy of the real one), `cargo` beside it (a hard link
/// or a symlink), and `~/.rustup` with one toolchain whose `cargo` prints a marker.
fn rustup_home(f: &Fixture, name: &str, rustup: &Path, hard: bool) -> PathBuf {
    let h = f.path(name);
    let bin = h.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(rustup, bin.join("rustup")).unwrap();
    std::fs::set_permissions(bin.join("rustup"), std::fs::Permissions::from_mode(0o755)).unwrap();
    if hard {
        std::fs::hard_link(bin.join("rustup"), bin.join("cargo")).unwrap();
    } else {
        std::os::unix::fs::symlink("rustup", bin.join("cargo")).unwrap();
    }
    f.write(
        &format!("{name}/.rustup/toolchains/sbx-fake/bin/cargo"),
        "#!/bin/sh\necho \"cargo-from-the-sbx-fake-toolchain $*\"\n",
    );
    std::fs::set_permissions(
        h.join(".rustup/toolchains/sbx-fake/bin/cargo"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    f.write(
        &format!("{name}/.rustup/settings.toml"),
        "version = \"12\"\ndefault_toolchain = \"sbx-fake\"\n",
    );
    h
}

fn cargo_version(f: &Fixture, home: &Path) -> Run {
    let repo = f.repo(&format!(
        "repo-{}",
        home.file_name().unwrap().to_string_lossy()
    ));
    let p = f.profile(&Spec::extends("validate").programs(&["cargo"]));
    let mut c = sandbox_command(&p, &repo, &[], &["cargo", "--version"]);
    c.env("HOME", home)
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", home.join(".cargo/bin").display()),
        )
        .env_remove("RUSTUP_HOME")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_HOME");
    run_command(c, LIMIT)
}

#[test]
fn hard_linked_and_symlinked_proxies_both_run_cargo() {
    if !sandbox_works() {
        return;
    }
    let Some(rustup) = host_rustup() else {
        skip_tool("no readable rustup here (set SANDBOX_RUN_TEST_RUSTUP)");
        return;
    };
    let f = Fixture::new("rustup-proxies");
    // positive control: the symlinked layout, found by name as always
    let sym = rustup_home(&f, "sym", &rustup, false);
    let r = cargo_version(&f, &sym);
    r.assert_code(0);
    assert!(
        r.stdout
            .contains("cargo-from-the-sbx-fake-toolchain --version"),
        "{r}"
    );
    // the hard-linked layout: the same inode as rustup, under another name
    let hard = rustup_home(&f, "hard", &rustup, true);
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (
        hard.join(".cargo/bin/cargo").metadata().unwrap(),
        hard.join(".cargo/bin/rustup").metadata().unwrap(),
    );
    assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()), "not a hard link");
    let r = cargo_version(&f, &hard);
    assert!(
        !r.all().contains("could not choose a version"),
        "rustup's home was not bound for a hard-linked proxy:\n{r}"
    );
    r.assert_code(0);
    assert!(
        r.stdout
            .contains("cargo-from-the-sbx-fake-toolchain --version"),
        "{r}"
    );
}

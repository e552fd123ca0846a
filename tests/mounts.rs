//! The new root as pid 1 builds it: system links made as links (merged /usr's
//! `/bin` -> `/usr/bin`), and the root tmpfs with every system bind made read-only, nosuid and
//! nodev by one recursive `mount_setattr`. Attacked from inside, beside a control that works.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The mounts of the sandbox, from its own /proc/self/mountinfo: (mount point, options).
fn mounts_inside(p: &Path, repo: &Path) -> Vec<(String, String)> {
    let r = run_probe(p, repo, &[], &["read-hex", "/proc/self/mountinfo"]);
    r.assert_ok();
    let hex = r.lines.first().cloned().unwrap_or_default();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 5).then(|| (f[4].to_string(), f[5].to_string()))
        })
        .collect()
}

/// On a merged-/usr host `/bin` is a link to `usr/bin`: inside it is a link too (no mount),
/// `/bin/sh` runs through it, and the link can be neither removed, replaced nor written
/// through.
#[test]
fn merged_usr_links_work_and_cannot_be_changed() {
    if !sandbox_works() {
        return;
    }
    if std::fs::read_link("/bin").is_err() {
        skip_tool("/bin is not a link on this host (not merged /usr)");
        return;
    }
    let f = Fixture::new("usr-links");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    // control: a link (lstat), not a mount, and a shell runs through it
    let d = run_probe(&p, &repo, &[], &["stat", "/bin"]).assert_ok();
    assert!(d.starts_with("mode=120"), "/bin inside is not a link: {d}");
    let d = run_probe(&p, &repo, &[], &["exec", "/bin/sh", "-c", "exit 7"]).assert_ok();
    assert_eq!(d, "exit=7", "/bin/sh did not run");
    let mounts = mounts_inside(&p, &repo);
    assert!(!mounts.iter().any(|(m, _)| m == "/bin"), "/bin is a mount");
    let root = mounts.iter().find(|(m, _)| m == "/").expect("/ inside");
    assert!(
        root.1.split(',').any(|o| o == "ro"),
        "/ is mounted {}",
        root.1
    );
    // attacks: the link itself, and writes through it
    run_probe(&p, &repo, &[], &["unlink", "/bin"]).assert_errno(&[libc::EROFS, libc::EACCES]);
    run_probe(&p, &repo, &[], &["replace-with-symlink", "/bin", "/tmp"])
        .assert_errno(&[libc::EROFS, libc::EACCES]);
    let write = run_probe(&p, &repo, &[], &["write", "/bin/sbx-e2e-planted"]);
    // chmod follows the link: to the mode the host's directory has (no change if it got
    // through, whatever this test runs against)
    let mode = format!("{:o}", std::fs::metadata("/bin").unwrap().mode() & 0o7777);
    let chmod = run_probe(&p, &repo, &[], &["chmod", "/bin", &mode]);
    let planted = Path::new("/bin/sbx-e2e-planted");
    let leaked = planted.exists();
    let _ = std::fs::remove_file(planted);
    assert!(!leaked, "a file appeared in the host's /bin");
    write.assert_errno(&[libc::EROFS, libc::EACCES]);
    chmod.assert_errno(&[libc::EROFS, libc::EACCES, libc::EPERM]);
    // and the link's target is what the host's is
    run_probe(&p, &repo, &[], &["stat", "/bin/sh"]).assert_ok();
}

/// The root tmpfs and the system binds (made read-only together, after the links) are
/// read-only, nosuid and nodev, each of them; a write into one fails, beside the writable
/// /tmp, home and repo.
#[test]
fn the_root_and_system_binds_are_read_only_nosuid_nodev() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("sealed");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mounts = mounts_inside(&p, &repo);
    let system = ["/usr", "/etc/ssl/certs", "/etc/alternatives", "/etc/passwd"];
    let mut seen = 0;
    for (m, opts) in &mounts {
        if m == "/" || system.contains(&m.as_str()) {
            seen += 1;
            let o: Vec<&str> = opts.split(',').collect();
            for want in ["ro", "nosuid", "nodev"] {
                assert!(o.contains(&want), "{m} is mounted {opts}, not {want}");
            }
        }
    }
    assert!(seen >= 2, "neither / nor /usr found inside: {mounts:?}");
    for target in [
        "/sbx-e2e-planted",
        "/etc/sbx-e2e-planted",
        "/etc/ssl/certs/sbx-e2e-planted",
        "/usr/sbx-e2e-planted",
    ] {
        if Path::new(target).parent().is_some_and(|d| d.exists()) {
            run_probe(&p, &repo, &[], &["write", target])
                .assert_errno(&[libc::EROFS, libc::EACCES]);
        }
    }
    run_probe(&p, &repo, &[], &["mkdir", "/sbx-e2e-dir"])
        .assert_errno(&[libc::EROFS, libc::EACCES]);
    // /etc inside is the root tmpfs's own directory, 755
    run_probe(&p, &repo, &[], &["chmod", "/etc", "755"]).assert_errno(&[
        libc::EROFS,
        libc::EACCES,
        libc::EPERM,
    ]);
    // control: the writable mounts made after the seal are writable
    run_probe(&p, &repo, &[], &["write", "/tmp/x"]).assert_ok();
    run_probe(&p, &repo, &[], &["write", repo.join("x").to_str().unwrap()]).assert_ok();
    let tmp = mounts
        .iter()
        .find(|(m, _)| m == "/tmp")
        .expect("/tmp mount");
    assert!(tmp.1.split(',').any(|o| o == "rw"), "/tmp: {}", tmp.1);
}

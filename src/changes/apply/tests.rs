//! Every kind of entry applied, and every failure rolled back to the byte.

use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};

/// A node of a tree written by [`build`].
#[derive(Clone, Copy)]
enum N {
    F(&'static str, u32),
    D(u32),
    L(&'static str),
}
use N::{D, F, L};

/// `target/changes-apply-NAME-PID`, or under `$SANDBOX_RUN_TEST_TMP` (an unprivileged
/// user's run: the permission failures only show there).
fn scratch(name: &str) -> PathBuf {
    let base = crate::testdir::base().join(format!("changes-apply-{name}-{}", std::process::id()));
    wipe(&base);
    std::fs::create_dir_all(&base).unwrap();
    base
}

fn wipe(p: &Path) {
    if p.symlink_metadata().is_ok() {
        let parent = Tree::open(p.parent().unwrap()).unwrap();
        fs::remove_all(parent.raw_fd(), p.file_name().unwrap()).unwrap();
    }
}

/// Write `spec` under `root` (made fresh), parents first; directories' modes last.
fn build(root: &Path, spec: &[(&str, N)]) {
    wipe(root);
    std::fs::create_dir_all(root).unwrap();
    let mut dirs = Vec::new();
    for (p, n) in spec {
        let p = root.join(p);
        match n {
            F(c, m) => {
                std::fs::write(&p, c).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*m)).unwrap();
            }
            D(m) => {
                std::fs::create_dir(&p).unwrap();
                dirs.push((p, *m));
            }
            L(t) => symlink(t, &p).unwrap(),
        }
    }
    for (p, m) in dirs.iter().rev() {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(*m)).unwrap();
    }
}

/// Everything under `root`: type, mode, content or target (not times).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut names: Vec<_> = std::fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let p = root.join(&r);
            let md = p.symlink_metadata().unwrap();
            let mode = md.permissions().mode() & 0o7777;
            let ft = md.file_type();
            let v = if ft.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                format!("dir {mode:o}")
            } else if ft.is_file() {
                format!("file {mode:o} {:?}", std::fs::read(&p).unwrap())
            } else {
                format!("special {:o}", md.permissions().mode())
            };
            out.insert(r.clone(), v);
            if ft.is_dir() {
                walk(root, &r, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn entry(path: &str, kind: Kind, what: What, mode: u32) -> Entry {
    Entry {
        root: 0,
        path: PathBuf::from(path),
        kind,
        what,
        mode,
        bytes: 0,
        refused: None,
    }
}

fn whiteout(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod of a NUL-terminated path: a character device 0:0 (an overlayfs whiteout).
    assert_eq!(
        unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) },
        0
    );
}

const BEFORE: &[(&str, N)] = &[
    ("keep.txt", F("keep\n", 0o644)),
    ("mod.txt", F("old\n", 0o644)),
    ("rm.txt", F("bye\n", 0o644)),
    ("rmdir", D(0o755)),
    ("rmdir/a", F("a", 0o644)),
    ("rmdir/b", D(0o555)),
    ("rmdir/b/c", F("c", 0o444)),
    ("f2d", F("was a file\n", 0o644)),
    ("d2f", D(0o755)),
    ("d2f/x", F("x", 0o644)),
    ("f2l", F("was a file\n", 0o644)),
    ("l2f", L("keep.txt")),
    ("mode.sh", F("#!/bin/sh\n", 0o644)),
    ("modedir", D(0o755)),
    ("ro", D(0o555)),
    ("sub", D(0o755)),
    ("sub/old.txt", F("old\n", 0o600)),
    ("link", L("keep.txt")),
];

/// The run's upper layer: new content, and whiteouts the apply must ignore.
const UPPER: &[(&str, N)] = &[
    ("mod.txt", F("new\n", 0o640)),
    ("new.txt", F("fresh\n", 0o600)),
    ("newdir", D(0o750)),
    ("newdir/x", F("x\n", 0o644)),
    ("newdir/y", D(0o555)),
    ("newdir/y/z", F("z\n", 0o444)),
    ("newdir/ln", L("x")),
    ("newlink", L("../outside")),
    ("f2d", D(0o700)),
    ("f2d/inner", F("inner\n", 0o644)),
    ("d2f", F("now a file\n", 0o644)),
    ("f2l", L("keep.txt")),
    ("l2f", F("now a file\n", 0o644)),
    ("mode.sh", F("#!/bin/sh\n", 0o755)),
    ("modedir", D(0o700)),
    ("ro", D(0o755)),
    ("ro/added", F("added\n", 0o644)),
    ("sub", D(0o755)),
    ("sub/added", F("added\n", 0o644)),
    ("link", L("mod.txt")),
];

fn changeset(repo: &Path) -> Changeset {
    let d = What::Dir;
    let f = What::File;
    let l = What::Link;
    Changeset {
        roots: vec![repo.to_path_buf()],
        entries: vec![
            entry("d2f", Kind::TypeChange, f, 0o644),
            entry("f2d", Kind::TypeChange, d, 0o700),
            entry("f2d/inner", Kind::Added, f, 0o644),
            entry("f2l", Kind::TypeChange, l, 0),
            entry("l2f", Kind::TypeChange, f, 0o644),
            entry("link", Kind::Modified, l, 0),
            entry("mod.txt", Kind::Modified, f, 0o640),
            entry("mode.sh", Kind::Mode, f, 0o755),
            entry("modedir", Kind::Mode, d, 0o700),
            entry("new.txt", Kind::Added, f, 0o600),
            entry("newdir", Kind::Added, d, 0o750),
            entry("newdir/ln", Kind::Added, l, 0),
            entry("newdir/x", Kind::Added, f, 0o644),
            entry("newdir/y", Kind::Added, d, 0o555),
            entry("newdir/y/z", Kind::Added, f, 0o444),
            entry("newlink", Kind::Added, l, 0),
            entry("rm.txt", Kind::Removed, f, 0),
            entry("rmdir", Kind::Removed, d, 0),
            entry("ro", Kind::Mode, d, 0o755),
            entry("ro/added", Kind::Added, f, 0o644),
            entry("sub/added", Kind::Added, f, 0o644),
        ],
    }
}

/// What the repo must hold afterwards.
const AFTER: &[(&str, N)] = &[
    ("d2f", F("now a file\n", 0o644)),
    ("f2d", D(0o700)),
    ("f2d/inner", F("inner\n", 0o644)),
    ("f2l", L("keep.txt")),
    ("keep.txt", F("keep\n", 0o644)),
    ("l2f", F("now a file\n", 0o644)),
    ("link", L("mod.txt")),
    ("mod.txt", F("new\n", 0o640)),
    ("mode.sh", F("#!/bin/sh\n", 0o755)),
    ("modedir", D(0o700)),
    ("new.txt", F("fresh\n", 0o600)),
    ("newdir", D(0o750)),
    ("newdir/ln", L("x")),
    ("newdir/x", F("x\n", 0o644)),
    ("newdir/y", D(0o555)),
    ("newdir/y/z", F("z\n", 0o444)),
    ("newlink", L("../outside")),
    ("ro", D(0o755)),
    ("ro/added", F("added\n", 0o644)),
    ("sub", D(0o755)),
    ("sub/added", F("added\n", 0o644)),
    ("sub/old.txt", F("old\n", 0o600)),
];

struct Setup {
    base: PathBuf,
    repo: PathBuf,
    upper: PathBuf,
    /// Apply as the way back does: files moved in by rename (same filesystem here).
    moving: std::cell::Cell<bool>,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let base = scratch(name);
        let s = Setup {
            repo: base.join("repo"),
            upper: base.join("upper"),
            base,
            moving: std::cell::Cell::new(false),
        };
        s.reset();
        s
    }

    fn reset(&self) {
        build(&self.repo, BEFORE);
        build(&self.upper, UPPER);
        whiteout(&self.upper.join("rm.txt"));
        whiteout(&self.upper.join("rmdir"));
    }

    fn apply(&self, cs: &Changeset, faults: &Faults) -> Outcome {
        let src = [Tree::open(&self.upper).unwrap()];
        let dst = [Tree::open(&self.repo).unwrap()];
        apply_with(cs, &src, &dst, faults, self.moving.get())
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            wipe(&self.base);
        }
    }
}

fn expected(base: &Path) -> BTreeMap<PathBuf, String> {
    let p = base.join("expected");
    build(&p, AFTER);
    snapshot(&p)
}

#[test]
fn every_kind_of_entry_is_applied() {
    let s = Setup::new("kinds");
    let want = expected(&s.base);
    let o = s.apply(&changeset(&s.repo), &Faults::default());
    assert_eq!(o.error, None);
    assert_eq!(o.applied, Applied::All);
    assert_eq!(snapshot(&s.repo), want);
    assert_eq!(o.removed, 2);
    assert!(o.written > 0);
    // the file's times come with it
    let (a, b) = (
        std::fs::metadata(s.upper.join("mod.txt")).unwrap(),
        std::fs::metadata(s.repo.join("mod.txt")).unwrap(),
    );
    assert_eq!(a.modified().unwrap(), b.modified().unwrap());
}

/// A filesystem without RENAME_EXCHANGE and RENAME_NOREPLACE: the same result, and a
/// failure at any step of the swap still rolls back whole.
#[test]
fn without_the_rename_flags_it_falls_back_and_still_rolls_back() {
    let s = Setup::new("oldfs");
    let want = expected(&s.base);
    let cs = changeset(&s.repo);
    let o = s.apply(
        &cs,
        &Faults {
            old_fs: true,
            ..Faults::default()
        },
    );
    assert_eq!((o.applied, o.error), (Applied::All, None));
    assert_eq!(snapshot(&s.repo), want);
    s.reset();
    let before = snapshot(&s.repo);
    for n in 0.. {
        s.reset();
        let o = s.apply(
            &cs,
            &Faults {
                swap: Some(n),
                old_fs: true,
                ..Faults::default()
            },
        );
        if o.applied == Applied::All {
            break;
        }
        assert_eq!(o.applied, Applied::None, "step {n}: {o:?}");
        assert_eq!(snapshot(&s.repo), before, "step {n}");
    }
}

#[test]
fn refused_entries_and_nothing_to_do_change_nothing() {
    let s = Setup::new("refused");
    let before = snapshot(&s.repo);
    let mut cs = changeset(&s.repo);
    for e in &mut cs.entries {
        e.refused = Some("test".into());
    }
    let o = s.apply(&cs, &Faults::default());
    assert_eq!((o.applied, o.error), (Applied::None, None));
    assert_eq!(snapshot(&s.repo), before);
}

/// A failure at every step of phase 1 and of phase 2 leaves the repo as it was.
#[test]
fn a_failure_at_any_step_rolls_back_whole() {
    let s = Setup::new("steps");
    let before = snapshot(&s.repo);
    let upper_before = snapshot(&s.upper);
    let cs = changeset(&s.repo);
    for (phase, moving) in [(1, false), (2, false), (1, true), (2, true)] {
        s.moving.set(moving);
        let mut n = 0;
        loop {
            s.reset();
            let faults = if phase == 1 {
                Faults {
                    prepare: Some(n),
                    ..Faults::default()
                }
            } else {
                Faults {
                    swap: Some(n),
                    ..Faults::default()
                }
            };
            let o = s.apply(&cs, &faults);
            if o.applied == Applied::All {
                assert!(n > 5, "phase {phase}: only {n} steps");
                break;
            }
            assert_eq!(o.applied, Applied::None, "phase {phase} step {n}: {o:?}");
            assert!(o.error.unwrap().contains("os error 5"));
            assert_eq!(snapshot(&s.repo), before, "phase {phase} step {n}");
            // what was moved in went back where it came from
            assert_eq!(snapshot(&s.upper), upper_before, "phase {phase} step {n}");
            n += 1;
        }
    }
}

/// The last step done cannot be undone (for each step of phase 2 in turn): that path, and
/// only that one, is reported and left changed; an old content is kept beside it.
#[test]
fn what_cannot_be_undone_is_reported() {
    let s = Setup::new("partial");
    let cs = changeset(&s.repo);
    for (k, moving) in (1..).flat_map(|k| [(k, false), (k, true)]) {
        s.moving.set(moving);
        s.reset();
        let o = s.apply(
            &cs,
            &Faults {
                swap: Some(k),
                undo: Some(0),
                ..Faults::default()
            },
        );
        if o.applied == Applied::All {
            assert!(k > 5);
            break;
        }
        assert_eq!(o.applied, Applied::Partial, "{k}: {o:?}");
        assert!(o.left.iter().all(|l| l.0 == 0));
        let left: Vec<PathBuf> = o.left.iter().map(|l| l.1.clone()).collect();
        assert!(!left.is_empty() && left.len() <= 2, "{k}: {o:?}");
        let strip = |m: BTreeMap<PathBuf, String>| -> BTreeMap<PathBuf, String> {
            m.into_iter()
                .filter(|(p, _)| !left.iter().any(|l| p.starts_with(l)))
                .collect()
        };
        let now = snapshot(&s.repo);
        let partial = strip(now.clone());
        if left.len() == 2 {
            assert!(left[1].to_string_lossy().contains(".sbx-"), "{left:?}");
            assert!(now.contains_key(&left[1]), "{now:?}");
        }
        assert!(
            partial
                .keys()
                .all(|p| !p.to_string_lossy().contains(".sbx-")),
            "{k}: {partial:?}"
        );
        s.reset();
        assert_ne!(now, snapshot(&s.repo), "{k}: the path left is changed");
        assert_eq!(partial, strip(snapshot(&s.repo)), "{k}");
    }
}

/// A parent of an entry replaced by a link to somewhere else: nothing is written there,
/// nothing changes in the repo.
#[test]
fn a_parent_replaced_by_a_link_is_not_followed() {
    let s = Setup::new("parentlink");
    let outside = s.base.join("outside");
    build(&outside, &[("old.txt", F("outside\n", 0o644))]);
    std::fs::rename(s.repo.join("sub"), s.base.join("sub-moved")).unwrap();
    symlink(&outside, s.repo.join("sub")).unwrap();
    let before = snapshot(&s.repo);
    let out_before = snapshot(&outside);
    let o = s.apply(&changeset(&s.repo), &Faults::default());
    assert_eq!(o.applied, Applied::None);
    let err = o.error.unwrap();
    assert!(err.contains("sub/added"), "{err}");
    assert_eq!(snapshot(&s.repo), before);
    assert_eq!(snapshot(&outside), out_before);
}

/// A FIFO, or a link, planted where a file is modified: never opened, never followed.
#[test]
fn a_fifo_or_link_in_the_target_is_never_written_through() {
    for planted in ["fifo", "link"] {
        let s = Setup::new(&format!("plant-{planted}"));
        let victim = s.base.join("victim");
        std::fs::write(&victim, "victim\n").unwrap();
        std::fs::remove_file(s.repo.join("mod.txt")).unwrap();
        if planted == "fifo" {
            nix::unistd::mkfifo(
                &s.repo.join("mod.txt"),
                nix::sys::stat::Mode::from_bits_truncate(0o644),
            )
            .unwrap();
        } else {
            symlink(&victim, s.repo.join("mod.txt")).unwrap();
        }
        let before = snapshot(&s.repo);
        let o = s.apply(&changeset(&s.repo), &Faults::default());
        assert_eq!(o.applied, Applied::None, "{planted}");
        assert!(o.error.unwrap().contains("mod.txt"));
        assert_eq!(snapshot(&s.repo), before, "{planted}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    }
}

/// Something appeared where the changeset adds: not overwritten.
#[test]
fn an_addition_never_overwrites() {
    let s = Setup::new("exists");
    std::fs::write(s.repo.join("new.txt"), "mine\n").unwrap();
    let before = snapshot(&s.repo);
    let o = s.apply(&changeset(&s.repo), &Faults::default());
    assert_eq!(o.applied, Applied::None);
    assert!(o.error.unwrap().contains("new.txt: exists"));
    assert_eq!(snapshot(&s.repo), before);
}

/// A name too long for the filesystem, last in the changeset: everything before it was
/// prepared, and is all undone.
#[test]
fn a_name_too_long_rolls_back() {
    let s = Setup::new("toolong");
    let before = snapshot(&s.repo);
    let mut cs = changeset(&s.repo);
    cs.entries.push(entry(
        &format!("sub/{}", "n".repeat(300)),
        Kind::Added,
        What::File,
        0o644,
    ));
    let o = s.apply(&cs, &Faults::default());
    assert_eq!(o.applied, Applied::None);
    assert!(o.error.unwrap().contains("os error 36"));
    assert_eq!(snapshot(&s.repo), before);
}

/// A directory the owner cannot write, part-way: as an unprivileged user the copy into it
/// fails (root is not stopped by permissions: a fault stands in above).
#[test]
fn a_read_only_directory_part_way_rolls_back() {
    let s = Setup::new("readonly");
    std::fs::set_permissions(s.repo.join("sub"), std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = snapshot(&s.repo);
    let o = s.apply(&changeset(&s.repo), &Faults::default());
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert_eq!(o.applied, Applied::None);
        assert!(o.error.unwrap().contains("sub/added"));
        assert_eq!(snapshot(&s.repo), before);
    } else {
        assert_eq!(o.applied, Applied::All);
    }
    std::fs::set_permissions(s.repo.join("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn malformed_changesets_are_refused_before_anything() {
    let s = Setup::new("malformed");
    let before = snapshot(&s.repo);
    for (p, kind, what) in [
        ("../up", Kind::Added, What::File),
        ("/abs", Kind::Added, What::File),
        ("rm.txt/inside", Kind::Added, What::File),
        ("newdir/x/y", Kind::Added, What::File),
        ("newdir/gone", Kind::Removed, What::File),
        ("dev", Kind::Added, What::Special),
    ] {
        let mut cs = changeset(&s.repo);
        cs.entries.push(entry(p, kind, what, 0o644));
        cs.entries.sort_by(|a, b| a.path.cmp(&b.path));
        let o = s.apply(&cs, &Faults::default());
        assert_eq!(o.applied, Applied::None, "{p}");
        assert_eq!(snapshot(&s.repo), before, "{p}");
    }
}

/// The way back's apply moves files in by rename when the layer is on the repo's filesystem:
/// the same result as a copy (modes without set-ID bits, times, only `user.*` attributes and
/// never `user.overlay.*`), the very inode, nothing left in the layer.
#[test]
fn files_are_moved_in_by_rename_with_the_rules_of_a_copy() {
    let s = Setup::new("moving");
    s.moving.set(true);
    let want = expected(&s.base);
    let new = s.upper.join("new.txt");
    let setx = |p: &Path, name: &str| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: setxattr of NUL-terminated strings and a 1-byte value.
        unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"y".as_ptr().cast(), 1, 0) == 0 }
    };
    let getx = |p: &Path, name: &str| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        let mut b = [0u8; 8];
        // SAFETY: getxattr into a buffer of the given length.
        unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), b.as_mut_ptr().cast(), b.len()) >= 0 }
    };
    let user = setx(&new, "user.keep");
    assert_eq!(user, setx(&new, "user.overlay.origin"));
    // as root: an attribute only root may set, which must not reach the repo
    let trusted = setx(&new, "trusted.sbx");
    // a set-ID bit on the layer's file, and asked for by the entry: never applied
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mut cs = changeset(&s.repo);
    for e in &mut cs.entries {
        if e.path == Path::new("new.txt") {
            e.mode = 0o4600;
        }
    }
    let ino = std::fs::metadata(&new).unwrap();
    let o = s.apply(&cs, &Faults::default());
    assert_eq!((o.applied, o.error), (Applied::All, None));
    assert_eq!(snapshot(&s.repo), want);
    use std::os::unix::fs::MetadataExt;
    let got = std::fs::metadata(s.repo.join("new.txt")).unwrap();
    assert_eq!(
        (got.dev(), got.ino()),
        (ino.dev(), ino.ino()),
        "moved, not copied"
    );
    assert_eq!(got.mode() & 0o7777, 0o600);
    assert_eq!(got.modified().unwrap(), ino.modified().unwrap());
    let moved = s.repo.join("new.txt");
    assert_eq!(getx(&moved, "user.keep"), user);
    assert!(!getx(&moved, "user.overlay.origin"));
    if trusted {
        assert!(!getx(&moved, "trusted.sbx"));
    }
    for p in ["new.txt", "mod.txt", "newdir/x"] {
        assert!(!s.upper.join(p).exists(), "{p} is still in the layer");
    }
    // A rename takes the right to write the layer's directory the file leaves: newdir/y is
    // 0555 there, which only root's CAP_DAC_OVERRIDE passes. Anyone else gets a copy: the
    // repo as above (the snapshot), a new inode, and the layer's file left where it was.
    use nix::unistd::{access, AccessFlags};
    let may_leave = access(&s.upper.join("newdir/y"), AccessFlags::W_OK).is_ok();
    let (z, left) = (s.repo.join("newdir/y/z"), s.upper.join("newdir/y/z"));
    assert_eq!(
        left.exists(),
        !may_leave,
        "newdir/y/z: moved iff its dir may be written"
    );
    if !may_leave {
        let (a, b) = (
            std::fs::metadata(&z).unwrap(),
            std::fs::metadata(&left).unwrap(),
        );
        assert_ne!((a.dev(), a.ino()), (b.dev(), b.ino()), "copied, not linked");
        assert_eq!(
            std::fs::read(&left).unwrap(),
            b"z\n",
            "the layer's file is untouched"
        );
    }
}

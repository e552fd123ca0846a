//! Kept changesets end to end: a changeset built by hand (a source tree with files, a link
//! and whiteouts, kept with the library's `keep`), then driven through the binary: `changes
//! list`, `show --json`, `diff`, `apply` (the repo updated exactly), a conflict (the repo
//! changed after the keep: nothing applied, the path named), `drop`; and the kept tree
//! mounted as an overlayfs lower layer in a throw-away user and mount namespace.

mod common;

use common::*;
use sandbox_run::changes::store::{self, Meta};
use sandbox_run::changes::{Changeset, Entry, Kind, What};
use sandbox_run::hostfs::Tree;
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The state directory of this test binary: the library's `keep` and the binary both use it.
fn state() -> PathBuf {
    static S: OnceLock<PathBuf> = OnceLock::new();
    S.get_or_init(|| {
        let s = test_base().join(format!("changes-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&s);
        std::fs::create_dir_all(&s).unwrap();
        std::env::set_var("XDG_STATE_HOME", &s);
        s
    })
    .clone()
}

fn changes(args: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.arg("changes")
        .args(args)
        .env("XDG_STATE_HOME", state())
        .env("LC_ALL", "C");
    run_command(c, LIMIT)
}

fn whiteout(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod of a NUL-terminated path: a character device 0:0 (an overlayfs whiteout).
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) };
    assert_eq!(
        r,
        0,
        "mknod {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// Everything under `root`: type, mode, content or target.
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
            let v = if md.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                format!("dir {mode:o}")
            } else {
                format!("file {mode:o} {:?}", std::fs::read(&p).unwrap())
            };
            out.insert(r.clone(), v);
            if md.is_dir() {
                walk(root, &r, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

fn entry(path: &str, kind: Kind, what: What, mode: u32, bytes: u64) -> Entry {
    Entry {
        root: 0,
        path: PathBuf::from(path),
        kind,
        what,
        mode,
        bytes,
        refused: None,
    }
}

const BIN_OLD: &[u8] = b"\x00\x01old";
const BIN_NEW: &[u8] = b"\x00\x02new";

/// A repo, the upper layer a run left over it, and the changeset saying what changed.
fn scene(f: &Fixture, name: &str) -> (PathBuf, PathBuf, Changeset) {
    let repo = f.path(&format!("{name}/repo"));
    let upper = f.path(&format!("{name}/upper"));
    for d in ["gonedir/deep", "sub", "d2f"] {
        std::fs::create_dir_all(repo.join(d)).unwrap();
    }
    std::fs::write(repo.join("d2f/old"), "old\n").unwrap();
    std::fs::write(repo.join("f2d"), "a file\n").unwrap();
    std::fs::write(repo.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(repo.join("mod.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(repo.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(repo.join("gonedir/a"), "a\n").unwrap();
    std::fs::write(repo.join("gonedir/deep/b"), "b\n").unwrap();
    std::fs::write(repo.join("bin.dat"), BIN_OLD).unwrap();
    std::fs::write(repo.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(repo.join("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();

    for d in ["newdir", "sub", "f2d"] {
        std::fs::create_dir_all(upper.join(d)).unwrap();
    }
    std::fs::write(upper.join("d2f"), "now a file\n").unwrap();
    std::fs::write(upper.join("f2d/inner"), "inner\n").unwrap();
    std::fs::write(upper.join("mod.txt"), "one\n2\nthree\n").unwrap();
    std::fs::write(upper.join("new.txt"), "hello\n").unwrap();
    std::fs::write(upper.join("newdir/x"), "x\n").unwrap();
    std::fs::write(upper.join("sub/added"), "added\n").unwrap();
    std::fs::write(upper.join("bin.dat"), BIN_NEW).unwrap();
    std::fs::write(upper.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(upper.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("new.txt", upper.join("link")).unwrap();
    whiteout(&upper.join("gone.txt"));
    whiteout(&upper.join("gonedir"));
    let mut hook = entry("sub/evil", Kind::Added, What::Special, 0o644, 0);
    hook.refused = Some("a FIFO, socket or device never reaches the host".into());
    let cs = Changeset {
        roots: vec![repo.clone()],
        entries: vec![
            entry("bin.dat", Kind::Modified, What::File, 0o644, 5),
            entry("d2f", Kind::TypeChange, What::File, 0o644, 11),
            entry("f2d", Kind::TypeChange, What::Dir, 0o755, 0),
            entry("f2d/inner", Kind::Added, What::File, 0o644, 6),
            entry("gone.txt", Kind::Removed, What::File, 0, 0),
            entry("gonedir", Kind::Removed, What::Dir, 0, 0),
            entry("link", Kind::Added, What::Link, 0, 7),
            entry("mod.txt", Kind::Modified, What::File, 0o644, 12),
            entry("new.txt", Kind::Added, What::File, 0o644, 6),
            entry("newdir", Kind::Added, What::Dir, 0o755, 0),
            entry("newdir/x", Kind::Added, What::File, 0o600, 2),
            entry("run.sh", Kind::Mode, What::File, 0o755, 10),
            entry("sub/added", Kind::Added, What::File, 0o644, 6),
            hook,
        ],
    };
    (repo, upper, cs)
}

fn keep(cs: &Changeset, upper: &Path) -> String {
    state();
    let src = [Tree::open(upper).unwrap()];
    store::keep(
        cs,
        &src,
        Meta {
            profile: "ci".into(),
            command: "make fmt".into(),
            ..Meta::default()
        },
    )
    .unwrap()
}

/// What the repo must hold once the scene's changes are applied.
fn applied(f: &Fixture, name: &str) -> BTreeMap<PathBuf, String> {
    let want = f.path(&format!("{name}/want"));
    for d in ["newdir", "sub", "f2d"] {
        std::fs::create_dir_all(want.join(d)).unwrap();
    }
    std::fs::write(want.join("d2f"), "now a file\n").unwrap();
    std::fs::write(want.join("f2d/inner"), "inner\n").unwrap();
    std::fs::write(want.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(want.join("mod.txt"), "one\n2\nthree\n").unwrap();
    std::fs::write(want.join("new.txt"), "hello\n").unwrap();
    std::fs::write(want.join("newdir/x"), "x\n").unwrap();
    std::fs::set_permissions(
        want.join("newdir/x"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(want.join("sub/added"), "added\n").unwrap();
    std::fs::write(want.join("bin.dat"), BIN_NEW).unwrap();
    std::fs::write(want.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(want.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("new.txt", want.join("link")).unwrap();
    snapshot(&want)
}

#[test]
fn list_show_diff_apply_drop() {
    let f = Fixture::new("changes-flow");
    let (repo, upper, cs) = scene(&f, "a");
    let id = keep(&cs, &upper);
    assert!(id.starts_with('c') && id.len() == 9, "{id}");

    // the kept layout: 0700 directories, a 0600 manifest, whiteouts as devices 0:0, the
    // repo's modes on directories that did not change, the entries' modes on the rest
    let stored = store::open(&id).unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&stored.dir), 0o700);
    assert_eq!(mode(stored.dir.parent().unwrap()), 0o700);
    assert_eq!(mode(&stored.dir.join("manifest.json")), 0o600);
    let tree = &stored.trees[0];
    for w in ["gone.txt", "gonedir"] {
        use std::os::unix::fs::FileTypeExt;
        let m = std::fs::symlink_metadata(tree.join(w)).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == 0, "{w}");
    }
    std::fs::set_permissions(repo.join("sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
    assert_eq!(
        mode(&tree.join("sub")),
        0o755,
        "the repo's mode at the keep"
    );
    std::fs::set_permissions(repo.join("sub"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(mode(&tree.join("newdir/x")), 0o600);
    assert_eq!(mode(&tree.join("run.sh")), 0o755);
    assert!(
        !tree.join("sub/evil").exists(),
        "a refused entry is not kept"
    );

    let r = changes(&["list"]);
    r.assert_code(0);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{r}"));
    assert!(line.contains(&repo.display().to_string()), "{line}");
    assert!(
        line.contains(" ci ") && line.contains("13 accepted, 1 refused"),
        "{line}"
    );

    let r = changes(&["show", &id, "--json"]);
    r.assert_code(0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["meta"]["command"], "make fmt");
    assert_eq!(v["changeset"]["entries"].as_array().unwrap().len(), 14);
    assert_eq!(
        v["changeset"]["entries"][13]["refused"],
        "a FIFO, socket or device never reaches the host"
    );
    let base = |path: &str| {
        let i = cs
            .entries
            .iter()
            .position(|e| e.path == Path::new(path))
            .unwrap();
        let b = v["meta"]["base"].as_array().unwrap();
        b.iter().find(|b| b["entry"] == i).unwrap()["held"].clone()
    };
    assert_eq!(base("gone.txt")["state"], "present");
    assert_eq!(base("gone.txt")["what"], "file");
    assert_eq!(base("new.txt")["state"], "absent");
    assert!(base("gonedir")["digest"].is_string());
    assert!(base("mod.txt")["digest"].is_null());
    let r = changes(&["show", &id]);
    r.assert_code(0);
    assert!(r.stdout.contains("refused: a FIFO"), "{r}");

    let r = changes(&["diff", &id]);
    r.assert_code(0);
    for part in [
        "diff --git a/bin.dat b/bin.dat\nBinary files a/bin.dat and b/bin.dat differ\n",
        "diff --git a/d2f/old b/d2f/old\ndeleted file mode 100644\n--- a/d2f/old\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\ndiff --git a/d2f b/d2f\nnew file mode 100644\n",
        "diff --git a/f2d b/f2d\ndeleted file mode 100644\n--- a/f2d\n+++ /dev/null\n@@ -1 +0,0 @@\n-a file\ndiff --git a/f2d/inner b/f2d/inner\nnew file mode 100644\n",
        "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
        "diff --git a/gonedir/a b/gonedir/a\ndeleted file mode 100644\n",
        "diff --git a/gonedir/deep/b b/gonedir/deep/b\ndeleted file mode 100644\n",
        "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+new.txt\n\\ No newline at end of file\n",
        "diff --git a/mod.txt b/mod.txt\n--- a/mod.txt\n+++ b/mod.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n",
        "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n",
        "diff --git a/newdir/x b/newdir/x\nnew file mode 100644\n",
        "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
    ] {
        assert!(r.stdout.contains(part), "missing {part:?} in\n{}", r.stdout);
    }
    assert!(
        !r.stdout.contains("sub/evil"),
        "a refused entry is not in the diff"
    );

    let r = changes(&["apply", &id]);
    r.assert_code(0);
    assert!(
        r.stdout.starts_with(&format!("applied {id} to "))
            && r.stdout.contains("the kept changeset is removed")
            && r.stdout.lines().count() == 1,
        "{r}"
    );
    assert_eq!(snapshot(&repo), applied(&f, "a"));
    let r = changes(&["show", &id]);
    r.assert_code(125);
    assert!(r.stderr.contains("sandbox-run changes list"), "{r}");
    assert!(!changes(&["list"]).stdout.contains(&id));
}

#[test]
fn a_path_changed_since_the_keep_stops_the_apply() {
    let f = Fixture::new("changes-conflict");
    let (repo, upper, cs) = scene(&f, "b");
    let id = keep(&cs, &upper);
    std::fs::write(repo.join("mod.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    std::fs::write(repo.join("gonedir/deep/c"), "new since\n").unwrap();
    let before = snapshot(&repo);
    let r = changes(&["apply", &id]);
    r.assert_code(125);
    assert_eq!(r.stderr.lines().count(), 1, "{r}");
    assert!(
        r.stderr.contains("nothing applied")
            && r.stderr.contains("mod.txt (changed)")
            && r.stderr.contains("gonedir (changed)")
            && !r.stderr.contains("new.txt"),
        "{r}"
    );
    assert_eq!(snapshot(&repo), before);
    assert!(changes(&["list"]).stdout.contains(&id));
    let r = changes(&["drop", &id]);
    r.assert_code(0);
    assert!(!changes(&["list"]).stdout.contains(&id));
    let r = changes(&["drop", &id]);
    r.assert_code(125);
    assert!(r.stderr.contains("changes list"), "{r}");
}

#[test]
fn unknown_or_malformed_ids_say_how_to_list() {
    state();
    for id in ["cabcdefgh", "../../etc", "c2"] {
        for cmd in ["show", "diff", "apply", "drop"] {
            let r = changes(&[cmd, id]);
            r.assert_code(125);
            assert!(
                r.stderr.contains("sandbox-run changes list") && r.stderr.lines().count() == 1,
                "{r}"
            );
        }
    }
}

/// Root applying to a repo another user owns: the files are that user's, made with that
/// user's permissions.
#[test]
fn root_applies_as_the_repos_owner() {
    if !is_root() {
        skip("root", "only root can give a repo to another user");
        return;
    }
    let f = Fixture::new("changes-owner");
    let (repo, upper, cs) = scene(&f, "c");
    let chown = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(chown.success());
    let id = keep(&cs, &upper);
    // kept in root's directory, but given to the repo's owner, who applies it
    let tree = store::open(&id).unwrap().trees[0].clone();
    for p in ["", "new.txt", "newdir", "gone.txt"] {
        assert_eq!(
            std::fs::symlink_metadata(tree.join(p)).unwrap().uid(),
            65534,
            "{p}"
        );
    }
    let r = changes(&["apply", &id]);
    r.assert_code(0);
    for p in ["new.txt", "newdir", "newdir/x", "sub/added", "mod.txt"] {
        let m = std::fs::symlink_metadata(repo.join(p)).unwrap();
        assert_eq!(m.uid(), 65534, "{p}");
    }
    // a directory the owner cannot write stops the apply even for root, and nothing changes
    let (repo, upper, cs) = scene(&f, "d");
    Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&repo)
        .status()
        .unwrap();
    std::fs::set_permissions(repo.join("sub"), std::fs::Permissions::from_mode(0o555)).unwrap();
    let id = keep(&cs, &upper);
    let before = snapshot(&repo);
    let r = changes(&["apply", &id]);
    r.assert_code(125);
    assert!(
        r.stderr.contains("sub/added") && r.stderr.contains("rolled back"),
        "{r}"
    );
    assert_eq!(snapshot(&repo), before);
    changes(&["drop", &id]).assert_code(0);
}

/// The kept tree is an overlayfs lower layer: over a copy of the repo it shows the repo as
/// the run left it.
#[test]
fn the_kept_tree_is_an_overlay_lower_layer() {
    let f = Fixture::new("changes-overlay");
    let (repo, upper, cs) = scene(&f, "e");
    let id = keep(&cs, &upper);
    let tree = store::open(&id).unwrap().trees[0].clone();
    let mnt = f.path("e/mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let script = format!(
        "mount -t overlay overlay -o lowerdir={}:{} {} || exit 99; cd {} && \
         for p in gone.txt gonedir new.txt newdir/x sub/added link keep.txt d2f/old f2d/inner; do \
           if [ -e $p ] || [ -L $p ]; then echo \"$p yes\"; else echo \"$p no\"; fi; done; \
         cat mod.txt d2f; stat -c %a run.sh",
        tree.display(),
        repo.display(),
        mnt.display(),
        mnt.display()
    );
    let mut c = Command::new("unshare");
    c.args(["-Urm", "sh", "-c", &script]);
    let r = run_command(c, LIMIT);
    if r.code == Some(99) || r.stderr.contains("unshare failed") {
        skip(
            "userns",
            &format!("no overlayfs in a user namespace here: {r}"),
        );
        return;
    }
    r.assert_code(0);
    assert_eq!(
        r.stdout,
        "gone.txt no\ngonedir no\nnew.txt yes\nnewdir/x yes\nsub/added yes\nlink yes\nkeep.txt yes\nd2f/old no\nf2d/inner yes\none\n2\nthree\nnow a file\n755\n",
        "{r}"
    );
    changes(&["drop", &id]).assert_code(0);
}

/// A name the command chose cannot rewrite the reviewer's terminal: controls are escaped in
/// every listing and in errors.
#[test]
fn names_are_shown_not_obeyed() {
    let f = Fixture::new("changes-names");
    let repo = f.path("g/repo");
    let upper = f.path("g/upper");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&upper).unwrap();
    let evil = "a\x1b[2J\u{202e}txt.exe";
    std::fs::write(upper.join(evil), "x\n").unwrap();
    let cs = Changeset {
        roots: vec![repo.clone()],
        entries: vec![entry(evil, Kind::Added, What::File, 0o644, 2)],
    };
    let id = keep(&cs, &upper);
    for args in [vec!["show", &id], vec!["diff", &id]] {
        let r = changes(&args);
        r.assert_code(0);
        assert!(
            !r.stdout.contains('\x1b') && !r.stdout.contains('\u{202e}'),
            "{r}"
        );
        assert!(r.stdout.contains("a\\u{1b}[2J\\u{202e}txt.exe"), "{r}");
    }
    // the same name in the repo now: the apply refuses, and says so without the controls
    std::fs::write(repo.join(evil), "mine\n").unwrap();
    let r = changes(&["apply", &id]);
    r.assert_code(125);
    assert!(
        !r.stderr.contains('\x1b') && r.stderr.contains("\\u{1b}"),
        "{r}"
    );
    changes(&["drop", &id]).assert_code(0);
}

/// A change with one shortest script (several hunks, lines added and removed, a last line
/// without a newline) is printed as git prints it, but for git's `index` line.
#[test]
fn an_unambiguous_change_is_printed_as_git_prints_it() {
    let f = Fixture::new("changes-gitdiff");
    let repo = f.path("h/repo");
    let upper = f.path("h/upper");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&upper).unwrap();
    let old: String = (1..=40).map(|i| format!("{i}\n")).collect();
    let mut new = String::new();
    for i in 1..=40 {
        match i {
            5 => new.push_str("five\n"),
            12 => {}
            30 => new.push_str("thirty\nextra\n"),
            _ => new.push_str(&format!("{i}\n")),
        }
    }
    new.push_str("tail");
    std::fs::write(repo.join("f.txt"), &old).unwrap();
    std::fs::write(upper.join("f.txt"), &new).unwrap();
    std::fs::write(repo.join("g.txt"), "a\nb\n").unwrap();
    std::fs::write(upper.join("g.txt"), "a\nb").unwrap();
    let modified = |p: &str| entry(p, Kind::Modified, What::File, 0o644, 1);
    let cs = Changeset {
        roots: vec![repo.clone()],
        entries: vec![modified("f.txt"), modified("g.txt")],
    };
    let id = keep(&cs, &upper);
    let ours = changes(&["diff", &id]);
    ours.assert_code(0);
    let mut want = String::new();
    for n in ["f.txt", "g.txt"] {
        let mut c = Command::new("git");
        c.args(["diff", "--no-index", "--no-color", "--no-ext-diff"])
            .arg(repo.join(n))
            .arg(upper.join(n))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &f.dir);
        let Ok(o) = c.output() else {
            skip_tool("git is not in PATH");
            return;
        };
        let text = String::from_utf8_lossy(&o.stdout)
            .replace(&format!("a{}", repo.display()), "a")
            .replace(&format!("b{}", upper.display()), "b");
        for l in text.lines().filter(|l| !l.starts_with("index ")) {
            want.push_str(l);
            want.push('\n');
        }
    }
    assert_eq!(ours.stdout, want);
    changes(&["drop", &id]).assert_code(0);
}

/// A random text: `n` lines drawn from `kinds` short ones (so that many shortest scripts
/// exist), sometimes without the last newline.
fn random_text(seed: &mut u64, n: u64, kinds: u64) -> String {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let lines = next() % (n + 1);
    let mut t: String = (0..lines)
        .map(|_| format!("line {}\n", next() % kinds))
        .collect();
    if next() % 8 == 0 {
        t.pop();
    }
    t
}

/// What `changes diff` prints is a unified diff that `git apply` and `patch` accept and that
/// turns each old file into the new one exactly, over 600 random changes with many shortest
/// scripts each (where a change goes among equal lines may differ from git's choice).
#[test]
fn the_diff_applies_to_give_the_new_files() {
    let f = Fixture::new("changes-applies");
    let repo = f.path("r/repo");
    let upper = f.path("r/upper");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&upper).unwrap();
    let mut seed = 0x853c49e6748fea9bu64;
    let mut entries = Vec::new();
    let mut want = BTreeMap::new();
    for i in 0..600u64 {
        let name = format!("f{i:03}.txt");
        let (lines, kinds) = [(6, 2), (20, 3), (60, 5), (200, 8)][(i % 4) as usize];
        let old = random_text(&mut seed, lines, kinds);
        let mut new = random_text(&mut seed, lines, kinds);
        if old == new {
            new.push_str("one more\n");
        }
        std::fs::write(repo.join(&name), &old).unwrap();
        std::fs::write(upper.join(&name), &new).unwrap();
        entries.push(entry(
            &name,
            Kind::Modified,
            What::File,
            0o644,
            new.len() as u64,
        ));
        want.insert(name, new);
    }
    let cs = Changeset {
        roots: vec![repo.clone()],
        entries,
    };
    let id = keep(&cs, &upper);
    let diff = changes(&["diff", &id]);
    diff.assert_code(0);
    let patch = f.write("all.patch", &diff.stdout);
    for (tool, args) in [
        ("git", vec!["apply", "--whitespace=nowarn"]),
        ("patch", vec!["-s", "-p1", "-i"]),
    ] {
        let copy = f.path(&format!("applied-by-{tool}"));
        std::fs::create_dir_all(&copy).unwrap();
        for n in want.keys() {
            std::fs::copy(repo.join(n), copy.join(n)).unwrap();
        }
        let mut c = Command::new(tool);
        c.args(&args)
            .arg(&patch)
            .current_dir(&copy)
            // not the repo the fixture lies in: git apply there would patch other paths
            .env("GIT_CEILING_DIRECTORIES", &f.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &f.dir);
        if which(tool).is_none() {
            skip_tool(&format!("{tool} is not in PATH"));
            continue;
        }
        run_command(c, LIMIT).assert_code(0);
        for (n, text) in &want {
            let got = std::fs::read_to_string(copy.join(n)).unwrap();
            assert!(
                got == *text,
                "{tool}: {n} is not the new file after the patch"
            );
        }
    }
    changes(&["drop", &id]).assert_code(0);
}

/// One apply or drop at a time; a kept changeset whose manifest broke is listed as such and
/// can still be dropped.
#[test]
fn a_changeset_in_use_is_left_alone_and_a_broken_one_can_go() {
    let f = Fixture::new("changes-lock");
    let (repo, upper, cs) = scene(&f, "i");
    let id = keep(&cs, &upper);
    let stored = store::open(&id).unwrap();
    let held = stored.lock().unwrap();
    let before = snapshot(&repo);
    for cmd in ["apply", "drop"] {
        let r = changes(&[cmd, &id]);
        r.assert_code(125);
        assert!(r.stderr.contains("another sandbox-run"), "{r}");
    }
    assert_eq!(snapshot(&repo), before);
    drop(held);
    std::fs::write(stored.dir.join("manifest.json"), "{ broken").unwrap();
    let r = changes(&["list"]);
    r.assert_code(0);
    assert!(r.stdout.contains(&format!("{id}  (unreadable")), "{r}");
    changes(&["show", &id]).assert_code(125);
    changes(&["drop", &id]).assert_code(0);
    assert!(!stored.dir.exists());
}

/// After the keep, a directory on the way of an entry is replaced by a link to somewhere
/// outside: the apply refuses, and nothing is written there (nor anywhere in the repo).
#[test]
fn a_directory_turned_link_after_the_keep_is_not_followed() {
    let f = Fixture::new("changes-link");
    let (repo, upper, cs) = scene(&f, "j");
    let id = keep(&cs, &upper);
    let outside = f.path("j/outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::rename(repo.join("sub"), f.path("j/sub-moved")).unwrap();
    symlink(&outside, repo.join("sub")).unwrap();
    let before = snapshot(&repo);
    let r = changes(&["apply", &id]);
    r.assert_code(125);
    assert!(r.stderr.contains("sub/added (now unreachable)"), "{r}");
    assert_eq!(snapshot(&repo), before);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    changes(&["drop", &id]).assert_code(0);
}

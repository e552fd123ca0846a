//! `sandbox-run home PROFILE --seed PATH...`: the user's files (a login's `~/.claude`,
//! `~/.claude.json`) copied into a kept home without following a link on either side.
//!
//! **Why not `cp -r`.** Everything in a kept home is written by the commands that ran with it,
//! hostile ones included. One of them can leave `~/.claude.json` there as a link to a file of
//! the repo (or any path the user can write), and `cp -r ~/.claude.json KEPT/` then writes the
//! user's credentials through it: into the repo, where the next `git add -A` or an upload
//! picks them up. Here the kept home is walked from its fd, one entry at a time with
//! `O_NOFOLLOW` ([`crate::hostfs::Tree`]); whatever is in the way (a link, a FIFO, a file where
//! a directory goes, a directory where a file goes) is removed, never written through, and
//! files are written beside and renamed over. A directory already there is merged into, as
//! `cp -r` does.
//!
//! **The source side.** The caller's own path to a seed may go through links (its parent
//! directories are the caller's); the seed itself and everything below it is opened with
//! `O_NOFOLLOW`: a link is copied as a link (its target text, never what it names), a FIFO,
//! socket or device is left out and named. A seed inside the kept home, or one containing it,
//! is refused.
//!
//! **All or nothing where it can be.** Every seed is walked and every file opened once before
//! anything is written: a missing or unreadable seed stops the command with nothing copied.
//!
//! **What the copies are.** Modes kept, set-user-ID and set-group-ID bits never; times kept;
//! owned by the user the kept home belongs to (when root seeds another user's home, each new
//! entry is given to that user before it takes its name).

use crate::hostfs::{lexical, Tree};
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Deeper than this is refused (every level holds two directory fds while it is copied).
const MAX_DEPTH: usize = 200;

/// What a seed did.
#[derive(Debug, Default)]
pub struct Seeded {
    pub files: u64,
    pub dirs: u64,
    pub links: u64,
    pub bytes: u64,
    /// Entries of the kept home that were in the way and were removed: `path (what it was)`.
    pub replaced: Vec<String>,
    /// Entries of a seed left out (FIFOs, sockets, devices).
    pub skipped: Vec<String>,
}

impl Seeded {
    /// One line: what was copied where.
    pub fn summary(&self, home: &Path) -> String {
        let mut s = format!(
            "seeded {}: {} file{} ({} bytes), {} director{}, {} link{} (copied as links)",
            home.display(),
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.bytes,
            self.dirs,
            if self.dirs == 1 { "y" } else { "ies" },
            self.links,
            if self.links == 1 { "" } else { "s" },
        );
        if !self.replaced.is_empty() {
            s.push_str(&format!(
                "; replaced {} entr{} in the way (a link, a FIFO, or a file where a directory goes: left by a run; -v lists them)",
                self.replaced.len(),
                if self.replaced.len() == 1 { "y" } else { "ies" }
            ));
        }
        if !self.skipped.is_empty() {
            s.push_str(&format!(
                "; left out {} FIFO, socket or device (-v lists them)",
                self.skipped.len()
            ));
        }
        s
    }
}

/// One seed: how the caller named it, its name in the kept home, its parent directory.
struct Source {
    shown: PathBuf,
    name: OsString,
    parent: Tree,
    st: libc::stat,
}

struct Ctx<'a> {
    home: &'a Path,
    home_id: (u64, u64),
    owner: Option<(u32, u32)>,
    log: &'a mut dyn FnMut(String),
    verbose: bool,
    done: Seeded,
}

fn fstat_fd(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: all-zero is a valid `stat`; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of an fd the caller owns, into our stat.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn fmt(mode: libc::mode_t) -> libc::mode_t {
    mode & libc::S_IFMT
}

/// What an entry of the kept home was, in words.
fn what(st: &libc::stat, tree: &Tree, name: &OsStr) -> String {
    match fmt(st.st_mode) {
        libc::S_IFLNK => format!(
            "a symlink to {}",
            tree.read_link(name)
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "?".into())
        ),
        libc::S_IFIFO => "a FIFO".into(),
        libc::S_IFSOCK => "a socket".into(),
        libc::S_IFCHR | libc::S_IFBLK => "a device".into(),
        libc::S_IFDIR => "a directory".into(),
        _ => "a file".into(),
    }
}

/// The mode a copy gets: the source's permission bits, never set-user-ID or set-group-ID.
fn mode_of(st: &libc::stat) -> u32 {
    st.st_mode & 0o1777
}

/// Open the directory at the caller's own `path` (links followed: the caller's path).
fn open_parent(path: &Path) -> std::io::Result<Tree> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: open of a NUL-terminated path; a fresh fd on success.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd from the kernel, owned from here on.
    Ok(Tree::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Find and check every seed (named relative to `cwd`) before anything is written.
fn sources(home: &Path, seeds: &[PathBuf], cwd: &Path) -> Result<Vec<Source>, String> {
    let mut out: Vec<Source> = Vec::new();
    for shown in seeds {
        let fail = |what: String| format!("seed {}: {what}", shown.display());
        let abs = lexical(cwd, shown);
        let name = abs.file_name().map(OsStr::to_os_string).ok_or_else(|| {
            fail("names no file or directory to copy (give the path of one, e.g. ~/.claude)".into())
        })?;
        if let Some(other) = out.iter().find(|s| s.name == name) {
            return Err(fail(format!(
                "has the same name in the kept home as {} ({})",
                other.shown.display(),
                name.to_string_lossy()
            )));
        }
        let dir = abs.parent().unwrap_or(Path::new("/"));
        let parent =
            open_parent(dir).map_err(|e| fail(format!("opening {}: {e}", dir.display())))?;
        // Where the caller's links led: a seed taken from the kept home itself is refused.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", parent.raw_fd()))
            .map_err(|e| fail(format!("resolving {}: {e}", dir.display())))?
            .join(&name);
        if real.starts_with(home) {
            return Err(fail(format!(
                "is inside the kept home {}: nothing to seed",
                home.display()
            )));
        }
        let st = parent
            .stat(&name)
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail("No such file or directory".into()))?;
        out.push(Source {
            shown: shown.clone(),
            name,
            parent,
            st,
        });
    }
    Ok(out)
}

/// Copy (or, with `to` None, only check) the entry `name` of `from` into `to`. `rel`: its path
/// in the kept home; `shown`: the caller's name for it.
#[allow(clippy::too_many_arguments)]
fn walk(
    cx: &mut Ctx,
    from: &Tree,
    name: &OsStr,
    st: &libc::stat,
    to: Option<&Tree>,
    rel: &Path,
    shown: &Path,
    depth: usize,
) -> Result<(), String> {
    let src_fail = |what: &str, e: std::io::Error| format!("seed {}: {what}: {e}", shown.display());
    let dst = cx.home.join(rel);
    let dst_fail = |what: &str, e: std::io::Error| {
        format!("seed {}: {what} {}: {e}", shown.display(), dst.display())
    };
    // What is in the kept home where this entry goes, and whether it must go first: anything
    // that is not what is being copied (a link is never kept: it is replaced, or removed).
    let in_way = |cx: &mut Ctx, to: &Tree, keep_dir: bool| -> Result<(), String> {
        let Some(old) = to.stat(name).map_err(|e| dst_fail("looking at", e))? else {
            return Ok(());
        };
        let same = match fmt(old.st_mode) {
            libc::S_IFDIR => fmt(st.st_mode) == libc::S_IFDIR,
            libc::S_IFREG => fmt(st.st_mode) == libc::S_IFREG,
            // the link an earlier seed copied: replaced all the same, but not news
            libc::S_IFLNK if fmt(st.st_mode) == libc::S_IFLNK => {
                matches!((to.read_link(name), from.read_link(name)), (Ok(a), Ok(b)) if a == b)
            }
            _ => false,
        };
        if !same {
            let line = format!("{} (was {})", rel.display(), what(&old, to, name));
            if cx.verbose {
                (cx.log)(format!("seed: replaced {line}"));
            }
            cx.done.replaced.push(line);
            if !keep_dir || fmt(old.st_mode) != libc::S_IFDIR {
                to.remove(name).map_err(|e| dst_fail("removing", e))?;
            }
        }
        Ok(())
    };
    match fmt(st.st_mode) {
        libc::S_IFREG => {
            let mut f = from
                .open_file(name)
                .map_err(|e| src_fail("opening without following links", e))?;
            if let Some(to) = to {
                in_way(cx, to, false)?;
                let n = to
                    .put_file_as(name, &mut f, mode_of(st), st, cx.owner)
                    .map_err(|e| dst_fail("writing", e))?;
                cx.done.files += 1;
                cx.done.bytes += n;
                if cx.verbose {
                    (cx.log)(format!("seed: {} ({n} bytes)", rel.display()));
                }
            }
        }
        libc::S_IFDIR => {
            if (st.st_dev, st.st_ino) == cx.home_id {
                return Err(format!(
                    "seed {}: contains the kept home {}: name the files to copy instead",
                    shown.display(),
                    cx.home.display()
                ));
            }
            if depth > MAX_DEPTH {
                return Err(format!(
                    "seed {}: more than {MAX_DEPTH} directories deep",
                    shown.display()
                ));
            }
            let sub = from
                .child(name)
                .map_err(|e| src_fail("opening without following links", e))?;
            let mut names = sub.names().map_err(|e| src_fail("listing", e))?;
            names.sort();
            let to_sub = match to {
                Some(to) => {
                    in_way(cx, to, true)?;
                    // 0700 while it is filled (a read-only source directory too), its own
                    // mode at the end.
                    to.make_dir_as(name, 0o700, cx.owner)
                        .map_err(|e| dst_fail("making", e))?;
                    Some(to.child(name).map_err(|e| dst_fail("opening", e))?)
                }
                None => None,
            };
            for n in names {
                let Some(cst) = sub.stat(&n).map_err(|e| src_fail("looking into", e))? else {
                    continue; // gone meanwhile
                };
                walk(
                    cx,
                    &sub,
                    &n,
                    &cst,
                    to_sub.as_ref(),
                    &rel.join(&n),
                    &shown.join(&n),
                    depth + 1,
                )?;
            }
            if let Some(t) = &to_sub {
                // SAFETY: fchmod of a directory fd we own.
                if unsafe { libc::fchmod(t.raw_fd(), mode_of(st)) } != 0 {
                    return Err(dst_fail(
                        "setting the mode of",
                        std::io::Error::last_os_error(),
                    ));
                }
                cx.done.dirs += 1;
                if cx.verbose {
                    (cx.log)(format!("seed: {}/", rel.display()));
                }
            }
        }
        libc::S_IFLNK => {
            let target = from
                .read_link(name)
                .map_err(|e| src_fail("reading the link", e))?;
            if let Some(to) = to {
                in_way(cx, to, false)?;
                to.put_link_as(name, &target, cx.owner)
                    .map_err(|e| dst_fail("making the link", e))?;
                cx.done.links += 1;
                if depth == 0 {
                    // A dotfile linked from elsewhere: the copy will likely dangle inside.
                    (cx.log)(format!(
                        "seed: {} is a link (to {}): copied as a link, not what it names (name that file to copy it; it keeps its own name)",
                        shown.display(),
                        target.to_string_lossy()
                    ));
                } else if cx.verbose {
                    (cx.log)(format!(
                        "seed: {} -> {} (a link, copied as a link: what it names is not copied)",
                        rel.display(),
                        target.to_string_lossy()
                    ));
                }
            }
        }
        _ => {
            if to.is_some() {
                if cx.verbose {
                    (cx.log)(format!(
                        "seed: left out {} (a FIFO, socket or device)",
                        shown.display()
                    ));
                }
                cx.done.skipped.push(shown.display().to_string());
            }
        }
    }
    Ok(())
}

/// Copy `seeds` (paths relative to `cwd`) into the kept home `home` (a path [`super::ensure`]
/// returned: no link on it), each under its own name. `log` gets one line per entry when
/// `verbose`. Errors are one line naming the path.
pub fn seed(
    home: &Path,
    seeds: &[PathBuf],
    cwd: &Path,
    verbose: bool,
    log: &mut dyn FnMut(String),
) -> Result<Seeded, String> {
    let to = Tree::open(home).map_err(|e| format!("seed: kept home {}: {e}", home.display()))?;
    let hst =
        fstat_fd(to.raw_fd()).map_err(|e| format!("seed: kept home {}: {e}", home.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    let owner = (me == 0 && hst.st_uid != 0).then_some((hst.st_uid, hst.st_gid));
    let list = sources(home, seeds, cwd)?;
    let mut cx = Ctx {
        home,
        home_id: (hst.st_dev, hst.st_ino),
        owner,
        log,
        verbose,
        done: Seeded::default(),
    };
    // First every seed is walked and every file opened, then written.
    for pass in [None, Some(&to)] {
        for s in &list {
            walk(
                &mut cx,
                &s.parent,
                &s.name,
                &s.st,
                pass,
                Path::new(&s.name),
                &s.shown,
                0,
            )?;
        }
    }
    Ok(cx.done)
}

/// `NAME|UID` of a passwd entry: its uid and gid (a bare number with no entry: that uid, and
/// the same gid).
pub fn user_ids(user: &str) -> Result<(u32, u32), String> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let found = text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && (f[0] == user || f[2] == user))
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    });
    match (found, user.parse::<u32>()) {
        (Some(ids), _) => Ok(ids),
        (None, Ok(uid)) => Ok((uid, uid)),
        (None, Err(_)) => Err(format!("home --user {user}: no such user in /etc/passwd")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn scratch(name: &str) -> PathBuf {
        let base = crate::testdir::base().join(format!("seed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("home")).unwrap();
        std::fs::create_dir_all(base.join("src/.claude/sub")).unwrap();
        std::fs::write(base.join("src/.claude.json"), "{\"token\":\"t\"}").unwrap();
        std::fs::write(base.join("src/.claude/sub/creds"), "secret").unwrap();
        base
    }

    fn run(b: &Path, seeds: &[&str]) -> Result<Seeded, String> {
        let seeds: Vec<PathBuf> = seeds.iter().map(PathBuf::from).collect();
        seed(&b.join("home"), &seeds, &b.join("src"), false, &mut |_| {})
    }

    /// Links, a FIFO and a directory left where the seeds go are replaced, never written
    /// through; what they named is unchanged.
    #[test]
    fn nothing_in_the_way_is_followed() {
        let b = scratch("way");
        let outside = b.join("outside");
        std::fs::write(&outside, "keep").unwrap();
        std::fs::create_dir_all(b.join("elsewhere")).unwrap();
        symlink(&outside, b.join("home/.claude.json")).unwrap();
        symlink(b.join("elsewhere"), b.join("home/.claude")).unwrap();
        std::fs::create_dir_all(b.join("home/x")).unwrap();
        nix::unistd::mkfifo(
            &b.join("home/x/f"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        std::fs::create_dir_all(b.join("src/x")).unwrap();
        std::fs::write(b.join("src/x/f"), "ff").unwrap();
        let s = run(&b, &[".claude.json", ".claude", "x"]).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        assert_eq!(std::fs::read_dir(b.join("elsewhere")).unwrap().count(), 0);
        let h = b.join("home");
        assert!(std::fs::symlink_metadata(h.join(".claude.json"))
            .unwrap()
            .is_file());
        assert_eq!(
            std::fs::read_to_string(h.join(".claude/sub/creds")).unwrap(),
            "secret"
        );
        assert_eq!(std::fs::read_to_string(h.join("x/f")).unwrap(), "ff");
        assert_eq!(s.replaced.len(), 3, "{s:?}");
        assert_eq!((s.files, s.dirs), (3, 3), "{s:?}");
        std::fs::remove_dir_all(&b).unwrap();
    }

    /// Root seeding another user's kept home: every entry it makes is that user's, the link
    /// itself included (root only).
    #[test]
    fn root_gives_the_copies_to_the_homes_owner() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let b = scratch("owner");
        symlink("x", b.join("src/.claude/l")).unwrap();
        std::os::unix::fs::chown(b.join("home"), Some(4321), Some(4322)).unwrap();
        run(&b, &[".claude", ".claude.json"]).unwrap();
        for p in [
            ".claude",
            ".claude/sub",
            ".claude/sub/creds",
            ".claude/l",
            ".claude.json",
        ] {
            let m = std::fs::symlink_metadata(b.join("home").join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), (4321, 4322), "{p}");
        }
        std::fs::remove_dir_all(&b).unwrap();
    }

    /// A link in a seed is copied as a link; set-ID bits are dropped, modes kept; a seed
    /// containing the kept home or inside it is refused before anything is written.
    #[test]
    fn links_copied_as_links_and_no_set_id() {
        let b = scratch("links");
        symlink("/etc/shadow", b.join("src/.claude/l")).unwrap();
        std::fs::set_permissions(
            b.join("src/.claude.json"),
            std::fs::Permissions::from_mode(0o6750),
        )
        .unwrap();
        run(&b, &[".claude", ".claude.json"]).unwrap();
        let h = b.join("home");
        assert_eq!(
            std::fs::read_link(h.join(".claude/l")).unwrap(),
            Path::new("/etc/shadow")
        );
        assert_eq!(
            std::fs::metadata(h.join(".claude.json")).unwrap().mode() & 0o7777,
            0o750
        );
        // no name, the kept home inside a seed, a seed inside the kept home
        let e = run(&b, &["/"]).unwrap_err();
        assert!(e.contains("names no file"), "{e}");
        let e = run(&b, &[".."]).unwrap_err();
        assert!(e.contains("contains the kept home"), "{e}");
        std::fs::write(b.join("home/inner"), "i").unwrap();
        let e = run(&b, &["../home/inner"]).unwrap_err();
        assert!(e.contains("inside the kept home"), "{e}");
        // a missing seed: nothing of the others copied
        std::fs::write(b.join("src/fresh"), "f").unwrap();
        let e = run(&b, &["fresh", "/nonexistent-seed-dir/y"]).unwrap_err();
        assert!(e.contains("nonexistent-seed-dir"), "{e}");
        assert!(!h.join("fresh").exists());
        std::fs::remove_dir_all(&b).unwrap();
    }
}

//! Kept changesets: what a run changed, stored for review instead of applied.
//!
//! **Where.** `STATE/sandbox-run/changes/<ID>/`, where STATE is the caller's
//! `$XDG_STATE_HOME` (when absolute) or `~/.local/state`. Every directory on the way below
//! STATE is opened without following a link; `sandbox-run/` and `changes/` must be the
//! caller's own directories, `changes/` and each `<ID>/` are 0700.
//!
//! **What.** `<ID>/manifest.json` ([`Manifest`]: the changeset, refused entries included for
//! the record, and [`Meta`]: the repo, the profile, the command, when, and what the repo held
//! at each accepted path then) and `<ID>/tree/<root index>/`, the accepted entries as an
//! **overlayfs lower layer**: files, directories with their new modes, links, and a whiteout
//! (a character device 0:0) for each removed path. Directories on the way that did not change
//! have the repo's modes. Mounted over the repo as a lower layer it shows the repo as the run
//! left it; `sandbox-run changes apply ID` applies it for real.
//!
//! **Who.** When root keeps the changes of a repo another user owns, the tree is given to that
//! user (inside root's 0700 directory), so that the apply, which runs as that user, can read
//! it through the descriptors root opened.
//!
//! **IDs** are `c` and 8 base32 characters, checked whenever one is read back: never a path.

use super::{Changeset, Kind, What};
use crate::fsops as fs;
use crate::hostfs::Tree;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The largest manifest read back.
const MANIFEST_CAP: u64 = 256 << 20;

/// Why a changeset was kept, and what the repo held where it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The repo root (the changeset's first root).
    pub repo: PathBuf,
    pub profile: String,
    /// The command, as the report shows it.
    pub command: String,
    /// When it was kept (RFC 3339, UTC); [`keep`] fills it when empty.
    pub created: String,
    /// What the repo held at each accepted entry when it was kept; [`keep`] fills it when
    /// empty (with [`base_now`]).
    pub base: Vec<Base>,
}

/// What the repo held at one entry's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    /// The index of the entry in the changeset.
    pub entry: usize,
    pub held: Held,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Held {
    /// Nothing.
    Absent,
    /// Something, as `lstat` saw it; `digest`: for a directory the changeset removes or
    /// replaces, a digest of every signature (path, type, size, mtime, mode, inode) in it.
    Present {
        what: What,
        size: u64,
        mtime_s: i64,
        mtime_ns: i64,
        mode: u32,
        inode: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<String>,
    },
    /// Not reachable without following a link (or another error): the apply will refuse it.
    Unreachable { error: String },
}

/// `<ID>/manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub changeset: Changeset,
    pub meta: Meta,
}

/// A kept changeset, read back.
#[derive(Debug)]
pub struct Stored {
    pub id: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// `<ID>/tree/<i>` for each root.
    pub trees: Vec<PathBuf>,
}

/// Is `id` the shape of an ID this module makes (`c` + 8 of `a-z2-7`)?
pub fn valid_id(id: &str) -> bool {
    id.len() == 9
        && id.starts_with('c')
        && id[1..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
}

fn unknown(id: &str) -> String {
    format!("no kept changeset {id:?} (`sandbox-run changes list` shows them)")
}

/// The caller's state directory: `$XDG_STATE_HOME` when absolute, else `~/.local/state`.
fn state_base() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| Path::new(x).is_absolute()) {
        return Ok(PathBuf::from(x));
    }
    let uid = nix::unistd::geteuid().as_raw();
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h != Path::new("/"))
        .or_else(|| crate::state::passwd_home(uid))
        .map(|h| h.join(".local/state"))
        .ok_or_else(|| {
            format!("changes: user {uid} has no home directory to keep changes under (set XDG_STATE_HOME)")
        })
}

/// `STATE/sandbox-run/changes`, opened without following any link below STATE; made (0700)
/// when `create`, else `None` when it does not exist.
fn changes_dir(create: bool) -> Result<Option<(PathBuf, Tree)>, String> {
    let base = state_base()?;
    let fail = |p: &Path, what: String| format!("changes {}: {what}", p.display());
    if create && std::fs::symlink_metadata(&base).is_err() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&base)
            .map_err(|e| fail(&base, e.to_string()))?;
    }
    let base = match std::fs::canonicalize(&base) {
        Ok(b) => b,
        Err(_) if !create => return Ok(None),
        Err(e) => return Err(fail(&base, e.to_string())),
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut tree = Tree::open(&base).map_err(|e| fail(&base, e.to_string()))?;
    let mut path = base;
    for name in ["sandbox-run", "changes"] {
        path.push(name);
        let n = OsStr::new(name);
        match tree.stat(n).map_err(|e| fail(&path, e.to_string()))? {
            None if !create => return Ok(None),
            None => match fs::mkdir(tree.raw_fd(), n) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(fail(&path, e.to_string()))
                }
                _ => {}
            },
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                return Err(fail(&path, "is a symlink: not followed (remove it)".into()))
            }
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return Err(fail(&path, "is not a directory".into()))
            }
            Some(_) => {}
        }
        let next = tree
            .child(n)
            .map_err(|e| fail(&path, format!("opening without following links: {e}")))?;
        let st = fs::fstat(next.raw_fd()).map_err(|e| fail(&path, e.to_string()))?;
        if st.st_uid != me {
            return Err(fail(
                &path,
                format!(
                    "is owned by uid {}, not by you (uid {me}): refused",
                    st.st_uid
                ),
            ));
        }
        tree = next;
    }
    fs::chmod_fd(tree.raw_fd(), 0o700).map_err(|e| fail(&path, e.to_string()))?;
    Ok(Some((path, tree)))
}

/// FNV-1a, 64 bits, over `data` from `h`: a fingerprint to notice changes, not a secret.
fn fnv(mut h: u64, data: &[u8]) -> u64 {
    for b in data {
        h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn what_of(st: &libc::stat) -> What {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => What::File,
        libc::S_IFDIR => What::Dir,
        libc::S_IFLNK => What::Link,
        _ => What::Special,
    }
}

/// The signatures of everything in the directory `fd`, folded into `h` in name order.
fn digest_dir(fd: &OwnedFd, rel: &Path, h: &mut u64, budget: &mut usize) -> std::io::Result<()> {
    for n in fs::names(fd.as_raw_fd())? {
        if *budget == 0 {
            return Err(std::io::Error::other("more than a million entries"));
        }
        *budget -= 1;
        let Some(st) = fs::lstat_at(fd.as_raw_fd(), &n)? else {
            continue;
        };
        let r = rel.join(&n);
        let sig = format!(
            "{}\0{:?}\0{}\0{}.{}\0{:o}\0{}\n",
            r.display(),
            what_of(&st),
            st.st_size,
            st.st_mtime,
            st.st_mtime_nsec,
            st.st_mode & 0o7777,
            st.st_ino
        );
        *h = fnv(*h, sig.as_bytes());
        if what_of(&st) == What::Dir {
            let sub = fs::open_dir(fd.as_raw_fd(), &n)?;
            digest_dir(&sub, &r, h, budget)?;
        }
    }
    Ok(())
}

/// What `root` holds at `rel` now; with a digest of the tree when it is a directory and
/// `tree` is set.
pub fn held(root: &Tree, rel: &Path, tree: bool) -> Held {
    let err = |e: std::io::Error| Held::Unreachable {
        error: e.to_string(),
    };
    let comps = match fs::components(rel) {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    let dir = match fs::walk_dir(root.raw_fd(), &comps[..comps.len() - 1]) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Held::Absent,
        Err(e) => return err(e),
    };
    let name = comps[comps.len() - 1];
    let st = match fs::lstat_at(dir.as_raw_fd(), name) {
        Ok(Some(st)) => st,
        Ok(None) => return Held::Absent,
        Err(e) => return err(e),
    };
    let digest = if tree && what_of(&st) == What::Dir {
        let mut h = 0xcbf2_9ce4_8422_2325;
        let r = fs::open_dir(dir.as_raw_fd(), name)
            .and_then(|fd| digest_dir(&fd, Path::new(""), &mut h, &mut 1_000_000));
        match r {
            Ok(()) => Some(format!("{h:016x}")),
            Err(e) => return err(e),
        }
    } else {
        None
    };
    Held::Present {
        what: what_of(&st),
        size: st.st_size as u64,
        mtime_s: st.st_mtime,
        mtime_ns: st.st_mtime_nsec,
        mode: st.st_mode & 0o7777,
        inode: st.st_ino,
        digest,
    }
}

/// What the repo holds now for each accepted entry of `cs`, as [`Meta::base`] records it.
pub fn base_now(cs: &Changeset) -> Result<Vec<Base>, String> {
    let roots: Vec<Tree> = cs
        .roots
        .iter()
        .map(|r| Tree::open(r).map_err(|e| format!("changes: opening {}: {e}", r.display())))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (i, e) in cs.entries.iter().enumerate() {
        if !e.accepted() {
            continue;
        }
        let root = roots.get(e.root).ok_or_else(|| {
            format!(
                "changes: entry {} names no root",
                crate::visible::path(&e.path)
            )
        })?;
        let tree = matches!(e.kind, Kind::Removed | Kind::TypeChange);
        out.push(Base {
            entry: i,
            held: held(root, &e.path, tree),
        });
    }
    Ok(out)
}

/// Now, as RFC 3339 in UTC, to the second (`2026-11-27T13:28:05Z`).
pub fn now_rfc3339() -> String {
    let ms = crate::units::iso8601(std::time::SystemTime::now());
    // `2026-11-27T13:28:05.123Z`: the seconds are what a reader of `changes list` needs.
    format!("{}Z", ms.split('.').next().unwrap_or(&ms))
}

/// Copies the accepted entries of one changeset into a lower layer.
struct Layer {
    /// Who the tree is given to (root keeping another user's changes), else `None`.
    owner: Option<(u32, u32)>,
    /// Directories made, with their final modes: set last, deepest first.
    modes: Vec<(OwnedFd, u32)>,
}

impl Layer {
    fn own(&self, dirfd: i32, name: &OsStr) -> std::io::Result<()> {
        match self.owner {
            Some((u, g)) => fs::chown_at(dirfd, name, u, g),
            None => Ok(()),
        }
    }

    /// Make the directory `name` (0700 until the end), to get `mode`.
    fn dir(&mut self, dirfd: i32, name: &OsStr, mode: u32) -> std::io::Result<OwnedFd> {
        fs::mkdir(dirfd, name)?;
        self.own(dirfd, name)?;
        let fd = fs::open_dir(dirfd, name)?;
        self.modes.push((fs::open_dir(dirfd, name)?, mode & 0o1777));
        Ok(fd)
    }

    /// The directory `comps` below `top` in the layer, made on the way with the modes the
    /// repo's directories have.
    fn parent(&mut self, top: &OwnedFd, host: &Tree, comps: &[&OsStr]) -> std::io::Result<OwnedFd> {
        let mut fd = fs::walk_dir(top.as_raw_fd(), &[])?;
        let mut hostdir = fs::walk_dir(host.raw_fd(), &[]).ok();
        for n in comps {
            hostdir = hostdir.and_then(|h| fs::open_dir(h.as_raw_fd(), n).ok());
            fd = match fs::open_dir(fd.as_raw_fd(), n) {
                Ok(next) => next,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let mode = hostdir
                        .as_ref()
                        .and_then(|h| fs::fstat(h.as_raw_fd()).ok())
                        .map(|st| st.st_mode & 0o1777)
                        .unwrap_or(0o755);
                    self.dir(fd.as_raw_fd(), n, mode)?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(fd)
    }

    /// Put entry `e` (new content from `source`) into the layer whose root is `top`.
    fn put(
        &mut self,
        e: &super::Entry,
        source: &Tree,
        host: &Tree,
        top: &OwnedFd,
    ) -> std::io::Result<u64> {
        let comps = fs::components(&e.path)?;
        let (last, up) = (comps[comps.len() - 1], &comps[..comps.len() - 1]);
        let dir = self.parent(top, host, up)?;
        let d = dir.as_raw_fd();
        if e.kind == Kind::Removed {
            // SAFETY: mknodat on a directory fd with a plain NUL-terminated name.
            let c = fs::cname(last)?;
            if unsafe { libc::mknodat(d, c.as_ptr(), libc::S_IFCHR | 0o600, 0) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EPERM) {
                    // overlayfs refuses whiteout devices: a container's root is one.
                    return Err(std::io::Error::new(
                        e.kind(),
                        "this filesystem takes no whiteout (a removal's mark), as a container's overlayfs root does not: set XDG_STATE_HOME to a directory on another filesystem (a volume, a tmpfs)",
                    ));
                }
                return Err(e);
            }
            self.own(d, last)?;
            return Ok(0);
        }
        let sdir = fs::walk_dir(source.raw_fd(), up)?;
        let n = match e.what {
            What::File => {
                let mut f = fs::open_regular(sdir.as_raw_fd(), last)?;
                fs::copy_file(d, last, &mut f, e.mode)?
            }
            What::Link => {
                let t = fs::read_link(sdir.as_raw_fd(), last)?;
                fs::symlink(d, last, &t)?;
                t.len() as u64
            }
            What::Dir => {
                self.dir(d, last, e.mode)?;
                0
            }
            What::Special => return Err(std::io::Error::from_raw_os_error(libc::EPERM)),
        };
        if e.what != What::Dir {
            self.own(d, last)?;
        }
        Ok(n)
    }
}

/// Keep the accepted entries of `cs` (new content read from `sources`, one tree per root) and
/// its manifest; returns the new ID. Nothing is left behind on failure.
pub fn keep(cs: &Changeset, sources: &[Tree], mut meta: Meta) -> Result<String, String> {
    if sources.len() < cs.roots.len() {
        return Err("changes: fewer source trees than roots".into());
    }
    let (dir, changes) = changes_dir(true)?.ok_or("changes: no state directory")?;
    let mut id = String::new();
    for _ in 0..8 {
        let cand = format!(
            "c{}",
            fs::random_base32(8).map_err(|e| format!("changes: getrandom: {e}"))?
        );
        match fs::mkdir(changes.raw_fd(), OsStr::new(&cand)) {
            Ok(()) => {
                id = cand;
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(format!("changes {}: {e}", dir.join(&cand).display())),
        }
    }
    if id.is_empty() {
        return Err("changes: no free ID".into());
    }
    let r = keep_in(cs, sources, &mut meta, &changes, &dir, &id);
    if let Err(e) = r {
        let _ = fs::remove_all(changes.raw_fd(), OsStr::new(&id));
        return Err(e);
    }
    Ok(id)
}

fn keep_in(
    cs: &Changeset,
    sources: &[Tree],
    meta: &mut Meta,
    changes: &Tree,
    dir: &Path,
    id: &str,
) -> Result<(), String> {
    let here = dir.join(id);
    let fail = |what: &str, p: &Path, e: std::io::Error| {
        format!("changes: keeping {what} {}: {e}", crate::visible::path(p))
    };
    let idtree = changes
        .child(OsStr::new(id))
        .map_err(|e| fail("in", &here, e))?;
    let hosts: Vec<Tree> = cs
        .roots
        .iter()
        .map(|r| Tree::open(r).map_err(|e| fail("from", r, e)))
        .collect::<Result<_, _>>()?;
    let me = nix::unistd::geteuid().as_raw();
    let owner = match cs.roots.first() {
        Some(r) if me == 0 => {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::symlink_metadata(r).map_err(|e| fail("from", r, e))?;
            (m.uid() != 0).then_some((m.uid(), m.gid()))
        }
        _ => None,
    };
    let mut layer = Layer {
        owner,
        modes: Vec::new(),
    };
    fs::mkdir(idtree.raw_fd(), OsStr::new("tree")).map_err(|e| fail("in", &here, e))?;
    let trees =
        fs::open_dir(idtree.raw_fd(), OsStr::new("tree")).map_err(|e| fail("in", &here, e))?;
    let mut tops = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let mode = fs::fstat(host.raw_fd())
            .map(|st| st.st_mode & 0o1777)
            .unwrap_or(0o755);
        let top = layer
            .dir(trees.as_raw_fd(), OsStr::new(&i.to_string()), mode)
            .map_err(|e| fail("in", &here, e))?;
        tops.push(top);
    }
    for e in cs.entries.iter().filter(|e| e.accepted()) {
        let (Some(top), Some(src), Some(host)) =
            (tops.get(e.root), sources.get(e.root), hosts.get(e.root))
        else {
            return Err(format!(
                "changes: entry {} names no root",
                crate::visible::path(&e.path)
            ));
        };
        layer
            .put(e, src, host, top)
            .map_err(|err| fail("", &cs.roots[e.root].join(&e.path), err))?;
    }
    for (fd, mode) in layer.modes.iter().rev() {
        fs::chmod_fd(fd.as_raw_fd(), *mode).map_err(|e| fail("in", &here, e))?;
    }
    if meta.created.is_empty() {
        meta.created = now_rfc3339();
    }
    if meta.repo.as_os_str().is_empty() {
        meta.repo = cs.roots.first().cloned().unwrap_or_default();
    }
    if meta.base.is_empty() {
        meta.base = base_now(cs)?;
    }
    let manifest = Manifest {
        changeset: cs.clone(),
        meta: meta.clone(),
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?;
    idtree
        .put_bytes(OsStr::new("manifest.json"), &json, 0o600)
        .map_err(|e| fail("in", &here, e))?;
    fs::sync_fs(idtree.raw_fd());
    fs::sync_dir(idtree.raw_fd());
    Ok(())
}

/// The kept changeset `id`.
pub fn open(id: &str) -> Result<Stored, String> {
    if !valid_id(id) {
        return Err(unknown(id));
    }
    let (dir, changes) = changes_dir(false)?.ok_or_else(|| unknown(id))?;
    let here = dir.join(id);
    let idtree = match changes.child(OsStr::new(id)) {
        Ok(t) => t,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(unknown(id)),
        Err(e) => return Err(format!("changes {}: {e}", here.display())),
    };
    let text = idtree
        .read_small(OsStr::new("manifest.json"), MANIFEST_CAP)
        .ok_or_else(|| format!("changes {}: no readable manifest.json", here.display()))?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| format!("changes {}/manifest.json: {e}", here.display()))?;
    let trees = (0..manifest.changeset.roots.len())
        .map(|i| here.join("tree").join(i.to_string()))
        .collect();
    Ok(Stored {
        id: id.to_string(),
        dir: here,
        manifest,
        trees,
    })
}

/// A kept changeset read back, or its ID and why it could not be.
pub type Listed = Result<Stored, (String, String)>;

/// Every kept changeset, oldest first (a broken one as its ID and why).
pub fn list() -> Result<Vec<Listed>, String> {
    let Some((dir, changes)) = changes_dir(false)? else {
        return Ok(Vec::new());
    };
    let names =
        fs::names(changes.raw_fd()).map_err(|e| format!("changes {}: {e}", dir.display()))?;
    let mut out: Vec<Listed> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| valid_id(n))
        .map(|id| open(&id).map_err(|e| (id, e)))
        .collect();
    out.sort_by(|a, b| {
        let key = |s: &Listed| match s {
            Ok(s) => (s.manifest.meta.created.clone(), s.id.clone()),
            Err((id, _)) => (String::new(), id.clone()),
        };
        key(a).cmp(&key(b))
    });
    Ok(out)
}

/// Remove the kept changeset `id` (a broken one too), unless another process holds its lock.
pub fn drop(id: &str) -> Result<(), String> {
    let (dir, changes) = locate(id)?;
    let t = changes
        .child(OsStr::new(id))
        .map_err(|e| format!("changes {}: {e}", dir.join(id).display()))?;
    let _held = lock_tree(t, id)?;
    remove_all(&dir, &changes, id)
}

/// Remove the kept changeset `id`, whose lock the caller holds ([`Stored::lock`]).
pub fn remove_locked(id: &str, _held: Tree) -> Result<(), String> {
    let (dir, changes) = locate(id)?;
    remove_all(&dir, &changes, id)
}

fn locate(id: &str) -> Result<(PathBuf, Tree), String> {
    if !valid_id(id) {
        return Err(unknown(id));
    }
    let (dir, changes) = changes_dir(false)?.ok_or_else(|| unknown(id))?;
    match changes.stat(OsStr::new(id)) {
        Ok(Some(_)) => Ok((dir, changes)),
        Ok(None) => Err(unknown(id)),
        Err(e) => Err(format!("changes {}: {e}", dir.join(id).display())),
    }
}

fn remove_all(dir: &Path, changes: &Tree, id: &str) -> Result<(), String> {
    fs::remove_all(changes.raw_fd(), OsStr::new(id))
        .map_err(|e| format!("changes: removing {}: {e}", dir.join(id).display()))
}

/// An exclusive lock on a kept changeset's directory, held while the returned tree lives.
fn lock_tree(t: Tree, id: &str) -> Result<Tree, String> {
    // SAFETY: flock on a directory fd we own; no memory is passed.
    if unsafe { libc::flock(t.raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            format!("changes {id}: another sandbox-run is applying or dropping it")
        } else {
            format!("changes {id}: lock: {e}")
        });
    }
    Ok(t)
}

impl Stored {
    /// The trees holding the new content (`tree/<i>`), opened without following a link.
    pub fn sources(&self) -> Result<Vec<Tree>, String> {
        self.trees
            .iter()
            .map(|t| Tree::open(t).map_err(|e| format!("changes: opening {}: {e}", t.display())))
            .collect()
    }

    /// Hold this changeset: one apply or drop at a time (released when the tree is dropped).
    pub fn lock(&self) -> Result<Tree, String> {
        let t =
            Tree::open(&self.dir).map_err(|e| format!("changes {}: {e}", self.dir.display()))?;
        lock_tree(t, &self.id)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_when_read_back() {
        assert!(valid_id("cabcdefg2"));
        for bad in [
            "",
            "c",
            "cabcdefg1",
            "xabcdefg2",
            "cABCDEFG2",
            "c../../..",
            "cabcdefg22",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(open("../../etc").unwrap_err().contains("changes list"));
    }

    #[test]
    fn dates_are_rfc3339() {
        let d = now_rfc3339();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z') && d.as_bytes()[10] == b'T');
    }
}

//! The read-write repo's layer on disk: for a `[limits] disk` cap larger than
//! [`IN_MEMORY_MAX`], the kept overlay's upper and work dirs live in a private directory on the
//! host ([`crate::state::LayerDir`], made by [`crate::plan::prepare_layer_dir`]) instead of a
//! tmpfs, so that what a build writes costs disk, not the sandbox's memory; the cap becomes a
//! budget ([`Budget`]) held per call by the kernel (`RLIMIT_FSIZE` at the room left,
//! [`crate::layers::fsize`]; allocating `fallocate` modes and reflinks refused by seccomp) and
//! between calls by the supervisor: past it the run is stopped. Why, and the margin
//! (measured): docs/performance.md, "Big writes".
//!
//! **Where.** `STATE/sandbox-run/runs/layer-<random>/disk`, a run dir of [`crate::state`]
//! (STATE: `$XDG_STATE_HOME` or `~/.local/state` of the user the sandbox runs as): every
//! directory reached without following a link, 0700, owned by that user, who is the one
//! stage 2 mounts the overlay as; locked for the run's life, removed at the end, or by the
//! next run when this one was killed.
//! When that directory is on the repo's filesystem (same `st_dev`), the way back moves files
//! into the repo by rename instead of copying their bytes ([`crate::changes::apply`]).
//!
//! **Caps.** Bytes: the blocks the upper dirs take (`st_blocks`, a hard-linked file once);
//! files: their inodes, one per 4 KiB of the cap (at least 1024), as the tmpfs had. The way
//! back's scan still refuses what is past the cap by file length, so nothing over it reaches
//! the repo even when the command wrote between two checks.

use crate::hostfs::Tree;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Caps up to this size keep the layer on a tmpfs: the kernel then enforces the cap exactly
/// (ENOSPC inside) for at most this much memory, where a watched budget could overshoot a
/// small cap by more than the cap itself between two checks.
pub const IN_MEMORY_MAX: u64 = 64 << 20;

/// The layer's file cap for a cap of `bytes` (the tmpfs's `nr_inodes`).
pub fn max_files(bytes: u64) -> u64 {
    (bytes / 4096).max(1024)
}

/// What the layer holds: bytes (blocks taken) and files (inodes), and whether some directory
/// could not be read (the command made it unreadable; counted at the end by the scan's cap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub bytes: u64,
    pub files: u64,
    /// The blocks of the largest file (what [`Budget::left`] adds back for appends to it).
    pub largest: u64,
    pub unreadable: bool,
}

/// A run that went past its cap: what the layer held, and whether the sandbox was stopped
/// for it (else it was found at the end, the command having ended by itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over {
    pub count: Count,
    pub stopped: bool,
}

/// Deeper trees are not counted further (the scan refuses them).
const MAX_DEPTH: usize = 256;

/// Count the layer under `dir` (the disk dir: every upper and work dir), fd by fd, no link
/// followed, a hard-linked inode once. Entries that vanish meanwhile are skipped.
pub fn count(dir: &Tree) -> Count {
    let mut c = Count::default();
    let mut seen = HashSet::new();
    if let Ok(st) = crate::fsops::fstat(dir.raw_fd()) {
        walk(dir.raw_fd(), &st, 0, &mut c, &mut seen);
    }
    c
}

fn walk(fd: i32, st: &libc::stat, depth: usize, c: &mut Count, seen: &mut HashSet<(u64, u64)>) {
    c.bytes += st.st_blocks as u64 * 512;
    c.files += 1;
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(names) = crate::fsops::names(fd) else {
        c.unreadable = true;
        return;
    };
    for n in names {
        let Ok(Some(st)) = crate::fsops::lstat_at(fd, &n) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            match crate::fsops::open_at(fd, &n, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(sub) => walk(sub.as_raw_fd(), &st, depth + 1, c, seen),
                Err(_) => {
                    c.bytes += st.st_blocks as u64 * 512;
                    c.files += 1;
                    c.unreadable = true;
                }
            }
        } else if st.st_nlink <= 1 || seen.insert((st.st_dev, st.st_ino)) {
            c.bytes += st.st_blocks as u64 * 512;
            c.files += 1;
            c.largest = c.largest.max(st.st_blocks as u64 * 512);
        }
    }
}

/// The cap as a budget the supervisor keeps while the command runs, and until its last
/// process is gone (the kill grace included). Two halves:
///
/// * **Per call, by the kernel**: every process of the sandbox has `RLIMIT_FSIZE` at
///   [`Budget::left`], the room the last exact count left ([`crate::layers::fsize`]), so no
///   single call puts more than that into the layer; the calls that allocate past that limit
///   (`fallocate` with `KEEP_SIZE`, reflinks, ...) are refused by seccomp.
/// * **Between calls, by the supervisor**: a cheap `statfs` of the layer's filesystem at every
///   [`TICK`] tells when its used blocks grew by more than that room; an exact count
///   ([`count`]) runs then (and at an interval that keeps its CPU under about 2 %: 50 times the
///   last count's time, at least [`TICK`] * 4), the limit follows it, and past the cap the
///   sandbox is killed. So several calls (several files, several processes) can together
///   pass the cap by what they write in one [`TICK`] plus one count's time.
///
/// [`Budget::hit`] latches when any count finds the layer at its cap (within [`SLACK`] * 2)
/// or past it.
pub struct Budget {
    dir: Tree,
    pub cap_bytes: u64,
    pub cap_files: u64,
    /// The filesystem's used bytes at the last exact count, and what the layer held then.
    fs_used: u64,
    last: Count,
    next_walk: Instant,
    walk_cost: Duration,
    last_walk: Instant,
    last_look: Instant,
    /// A count found the layer at or past its cap.
    pub hit: bool,
}

/// The workload's `RLIMIT_FSIZE` at its start, for a cap of `cap` bytes: the cap less
/// [`SLACK`] (also the hard limit, which the supervisor's updates stay under).
pub fn first_fsize(cap: u64) -> u64 {
    cap.saturating_sub(SLACK)
}

/// How often the filesystem's usage is looked at (a `statfs`: about a microsecond).
pub const TICK: Duration = Duration::from_millis(10);

/// Room kept back from [`Budget::left`] for what a file costs besides its bytes (its
/// directory's block, extent blocks), so that a write stopped at the limit leaves the layer
/// within its cap.
pub const SLACK: u64 = 64 << 10;

impl Budget {
    pub fn new(disk: &Path, cap_bytes: u64) -> std::io::Result<Budget> {
        let dir = Tree::open(disk)?;
        let fs_used = fs_used(&dir).unwrap_or(0);
        Ok(Budget {
            dir,
            cap_bytes,
            cap_files: max_files(cap_bytes),
            fs_used,
            last: Count::default(),
            next_walk: Instant::now() + TICK * 4,
            walk_cost: Duration::ZERO,
            last_walk: Instant::now(),
            last_look: Instant::now(),
            hit: false,
        })
    }

    /// The offset no file may grow past (`RLIMIT_FSIZE` is a bound on a file's end, not on
    /// what a call adds): the room the last exact count left (the cap less what the layer
    /// held, less [`SLACK`]), plus the blocks of its largest file, so that the file a command
    /// is writing can take the whole room however big it already is. A call on a smaller file
    /// can add at most that much more than the room: the largest file's size (nothing for a
    /// command that writes its files one after the other). Never more than [`first_fsize`].
    pub fn left(&self) -> u64 {
        let room = self
            .cap_bytes
            .saturating_sub(self.last.bytes)
            .saturating_sub(SLACK);
        (room + self.last.largest).min(first_fsize(self.cap_bytes))
    }

    /// When the next check is due.
    pub fn due(&self) -> Instant {
        self.last_look + TICK
    }

    /// Look now; `Some(count)` when the layer is past its cap.
    pub fn check(&mut self) -> Option<Count> {
        let now = Instant::now();
        if now < self.last_look + TICK {
            return None;
        }
        self.last_look = now;
        let grown = fs_used(&self.dir)
            .map(|u| u.saturating_sub(self.fs_used))
            .unwrap_or(u64::MAX);
        let room = self.cap_bytes.saturating_sub(self.last.bytes);
        // a trigger walks at most every 10 times the walk's cost (10 % in the worst case,
        // when something else keeps writing to the same filesystem)
        // (at the cap within the slack: a write stopped by the limit leaves it there)
        let triggered = grown + 2 * SLACK >= room && now >= self.last_walk + self.walk_cost * 10;
        if !triggered && now < self.next_walk {
            return None;
        }
        let c = self.walk();
        self.over(c)
    }

    /// `c`, when it is past the cap.
    pub fn over(&self, c: Count) -> Option<Count> {
        (c.bytes > self.cap_bytes || c.files > self.cap_files).then_some(c)
    }

    /// An exact count now.
    pub fn walk(&mut self) -> Count {
        let t = Instant::now();
        let before = fs_used(&self.dir).unwrap_or(0);
        let c = count(&self.dir);
        self.walk_cost = t.elapsed();
        self.fs_used = before;
        self.last = c;
        self.last_walk = Instant::now();
        self.next_walk = self.last_walk + (self.walk_cost * 50).max(TICK * 4);
        if c.bytes + 2 * SLACK >= self.cap_bytes || c.files >= self.cap_files {
            self.hit = true;
        }
        c
    }
}

/// The used bytes of the filesystem `dir` lies on.
fn fs_used(dir: &Tree) -> Option<u64> {
    // SAFETY: all-zero is a valid statfs; fstatfs fills it for an fd we own.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(dir.raw_fd(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_blocks - s.f_bfree) as u64 * s.f_bsize as u64)
}

/// Is `fd`'s filesystem a tmpfs (the in-memory layer)?
pub fn on_tmpfs(fd: i32) -> bool {
    // SAFETY: as in fs_used.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::fstatfs(fd, &mut s) == 0 && s.f_type == libc::TMPFS_MAGIC }
}

/// Can the filesystem of `dir` hold an overlay's upper dir made in a user namespace? Not an
/// overlayfs (a container's root is one: overlayfs refuses it as an upper), and it must take
/// `user.*` xattrs (overlayfs's marks there) and whiteout devices (removed entries). Tried on
/// `dir` itself, leaving nothing.
pub fn holds_an_upper(dir: &Path) -> Result<(), String> {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    let t = Tree::open(dir).map_err(|e| e.to_string())?;
    // SAFETY: all-zero is a valid statfs; fstatfs fills it for an fd we own.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(t.raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if st.f_type as i64 == OVERLAYFS_SUPER_MAGIC {
        return Err(
            "an overlayfs (a container's root?), which cannot hold an overlay's upper layer".into(),
        );
    }
    t.set_xattr(c"user.sandbox-run.probe", b"1")
        .map_err(|e| format!("no user.* extended attributes here ({e})"))?;
    // SAFETY: fremovexattr of the attribute just set, on an fd we own.
    unsafe { libc::fremovexattr(t.raw_fd(), c"user.sandbox-run.probe".as_ptr()) };
    let probe = OsStr::new(".whiteout-probe");
    t.put_whiteout(probe)
        .map_err(|e| format!("no whiteout devices here ({e})"))?;
    t.remove(probe).map_err(|e| e.to_string())
}

/// The one stderr line of a run stopped past its cap.
pub fn stopped_line(o: &Over, mounts: &[crate::layers::mounts::Op]) -> String {
    let cap = crate::layers::overlay::disk_size(mounts).unwrap_or(0);
    let c = &o.count;
    let end = match o.stopped {
        true => "it was stopped",
        false => "nothing of it was applied",
    };
    if c.bytes > cap {
        format!(
            "sandbox-run: disk: the command wrote {} to the repo's layer, past its cap of {} ([limits] disk): {end}",
            crate::units::Size(c.bytes),
            crate::units::Size(cap)
        )
    } else {
        format!(
            "sandbox-run: disk: the command made {} files in the repo's layer, past its cap of {} files (one per 4 KiB of [limits] disk): {end}",
            c.files,
            max_files(cap)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let p = crate::testdir::base().join(format!("layer-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("upper")).unwrap();
        p
    }

    /// Blocks, not lengths (a sparse file takes nothing), a hard link once, links not followed.
    #[test]
    fn the_count_is_of_blocks_and_inodes() {
        let d = scratch("count");
        let t = Tree::open(&d).unwrap();
        let base = count(&t);
        std::fs::write(d.join("upper/a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(d.join("upper/a"), d.join("upper/b")).unwrap();
        std::os::unix::fs::symlink("/usr", d.join("upper/l")).unwrap();
        let f = std::fs::File::create(d.join("upper/sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        let c = count(&t);
        let grown = c.bytes - base.bytes;
        assert!(
            ((1 << 20)..(1 << 20) + (64 << 10)).contains(&grown),
            "{grown}"
        );
        assert_eq!(c.files - base.files, 3, "{c:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The filesystem's growth past the room left triggers a count at the next tick.
    #[test]
    fn the_budget_sees_a_write_past_the_cap_at_the_next_tick() {
        let d = scratch("budget");
        let mut b = Budget::new(&d, 4 << 20).unwrap();
        // no periodic count in this test: only the trigger
        b.next_walk = Instant::now() + Duration::from_secs(3600);
        std::thread::sleep(TICK);
        assert_eq!(b.check(), None);
        std::fs::write(d.join("upper/big"), vec![1u8; 8 << 20]).unwrap();
        // SAFETY: syncfs takes no pointer; the blocks must be allocated for statfs to see them.
        unsafe { libc::syncfs(b.dir.raw_fd()) };
        std::thread::sleep(TICK);
        let over = b.check().expect("past the cap");
        assert!(over.bytes >= 8 << 20, "{over:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_file_cap_is_one_per_4k() {
        assert_eq!(max_files(2 << 30), 524_288);
        assert_eq!(max_files(1 << 20), 1024);
    }
}

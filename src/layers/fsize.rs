//! The repo layer's per-call bound, supervisor side: every process of the sandbox has its soft
//! `RLIMIT_FSIZE` at the layer's budget left ([`crate::layers::disk::Budget::left`]), lowered
//! (and raised again when the command frees space) as the supervisor's counts change.
//!
//! The kernel checks that limit in every call that grows a file (write, pwrite, writev,
//! truncate, copy_file_range, sendfile and splice into a file, fallocate without
//! `KEEP_SIZE`): none of them puts a byte of a file past it. The calls that would allocate
//! blocks without that check (`fallocate` with `KEEP_SIZE`, `INSERT_RANGE`, or inside the
//! file's size; reflinks) are refused by seccomp, which also refuses the workload setting the
//! limit itself; its hard limit stays at the cap ([`crate::layers::rlimits`]), so the
//! supervisor can raise the soft one back without any privilege. `SIGXFSZ` is ignored in the
//! sandbox: a write past the limit fails with `EFBIG`.
//!
//! Who: the descendants of stage 2 (its own pid excluded: it is ours, and writes the way
//! back), found through `/proc/PID/task/TID/children`, which covers every thread's children.
//! Permission: the supervisor runs as the sandbox's user (rootless: same uid, which
//! `prlimit` requires) or as root (`CAP_SYS_RESOURCE` over every user namespace).
//! The fork race: a child copies its parent's limits when it is made, under the same lock
//! `prlimit` takes, so it has the old or the new one; a second pass sets the children made
//! during the first. A child still being made during the second pass keeps the old (larger)
//! limit until the next update.

use std::collections::HashSet;

/// The sandbox's processes and the limit they were given last.
pub struct Bound {
    stage2: i32,
    hard: u64,
    set: Option<u64>,
}

impl Bound {
    /// For the sandbox under `stage2`, whose hard `RLIMIT_FSIZE` is `hard`.
    pub fn new(stage2: i32, hard: u64) -> Bound {
        Bound {
            stage2,
            hard,
            set: None,
        }
    }

    /// Give every process of the sandbox the soft limit `left` (at most the hard one). Cheap
    /// when it has not changed.
    pub fn apply(&mut self, left: u64) {
        let soft = left.min(self.hard);
        if self.set == Some(soft) {
            return;
        }
        let lowered = self.set.is_none_or(|old| soft < old);
        let mut done = HashSet::new();
        for _ in 0..if lowered { 2 } else { 1 } {
            for pid in descendants(self.stage2) {
                if done.insert(pid) {
                    set_soft(pid, soft, self.hard);
                }
            }
        }
        self.set = Some(soft);
    }
}

/// `prlimit(pid, RLIMIT_FSIZE, {soft, hard})`; a process that is gone meanwhile is skipped.
fn set_soft(pid: i32, soft: u64, hard: u64) {
    let new = libc::rlimit64 {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit64 reads `new`, which outlives the call; no old value asked for.
    unsafe { libc::prlimit64(pid, libc::RLIMIT_FSIZE, &new, std::ptr::null_mut()) };
}

/// Every process under `root` (not `root` itself), each thread's children included.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let path = t.path().join("children");
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            for c in text.split_ascii_whitespace().filter_map(|c| c.parse().ok()) {
                if seen.insert(c) {
                    out.push(c);
                    todo.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The root's child gets the limit, the root does not; raising it again works without
    /// privilege (the hard limit stays).
    #[test]
    fn the_limit_reaches_every_descendant_and_comes_back() {
        let mut c = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let me = c.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(200));
        let kids = descendants(me);
        assert_eq!(kids.len(), 1, "{kids:?}");
        let get = |pid: i32| {
            let mut old = libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: prlimit64 writes `old`, which we own; no new value.
            unsafe { libc::prlimit64(pid, libc::RLIMIT_FSIZE, std::ptr::null(), &mut old) };
            (old.rlim_cur, old.rlim_max)
        };
        let hard = get(me).1.min(1 << 40);
        // under `sh`: not the test process, whose other children are other tests'
        let mut b = Bound::new(me, hard);
        let before = get(me);
        b.apply(12345);
        assert_eq!(get(kids[0]), (12345, hard));
        assert_eq!(get(me), before, "the root is left alone");
        b.apply(1 << 30);
        assert_eq!(get(kids[0]).0, (1 << 30).min(hard));
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

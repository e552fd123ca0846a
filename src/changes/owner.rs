//! Run a piece of work as the user who owns the repo.
//!
//! When root applies changes to a repo another user owns, the files it makes must be that
//! user's, and the kernel must check that user's permissions, not root's (a directory the
//! user cannot write stays unwritten, a file the user cannot read stays unread). So the work
//! runs in a forked child that has dropped to the user for good (supplementary groups, then
//! the group IDs, then the user IDs: each checked) and sends its result back as JSON on a
//! pipe. File descriptors opened before (the source and target trees) are inherited: the
//! child reaches what they name with its own permissions from there.
//!
//! Call it from a single-threaded process (the CLI is): the child allocates after the fork.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{Read, Write};

/// `f()` as user `uid` with group `gid` (and no other group): in this process when the
/// effective uid is already `uid`, else in a child that drops to them.
pub fn run_as<T: Serialize + DeserializeOwned>(
    uid: u32,
    gid: u32,
    f: impl FnOnce() -> T,
) -> Result<T, String> {
    if nix::unistd::geteuid().as_raw() == uid {
        return Ok(f());
    }
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| format!("running as uid {uid}: pipe: {e}"))?;
    // SAFETY: the child only drops its IDs, runs `f`, writes to the pipe and `_exit`s; the
    // caller is single-threaded (see the module's note), so no lock is held across the fork.
    match unsafe { nix::unistd::fork() } {
        Err(e) => Err(format!("running as uid {uid}: fork: {e}")),
        Ok(nix::unistd::ForkResult::Child) => {
            drop(r);
            let res: Result<T, String> = drop_to(uid, gid).and_then(|()| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                    .map_err(|_| format!("running as uid {uid}: the work panicked"))
            });
            let json = serde_json::to_vec(&res).unwrap_or_default();
            let ok = std::fs::File::from(w).write_all(&json).is_ok();
            // SAFETY: leave the child at once, without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(w);
            let mut buf = Vec::new();
            let read = std::fs::File::from(r).read_to_end(&mut buf);
            let status = loop {
                match nix::sys::wait::waitpid(child, None) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other,
                }
            };
            match status {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => {}
                Ok(s) => return Err(format!("running as uid {uid}: the child ended: {s:?}")),
                Err(e) => return Err(format!("running as uid {uid}: waitpid: {e}")),
            }
            read.map_err(|e| format!("running as uid {uid}: reading the result: {e}"))?;
            serde_json::from_slice::<Result<T, String>>(&buf)
                .map_err(|e| format!("running as uid {uid}: reading the result: {e}"))?
        }
    }
}

/// Become `uid`:`gid` for good, with `gid` as the only group; each step checked.
fn drop_to(uid: u32, gid: u32) -> Result<(), String> {
    let fail = |step: &str| {
        format!(
            "running as uid {uid}: {step}: {}",
            std::io::Error::last_os_error()
        )
    };
    // SAFETY: setgroups from a one-element array; setresgid/setresuid take plain integers.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(fail("setgroups"));
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            return Err(fail("setresgid"));
        }
        if libc::setresuid(uid, uid, uid) != 0 {
            return Err(fail("setresuid"));
        }
    }
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: getresuid into three integers we own.
    if unsafe { libc::getresuid(&mut r, &mut e, &mut s) } != 0 || (r, e, s) != (uid, uid, uid) {
        return Err(format!(
            "running as uid {uid}: the user IDs did not all change"
        ));
    }
    // SAFETY: getresgid into three integers we own.
    if unsafe { libc::getresgid(&mut r, &mut e, &mut s) } != 0 || (r, e, s) != (gid, gid, gid) {
        return Err(format!(
            "running as uid {uid}: the group IDs did not all change"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (u32, u32, Vec<u32>) {
        let groups = nix::unistd::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
            groups,
        )
    }

    #[test]
    fn the_work_runs_here_when_already_that_user() {
        let me = nix::unistd::geteuid().as_raw();
        let pid = run_as(me, 12345, std::process::id).unwrap();
        assert_eq!(pid, std::process::id());
    }

    #[test]
    fn root_drops_to_the_user_with_its_permissions() {
        if !nix::unistd::geteuid().is_root() {
            // an unprivileged caller cannot become another user
            assert!(run_as(0, 0, ids).unwrap_err().contains("setgroups"));
            return;
        }
        let (uid, gid, groups) = run_as(65534, 65533, ids).unwrap();
        assert_eq!((uid, gid, groups), (65534, 65533, vec![65533]));
        // root's file is out of the user's reach, and what the user makes is the user's
        let base = std::env::temp_dir().join(format!("owner-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("secret"), "s").unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        std::fs::set_permissions(base.join("secret"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let b = base.clone();
        let r = run_as(65534, 65534, move || {
            (
                std::fs::read(b.join("secret")).is_ok(),
                std::fs::write(b.join("made"), "m").is_ok(),
            )
        })
        .unwrap();
        assert_eq!(r, (false, true));
        assert_eq!(std::fs::metadata(base.join("made")).unwrap().uid(), 65534);
        std::fs::remove_dir_all(&base).unwrap();
    }
}

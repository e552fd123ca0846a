//! Capabilities: none. Child side, in the workload just before exec.
//!
//! Inside its own user namespace the sandbox holds every capability (of that namespace). The
//! bounding and ambient sets are cleared while we still hold CAP_SETPCAP, or a workload running
//! as uid 0 inside would get them all back at exec; then permitted, effective and inheritable
//! are emptied. Raw `capget`/`prctl`/`capset` on stack data: one read of the sets, one drop per
//! capability the kernel knows (no read of each first), one ambient clear, one `capset`.

use crate::layers::{Step, StepError};

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn fail() -> StepError {
    StepError::last(Step::Capabilities)
}

/// This thread's capability sets (two words each).
fn get() -> Result<[Data; 2], StepError> {
    let mut h = Header {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two cap data structs (version 3) into `d`, which has room for them.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) } != 0 {
        return Err(fail());
    }
    Ok(d)
}

pub fn drop_all() -> Result<(), StepError> {
    let d = get()?;
    let setpcap = d[0].effective & (1 << CAP_SETPCAP) != 0;
    let none_held = d.iter().all(|w| w.permitted == 0);
    // Without CAP_SETPCAP the bounding set cannot be changed. That happens only in a run
    // without namespaces by an unprivileged user, who holds no capability at all: exec cannot
    // give any back either, as no_new_privs (set next) stops setuid and file capabilities.
    if setpcap || !none_held {
        for cap in 0..64 {
            // With CAP_SETPCAP, dropping a capability already out of the set is harmless: no
            // read first. Without it (and some capability held), only what is in the set.
            // SAFETY: prctl with integer arguments.
            let r = unsafe {
                if !setpcap && libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) == 0 {
                    continue;
                }
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0)
            };
            if r != 0 {
                // Past the last capability this kernel knows: the set is empty.
                if nix::errno::Errno::last_raw() == libc::EINVAL {
                    break;
                }
                return Err(fail());
            }
        }
    }
    // SAFETY: prctl with integer arguments.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if r != 0 {
        return Err(fail());
    }
    let mut h = Header {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let none = [Data::default(); 2];
    // SAFETY: capset reads two cap data structs (version 3) from `none`.
    if unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, none.as_ptr()) } != 0 {
        return Err(fail());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (the sets are per thread, and the test runner's own must stay): after
    /// `drop_all`, every set is empty, and the bounding set too when it could be changed.
    #[test]
    fn drop_all_empties_every_set() {
        // SAFETY: the child only makes system calls and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                let Ok(before) = get() else { return 2 };
                let setpcap = before[0].effective & (1 << CAP_SETPCAP) != 0;
                if drop_all().is_err() {
                    return 1;
                }
                let Ok(d) = get() else { return 2 };
                if d.iter()
                    .any(|w| w.effective | w.permitted | w.inheritable != 0)
                {
                    return 3;
                }
                for cap in 0..64 {
                    // SAFETY: prctl with integer arguments.
                    match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } {
                        0 => {}
                        // Unprivileged (no CAP_SETPCAP) the bounding set stays: nothing is
                        // held, and no_new_privs keeps exec from granting anything.
                        1 if setpcap => return 4,
                        1 => {}
                        _ => break,
                    }
                    // SAFETY: as above.
                    let amb = unsafe {
                        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0)
                    };
                    if amb == 1 {
                        return 5;
                    }
                }
                0
            })();
            // SAFETY: ends the child.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}

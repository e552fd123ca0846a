//! The one-way channel from the sandbox to the supervisor: fixed-size 12-byte records on a
//! close-on-exec pipe (fd 3 in stage 2 and its children). Writes of 12 bytes to a pipe are
//! atomic, need no allocation, and the pipe's end-of-file tells the supervisor that every
//! process holding it has exec'd or exited. Whenever the sandbox has its own network namespace
//! (`--net none` and `--net filtered`), or a kept layer, the channel is a `SOCK_SEQPACKET`
//! socket pair instead (one message per record, the same guarantees), so that pid 1 can pass
//! the sockets it makes there (the proxy's, the loopback ports', the name service's) with
//! `SCM_RIGHTS`.
//!
//! Kept among the layers, below the launcher that owns the pipe and the supervisor that reads
//! it, because the namespace layer speaks it too ([`crate::layers::ns`]: the id-map helper's
//! verdict and the network namespace handed to pid 1).

use crate::layers::{Step, StepError};
use std::os::fd::RawFd;

/// Bytes per record: below PIPE_BUF, so each write is atomic.
pub const SIZE: usize = 12;

/// The fd number of the channel in stage 2, pid 1 and the workload (until it execs).
pub const FD: RawFd = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A setup step failed.
    Failed(StepError),
    /// The workload ended; the raw `wait` status.
    Exited(i32),
    /// Landlock is in force: ABI and status (0 not, 1 partially, 2 fully enforced).
    Landlock { abi: u8, status: u8 },
    /// The workload is about to exec: every layer is in place.
    Ready,
    /// A setup phase ended at this CLOCK_MONOTONIC time (low 32 bits of microseconds).
    Timing { phase: Phase, micros: u32 },
    /// The proxy's listening socket, created in the sandbox's network namespace, travels with
    /// this record as `SCM_RIGHTS` ([`send_listener`], [`recv`]).
    Listener,
    /// Every process of the sandbox is gone (pid 1 ended): what stage 2 does from now on is
    /// the way back's hand-over, which the timeout and the kill grace no longer cut.
    Handing,
    /// The run's disk layer (the kept layers' upper dirs), travelling with this record as
    /// `SCM_RIGHTS` to the supervisor's way back ([`crate::changes`]).
    Layer,
    /// The repo's layer was full at some point of the run: writes failed with ENOSPC.
    Full,
    /// The other way, supervisor to pid 1 (a run with secrets): the run's CA is in the trust
    /// bundle (`ok`), or the proxy could not start; pid 1 waits for it ([`wait_trusted`]).
    Trusted { ok: bool },
    /// A listening socket on a loopback port of the allow-list, the `index`th of
    /// [`crate::net::proxy::loopback_ports`], travelling as `SCM_RIGHTS`. Sent before
    /// [`Record::Listener`].
    Forward { index: u16 },
    /// The name service's UDP socket (`127.0.0.1:53` inside), travelling as `SCM_RIGHTS`.
    /// Sent before [`Record::Listener`]; the last network record under `--net none`.
    Names,
    /// The seccomp filter's listener (user notification), travelling as `SCM_RIGHTS`: the
    /// workload sends it and closes its own copy right before `execve`.
    Notify,
    /// The kernel refused the filter a listener (this errno): the errno program is in force,
    /// and the refused calls go unnamed.
    Unnamed(i32),
}

/// The phases of setup inside the sandbox, for `--timings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Stage 2 runs: a fork of the supervisor, or a re-exec that has read its plan.
    Stage2 = 1,
    /// The seccomp filters are compiled.
    SeccompCompiled,
    /// Every namespace exists and the ids are mapped.
    Namespaces,
    /// pid 1 has built the new root and pivoted into it.
    Mounts,
    /// The workload has dropped capabilities and set rlimits and no_new_privs.
    Process,
    /// Landlock is in force.
    Landlock,
    /// The seccomp filters are installed: execve is next.
    Seccomp,
    /// The supervisor has moved stage 2 into the cgroup leaf (stage 2 prepared meanwhile).
    CgroupJoined,
    /// Stage 2 is in its cgroup leaf (cgroup v1, where it moves itself).
    CgroupSelfJoined,
    /// pid 1 has reaped the workload and killed what it left.
    WorkloadEnded,
    /// Stage 2 has reaped pid 1 (the pid namespace is gone).
    InitEnded,
    /// Stage 2 is done (copy-back included) and exits.
    Stage2Ended,
    /// pid 1 is in the sandbox's network namespace (made meanwhile by stage 2, see
    /// `ns::Net`), and its sockets made there (the name service's; under `--net filtered`
    /// the loopback ports' and the proxy's).
    Network,
}

impl Phase {
    pub const ALL: [Phase; 13] = [
        Phase::Stage2,
        Phase::CgroupSelfJoined,
        Phase::WorkloadEnded,
        Phase::InitEnded,
        Phase::Stage2Ended,
        Phase::SeccompCompiled,
        Phase::Namespaces,
        Phase::CgroupJoined,
        Phase::Mounts,
        Phase::Process,
        Phase::Landlock,
        Phase::Seccomp,
        Phase::Network,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Phase::Stage2 => "stage 2 started",
            Phase::SeccompCompiled => "seccomp compiled",
            Phase::Namespaces => "namespaces",
            Phase::Mounts => "mounts + pivot_root",
            Phase::Process => "rlimits, caps, no_new_privs",
            Phase::Landlock => "landlock",
            Phase::Seccomp => "seccomp installed",
            Phase::CgroupJoined => "cgroup joined",
            Phase::CgroupSelfJoined => "cgroup v1 self-join",
            Phase::WorkloadEnded => "workload ran",
            Phase::InitEnded => "pid 1 ended",
            Phase::Stage2Ended => "stage 2 ended",
            Phase::Network => "network namespace entered",
        }
    }
}

/// Microseconds of CLOCK_MONOTONIC, low 32 bits (differences wrap correctly).
pub fn now_micros() -> u32 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1000) as u32
}

/// Mark the end of a setup phase.
pub fn mark(phase: Phase) {
    send(Record::Timing {
        phase,
        micros: now_micros(),
    });
}

impl Record {
    pub fn encode(self) -> [u8; SIZE] {
        let (kind, a, step, value, at): (u8, u8, u16, i32, u16) = match self {
            Record::Failed(e) => (1, 0, e.step as u16, e.errno, e.at),
            Record::Exited(s) => (2, 0, 0, s, 0),
            Record::Landlock { abi, status } => (3, abi, status as u16, 0, 0),
            Record::Ready => (4, 0, 0, 0, 0),
            Record::Timing { phase, micros } => (5, phase as u8, 0, micros as i32, 0),
            Record::Listener => (6, 0, 0, 0, 0),
            Record::Handing => (8, 0, 0, 0, 0),
            Record::Layer => (9, 0, 0, 0, 0),
            Record::Full => (10, 0, 0, 0, 0),
            Record::Trusted { ok } => (11, ok as u8, 0, 0, 0),
            Record::Forward { index } => (12, 0, index, 0, 0),
            Record::Names => (13, 0, 0, 0, 0),
            Record::Notify => (14, 0, 0, 0, 0),
            Record::Unnamed(errno) => (15, 0, 0, errno, 0),
        };
        let mut b = [0u8; SIZE];
        b[0] = kind;
        b[1] = a;
        b[2..4].copy_from_slice(&step.to_ne_bytes());
        b[4..8].copy_from_slice(&value.to_ne_bytes());
        b[8..10].copy_from_slice(&at.to_ne_bytes());
        b
    }

    pub fn decode(b: [u8; SIZE]) -> Option<Record> {
        let step = u16::from_ne_bytes([b[2], b[3]]);
        let value = i32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
        let at = u16::from_ne_bytes([b[8], b[9]]);
        match b[0] {
            1 => Some(Record::Failed(StepError {
                step: Step::from_u16(step)?,
                errno: value,
                at,
            })),
            2 => Some(Record::Exited(value)),
            3 => Some(Record::Landlock {
                abi: b[1],
                status: step as u8,
            }),
            4 => Some(Record::Ready),
            5 => Some(Record::Timing {
                phase: *Phase::ALL.iter().find(|p| **p as u8 == b[1])?,
                micros: value as u32,
            }),
            6 => Some(Record::Listener),
            8 => Some(Record::Handing),
            9 => Some(Record::Layer),
            10 => Some(Record::Full),
            11 => Some(Record::Trusted { ok: b[1] == 1 }),
            12 => Some(Record::Forward { index: step }),
            13 => Some(Record::Names),
            14 => Some(Record::Notify),
            15 => Some(Record::Unnamed(value)),
            _ => None,
        }
    }
}

/// Send a record on the channel. Best effort: if the supervisor is gone there is nobody to tell.
pub fn send(r: Record) {
    let b = r.encode();
    // SAFETY: write(2) of a stack buffer of the given length to an fd number; no allocation.
    unsafe { libc::write(FD, b.as_ptr().cast(), b.len()) };
}

/// Send the proxy's listening socket `fd` on the channel (a [`Record::Listener`] with the fd
/// as `SCM_RIGHTS`). No allocation: a stack buffer for the control message.
pub fn send_listener(fd: RawFd) -> Result<(), i32> {
    send_with_fd(FD, Record::Listener, fd)
}

/// Send `r` with `fd` as `SCM_RIGHTS` on the socket `sock` (the channel, or another
/// `SOCK_SEQPACKET` pair). No allocation.
pub fn send_with_fd(sock: RawFd, r: Record, fd: RawFd) -> Result<(), i32> {
    let b = r.encode();
    let mut iov = libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    };
    // Room for one cmsghdr and one int, aligned as cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; every pointer in it refers to a local that outlives the
    // sendmsg call, and the CMSG macros stay inside `control` (CMSG_SPACE(4) <= 32 bytes).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != b.len() as isize {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
    }
    Ok(())
}

/// How long pid 1 waits for [`Record::Trusted`]: the supervisor makes a CA (milliseconds) and
/// starts the proxy; past this it is taken as failed.
pub const TRUST_WAIT_MS: i32 = 20_000;

/// pid 1's side of [`Record::Trusted`]: wait on the channel (at most [`TRUST_WAIT_MS`]) for
/// the supervisor's word. `Err(errno)`: ETIMEDOUT when none came, ECANCELED when the
/// supervisor could not start the proxy or add its CA. No allocation.
pub fn wait_trusted() -> Result<(), i32> {
    let mut p = libc::pollfd {
        fd: FD,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd on our stack.
    let n = unsafe { libc::poll(&mut p, 1, TRUST_WAIT_MS) };
    if n <= 0 {
        return Err(libc::ETIMEDOUT);
    }
    let mut b = [0u8; SIZE];
    // SAFETY: recv(2) of one record into a stack buffer of its size.
    let got = unsafe { libc::recv(FD, b.as_mut_ptr().cast(), SIZE, libc::MSG_DONTWAIT) };
    match (got, Record::decode(b)) {
        (n, Some(Record::Trusted { ok: true })) if n == SIZE as isize => Ok(()),
        (n, _) if n <= 0 => Err(libc::ETIMEDOUT),
        _ => Err(libc::ECANCELED),
    }
}

/// The supervisor's side: tell pid 1 on the channel `fd` whether the run's CA is in.
pub fn send_trusted(fd: RawFd, ok: bool) {
    let b = Record::Trusted { ok }.encode();
    // SAFETY: send(2) of a stack buffer of the given length.
    unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
}

/// Read one record now (the supervisor's side, while the sandbox runs), with the fd that came
/// with it. `None` at end-of-file, when nothing is there, or on error.
pub fn recv(fd: RawFd) -> Option<(Record, Option<std::os::fd::OwnedFd>)> {
    recv_flags(fd, libc::MSG_DONTWAIT)
}

/// [`recv`], waiting for the record (retried on EINTR).
pub fn recv_wait(fd: RawFd) -> Option<(Record, Option<std::os::fd::OwnedFd>)> {
    recv_flags(fd, 0)
}

fn recv_flags(fd: RawFd, flags: i32) -> Option<(Record, Option<std::os::fd::OwnedFd>)> {
    use std::os::fd::FromRawFd;
    let mut b = [0u8; SIZE];
    let mut iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: as in send_listener; the kernel writes at most msg_controllen bytes of control
    // data, and we read only the SCM_RIGHTS int it reports.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        let n = loop {
            let n = libc::recvmsg(fd, &mut msg, flags | libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break n;
            }
        };
        let mut passed = None;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    let p = libc::CMSG_DATA(c).cast::<RawFd>().add(i);
                    let f = std::os::fd::OwnedFd::from_raw_fd(std::ptr::read_unaligned(p));
                    // One fd is expected; any other is closed by its drop.
                    if passed.is_none() {
                        passed = Some(f);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if n != SIZE as isize {
            return None;
        }
        Record::decode(b).map(|r| (r, passed))
    }
}

/// Read every record until end-of-file from a `SOCK_SEQPACKET` channel, keeping the fds that
/// came with them (a plain read would close them).
pub fn recv_all(fd: RawFd) -> Vec<(Record, Option<std::os::fd::OwnedFd>)> {
    let mut out = Vec::new();
    loop {
        match recv_flags(fd, 0) {
            Some(r) => out.push(r),
            None => {
                // A record that did not decode is skipped; end of file or an error ends it.
                let mut b = [0u8; 1];
                // SAFETY: recv(MSG_PEEK|MSG_DONTWAIT) into a stack byte.
                let n = unsafe {
                    libc::recv(
                        fd,
                        b.as_mut_ptr().cast(),
                        1,
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                if n <= 0 {
                    return out;
                }
            }
        }
    }
}

/// Read every record until end-of-file. Used by the supervisor on its read end.
pub fn read_all(fd: RawFd) -> Vec<Record> {
    let mut out = Vec::new();
    // Many records per read from a pipe (each was written whole, so a read of a multiple of
    // SIZE never splits one); one per read from a seqpacket socket.
    let mut b = [0u8; SIZE * 64];
    loop {
        // SAFETY: read(2) into a stack buffer of the given length.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
        if n > 0 && (n as usize).is_multiple_of(SIZE) {
            for chunk in b[..n as usize].chunks_exact(SIZE) {
                let mut rec = [0u8; SIZE];
                rec.copy_from_slice(chunk);
                if let Some(r) = Record::decode(rec) {
                    out.push(r);
                }
            }
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        for r in [
            Record::Failed(StepError::new(Step::LandlockRestrict, libc::EPERM)),
            Record::Failed(StepError::new(Step::MountBind, libc::ENOENT).at(41)),
            Record::Exited(0x8b00),
            Record::Landlock { abi: 7, status: 2 },
            Record::Ready,
            Record::Timing {
                phase: Phase::Landlock,
                micros: u32::MAX - 3,
            },
            Record::Handing,
            Record::Layer,
            Record::Full,
            Record::Trusted { ok: true },
            Record::Trusted { ok: false },
            Record::Forward { index: 513 },
            Record::Names,
            Record::Notify,
            Record::Unnamed(libc::EBUSY),
        ] {
            assert_eq!(Record::decode(r.encode()), Some(r));
        }
        assert_eq!(Record::decode([42; SIZE]), None);
    }

    /// pid 1's wait for the run's CA: the supervisor's word decides; a "no" fails at once.
    #[test]
    fn pid1_waits_for_the_supervisors_word() {
        use std::os::fd::AsRawFd;
        for ok in [true, false] {
            let (ours, theirs) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::empty(),
            )
            .unwrap();
            // SAFETY: the child only calls dup2, poll, recv and _exit (async-signal-safe).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: as above.
                unsafe {
                    libc::dup2(theirs.as_raw_fd(), FD);
                    let code = match wait_trusted() {
                        Ok(()) => 0,
                        Err(libc::ECANCELED) => 1,
                        Err(_) => 2,
                    };
                    libc::_exit(code);
                }
            }
            send_trusted(ours.as_raw_fd(), ok);
            let mut st = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            assert!(libc::WIFEXITED(st));
            assert_eq!(libc::WEXITSTATUS(st), if ok { 0 } else { 1 });
        }
    }
}

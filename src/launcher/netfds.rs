//! pid 1's part of the sandbox's own network, beside the proxy's socket ([`super::init`]):
//! sockets made in the sandbox's network namespace and handed to the supervisor on the
//! channel with `SCM_RIGHTS` (a socket stays in the namespace it was made in; the supervisor
//! serves it from the host's side), and the sandbox's `/etc/resolv.conf`. All made before the
//! workload exists, so the ports are ours; pid 1 keeps no copy.
//!
//! - The loopback ports of the allow-list ([`crate::net::proxy::loopback_ports`]): a listener
//!   on each, one [`Record::Forward`] per socket. Ports below 1024 too: pid 1 holds
//!   `CAP_NET_BIND_SERVICE` in the user namespace that owns the network namespace, rootless
//!   as well.
//! - The name service ([`crate::net::dns`]): UDP `127.0.0.1:53`, one [`Record::Names`].
//! - `/etc/resolv.conf`: a file of ours saying `nameserver 127.0.0.1`, bound read-only over
//!   the host's (which may name a resolver on the host's loopback, such as systemd-resolved's
//!   127.0.0.53, that the sandbox cannot reach).

use crate::layers::channel::{self, Record};
use crate::layers::{Step, StepError};
use crate::plan::Plan;
use std::net::IpAddr;

/// Make and hand over every socket of the sandbox's network but the proxy's, and put our
/// `/etc/resolv.conf` in place. Called by pid 1 in the sandbox's network namespace.
pub fn hand_over(plan: &Plan) -> Result<(), StepError> {
    if plan.net == crate::profile::NetMode::Filtered {
        let allow = crate::net::allow::AllowList::parse(&plan.network_allow)
            .map_err(|_| StepError::new(Step::LoopbackPort, libc::EINVAL))?;
        for (i, lp) in crate::net::proxy::loopback_ports(&allow).iter().enumerate() {
            match socket(lp.ip, lp.port, libc::SOCK_STREAM) {
                Ok(fd) => send(fd, Record::Forward { index: i as u16 }, Step::LoopbackPort)?,
                // `localhost`'s IPv6 half, in a kernel without IPv6.
                Err(e) if lp.optional && matches!(e, libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT) => {}
                Err(e) => return Err(StepError::new(Step::LoopbackPort, e)),
            }
        }
    }
    let fd = socket(IpAddr::from([127, 0, 0, 1]), 53, libc::SOCK_DGRAM)
        .map_err(|e| StepError::new(Step::NameService, e))?;
    send(fd, Record::Names, Step::NameService)?;
    resolv_conf()
}

fn send(fd: i32, r: Record, step: Step) -> Result<(), StepError> {
    let sent = channel::send_with_fd(channel::FD, r, fd);
    // SAFETY: closing the fd `socket` made; the supervisor holds its own copy now.
    unsafe { libc::close(fd) };
    sent.map_err(|e| StepError::new(step, e))
}

/// A socket bound to `ip:port` (listening, for a stream socket); the errno otherwise.
fn socket(ip: IpAddr, port: u16, kind: i32) -> Result<i32, i32> {
    let v4;
    let v6;
    let (family, addr, len): (i32, *const libc::sockaddr, usize) = match ip {
        IpAddr::V4(a) => {
            v4 = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.octets()),
                },
                sin_zero: [0; 8],
            };
            (
                libc::AF_INET,
                (&v4 as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>(),
            )
        }
        IpAddr::V6(a) => {
            v6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: port.to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                sin6_scope_id: 0,
            };
            (
                libc::AF_INET6,
                (&v6 as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>(),
            )
        }
    };
    // SAFETY: socket, bind, listen and close on an fd made here; bind reads the sockaddr on
    // our stack (`v4` or `v6`, alive until the end of the function), of the size given.
    unsafe {
        let fd = libc::socket(family, kind | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(crate::sys::last_errno());
        }
        let ok = libc::bind(fd, addr, len as libc::socklen_t) == 0
            && (kind != libc::SOCK_STREAM || libc::listen(fd, 1024) == 0);
        if !ok {
            let e = crate::sys::last_errno();
            libc::close(fd);
            return Err(e);
        }
        Ok(fd)
    }
}

/// What the sandbox's `/etc/resolv.conf` says.
pub const RESOLV_CONF: &str = "# sandbox-run: the sandbox's own name service, which answers every lookup with NXDOMAIN\n# (clients reach allowed hosts through the proxy, which resolves names on the host)\nnameserver 127.0.0.1\noptions attempts:1\n";

/// Bind a file holding [`RESOLV_CONF`] read-only over `/etc/resolv.conf`. The file is made on
/// the sandbox's `/dev` (a tmpfs of its own, [`crate::layers::mounts::Op::Dev`]) and unlinked
/// once bound: nothing on the host, nothing to clean up, and no mount to undo (an unmount
/// waits for an RCU grace period: up to several ms, measured). A sandbox without
/// `/etc/resolv.conf` (a profile whose `system_ro` leaves it out, a host without one) keeps
/// none: resolvers then ask 127.0.0.1 anyway.
fn resolv_conf() -> Result<(), StepError> {
    use nix::mount::{mount, MsFlags};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    const DST: &str = "/etc/resolv.conf";
    const TMP: &str = "/dev/.sandbox-run-resolv.conf";
    let fail = |e: i32| StepError::new(Step::NameService, e);
    match std::fs::symlink_metadata(DST) {
        Ok(m) if m.is_file() => {}
        _ => return Ok(()),
    }
    // Only the sandbox's own /dev, never a host directory.
    let dev = nix::sys::statfs::statfs("/dev").map_err(|e| fail(e as i32))?;
    if dev.filesystem_type() != nix::sys::statfs::TMPFS_MAGIC {
        return Err(fail(libc::EXDEV));
    }
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(TMP)
        .and_then(|mut f| f.write_all(RESOLV_CONF.as_bytes()))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO));
    let none: Option<&str> = None;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let bound = made.and_then(|()| {
        mount(Some(TMP), DST, none, MsFlags::MS_BIND, none)
            .and_then(|()| {
                mount(
                    none,
                    DST,
                    none,
                    MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | flags,
                    none,
                )
            })
            .map_err(|e| e as i32)
    });
    // The bind keeps the file; its name goes.
    let _ = std::fs::remove_file(TMP);
    bound.map_err(fail)
}

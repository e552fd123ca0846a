//! The attack probe: run INSIDE a sandbox by the end-to-end tests, it attempts one thing with raw
//! system calls and reports the kernel's answer. It never guesses: every `ok` is a call that
//! returned success, every `denied` carries the errno the kernel gave.
//!
//! ```text
//! probe ATTACK [ARGS...]
//! ```
//!
//! Output: one result line on stdout (on stderr for `write-bytes` and `write-lines 1`, whose
//! stdout is the data):
//!
//! ```text
//! ATTACK: ok [DETAILS]
//! ATTACK: denied errno=N (NAME)
//! ATTACK: killed signal=N (NAME)      (int80-getpid, x32-getpid: the attempt runs in a child)
//! ATTACK: eof bytes=0                 (stdin), ATTACK: unset (getenv)
//! ATTACK: error MESSAGE               (usage or unexpected failure)
//! ```
//!
//! Some attacks print data lines after the result line (`list`, `status`, `fds`, `env`).
//!
//! Exit code: 0 the attempt succeeded; 1 the kernel refused it (errno, or a child killed by a
//! signal), or `stdin` read nothing, or `getenv` found the variable unset; 2 usage error or
//! unexpected failure. A probe that is itself killed (timeout, OOM) prints nothing and dies by
//! the signal.

use std::ffi::{CStr, CString};
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: probe ATTACK [ARGS...]

files:     read FILE | write FILE (appends one line) | list DIR | stat PATH | mkdir DIR
           unlink FILE | truncate FILE | exec PATH [ARGS...] | symlink-read LINK
           open-write PATH | write-proc-sys PATH VALUE
           replace-with-symlink PATH TARGET (a directory is renamed to PATH.replaced first)
network:   tcp-connect HOST:PORT | tcp-bind PORT | unix-connect PATH
           abstract-connect NAME | udp-send HOST:PORT
           tcp-loopback IP PORT (bind IP:PORT, 0 = ephemeral; listen; connect to itself; echo)
processes: kill PID [SIG] | ptrace-attach PID | ptrace-traceme
kernel:    unshare-user | clone-newuser | clone3 | mount-tmpfs DIR | io-uring | keyctl | bpf
           userfaultfd | perf-event-open | int80-getpid | x32-getpid | personality-norandom
           tiocsti FD [HIGHBITS]
terminal:  tty [WAIT_MS] [sleep] (as a command that wants the caller's keystrokes: print isatty
           of fds 0-2, the window size and a coloured word; read fds 1 and 2 (what is there,
           then what comes within WAIT_MS after the line `waiting`); turn echo off on both;
           TIOCSTI on fd 1; `done`; then sleep for ever when asked)
           winch SECS (print the window size, `waiting-winch`, the size after a SIGWINCH)
boundary:  copy FROM TO | chmod PATH MODE | fchmod PATH MODE | fchmodat2 PATH MODE
           creat PATH MODE | open-creat PATH MODE | tmpfile-link DIR PATH MODE
           openat2-creat PATH MODE | mknod-reg PATH MODE | setxattr PATH NAME VALUE
           file-cap PATH | io-setup | mptcp-connect HOST:PORT | tcp-fastopen HOST:PORT
           tcp-fastopen-connect HOST:PORT | listen-autobind | vsock-bind | raw-socket
           packet-socket                                  (MODE in octal)
state:     status | fds | read-fd N | stdin | env | getenv NAME | hostname | whoami | pid
behaviour: sleep SECS | fork-daemon SECS [FILE] | ignore-term-sleep SECS | spin SECS
           alloc MIB | fork-bomb N | write-bytes N
           write-lines FD N (N numbered lines of 16 bytes to fd 1 or 2; the result line goes to
           the other one)
oom:       alloc-child MIB (a child allocates, we wait and exit 0) | fill-tmp MIB (tmpfs pages,
           written by a process that stays small)
data:      args [ARGS...] | stdin-hex | read-hex FILE  (each argument / all of stdin / the file,
           one hex line each, after the result line)
per-user:  inotify-exhaust SECS | sigqueue-exhaust SECS  (take all, print `exhausted
           count=N errno=E`, hold them SECS)

prints `ATTACK: ok ...`, `ATTACK: denied errno=N (NAME)` or `ATTACK: killed signal=N (NAME)`;
exits 0 when the attempt succeeded, 1 when the kernel refused it, 2 on a usage error.";

/// Why an attempt did not succeed.
enum Fail {
    /// The kernel said no.
    Errno(i32),
    /// The attempt (in a child) was killed by this signal.
    Killed(i32),
    /// Nothing to read (`stdin`) / not set (`getenv`): a refusal without an errno.
    Nothing(&'static str),
    /// Bad arguments.
    Usage(String),
    /// Something the probe did not expect.
    Error(String),
}

/// Success with an optional detail for the result line, and optional data lines after it.
struct Done {
    detail: String,
    lines: Vec<String>,
}

type Outcome = Result<Done, Fail>;

fn ok() -> Outcome {
    Ok(Done {
        detail: String::new(),
        lines: Vec::new(),
    })
}

fn ok_with(detail: String) -> Outcome {
    Ok(Done {
        detail,
        lines: Vec::new(),
    })
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The kernel's answer to a raw call returning -1 on failure.
fn check(rc: libc::c_long) -> Result<libc::c_long, Fail> {
    if rc < 0 {
        Err(Fail::Errno(errno()))
    } else {
        Ok(rc)
    }
}

fn check_i(rc: libc::c_int) -> Result<libc::c_int, Fail> {
    check(rc as libc::c_long).map(|r| r as libc::c_int)
}

fn usage(msg: &str) -> Fail {
    Fail::Usage(msg.to_string())
}

fn arg<'a>(args: &'a [String], i: usize, what: &str) -> Result<&'a str, Fail> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| usage(&format!("missing {what}")))
}

fn num<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, Fail> {
    let s = arg(args, i, what)?;
    s.parse()
        .map_err(|_| usage(&format!("{what}: not a number: {s}")))
}

fn cpath(s: &str) -> Result<CString, Fail> {
    CString::new(s).map_err(|_| usage("argument contains a NUL byte"))
}

fn close(fd: libc::c_int) {
    // SAFETY: closing an fd we opened.
    unsafe { libc::close(fd) };
}

fn open(path: &str, flags: libc::c_int) -> Result<libc::c_int, Fail> {
    let p = cpath(path)?;
    // SAFETY: a valid C string; the mode is used only with O_CREAT.
    check_i(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) })
}

/// Reads `fd` to EOF; returns the byte count.
fn read_all(fd: libc::c_int) -> Result<usize, Fail> {
    let mut buf = [0u8; 65536];
    let mut total = 0;
    loop {
        // SAFETY: buf is a valid writable buffer of its length.
        let n =
            check(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } as libc::c_long)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as usize;
    }
}

fn write_all(fd: libc::c_int, mut data: &[u8]) -> Result<usize, Fail> {
    let total = data.len();
    while !data.is_empty() {
        // SAFETY: data is a valid readable buffer of its length.
        let n =
            check(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) } as libc::c_long)?;
        data = &data[n as usize..];
    }
    Ok(total)
}

fn secs(args: &[String], i: usize) -> Result<Duration, Fail> {
    let s: f64 = num(args, i, "SECS")?;
    if !(0.0..=86400.0).contains(&s) {
        return Err(usage("SECS must be between 0 and 86400"));
    }
    Ok(Duration::from_secs_f64(s))
}

fn sleep_for(d: Duration) {
    let deadline = Instant::now() + d;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left);
    }
}

// ---------------------------------------------------------------------------------------------
// files

fn read_file(args: &[String]) -> Outcome {
    let fd = open(arg(args, 0, "FILE")?, libc::O_RDONLY)?;
    let n = read_all(fd);
    close(fd);
    ok_with(format!("bytes={}", n?))
}

/// `read-unhex HEX`: `read` of the path whose bytes are HEX (a name the gate would refuse on
/// the command line, control characters included).
fn read_unhex(args: &[String]) -> Outcome {
    let h = arg(args, 0, "HEX")?;
    let bytes = (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| usage("HEX: not hex"))?;
    let path = CString::new(bytes).map_err(|_| usage("HEX: a NUL"))?;
    // SAFETY: a valid C string.
    let fd = check_i(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    let n = read_all(fd);
    close(fd);
    ok_with(format!("bytes={}", n?))
}

fn write_file(args: &[String]) -> Outcome {
    // Appends, never truncates: a sandbox that fails must not make the probe destroy data.
    let fd = open(
        arg(args, 0, "FILE")?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
    )?;
    let n = write_all(fd, b"sandbox-run probe\n");
    close(fd);
    ok_with(format!("bytes={}", n?))
}

fn list(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "DIR")?)?;
    // SAFETY: a valid C string.
    let dir = unsafe { libc::opendir(p.as_ptr()) };
    if dir.is_null() {
        return Err(Fail::Errno(errno()));
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: dir is an open DIR*; the entry is valid until the next readdir.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        let name = name.to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    // SAFETY: dir is open.
    unsafe { libc::closedir(dir) };
    names.sort();
    Ok(Done {
        detail: format!("entries={}", names.len()),
        lines: names,
    })
}

fn stat(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and output buffer.
    check_i(unsafe { libc::lstat(p.as_ptr(), &mut st) })?;
    ok_with(format!(
        "mode={:o} size={} uid={} gid={}",
        st.st_mode, st.st_size, st.st_uid, st.st_gid
    ))
}

fn mkdir(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "DIR")?)?;
    // SAFETY: a valid C string.
    check_i(unsafe { libc::mkdir(p.as_ptr(), 0o755) })?;
    ok()
}

fn unlink(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "FILE")?)?;
    // SAFETY: a valid C string.
    check_i(unsafe { libc::unlink(p.as_ptr()) })?;
    ok()
}

fn truncate(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "FILE")?)?;
    // SAFETY: a valid C string.
    check_i(unsafe { libc::truncate(p.as_ptr(), 0) })?;
    ok()
}

fn symlink_read(args: &[String]) -> Outcome {
    let link = arg(args, 0, "LINK")?;
    let target = std::fs::read_link(link)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "?".into());
    let fd = open(link, libc::O_RDONLY)?;
    let n = read_all(fd);
    close(fd);
    ok_with(format!("bytes={} target={target}", n?))
}

/// Forks; the child `execv`s; a close-on-exec pipe tells the parent whether the exec itself
/// succeeded (EOF) or failed (the errno). The parent then waits and reports the exit status.
fn exec(args: &[String]) -> Outcome {
    let path = cpath(arg(args, 0, "PATH")?)?;
    let argv: Vec<CString> = args.iter().map(|a| cpath(a)).collect::<Result<_, _>>()?;
    let mut argp: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    check_i(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    flush();
    // SAFETY: the child only calls execv, write and _exit on prepared data.
    let pid = check_i(unsafe { libc::fork() })?;
    if pid == 0 {
        // SAFETY: prepared argv; on failure, report errno and exit.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execv(path.as_ptr(), argp.as_ptr());
            let e = errno().to_ne_bytes();
            libc::write(fds[1], e.as_ptr().cast(), 4);
            libc::_exit(127);
        }
    }
    close(fds[1]);
    let mut e = [0u8; 4];
    // SAFETY: e is a valid 4-byte buffer.
    let n = unsafe { libc::read(fds[0], e.as_mut_ptr().cast(), 4) };
    close(fds[0]);
    let status = wait(pid)?;
    if n == 4 {
        return Err(Fail::Errno(i32::from_ne_bytes(e)));
    }
    ok_with(status_text(status))
}

fn wait(pid: libc::pid_t) -> Result<libc::c_int, Fail> {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        if errno() != libc::EINTR {
            return Err(Fail::Error(format!("waitpid: errno {}", errno())));
        }
    }
}

fn status_text(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit={}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        format!("signal={s} ({})", signal_name(s))
    } else {
        format!("status={status}")
    }
}

fn open_write(args: &[String]) -> Outcome {
    let fd = open(arg(args, 0, "PATH")?, libc::O_WRONLY)?;
    close(fd);
    ok()
}

fn write_proc_sys(args: &[String]) -> Outcome {
    let value = arg(args, 1, "VALUE")?;
    let fd = open(arg(args, 0, "PATH")?, libc::O_WRONLY)?;
    let n = write_all(fd, value.as_bytes());
    close(fd);
    ok_with(format!("bytes={}", n?))
}

// ---------------------------------------------------------------------------------------------
// network

fn resolve(hostport: &str) -> Result<SocketAddr, Fail> {
    if let Ok(a) = hostport.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = hostport
        .to_socket_addrs()
        .map_err(|e| Fail::Error(format!("cannot resolve {hostport}: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| Fail::Error(format!("{hostport} resolves to nothing")))
}

/// A `sockaddr_storage` and its length for an IP socket address.
fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn family(a: &SocketAddr) -> libc::c_int {
    if a.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    }
}

/// Non-blocking connect, at most 5 s: an unanswered SYN reports ETIMEDOUT.
fn connect_fd(
    fd: libc::c_int,
    ss: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Result<(), Fail> {
    // SAFETY: ss holds a valid address of length len.
    let rc = unsafe { libc::connect(fd, ss as *const _ as *const libc::sockaddr, len) };
    if rc == 0 {
        return Ok(());
    }
    if errno() != libc::EINPROGRESS {
        return Err(Fail::Errno(errno()));
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = check_i(unsafe { libc::poll(&mut pfd, 1, 5000) })?;
    if n == 0 {
        return Err(Fail::Errno(libc::ETIMEDOUT));
    }
    let mut err: libc::c_int = 0;
    let mut l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one int.
    check_i(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut l,
        )
    })?;
    if err != 0 {
        return Err(Fail::Errno(err));
    }
    Ok(())
}

fn tcp_connect(args: &[String]) -> Outcome {
    let a = resolve(arg(args, 0, "HOST:PORT")?)?;
    let (ss, len) = sockaddr(&a);
    // SAFETY: plain socket call.
    let fd = check_i(unsafe {
        libc::socket(
            family(&a),
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    let r = connect_fd(fd, &ss, len);
    close(fd);
    r?;
    ok_with(format!("addr={a}"))
}

fn tcp_bind(args: &[String]) -> Outcome {
    let port: u16 = num(args, 0, "PORT")?;
    let a = SocketAddr::from(([0, 0, 0, 0], port));
    let (ss, len) = sockaddr(&a);
    // SAFETY: plain socket calls on our fd; ss holds a valid address.
    unsafe {
        let fd = check_i(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let r = check_i(libc::bind(
            fd,
            &ss as *const _ as *const libc::sockaddr,
            len,
        ))
        .and_then(|_| check_i(libc::listen(fd, 1)));
        close(fd);
        r?;
    }
    ok_with(format!("port={port}"))
}

/// `tcp-loopback IP PORT`: a TCP server on IP:PORT (0: an ephemeral port), which the probe
/// connects to and exchanges bytes with both ways: what a test suite's server does. The errno
/// of the first step that fails (bind, listen, connect, accept, read, write) is the verdict.
fn tcp_loopback(args: &[String]) -> Outcome {
    use std::io::{Read, Write};
    let ip: std::net::IpAddr = arg(args, 0, "IP")?
        .parse()
        .map_err(|e| usage(&format!("IP: {e}")))?;
    let port: u16 = num(args, 1, "PORT")?;
    let io = |e: std::io::Error| match e.raw_os_error() {
        Some(n) => Fail::Errno(n),
        None => Fail::Error(e.to_string()),
    };
    let l = std::net::TcpListener::bind(SocketAddr::new(ip, port)).map_err(io)?;
    let at = l.local_addr().map_err(io)?;
    let mut c = std::net::TcpStream::connect_timeout(&at, Duration::from_secs(5)).map_err(io)?;
    let (mut s, _) = l.accept().map_err(io)?;
    for x in [&s, &c] {
        x.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(io)?;
    }
    c.write_all(b"ping").map_err(io)?;
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).map_err(io)?;
    s.write_all(b"pong").map_err(io)?;
    let mut back = [0u8; 4];
    c.read_exact(&mut back).map_err(io)?;
    if (&buf, &back) != (b"ping", b"pong") {
        return Err(Fail::Error(format!("echo: got {buf:?} and {back:?}")));
    }
    ok_with(format!("port={} exchanged=ping/pong", at.port()))
}

fn unix_addr(name: &[u8], abstract_ns: bool) -> Result<(libc::sockaddr_un, libc::socklen_t), Fail> {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let start = usize::from(abstract_ns);
    if start + name.len() >= sun.sun_path.len() {
        return Err(usage("socket name too long"));
    }
    for (i, b) in name.iter().enumerate() {
        sun.sun_path[start + i] = *b as libc::c_char;
    }
    let base = std::mem::size_of::<libc::sa_family_t>();
    // A path is NUL-terminated; an abstract name is exactly its bytes after the leading NUL.
    let len = base + start + name.len() + usize::from(!abstract_ns);
    Ok((sun, len as libc::socklen_t))
}

fn unix_connect(name: &str, abstract_ns: bool) -> Outcome {
    // A path longer than sun_path (108 bytes: a deep checkout's fixtures) is reached through
    // its directory, opened O_PATH: `/proc/self/fd/N/NAME`.
    let mut dir_fd = None;
    let short;
    let name = if !abstract_ns && name.len() >= 108 {
        let p = std::path::Path::new(name);
        let (Some(dir), Some(file)) = (p.parent(), p.file_name()) else {
            return Err(usage("socket path has no directory"));
        };
        let fd = open(&dir.to_string_lossy(), libc::O_PATH | libc::O_DIRECTORY)?;
        dir_fd = Some(fd);
        short = format!("/proc/self/fd/{fd}/{}", file.to_string_lossy());
        short.as_str()
    } else {
        name
    };
    let r = unix_connect_short(name, abstract_ns);
    if let Some(fd) = dir_fd {
        close(fd);
    }
    r
}

fn unix_connect_short(name: &str, abstract_ns: bool) -> Outcome {
    let (sun, len) = unix_addr(name.as_bytes(), abstract_ns)?;
    // SAFETY: plain socket calls; sun holds a valid address of length len.
    unsafe {
        let fd = check_i(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let r = check_i(libc::connect(
            fd,
            &sun as *const _ as *const libc::sockaddr,
            len,
        ));
        close(fd);
        r?;
    }
    ok()
}

fn udp_send(args: &[String]) -> Outcome {
    let a = resolve(arg(args, 0, "HOST:PORT")?)?;
    let (ss, len) = sockaddr(&a);
    let msg = b"sandbox-run probe\n";
    // SAFETY: plain socket calls; ss holds a valid address; msg is a valid buffer.
    unsafe {
        let fd = check_i(libc::socket(
            family(&a),
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let r = check(libc::sendto(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            &ss as *const _ as *const libc::sockaddr,
            len,
        ) as libc::c_long);
        close(fd);
        r?;
    }
    ok_with(format!("addr={a} bytes={}", msg.len()))
}

// ---------------------------------------------------------------------------------------------
// processes

fn kill(args: &[String]) -> Outcome {
    let pid: libc::pid_t = num(args, 0, "PID")?;
    let sig: libc::c_int = if args.len() > 1 {
        num(args, 1, "SIG")?
    } else {
        0
    };
    // SAFETY: integer arguments.
    check_i(unsafe { libc::kill(pid, sig) })?;
    ok_with(format!("pid={pid} sig={sig}"))
}

fn ptrace_attach(args: &[String]) -> Outcome {
    let pid: libc::pid_t = num(args, 0, "PID")?;
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH takes no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) })?;
    // Attached: wait for the attach stop, then let go.
    let mut status = 0;
    // SAFETY: waiting for our tracee.
    unsafe {
        libc::waitpid(pid, &mut status, libc::__WALL);
        libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
    }
    ok_with(format!("pid={pid}"))
}

fn ptrace_traceme() -> Outcome {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_TRACEME takes no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, null, null) })?;
    ok()
}

// ---------------------------------------------------------------------------------------------
// kernel attack surface

fn unshare_user() -> Outcome {
    // SAFETY: integer argument; the probe is single-threaded.
    check_i(unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
    ok()
}

fn clone_newuser() -> Outcome {
    flush();
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: a fork-like clone (no CLONE_VM, no new stack); the child only calls _exit.
    let pid =
        check(unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) })?;
    if pid == 0 {
        // SAFETY: ends the child.
        unsafe { libc::_exit(0) };
    }
    let status = wait(pid as libc::pid_t)?;
    ok_with(status_text(status))
}

fn clone3() -> Outcome {
    flush();
    // SAFETY: all-zero is a valid clone_args.
    let mut ca: libc::clone_args = unsafe { std::mem::zeroed() };
    ca.exit_signal = libc::SIGCHLD as u64;
    // SAFETY: a fork-like clone3; the child only calls _exit.
    let pid = check(unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut ca as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    })?;
    if pid == 0 {
        // SAFETY: ends the child.
        unsafe { libc::_exit(0) };
    }
    let status = wait(pid as libc::pid_t)?;
    ok_with(status_text(status))
}

fn mount_tmpfs(args: &[String]) -> Outcome {
    let dir = cpath(arg(args, 0, "DIR")?)?;
    // SAFETY: valid C strings.
    check_i(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=1m".as_ptr().cast(),
        )
    })?;
    // Succeeded: do not leave it behind.
    // SAFETY: a valid C string.
    unsafe { libc::umount2(dir.as_ptr(), libc::MNT_DETACH) };
    ok()
}

fn io_uring() -> Outcome {
    let mut params = [0u8; 120]; // struct io_uring_params

    // SAFETY: the kernel writes at most sizeof(struct io_uring_params).
    let fd =
        check(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1usize, params.as_mut_ptr()) })?;
    close(fd as libc::c_int);
    ok()
}

fn keyctl() -> Outcome {
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create=1)
    // SAFETY: integer arguments.
    let id = check(unsafe { libc::syscall(libc::SYS_keyctl, 0usize, -2isize, 1usize) })?;
    ok_with(format!("keyring={id}"))
}

fn bpf() -> Outcome {
    // BPF_MAP_CREATE of a one-entry array map.
    let mut attr = [0u32; 32];
    attr[0] = 2; // BPF_MAP_TYPE_ARRAY
    attr[1] = 4; // key_size
    attr[2] = 4; // value_size
    attr[3] = 1; // max_entries
                 // SAFETY: attr is a valid `union bpf_attr` prefix of the size given.
    let fd = check(unsafe { libc::syscall(libc::SYS_bpf, 0usize, attr.as_mut_ptr(), 128usize) })?;
    close(fd as libc::c_int);
    ok()
}

fn userfaultfd() -> Outcome {
    // UFFD_USER_MODE_ONLY (1): the variant unprivileged users may have.
    let flags = (libc::O_CLOEXEC | 1) as libc::c_ulong;
    // SAFETY: integer argument.
    let fd = check(unsafe { libc::syscall(libc::SYS_userfaultfd, flags) })?;
    close(fd as libc::c_int);
    ok()
}

fn perf_event_open() -> Outcome {
    let mut attr = [0u8; 64];
    attr[0] = 1; // PERF_TYPE_SOFTWARE
    attr[4] = 64; // size: PERF_ATTR_SIZE_VER0
    attr[8] = 1; // PERF_COUNT_SW_TASK_CLOCK
    attr[40] = 1 | 32 | 64; // disabled, exclude_kernel, exclude_hv

    // SAFETY: attr is a valid perf_event_attr of the size it declares.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0isize,
            -1isize,
            -1isize,
            0usize,
        )
    })?;
    close(fd as libc::c_int);
    ok()
}

/// Runs `attempt` in a forked child, which exits with 0 (it returned this pid), the errno, or
/// dies by a signal; the parent reports which.
fn in_child(attempt: fn() -> libc::c_long) -> Outcome {
    flush();
    // SAFETY: the child only makes raw system calls and _exits.
    let pid = check_i(unsafe { libc::fork() })?;
    if pid == 0 {
        let r = attempt();
        // SAFETY: getpid takes no arguments; _exit ends the child.
        unsafe {
            let code = if r == libc::getpid() as libc::c_long {
                0
            } else if (-4095..0).contains(&r) {
                -r as libc::c_int
            } else {
                255
            };
            libc::_exit(code);
        }
    }
    let status = wait(pid)?;
    if libc::WIFSIGNALED(status) {
        return Err(Fail::Killed(libc::WTERMSIG(status)));
    }
    match libc::WEXITSTATUS(status) {
        0 => ok_with("returned our pid".into()),
        255 => Err(Fail::Error(
            "the call returned something that is not our pid".into(),
        )),
        e => Err(Fail::Errno(e)),
    }
}

#[cfg(target_arch = "x86_64")]
fn int80_getpid_raw() -> libc::c_long {
    let ret: i32;
    // SAFETY: i386 getpid (20) through the legacy gate: touches no memory; the kernel may
    // clobber r8-r11 on this path.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("eax") 20i32 => ret,
            lateout("r8") _, lateout("r9") _, lateout("r10") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret as libc::c_long
}

#[cfg(target_arch = "x86_64")]
fn x32_getpid_raw() -> libc::c_long {
    let ret: libc::c_long;
    // SAFETY: the x32 getpid (39 | __X32_SYSCALL_BIT) via `syscall`: no memory is touched; the
    // instruction clobbers rcx and r11. Raw, so the kernel's -errno comes back as is.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") 39 | 0x4000_0000 as libc::c_long => ret,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn int80_getpid() -> Outcome {
    #[cfg(target_arch = "x86_64")]
    {
        in_child(int80_getpid_raw)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Err(usage("int80-getpid exists only on x86_64"))
    }
}

fn x32_getpid() -> Outcome {
    #[cfg(target_arch = "x86_64")]
    {
        in_child(x32_getpid_raw)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Err(usage("x32-getpid exists only on x86_64"))
    }
}

fn personality_norandom() -> Outcome {
    // SAFETY: integer argument.
    let old = unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) };
    check_i(old)?;
    ok_with(format!("previous={old:#x}"))
}

fn tiocsti(args: &[String]) -> Outcome {
    let fd: libc::c_int = num(args, 0, "FD")?;
    let high = match args.get(1).map(String::as_str) {
        None => false,
        Some("HIGHBITS" | "highbits" | "high" | "1") => true,
        Some(other) => return Err(usage(&format!("HIGHBITS: unexpected {other}"))),
    };
    let request: u64 = 0x5412 | if high { 1 << 32 } else { 0 };
    let c = b'#';
    // SAFETY: TIOCSTI reads one byte from a valid pointer.
    check(unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            fd as libc::c_long,
            request,
            &c as *const u8,
        )
    })?;
    ok_with(format!("request={request:#x}"))
}

/// One data line of `tty` and `winch`, written at once (stdout is a terminal or a pipe).
fn say(line: &str) {
    println!("{line}");
    flush();
}

/// The window size of fd 1, `ROWSxCOLS`.
fn winsize() -> String {
    // SAFETY: TIOCGWINSZ into a winsize we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    match unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } {
        0 => format!("{}x{}", ws.ws_row, ws.ws_col),
        _ => format!("none errno={}", errno_name(errno())),
    }
}

/// What fd `fd` gives within `ms` milliseconds (poll first: never blocks, never changes the
/// open file's flags, which the caller's own processes may share).
fn read_within(fd: libc::c_int, ms: i32) -> String {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own; read into a buffer of the size given.
    unsafe {
        if libc::poll(&mut p, 1, ms) <= 0 || p.revents & libc::POLLIN == 0 {
            return "nothing".into();
        }
        let mut buf = [0u8; 256];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n < 0 {
            return format!("denied errno={}", errno_name(errno()));
        }
        format!("{:?}", String::from_utf8_lossy(&buf[..n as usize]))
    }
}

fn tty(args: &[String]) -> Outcome {
    let wait: i32 = if args.is_empty() {
        2000
    } else {
        num(args, 0, "WAIT_MS")?
    };
    // SAFETY: isatty only queries the fds.
    let isatty = |fd| unsafe { libc::isatty(fd) };
    say(&format!(
        "isatty 0={} 1={} 2={}",
        isatty(0),
        isatty(1),
        isatty(2)
    ));
    say(&format!("winsize {}", winsize()));
    say("colour \x1b[31mred\x1b[0m");
    for fd in [1, 2] {
        say(&format!("typed-ahead fd{fd}: {}", read_within(fd, 0)));
    }
    say("waiting");
    let t = Instant::now();
    for fd in [1, 2] {
        let left = wait - t.elapsed().as_millis().min(wait as u128) as i32;
        say(&format!("typed-late fd{fd}: {}", read_within(fd, left)));
    }
    for fd in [1, 2] {
        // SAFETY: tcgetattr/tcsetattr with a termios we own.
        let r = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) == 0 {
                t.c_lflag &= !(libc::ECHO | libc::ICANON);
                libc::tcsetattr(fd, libc::TCSANOW, &t)
            } else {
                -1
            }
        };
        let r = if r == 0 {
            "ok".to_string()
        } else {
            format!("denied errno={}", errno_name(errno()))
        };
        say(&format!("echo-off fd{fd}: {r}"));
    }
    let c = b'#';
    // SAFETY: TIOCSTI reads one byte from a valid pointer.
    let r = unsafe { libc::ioctl(1, libc::TIOCSTI, &c as *const u8) };
    let r = if r == 0 {
        "ok".to_string()
    } else {
        format!("denied errno={}", errno_name(errno()))
    };
    say(&format!("tiocsti fd1: {r}"));
    say("done");
    if args.get(1).map(String::as_str) == Some("sleep") {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    ok()
}

static WINCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_winch(_: libc::c_int) {
    WINCHED.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn winch(args: &[String]) -> Outcome {
    let secs: u64 = num(args, 0, "SECS")?;
    // SAFETY: a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGWINCH, on_winch as *const () as libc::sighandler_t) };
    say(&format!("winsize {}", winsize()));
    say("waiting-winch");
    let t = Instant::now();
    while !WINCHED.load(std::sync::atomic::Ordering::SeqCst) {
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(Fail::Nothing("no SIGWINCH"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ok_with(format!("winsize {}", winsize()))
}

// ---------------------------------------------------------------------------------------------
// state

fn status() -> Outcome {
    let text = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Fail::Error(format!("/proc/self/status: {e}")))?;
    let keys = [
        "CapEff",
        "CapBnd",
        "CapPrm",
        "CapInh",
        "CapAmb",
        "NoNewPrivs",
        "Seccomp",
        "Seccomp_filters",
        "SigIgn",
        "SigBlk",
        "Uid",
        "Gid",
    ];
    let lines = text
        .lines()
        .filter(|l| keys.iter().any(|k| l.split(':').next() == Some(k)))
        .map(str::to_string)
        .collect();
    Ok(Done {
        detail: String::new(),
        lines,
    })
}

fn fds() -> Outcome {
    // SAFETY: a valid C string.
    let dir = unsafe { libc::opendir(c"/proc/self/fd".as_ptr()) };
    if dir.is_null() {
        return Err(Fail::Errno(errno()));
    }
    // SAFETY: dir is open.
    let own = unsafe { libc::dirfd(dir) };
    let mut found = Vec::new();
    loop {
        // SAFETY: dir is open; the entry is valid until the next readdir.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_string_lossy();
        if let Ok(fd) = name.parse::<libc::c_int>() {
            if fd > 2 && fd != own {
                found.push(fd);
            }
        }
    }
    // SAFETY: dir is open.
    unsafe { libc::closedir(dir) };
    found.sort_unstable();
    let lines = found
        .iter()
        .map(|fd| {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|t| t.display().to_string())
                .unwrap_or_else(|e| format!("? ({e})"));
            format!("{fd} -> {target}")
        })
        .collect();
    Ok(Done {
        detail: format!("count={}", found.len()),
        lines,
    })
}

fn read_fd(args: &[String]) -> Outcome {
    let fd: libc::c_int = num(args, 0, "N")?;
    let mut buf = [0u8; 65536];
    // SAFETY: buf is a valid writable buffer.
    let n = check(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } as libc::c_long)?;
    ok_with(format!("bytes={n}"))
}

fn stdin() -> Outcome {
    let mut buf = [0u8; 65536];
    // SAFETY: buf is a valid writable buffer.
    let n = check(unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) } as libc::c_long)?;
    if n == 0 {
        return Err(Fail::Nothing("eof bytes=0"));
    }
    ok_with(format!("bytes={n}"))
}

// data: what reached the workload, byte for byte (hex, so nothing needs escaping)

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn args_hex(args: &[String]) -> Outcome {
    let raw: Vec<Vec<u8>> = std::env::args_os()
        .skip(2)
        .map(std::os::unix::ffi::OsStringExt::into_vec)
        .collect();
    debug_assert_eq!(raw.len(), args.len());
    Ok(Done {
        detail: format!("count={}", raw.len()),
        lines: raw.iter().map(|a| hex(a)).collect(),
    })
}

fn stdin_hex() -> Outcome {
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        // SAFETY: buf is a valid writable buffer.
        let n =
            check(unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) } as libc::c_long)?;
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n as usize]);
    }
    Ok(Done {
        detail: format!("bytes={}", all.len()),
        lines: vec![hex(&all)],
    })
}

fn read_hex(args: &[String]) -> Outcome {
    let data = std::fs::read(arg(args, 0, "FILE")?).map_err(|e| match e.raw_os_error() {
        Some(n) => Fail::Errno(n),
        None => Fail::Error(e.to_string()),
    })?;
    Ok(Done {
        detail: format!("bytes={}", data.len()),
        lines: vec![hex(&data)],
    })
}

fn env() -> Outcome {
    let mut names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(Done {
        detail: format!("count={}", names.len()),
        lines: names,
    })
}

fn getenv(args: &[String]) -> Outcome {
    match std::env::var_os(arg(args, 0, "NAME")?) {
        Some(v) => ok_with(v.to_string_lossy().into_owned()),
        None => Err(Fail::Nothing("unset")),
    }
}

fn hostname() -> Outcome {
    // SAFETY: all-zero is a valid utsname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid output buffer.
    check_i(unsafe { libc::uname(&mut u) })?;
    // SAFETY: nodename is NUL-terminated.
    let name = unsafe { CStr::from_ptr(u.nodename.as_ptr()) };
    ok_with(name.to_string_lossy().into_owned())
}

fn whoami() -> Outcome {
    // SAFETY: these calls take no arguments and cannot fail.
    let (uid, gid, euid, egid) = unsafe {
        (
            libc::getuid(),
            libc::getgid(),
            libc::geteuid(),
            libc::getegid(),
        )
    };
    ok_with(format!("uid={uid} gid={gid} euid={euid} egid={egid}"))
}

fn pid() -> Outcome {
    // SAFETY: no arguments.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    ok_with(format!("pid={pid} ppid={ppid}"))
}

// ---------------------------------------------------------------------------------------------
// behaviour (for the supervisor's tests: timeouts, kills, limits, output)

fn sleep(args: &[String]) -> Outcome {
    sleep_for(secs(args, 0)?);
    ok()
}

/// Double fork: the grandchild starts a new session, drops its stdio (as a daemon does),
/// sleeps, then appends "alive" to FILE when one is given: if FILE exists afterwards, the
/// daemon outlived the sandbox. The probe exits at once.
fn fork_daemon(args: &[String]) -> Outcome {
    let d = secs(args, 0)?;
    let file = match args.get(1) {
        Some(f) => Some(cpath(f)?),
        None => None,
    };
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array.
    check_i(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    flush();
    // SAFETY: the children only make raw calls (and sleep) before _exit.
    let child = check_i(unsafe { libc::fork() })?;
    if child == 0 {
        // SAFETY: raw calls on prepared data.
        unsafe {
            let grandchild = libc::fork();
            if grandchild != 0 {
                let g = grandchild.to_ne_bytes();
                libc::write(fds[1], g.as_ptr().cast(), 4);
                libc::_exit(if grandchild > 0 { 0 } else { 1 });
            }
            libc::setsid();
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 0);
                libc::dup2(null, 1);
                libc::dup2(null, 2);
            }
            let ts = libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            let mut rem = ts;
            while libc::nanosleep(&rem, &mut rem) != 0 && errno() == libc::EINTR {}
            if let Some(f) = &file {
                let fd = libc::open(
                    f.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
                    0o644 as libc::c_uint,
                );
                if fd >= 0 {
                    libc::write(fd, b"alive\n".as_ptr().cast(), 6);
                }
            }
            libc::_exit(0);
        }
    }
    close(fds[1]);
    let mut g = [0u8; 4];
    // SAFETY: g is a valid 4-byte buffer.
    let n = unsafe { libc::read(fds[0], g.as_mut_ptr().cast(), 4) };
    close(fds[0]);
    let status = wait(child)?;
    let grandchild = i32::from_ne_bytes(g);
    if n != 4 || grandchild < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(Fail::Error(format!(
            "double fork failed ({})",
            status_text(status)
        )));
    }
    ok_with(format!("daemon={grandchild}"))
}

fn ignore_term_sleep(args: &[String]) -> Outcome {
    let d = secs(args, 0)?;
    // SAFETY: setting a disposition to SIG_IGN.
    if unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(Fail::Errno(errno()));
    }
    sleep_for(d);
    ok()
}

/// `refuse-flood N`: `N` calls the seccomp policy refuses (`ptrace(PTRACE_TRACEME)`), as
/// fast as they go; counts the errnos they got (`eperm=`, `enosys=`, `other=`).
fn refuse_flood(args: &[String]) -> Outcome {
    let n: u64 = num(args, 0, "N")?;
    let (mut eperm, mut enosys, mut other) = (0u64, 0u64, 0u64);
    for _ in 0..n {
        // SAFETY: PTRACE_TRACEME takes no pointers.
        let rc = unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) };
        match (rc, errno()) {
            (r, libc::EPERM) if r < 0 => eperm += 1,
            (r, libc::ENOSYS) if r < 0 => enosys += 1,
            _ => other += 1,
        }
    }
    ok_with(format!("eperm={eperm} enosys={enosys} other={other}"))
}

fn spin(args: &[String]) -> Outcome {
    let d = secs(args, 0)?;
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < d {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    ok_with(format!("spun={:.1}s", start.elapsed().as_secs_f64()))
}

fn alloc(args: &[String]) -> Outcome {
    let mib: usize = num(args, 0, "MIB")?;
    let len = mib
        .checked_mul(1 << 20)
        .ok_or_else(|| usage("MIB too large"))?;
    if len == 0 {
        return ok_with("mib=0".into());
    }
    // SAFETY: an anonymous private mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Fail::Errno(errno()));
    }
    let base = p as *mut u8;
    let mut off = 0;
    while off < len {
        // SAFETY: off < len, inside the mapping; writing touches (commits) the page.
        unsafe { std::ptr::write_volatile(base.add(off), 1) };
        off += 4096;
    }
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(p, len) };
    ok_with(format!("mib={mib}"))
}

fn fork_bomb(args: &[String]) -> Outcome {
    let n: usize = num(args, 0, "N")?;
    if n > 100_000 {
        return Err(usage("N is at most 100000"));
    }
    flush();
    // SAFETY: no arguments.
    let me = unsafe { libc::getpid() };
    let mut pids = Vec::with_capacity(n);
    let mut failed = None;
    for _ in 0..n {
        // SAFETY: the children only call prctl, pause and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: raw calls; the child waits to be killed (or its parent to die).
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != me {
                    libc::_exit(0);
                }
                let ts = libc::timespec {
                    tv_sec: 60,
                    tv_nsec: 0,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
                libc::_exit(0);
            }
        }
        if pid < 0 {
            failed = Some(errno());
            break;
        }
        pids.push(pid);
    }
    for &pid in &pids {
        // SAFETY: our own children.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    for &pid in &pids {
        let _ = wait(pid);
    }
    match failed {
        None => ok_with(format!("forked={n}")),
        Some(e) => {
            println!(
                "fork-bomb: denied errno={e} ({}) forked={} of {n}",
                errno_name(e),
                pids.len()
            );
            flush();
            std::process::exit(1);
        }
    }
}

/// What a hostile workload leaves for the next host-side open of a repo path: `PATH` (a file,
/// or a directory moved aside to `PATH.replaced`) becomes a symlink to `TARGET`.
fn replace_with_symlink(args: &[String]) -> Outcome {
    let path = arg(args, 0, "PATH")?;
    let target = cpath(arg(args, 1, "TARGET")?)?;
    let p = cpath(path)?;
    // SAFETY: all-zero is a valid `stat`; lstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a writable stat.
    check_i(unsafe { libc::lstat(p.as_ptr(), &mut st) })?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let aside = format!("{path}.replaced");
        let c_aside = cpath(&aside)?;
        // SAFETY: valid C strings.
        match check_i(unsafe { libc::rename(p.as_ptr(), c_aside.as_ptr()) }) {
            // A directory of a copy-on-write layer's lower tree: move it as mv(1) does.
            Err(Fail::Errno(libc::EXDEV)) => {
                copy_tree(std::path::Path::new(path), std::path::Path::new(&aside))
                    .and_then(|()| std::fs::remove_dir_all(path))
                    .map_err(|e| Fail::Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
            }
            r => {
                r?;
            }
        }
    } else {
        // SAFETY: a valid C string.
        check_i(unsafe { libc::unlink(p.as_ptr()) })?;
    }
    // SAFETY: valid C strings.
    check_i(unsafe { libc::symlink(target.as_ptr(), p.as_ptr()) })?;
    ok()
}

/// `cp -a`, files and directories only.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        } else {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

fn write_bytes(args: &[String]) -> Outcome {
    let n: usize = num(args, 0, "N")?;
    let chunk = [b'x'; 65536];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        write_all(1, &chunk[..k])?;
        left -= k;
    }
    ok_with(format!("bytes={n}"))
}

/// `out-hex HEX`: the bytes HEX spells, to fd 1 in one write (a terminal's control sequences
/// included).
fn out_hex(args: &[String]) -> Outcome {
    let hex = args
        .first()
        .ok_or_else(|| Fail::Error("out-hex: HEX".into()))?;
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let bytes = bytes.ok_or_else(|| Fail::Error(format!("out-hex: not hex: {hex}")))?;
    write_all(1, &bytes)?;
    ok_with(format!("bytes={}", bytes.len()))
}

/// `write-lines FD N`: lines `000000000000000\n`, `000000000000001\n`, ... (16 bytes each) to
/// fd 1 or 2, 256 lines per write: a reader can tell a lost, repeated or reordered byte.
fn write_lines(args: &[String]) -> Outcome {
    let fd: libc::c_int = num(args, 0, "FD")?;
    if fd != 1 && fd != 2 {
        return Err(usage("FD must be 1 or 2"));
    }
    let n: u64 = num(args, 1, "N")?;
    let mut buf = Vec::with_capacity(256 * 16);
    let mut i = 0u64;
    while i < n {
        buf.clear();
        let end = n.min(i + 256);
        for k in i..end {
            let _ = writeln!(buf, "{k:015}");
        }
        write_all(fd, &buf)?;
        i = end;
    }
    ok_with(format!("lines={n}"))
}

// ---------------------------------------------------------------------------------------------
// The host boundary in seccomp: set-ID modes, file capabilities, legacy AIO, socket kinds that
// landlock's TCP rules do not see, TCP Fast Open, listen's autobind, vsock.

fn octal(args: &[String], i: usize, what: &str) -> Result<u32, Fail> {
    let s = arg(args, i, what)?;
    u32::from_str_radix(s, 8).map_err(|_| usage(&format!("{what}: not an octal mode: {s}")))
}

/// `copy FROM TO`: copies a file (created 0755, no special bits), e.g. a binary into the repo.
fn copy_file(args: &[String]) -> Outcome {
    let from = open(arg(args, 0, "FROM")?, libc::O_RDONLY)?;
    let to = cpath(arg(args, 1, "TO")?)?;
    // SAFETY: a valid C string; plain open with a mode.
    let fd = unsafe {
        libc::open(
            to.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o755 as libc::c_uint,
        )
    };
    let fd = check_i(fd).inspect_err(|_| close(from))?;
    let mut buf = [0u8; 65536];
    let mut total = 0usize;
    let r = loop {
        // SAFETY: buf is a valid writable buffer of its length.
        let n = unsafe { libc::read(from, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            break Err(Fail::Errno(errno()));
        }
        if n == 0 {
            break Ok(());
        }
        if let Err(e) = write_all(fd, &buf[..n as usize]) {
            break Err(e);
        }
        total += n as usize;
    };
    close(from);
    close(fd);
    r?;
    ok_with(format!("bytes={total}"))
}

/// `chmod PATH MODE`: the raw `fchmodat` (what glibc's `chmod` calls), MODE in octal.
fn chmod_path(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    // SAFETY: a valid C string.
    check(unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, p.as_ptr(), mode, 0) })?;
    ok_with(format!("mode={mode:o}"))
}

/// `fchmod PATH MODE`: open, then `fchmod` the fd.
fn fchmod_path(args: &[String]) -> Outcome {
    let fd = open(arg(args, 0, "PATH")?, libc::O_RDONLY)?;
    let mode = octal(args, 1, "MODE")?;
    // SAFETY: fchmod on our own fd.
    let r = check(unsafe { libc::syscall(libc::SYS_fchmod, fd, mode) });
    close(fd);
    r?;
    ok_with(format!("mode={mode:o}"))
}

/// `fchmodat2 PATH MODE`: the newer call (nr 452, with flags).
fn fchmodat2(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    // SAFETY: a valid C string; flags 0.
    check(unsafe { libc::syscall(452, libc::AT_FDCWD, p.as_ptr(), mode, 0) })?;
    ok_with(format!("mode={mode:o}"))
}

/// `creat PATH MODE`: the raw `creat` where the architecture has it, else `openat` with
/// `O_CREAT|O_WRONLY|O_TRUNC` (which is what `creat` means).
fn creat_path(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a valid C string.
    let fd = check(unsafe { libc::syscall(libc::SYS_creat, p.as_ptr(), mode) })?;
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: a valid C string.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    })?;
    close(fd as libc::c_int);
    ok_with(format!("mode={mode:o}"))
}

/// `open-creat PATH MODE`: raw `openat(O_CREAT|O_WRONLY|O_CLOEXEC)`.
fn open_creat(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    // SAFETY: a valid C string.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            mode,
        )
    })?;
    close(fd as libc::c_int);
    ok_with(format!("mode={mode:o}"))
}

/// `tmpfile-link DIR PATH MODE`: an unnamed `O_TMPFILE` file in DIR with MODE, then linked
/// in at PATH through /proc/self/fd.
fn tmpfile_link(args: &[String]) -> Outcome {
    let dir = cpath(arg(args, 0, "DIR")?)?;
    let path = cpath(arg(args, 1, "PATH")?)?;
    let mode = octal(args, 2, "MODE")?;
    // SAFETY: a valid C string.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            mode,
        )
    })? as libc::c_int;
    let proc_fd = cpath(&format!("/proc/self/fd/{fd}"))?;
    // SAFETY: valid C strings.
    let r = check_i(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_fd.as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    });
    close(fd);
    r?;
    ok_with(format!("mode={mode:o}"))
}

/// `openat2-creat PATH MODE`: `openat2` with `O_CREAT` (its mode is in memory).
fn openat2_creat(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    // struct open_how { u64 flags; u64 mode; u64 resolve; }
    let how: [u64; 3] = [
        (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC) as u64,
        mode as u64,
        0,
    ];
    // SAFETY: a valid C string and a valid open_how of its size.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            p.as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    })?;
    close(fd as libc::c_int);
    ok_with(format!("mode={mode:o}"))
}

/// `mknod-reg PATH MODE`: `mknodat(S_IFREG | MODE)`.
fn mknod_reg(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let mode = octal(args, 1, "MODE")?;
    // SAFETY: a valid C string.
    check(unsafe {
        libc::syscall(
            libc::SYS_mknodat,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::S_IFREG | mode,
            0,
        )
    })?;
    ok_with(format!("mode={mode:o}"))
}

/// `setxattr PATH NAME VALUE`: a plain string value.
fn setxattr(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    let name = cpath(arg(args, 1, "NAME")?)?;
    let value = arg(args, 2, "VALUE")?;
    // SAFETY: valid C strings and a buffer of the given length.
    check_i(unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })?;
    ok()
}

/// `file-cap PATH`: a `security.capability` xattr (revision 2) granting `CAP_SETUID`,
/// permitted and effective: what `setcap cap_setuid+ep PATH` writes.
fn file_cap(args: &[String]) -> Outcome {
    let p = cpath(arg(args, 0, "PATH")?)?;
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    const VFS_CAP_FLAGS_EFFECTIVE: u32 = 1;
    let setuid = 1u32 << 7; // CAP_SETUID
                            // magic_etc, then {permitted, inheritable} for the low and high 32 capabilities.
    let words = [
        VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
        setuid,
        0,
        0,
        0,
    ];
    let mut value = Vec::with_capacity(20);
    for w in words {
        value.extend_from_slice(&w.to_le_bytes());
    }
    let name = cpath("security.capability")?;
    // SAFETY: valid C strings and a buffer of the given length.
    check_i(unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })?;
    ok()
}

/// `io-setup`: a legacy AIO context (`io_setup(1)`), destroyed at once.
fn io_setup() -> Outcome {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: io_setup writes one aio_context_t into ctx.
    check(unsafe { libc::syscall(libc::SYS_io_setup, 1, &mut ctx as *mut libc::c_ulong) })?;
    // SAFETY: destroying the context we created.
    unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
    ok()
}

/// A blocking IP socket of `type_` and `proto`, with 5 s send and receive timeouts.
fn ip_socket(a: &SocketAddr, type_: libc::c_int, proto: libc::c_int) -> Result<libc::c_int, Fail> {
    // SAFETY: plain socket call.
    let fd = check_i(unsafe { libc::socket(family(a), type_ | libc::SOCK_CLOEXEC, proto) })?;
    let tv = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    for opt in [libc::SO_SNDTIMEO, libc::SO_RCVTIMEO] {
        // SAFETY: a timeval of its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
    }
    Ok(fd)
}

/// `mptcp-connect HOST:PORT`: an MPTCP socket (`IPPROTO_MPTCP`, 262), then connect.
fn mptcp_connect(args: &[String]) -> Outcome {
    let a = resolve(arg(args, 0, "HOST:PORT")?)?;
    let (ss, len) = sockaddr(&a);
    let fd = ip_socket(&a, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 262)?;
    let r = connect_fd(fd, &ss, len);
    close(fd);
    r?;
    ok_with(format!("addr={a}"))
}

/// `tcp-fastopen HOST:PORT`: `sendto(MSG_FASTOPEN)` of one byte: connect and send in one call.
fn tcp_fastopen(args: &[String]) -> Outcome {
    let a = resolve(arg(args, 0, "HOST:PORT")?)?;
    let (ss, len) = sockaddr(&a);
    let fd = ip_socket(&a, libc::SOCK_STREAM, 0)?;
    // SAFETY: one byte from a static buffer; ss holds a valid address of length len.
    let r = check(unsafe {
        libc::sendto(
            fd,
            b"x".as_ptr().cast(),
            1,
            libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL,
            &ss as *const _ as *const libc::sockaddr,
            len,
        ) as libc::c_long
    });
    close(fd);
    r?;
    ok_with(format!("addr={a}"))
}

/// `tcp-fastopen-connect HOST:PORT`: `setsockopt(TCP_FASTOPEN_CONNECT)`, then connect (a
/// landlock refusal of the connect is `EACCES`, a seccomp refusal of the option `EPERM`).
fn tcp_fastopen_connect(args: &[String]) -> Outcome {
    let a = resolve(arg(args, 0, "HOST:PORT")?)?;
    let (ss, len) = sockaddr(&a);
    let fd = ip_socket(&a, libc::SOCK_STREAM, 0)?;
    let one: libc::c_int = 1;
    // SAFETY: an int of its size.
    let r = check_i(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            30, // TCP_FASTOPEN_CONNECT
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    });
    let r = match r {
        // SAFETY: ss holds a valid address of length len.
        Ok(_) => {
            check_i(unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len) })
        }
        Err(e) => Err(e),
    };
    close(fd);
    r?;
    ok_with(format!("addr={a}"))
}

/// `listen-autobind`: `listen` on an unbound TCP socket (the kernel picks a port on 0.0.0.0).
fn listen_autobind() -> Outcome {
    // SAFETY: plain socket calls on our fd.
    let fd =
        check_i(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: listen on our fd.
    let r = check_i(unsafe { libc::listen(fd, 1) });
    let port = local_port(fd);
    close(fd);
    r?;
    ok_with(format!("port={port}"))
}

fn local_port(fd: libc::c_int) -> u16 {
    // SAFETY: all-zero is a valid sockaddr_in; getsockname writes at most len bytes.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: as above.
    unsafe { libc::getsockname(fd, (&mut sin as *mut libc::sockaddr_in).cast(), &mut len) };
    u16::from_be(sin.sin_port)
}

/// `vsock-bind`: an `AF_VSOCK` stream socket bound to any CID and a free port, listening.
fn vsock_bind() -> Outcome {
    // SAFETY: plain socket calls on our fd; a zeroed sockaddr_vm with its fields set.
    unsafe {
        let fd = check_i(libc::socket(
            libc::AF_VSOCK,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let mut svm: libc::sockaddr_vm = std::mem::zeroed();
        svm.svm_family = libc::AF_VSOCK as libc::sa_family_t;
        svm.svm_cid = libc::VMADDR_CID_ANY;
        svm.svm_port = libc::VMADDR_PORT_ANY;
        let r = check_i(libc::bind(
            fd,
            (&svm as *const libc::sockaddr_vm).cast(),
            std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        ))
        .and_then(|_| check_i(libc::listen(fd, 1)));
        close(fd);
        r?;
    }
    ok()
}

/// `raw-socket`: `socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)`.
fn raw_socket() -> Outcome {
    // SAFETY: plain socket call.
    let fd = check_i(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    })?;
    close(fd);
    ok()
}

/// `packet-socket`: `socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL))`.
fn packet_socket() -> Outcome {
    let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
    // SAFETY: plain socket call.
    let fd = check_i(unsafe {
        libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto)
    })?;
    close(fd);
    ok()
}

// ---------------------------------------------------------------------------------------------

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::EPIPE => "EPIPE",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENOKEY => "ENOKEY",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EDQUOT => "EDQUOT",
        _ => "?",
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "?",
    }
}

fn flush() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

fn run(attack: &str, args: &[String]) -> Outcome {
    match attack {
        "read" => read_file(args),
        "read-unhex" => read_unhex(args),
        "write" => write_file(args),
        "list" => list(args),
        "stat" => stat(args),
        "mkdir" => mkdir(args),
        "unlink" => unlink(args),
        "truncate" => truncate(args),
        "exec" => exec(args),
        "symlink-read" => symlink_read(args),
        "open-write" => open_write(args),
        "write-proc-sys" => write_proc_sys(args),
        "replace-with-symlink" => replace_with_symlink(args),
        "tcp-connect" => tcp_connect(args),
        "tcp-bind" => tcp_bind(args),
        "tcp-loopback" => tcp_loopback(args),
        "unix-connect" => unix_connect(arg(args, 0, "PATH")?, false),
        "abstract-connect" => unix_connect(arg(args, 0, "NAME")?, true),
        "udp-send" => udp_send(args),
        "kill" => kill(args),
        "ptrace-attach" => ptrace_attach(args),
        "ptrace-traceme" => ptrace_traceme(),
        "unshare-user" => unshare_user(),
        "clone-newuser" => clone_newuser(),
        "clone3" => clone3(),
        "mount-tmpfs" => mount_tmpfs(args),
        "io-uring" => io_uring(),
        "keyctl" => keyctl(),
        "bpf" => bpf(),
        "userfaultfd" => userfaultfd(),
        "perf-event-open" => perf_event_open(),
        "int80-getpid" => int80_getpid(),
        "x32-getpid" => x32_getpid(),
        "personality-norandom" => personality_norandom(),
        "tiocsti" => tiocsti(args),
        "tty" => tty(args),
        "winch" => winch(args),
        "copy" => copy_file(args),
        "chmod" => chmod_path(args),
        "fchmod" => fchmod_path(args),
        "fchmodat2" => fchmodat2(args),
        "creat" => creat_path(args),
        "open-creat" => open_creat(args),
        "tmpfile-link" => tmpfile_link(args),
        "openat2-creat" => openat2_creat(args),
        "mknod-reg" => mknod_reg(args),
        "setxattr" => setxattr(args),
        "file-cap" => file_cap(args),
        "io-setup" => io_setup(),
        "mptcp-connect" => mptcp_connect(args),
        "tcp-fastopen" => tcp_fastopen(args),
        "tcp-fastopen-connect" => tcp_fastopen_connect(args),
        "listen-autobind" => listen_autobind(),
        "vsock-bind" => vsock_bind(),
        "raw-socket" => raw_socket(),
        "packet-socket" => packet_socket(),
        "status" => status(),
        "fds" => fds(),
        "read-fd" => read_fd(args),
        "stdin" => stdin(),
        "args" => args_hex(args),
        "stdin-hex" => stdin_hex(),
        "read-hex" => read_hex(args),
        "env" => env(),
        "getenv" => getenv(args),
        "hostname" => hostname(),
        "whoami" => whoami(),
        "pid" => pid(),
        "sleep" => sleep(args),
        "fork-daemon" => fork_daemon(args),
        "ignore-term-sleep" => ignore_term_sleep(args),
        "spin" => spin(args),
        "refuse-flood" => refuse_flood(args),
        "alloc" => alloc(args),
        "fork-bomb" => fork_bomb(args),
        "write-bytes" => write_bytes(args),
        "out-hex" => out_hex(args),
        "write-lines" => write_lines(args),
        "alloc-child" => alloc_child(args),
        "fill-tmp" => fill_tmp(args),
        "inotify-exhaust" => inotify_exhaust(args),
        "sigqueue-exhaust" => sigqueue_exhaust(args),
        _ => Err(usage(&format!("unknown attack `{attack}`"))),
    }
}

// ---------------------------------------------------------------------------------------------
// OOM victims other than the workload itself: the cap is hit, and the report must say `oom`
// whichever process the kernel chose.

/// `alloc-child MIB`: a child allocates MIB (the biggest process by far, so the kernel's
/// choice); we wait for it and exit 0 whatever became of it, as a test runner that shrugs off
/// a crashed worker would.
fn alloc_child(args: &[String]) -> Outcome {
    let mib: usize = num(args, 0, "MIB")?;
    flush();
    // SAFETY: the child only runs `alloc` (mmap and stores) and _exit.
    match unsafe { libc::fork() } {
        -1 => Err(Fail::Errno(errno())),
        0 => {
            let code = i32::from(alloc(&[mib.to_string()]).is_err());
            // SAFETY: leave the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) }
        }
        child => {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            let fate = if libc::WIFSIGNALED(status) {
                format!("child=killed signal={}", libc::WTERMSIG(status))
            } else {
                format!("child=exited code={}", libc::WEXITSTATUS(status))
            };
            ok_with(fate)
        }
    }
}

/// `fill-tmp MIB`: write MIB to a file on /tmp (the sandbox's tmpfs). The pages are charged to
/// the cgroup but mapped by no process, so under a smaller memory cap the OOM killer finds the
/// biggest process elsewhere: this one stays small (a fixed 64 KiB buffer).
fn fill_tmp(args: &[String]) -> Outcome {
    let mib: usize = num(args, 0, "MIB")?;
    let dir = std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into());
    let fd = open(
        &format!("{dir}/fill-tmp"),
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
    )?;
    let chunk = [b'x'; 65536];
    for _ in 0..mib * 16 {
        write_all(fd, &chunk)?;
    }
    close(fd);
    ok_with(format!("mib={mib}"))
}

// ---------------------------------------------------------------------------------------------
// per-user counts: take every unit the kernel grants this uid, say how many, hold them

/// Print `exhausted count=N errno=E` (before the result line: the caller acts on it while we
/// hold), then hold for SECS.
fn hold(count: usize, err: i32, d: Duration) -> Outcome {
    println!("exhausted count={count} errno={err}");
    flush();
    sleep_for(d);
    ok_with(format!("count={count} errno={err}"))
}

/// inotify instances, until inotify_init1 fails (EMFILE: the per-user limit, or RLIMIT_NOFILE).
fn inotify_exhaust(args: &[String]) -> Outcome {
    let d = secs(args, 0)?;
    let mut count = 0;
    let err = loop {
        // SAFETY: plain flags; the fd is kept open on purpose until we exit.
        if unsafe { libc::inotify_init1(libc::IN_CLOEXEC) } < 0 {
            break errno();
        }
        count += 1;
        if count == 1_000_000 {
            break 0;
        }
    };
    hold(count, err, d)
}

/// Real-time signals queued to ourselves (blocked, so they stay queued) until
/// rt_sigqueueinfo fails (EAGAIN: RLIMIT_SIGPENDING, or the per-user count above it).
fn sigqueue_exhaust(args: &[String]) -> Outcome {
    let d = secs(args, 0)?;
    let sig = libc::SIGRTMIN();
    // SAFETY: sigset and siginfo are plain data; the calls write only into them or signal us.
    let (count, err) = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        check_i(libc::sigprocmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        let mut info: libc::siginfo_t = std::mem::zeroed();
        info.si_signo = sig;
        info.si_code = -1; // SI_QUEUE
        let me = libc::getpid();
        let mut count = 0usize;
        let err = loop {
            if libc::syscall(libc::SYS_rt_sigqueueinfo, me, sig, &info) < 0 {
                break errno();
            }
            count += 1;
            if count == 1_000_000 {
                break 0;
            }
        };
        (count, err)
    };
    hold(count, err, d)
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let Some(attack) = argv.get(1) else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if attack == "-h" || attack == "--help" {
        println!("{USAGE}");
        return;
    }
    let outcome = run(attack, &argv[2..]);
    // write-bytes owns stdout: its result line goes to stderr.
    let mut out: Box<dyn Write> = if attack == "write-bytes"
        || (attack == "write-lines" && argv.get(2).is_some_and(|fd| fd == "1"))
    {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let code = match outcome {
        Ok(done) => {
            let sep = if done.detail.is_empty() { "" } else { " " };
            let _ = writeln!(out, "{attack}: ok{sep}{}", done.detail);
            for l in &done.lines {
                let _ = writeln!(out, "{l}");
            }
            0
        }
        Err(Fail::Errno(e)) => {
            let _ = writeln!(out, "{attack}: denied errno={e} ({})", errno_name(e));
            1
        }
        Err(Fail::Killed(s)) => {
            let _ = writeln!(out, "{attack}: killed signal={s} ({})", signal_name(s));
            1
        }
        Err(Fail::Nothing(what)) => {
            let _ = writeln!(out, "{attack}: {what}");
            1
        }
        Err(Fail::Usage(msg)) => {
            let _ = writeln!(out, "{attack}: error {msg}");
            eprintln!("{USAGE}");
            2
        }
        Err(Fail::Error(msg)) => {
            let _ = writeln!(out, "{attack}: error {msg}");
            2
        }
    };
    let _ = out.flush();
    std::process::exit(code);
}

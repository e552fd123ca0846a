//! The supervisor: starts stage 2 with the plan, then waits for it in one `poll` over a
//! pidfd, a signalfd and (when capturing) the command's output pipes, or (where sandbox-run's
//! stdout or stderr is a terminal) the master of the command's pty ([`crate::layers::pty`]),
//! and sandbox-run's own stdout and stderr ([`crate::sink`]: nothing in the loop waits for the
//! caller to read). No polling loop, no SIGALRM: the deadline is the poll timeout.
//!
//! Teardown: at the wall-clock deadline, or when sandbox-run receives SIGINT/SIGTERM/SIGHUP,
//! SIGTERM goes to every process of the sandbox (pid 1 relays it with `kill(-1)`); after the
//! grace period, SIGKILL to stage 2, whose death kills pid 1 (parent-death signal), whose death
//! kills everything left in the pid namespace. If sandbox-run itself is SIGKILLed, the same
//! chain starts at stage 2's parent-death signal.

use crate::launcher::Out;
use crate::layers::cgroup::Leaf;
use crate::layers::channel::{self, Record};
use crate::layers::pty::{Given, Pty, Terminal};
use crate::layers::{Step, StepError};
use crate::outcome::{Finished, Lost};
use crate::plan::Plan;
use crate::profile::NetMode;
use crate::sink::Sink;
use crate::termout::TermOut;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub mod live;
pub use live::{Judge, Live, Seen};

/// Signals sandbox-run relays to the sandbox.
const RELAYED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

fn relayed_set() -> SigSet {
    let mut set = SigSet::empty();
    RELAYED.iter().for_each(|s| set.add(*s));
    set
}

/// Block the relayed signals: called first thing in `main`.
pub fn block_relayed() {
    let _ = relayed_set().thread_block();
}

/// Undo [`block_relayed`] for commands that start no sandbox.
pub fn unblock_relayed() {
    let _ = relayed_set().thread_unblock();
}

/// How long stage 2 may take to hand the run's layer over once the sandbox is gone (it copies
/// git's few top-level files into the layer and sends one fd), whatever the timeout and the
/// kill grace: the way back is never cut part-way.
const HAND_OVER: Duration = Duration::from_secs(60);

/// How much of each output stream a report keeps.
pub const TAIL_BYTES: usize = 64 * 1024;

/// How the supervisor runs one sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// `-v`: each refusal is said on stderr when first seen.
    pub verbose: bool,
    pub timeout: Duration,
    pub kill_grace: Duration,
    /// Keep the last [`TAIL_BYTES`] of stdout and stderr while passing them through.
    pub capture: bool,
    /// Send the command's stdout to our stderr (the report goes to stdout).
    pub stdout_to_stderr: bool,
    /// Bytes of each stream passed through when piped (`[limits] output`); the rest is read
    /// and dropped.
    pub output_cap: u64,
    /// `--stdin`: copied into stage 2's stdin after the plan (the workload's stdin, see
    /// [`Plan::stdin_pipe`]), by a thread, until its end or the sandbox's.
    pub stdin: Option<std::sync::Arc<std::fs::File>>,
    /// `-v`: the judge of what the run sees, to say each refusal when first seen (`None`
    /// without `-v`: nothing is judged during the run).
    pub live: Option<std::sync::Arc<Live>>,
}

/// A bounded tail of a stream: memory stays flat however much the command prints.
struct Tail {
    buf: VecDeque<u8>,
    on: bool,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        if !self.on {
            return;
        }
        let data = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let excess = (self.buf.len() + data.len()).saturating_sub(TAIL_BYTES);
        self.buf.drain(..excess);
        self.buf.extend(data);
    }
}

/// One output pipe of the command: read, pass through up to the cap, keep the tail.
///
/// Past the cap the pipe is still read to its end and the data dropped, not closed: a closed
/// pipe would kill the command with SIGPIPE (or fail its writes with EPIPE) and change how it
/// ends; the wall-clock timeout still bounds how long it may go on printing. Memory stays flat.
///
/// Below the cap the pipe is read only as far as the caller takes what the supervisor passes
/// on ([`Sink`]): a caller that reads slowly slows the command, which blocks in its own write,
/// and loses nothing; the supervisor never waits for it. At teardown the pipe is read whatever
/// the caller does, and what it cannot take is dropped and counted.
struct Stream {
    pipe: Option<OwnedFd>,
    /// `stdout` or `stderr`: the command's stream, for the message.
    name: &'static str,
    /// Where it goes: 0 sandbox-run's stdout, 1 its stderr.
    sink: usize,
    tail: Tail,
    cap: u64,
    passed: u64,
    capped: bool,
    /// Where the stream is a pty's master relayed to the caller's terminal: what may reach a
    /// terminal ([`TermOut`]).
    term: Option<TermOut>,
    /// The command's error texts: paths it failed on, judged after the run
    /// ([`crate::denials::stderr`]; bounded, and nothing here touches the host).
    scan: Option<crate::denials::stderr::Scanner>,
    /// `-v`: what `scan` finds is judged as it comes, relative paths against the command's
    /// working directory.
    live: Option<(std::sync::Arc<Live>, std::path::PathBuf)>,
}

impl Stream {
    /// Is there something to read for: room in its sink, or past the cap, or `draining` (at
    /// teardown: the rest is dropped when the sink is full).
    fn wants(&self, sinks: &[Option<Sink>; 2], draining: bool) -> bool {
        self.pipe.is_some() && (draining || self.capped || room(sinks, self.sink) > 0)
    }

    /// Move what is there now, as far as [`Stream::wants`]; `false` once the pipe is closed or
    /// nothing more can be read now (the pipe is non-blocking).
    fn pump(&mut self, sinks: &mut [Option<Sink>; 2], draining: bool) -> bool {
        let Some(fd) = &self.pipe else { return false };
        let mut buf = [0u8; 16384];
        let len = if draining || self.capped {
            buf.len()
        } else {
            buf.len().min(room(sinks, self.sink))
        };
        if len == 0 {
            return false;
        }
        match nix::unistd::read(fd, &mut buf[..len]) {
            Ok(0) => {
                self.pipe = None;
                false
            }
            Ok(n) => {
                let raw = &buf[..n];
                let filtered;
                let data = match &mut self.term {
                    Some(t) => {
                        let mut v = Vec::with_capacity(n);
                        t.feed(raw, &mut v);
                        filtered = v;
                        &filtered[..]
                    }
                    None => raw,
                };
                let n = data.len();
                let room = usize::try_from(self.cap.saturating_sub(self.passed)).unwrap_or(n);
                let pass = &data[..n.min(room)];
                let said = self.scan(raw);
                // Each refusal line right after the command's line that named it, where the
                // bytes passed are the bytes read (not a terminal's filtered ones) and go to
                // sandbox-run's stderr; else after them.
                let split = self.term.is_none() && self.sink == 1;
                let mut done = 0;
                for (at, s) in &said {
                    let cut = if split {
                        (*at).min(pass.len())
                    } else {
                        pass.len()
                    };
                    if let Some(sink) = &mut sinks[self.sink] {
                        sink.push(&pass[done..cut.max(done)]);
                    }
                    done = cut.max(done);
                    if !say_now(sinks, &s.line) {
                        // no room now: said at the end
                        if let Some((live, _)) = &self.live {
                            live.lost(s);
                        }
                    }
                }
                if done < pass.len() {
                    if let Some(sink) = &mut sinks[self.sink] {
                        sink.push(&pass[done..]);
                    }
                }
                self.passed += pass.len() as u64;
                if pass.len() < n && !self.capped {
                    self.capped = true;
                    if let Some(err) = &mut sinks[1] {
                        err.say(&format!(
                            "sandbox-run: output: {} passed the {} cap; the rest was dropped\n",
                            self.name,
                            crate::units::Size(self.cap)
                        ));
                    }
                    if let Some((live, _)) = &self.live {
                        live.say(Seen::Output(self.name), |line| say_now(sinks, line));
                    }
                }
                self.tail.push(raw);
                true
            }
            Err(nix::errno::Errno::EINTR) => true,
            Err(nix::errno::Errno::EAGAIN) => false,
            Err(_) => {
                self.pipe = None;
                false
            }
        }
    }
}

impl Stream {
    /// Feed the error texts' scanner; with `-v`, the refusal lines to say, each with the
    /// offset in `raw` of the end of the line that named it.
    fn scan(&mut self, raw: &[u8]) -> Vec<(usize, live::Said)> {
        let Some(scan) = &mut self.scan else {
            return Vec::new();
        };
        let Some((live, cwd)) = &self.live else {
            scan.feed(raw);
            return Vec::new();
        };
        let mut said = Vec::new();
        let mut start = 0;
        while start < raw.len() {
            let end = raw[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(raw.len(), |i| start + i + 1);
            scan.feed(&raw[start..end]);
            for p in scan.fresh(cwd) {
                if let Some(s) = live.see(Seen::Path(&p)) {
                    said.push((end, s));
                }
            }
            start = end;
        }
        said
    }
}

fn room(sinks: &[Option<Sink>; 2], i: usize) -> usize {
    sinks[i].as_ref().map_or(usize::MAX, Sink::room)
}

fn sys(what: &str) -> impl Fn(nix::Error) -> String + '_ {
    move |e| format!("{what}: {}", e.desc())
}

/// What the supervisor's [`run`] calls, once stage 2 has started, to make the cgroup leaf of a
/// stage 2 that moves itself in ([`Plan::cgroup_self_join`]): the leaf, limited; `None` when
/// the run goes without (a best-effort layer the host could not give); an error line when it
/// must not run at all.
pub type MakeLeaf<'a> = &'a mut dyn FnMut() -> Result<Option<Leaf>, String>;

/// Start stage 2 for `plan` in `leaf` (when there is a cgroup) and wait for the sandbox to end.
/// With `make`, the leaf is made by it while stage 2 starts (cgroup v1 as root, see
/// [`crate::launcher`]) and left in `leaf` for the caller to remove; when it fails, stage 2 is
/// killed before it has forked anything, and the error is returned.
pub fn run(
    plan: &Plan,
    o: &Options,
    leaf: &mut Option<Leaf>,
    make: Option<MakeLeaf>,
) -> Result<Finished, String> {
    let started = Instant::now();
    // The sandbox's own network namespace: a socket pair, not a pipe, so that pid 1 can pass
    // the sockets it makes there (the proxy's, the loopback ports', the name service's).
    // A kept layer: the same, so that stage 2 can hand the disk layer over.
    let kept = crate::layers::overlay::kept(&plan.mounts);
    let own_net = plan.namespaces && plan.net != NetMode::Host;
    // Refusals named: the workload passes the seccomp listener over the channel.
    let notify = plan.seccomp && plan.seccomp_options.notifies();
    let seqpacket = own_net || kept || notify;
    let (rec_r, rec_w) = if seqpacket {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(sys("socketpair"))?
    } else {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?
    };
    if plan.net == NetMode::Host {
        eprintln!("sandbox-run: network: host mode: the command shares the host's network, with no allow-list (loopback services, the LAN and cloud metadata are reachable)");
    }

    let piped = o.capture || o.stdout_to_stderr;
    // Where sandbox-run's stdout or stderr is a terminal, the command gets a pty of ours.
    let mut term = Terminal::choose(piped);
    // The command's stderr passes the supervisor even where it would have been sandbox-run's
    // own (not a terminal, no capture): relayed as it comes, and read for the paths its error
    // texts name ([`crate::denials::stderr`]), which every refusal line is made from.
    if term.given[1] == Given::Inherited {
        term.given[1] = Given::Pipe;
    }
    let mut relayed = relayed_set();
    if term.any() {
        // The caller's window changed size: copied onto the pty (see `layers::pty`).
        relayed.add(Signal::SIGWINCH);
    }
    relayed.thread_block().map_err(sys("sigprocmask"))?;
    let sfd = SignalFd::with_flags(&relayed, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))?;

    // If stage 2 dies first (SIGKILL after the grace period), pid 1 is orphaned: as a
    // subreaper we become its parent and can wait for it, and pid 1 finishes exiting only
    // once every process of its namespace is gone. Without this we could return while the
    // sandbox's last processes are still dying.
    // SAFETY: prctl with integer arguments, affecting only this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let spawn_micros = channel::now_micros();
    let spawned = Instant::now();
    // Stage 2 compiles seccomp and creates its namespaces while we move it into the leaf (the
    // first move of a process can wait for an RCU grace period, 10-15 ms here). It waits for
    // the JOINED byte before it unshares its cgroup namespace (so the leaf is that namespace's
    // root) or forks anything.
    // cgroup v2: stage 2 is born in the leaf when the kernel can (no move, no wait).
    let leaf_fd = leaf
        .as_ref()
        .filter(|_| !plan.cgroup_self_join)
        .and_then(|l| l.open_v2().ok());
    let outs = [0, 1].map(|i| match (term.given[i], term.slave_for(i)) {
        (Given::Pty, Some(fd)) => Out::Give(fd),
        (Given::Inherited, _) => Out::Inherit,
        _ => Out::Pipe,
    });
    let spawned_child = crate::launcher::spawn(plan, rec_w, outs, leaf_fd.as_ref());
    // Stage 2 holds the slaves now: ours would keep the masters from ever reading EIO.
    term.ptys.iter_mut().flatten().for_each(|p| p.slave = None);
    let mut child = spawned_child?;
    drop(leaf_fd);
    let stdin = child.stdin.take();
    let mut f = Finished {
        start: Some(child.start),
        stdio: term.given,
        ..Finished::default()
    };
    // cgroup v1: stage 2 moves itself (plan.cgroup_self_join), which is much cheaper there.
    let born_inside = child.start == crate::launcher::Start::ForkIntoCgroup;
    let moved = leaf
        .as_ref()
        .filter(|_| !plan.cgroup_self_join && !born_inside)
        .map(|leaf| leaf.add(child.pid));
    if let Some(Err(e)) = moved {
        child.kill();
        let _ = child.wait();
        return Err(e.to_string());
    }
    let joined = if plan.cgroup_self_join {
        // Made now, on this core, while stage 2 sets up its namespaces on the other.
        let made_at = Instant::now();
        if let Some(make) = make {
            let mask = move_off_cpu();
            let made = make();
            if let Some(mask) = &mask {
                restore_cpus(mask);
            }
            // A leaf stage 2 cannot move itself into (not v1 after all): moved by us.
            let made = made.and_then(|made| match &made {
                Some(l) if l.self_join_files().is_empty() => {
                    l.add(child.pid).map(|()| made).map_err(|e| e.to_string())
                }
                _ => Ok(made),
            });
            match made {
                Ok(made) => *leaf = made,
                Err(e) => {
                    // Stage 2 waits for the leaf before it forks or runs anything of the
                    // workload's: nothing of the sandbox ran, nothing is left.
                    child.kill();
                    let _ = child.wait();
                    crate::launcher::init::kill_children();
                    return Err(e);
                }
            }
        }
        f.leaf_made = Some(made_at.elapsed());
        let tasks = leaf.as_ref().map(Leaf::self_join_files).unwrap_or_default();
        crate::launcher::joined_with(&tasks)
    } else {
        vec![crate::launcher::JOINED]
    };
    let leaf = leaf.as_ref();
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(&joined);
        if let Some(src) = o.stdin.clone() {
            // EPIPE (SIGPIPE is ignored) once the sandbox is gone ends it.
            std::thread::spawn(move || std::io::copy(&mut &*src, &mut stdin));
        }
    }
    let pid = child.pid;
    let pidfd = crate::sys::pidfd_open(pid)
        .map_err(|e| format!("pidfd_open: {}", std::io::Error::from_raw_os_error(e)))?;
    // A pty's output is read like a pipe (its master reads EIO once the sandbox is gone).
    let mut master = |i: usize| term.ptys[i].as_mut().and_then(|p| p.reader.take());
    // Without capture, the command's output is only relayed (pty, or a pipe where no pty
    // could be made): no cap, as when it writes to the caller's fd itself.
    let cap = if piped { o.output_cap } else { u64::MAX };
    // A pty's master is what reaches the caller's terminal: filtered (`TermOut`).
    let mut relay = |pipe: Option<OwnedFd>, i: usize| match pipe {
        Some(p) => (Some(p), None),
        None => {
            let m = master(i);
            let t = m.as_ref().map(|_| TermOut::new());
            (m, t)
        }
    };
    let (out_pipe, out_term) = relay(child.stdout.take(), 0);
    let (err_pipe, err_term) = relay(child.stderr.take(), 1);
    let live_paths = o.live.clone().map(|l| (l, plan.cwd.clone()));
    let mut streams = [
        Stream {
            pipe: out_pipe,
            name: "stdout",
            sink: usize::from(o.stdout_to_stderr),
            tail: Tail {
                buf: VecDeque::new(),
                on: o.capture,
            },
            cap,
            passed: 0,
            capped: false,
            term: out_term,
            // stderr on the same terminal as stdout comes through stdout's pty
            scan: (f.stdio[1] == crate::layers::pty::Given::Pty && err_pipe.is_none())
                .then(crate::denials::stderr::Scanner::default),
            live: live_paths.clone(),
        },
        Stream {
            pipe: err_pipe,
            name: "stderr",
            sink: 1,
            tail: Tail {
                buf: VecDeque::new(),
                on: o.capture,
            },
            cap,
            passed: 0,
            capped: false,
            term: err_term,
            scan: Some(crate::denials::stderr::Scanner::default()),
            live: live_paths,
        },
    ];
    // Our read ends: read as far as there is data, never waiting (see `Stream::pump`).
    for s in &streams {
        if let Some(p) = &s.pipe {
            let _ = nix::fcntl::fcntl(
                p,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
        }
    }
    // sandbox-run's own stdout and stderr, as far as the streams go there.
    let goes_to = |k: usize| streams.iter().any(|s| s.pipe.is_some() && s.sink == k);
    let mut sinks: [Option<Sink>; 2] = [
        goes_to(0).then(|| Sink::open(1)),
        goes_to(1).then(|| Sink::open(2)),
    ];

    // The sandbox's own network: watch the channel until pid 1 has passed its sockets; a kept
    // layer: until its end, for the hand-over.
    let mut watch_channel = own_net || kept || notify;
    // The seccomp listener is still to come on the channel.
    let mut notify_pending = notify;
    let mut listener: Option<crate::layers::seccomp::notify::Listener> = None;
    // How many of the listener's paths `-v` has judged.
    let mut observed = 0;
    let mut early = Vec::new();
    let mut net = Served {
        // -v: the proxy's and the name service's refusals said from their threads, as they
        // come.
        on_denied: o.live.clone().map(|live| {
            crate::net::OnDenied(std::sync::Arc::new(move |d| {
                live.say(Seen::Net(d), |line| {
                    crate::sink::line(line.trim_end_matches('\n'))
                });
            }))
        }),
        ..Served::default()
    };
    let mut deadline = started + o.timeout;
    let mut terminating = false;
    let mut hand_over_until: Option<Instant> = None;
    let mut exited = false;
    // A repo layer on disk: its cap is watched while the command runs.
    let mut budget = match (
        &plan.layer_dir,
        crate::layers::overlay::disk_size(&plan.mounts),
    ) {
        (Some(dir), Some(cap)) => Some(
            crate::layers::disk::Budget::new(dir, cap)
                .map_err(|e| format!("the repo's layer {}: {e}", dir.display()))?,
        ),
        _ => None,
    };
    // ... and each call of the sandbox's is bounded by the room left (layers::fsize).
    let mut fsize = budget
        .as_ref()
        .map(|_| crate::layers::fsize::Bound::new(pid, plan.rlimits.fsize));
    while !exited {
        let mut wait = deadline.saturating_duration_since(Instant::now());
        if let Some(b) = &budget {
            wait = wait.min(b.due().saturating_duration_since(Instant::now()));
        }
        // Rounded up: a wait of less than a millisecond truncated to 0 would spin until the
        // budget's next look is due.
        let ms = wait.as_micros().div_ceil(1000);
        let timeout =
            PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
        let mut fds = vec![
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        // Where each stream's pipe and each sink is in `fds`, if it is.
        let mut at = [None; 4];
        for (i, s) in streams.iter().enumerate() {
            // At teardown, read whatever the caller does (what it cannot take is dropped):
            // the command's last words must not wait for the caller either.
            if s.wants(&sinks, terminating) {
                at[i] = Some(fds.len());
                fds.push(PollFd::new(
                    s.pipe.as_ref().unwrap().as_fd(),
                    PollFlags::POLLIN,
                ));
            }
        }
        for (i, k) in sinks.iter().enumerate() {
            if let Some(fd) = k.as_ref().and_then(Sink::waiting) {
                at[2 + i] = Some(fds.len());
                fds.push(PollFd::new(fd, PollFlags::POLLOUT));
            }
        }
        let at_listener = listener.as_ref().and_then(|l| l.fd()).map(|fd| {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            fds.len() - 1
        });
        if watch_channel {
            fds.push(PollFd::new(rec_r.as_fd(), PollFlags::POLLIN));
        }
        let n = match nix::poll::poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {}", e.desc())),
            Ok(n) => n,
        };
        let ready: Vec<bool> = fds.iter().map(|p| p.any().unwrap_or(false)).collect();
        let hung_up = at_listener.is_some_and(|i| {
            fds[i]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLHUP) && !r.contains(PollFlags::POLLIN))
        });
        drop(fds);
        if let Some(l) = listener.as_mut() {
            if hung_up {
                // every process of the filter is gone
                l.close();
            } else if at_listener.is_some_and(|i| ready[i]) {
                l.serve(&mut |line| {
                    say_now(&mut sinks, &line);
                });
                // -v: the lookups `--observe` noted, judged before the command sees its
                // next output passed on.
                if let Some(live) = &o.live {
                    for p in &l.paths()[observed..] {
                        live.say(Seen::Path(p), |line| say_now(&mut sinks, line));
                    }
                    observed = l.paths().len();
                }
            }
        }
        if watch_channel && ready[ready.len() - 1] {
            let was_handing = f.handing;
            let net_watch =
                channel_records(plan, kept, &rec_r, &mut early, &mut net, &mut f, |line| {
                    say_now(&mut sinks, &line);
                });
            match net.notified.take() {
                Some(Some(fd)) => {
                    notify_pending = false;
                    match crate::layers::seccomp::notify::Listener::new(
                        fd,
                        &plan.seccomp_options,
                        o.verbose,
                    ) {
                        Ok(l) => listener = Some(l),
                        // dropped: the kernel answers ENOSYS, still refused
                        Err(e) => eprintln!("sandbox-run: seccomp: the refusals go unnamed: {e}"),
                    }
                }
                Some(None) => notify_pending = false,
                None => {}
            }
            // At end of file nothing more comes, whatever was awaited.
            let eof = !net_watch && channel_at_eof(&rec_r);
            watch_channel = !eof && (net_watch || notify_pending);
            if f.handing && !was_handing {
                // The sandbox is gone: a last exact count of the layer, for what was written
                // after the last check.
                if let Some(b) = &budget {
                    f.disk_hit |= b.hit;
                }
                if let Some(count) = budget.as_mut().and_then(|b| {
                    let c = b.walk();
                    f.disk_hit |= b.hit;
                    b.over(c)
                }) {
                    f.disk_stopped = Some(crate::layers::disk::Over {
                        count,
                        stopped: false,
                    });
                }
                budget = None;
                // The sandbox is gone: what stage 2 does now is bounded by the hand-over's
                // own time, not by the timeout, the kill grace or a signal to us.
                hand_over_until = Some(Instant::now() + HAND_OVER);
            }
            let proxy_lost = plan.net == NetMode::Filtered && net.proxy.is_none() && !f.handing;
            if proxy_lost && !net_watch && !terminating {
                // No proxy: nothing to serve the sandbox with; end it (the record says why).
                terminate(pid);
                terminating = true;
                deadline = Instant::now() + o.kill_grace;
            }
        }
        // Watched until the sandbox is gone, its kill grace included.
        if let Some(b) = budget.as_mut().filter(|_| !f.handing) {
            let over = b.check();
            f.disk_hit |= b.hit;
            if over.is_none() {
                if let Some(l) = fsize.as_mut() {
                    l.apply(b.left());
                }
            }
            if let Some(c) = over {
                // Past the cap: stopped at once, as the timeout's escalation does (the way back
                // gets nothing: a run cut part-way is not applied), in the grace period too.
                // SAFETY: SIGKILL to our own child, not yet reaped (its pidfd is open).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                if let Some(leaf) = leaf {
                    let _ = leaf.kill();
                }
                f.disk_stopped = Some(crate::layers::disk::Over {
                    count: c,
                    stopped: true,
                });
                budget = None;
                terminating = true;
                deadline = Instant::now() + Duration::from_secs(3600);
            }
        }
        if n == 0 && Instant::now() < deadline {
            // a look at the layer's budget, not the deadline
            continue;
        }
        if n == 0 {
            // The deadline: first the timeout itself, later the end of the grace period.
            if let Some(until) = hand_over_until.filter(|u| Instant::now() < *u) {
                // Only the hand-over is left, and it gets its own time.
                terminating = true;
                deadline = until;
            } else if terminating {
                // SAFETY: SIGKILL to our own child, not yet reaped (its pidfd is open).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                if let Some(leaf) = leaf {
                    let _ = leaf.kill();
                }
                f.killed = true;
                deadline = Instant::now() + Duration::from_secs(3600);
            } else {
                f.timed_out = true;
                if let Some(live) = &o.live {
                    live.say(Seen::Timeout, |line| say_now(&mut sinks, line));
                }
                terminate(pid);
                terminating = true;
                deadline = Instant::now() + o.kill_grace;
            }
            continue;
        }
        if ready[1] {
            while let Ok(Some(info)) = sfd.read_signal() {
                if info.ssi_signo == libc::SIGWINCH as u32 {
                    term.ptys.iter().flatten().for_each(Pty::copy_size);
                    continue;
                }
                if f.interrupted.is_none() && !f.timed_out {
                    f.interrupted = Some(info.ssi_signo as i32);
                }
                if !terminating {
                    terminating = true;
                    deadline = Instant::now() + o.kill_grace;
                }
                // SAFETY: relay to our own unreaped child.
                unsafe { libc::kill(pid, info.ssi_signo as i32) };
            }
        }
        for (i, k) in sinks.iter_mut().enumerate() {
            if at[2 + i].is_some_and(|j| ready[j]) {
                k.as_mut().map(Sink::flush);
            }
        }
        for (i, s) in streams.iter_mut().enumerate() {
            if at[i].is_some_and(|j| ready[j]) {
                s.pump(&mut sinks, terminating);
            }
        }
        exited = ready[0];
    }
    let stage2 = child.wait();
    // Kill and reap whatever was reparented to us: an orphaned pid 1 after a SIGKILL of stage
    // 2 (it finishes exiting once its namespace is empty), or, in a run without namespaces,
    // what the workload left behind when its reaper died.
    crate::launcher::init::kill_children();
    (f.secrets, f.secret_misdirected) = secret_log(plan, net.proxy.as_ref());
    if net.proxy.is_some() && !plan.secrets.is_empty() {
        // its threads put values into requests: the next sandbox is not forked from us
        crate::net::vault::spilled();
    }
    if let Some(p) = net.proxy {
        f.connections = p.stop();
    }
    if let Some(n) = net.names {
        f.dns_refused = n.stop();
    }
    if let Some(leaf) = leaf {
        // Nothing may outlive the run, whatever escaped the pid namespace's teardown.
        let _ = leaf.kill();
        f.usage = Some(leaf.usage());
    }
    // Whatever the command wrote before it ended is still in the pipes; what the caller has not
    // taken yet waits in the sinks. Passed on while the caller takes it, until the run's own
    // deadline (the end of the grace period after a teardown); never longer than the kill
    // grace without the caller taking a byte, nor past a signal.
    let until = if f.killed { Instant::now() } else { deadline };
    drain(&mut streams, &mut sinks, &sfd, until, o.kill_grace, &term);
    if term.any() {
        let mut winch = SigSet::empty();
        winch.add(Signal::SIGWINCH);
        let _ = winch.thread_unblock();
    }
    for k in sinks.iter_mut().flatten() {
        if k.dropped > 0 {
            f.output_dropped.push(k.name());
        }
    }
    // The caller's terminal as the command found it (attributes, cursor), and what of the
    // command's output never reached it.
    let mut terms = Vec::new();
    for s in streams.iter_mut() {
        if let (Some(t), Some(sink)) = (&mut s.term, &mut sinks[s.sink]) {
            sink.say(t.finish());
            if t.dropped() > 0 {
                terms.push(format!(
                    "sandbox-run: terminal: {} control sequences in the command's {} were not passed to your terminal (only text, colours, cursor moves and line erases pass)\n",
                    t.dropped(),
                    s.name
                ));
            }
        }
    }
    let lines: Vec<String> = sinks
        .iter()
        .flatten()
        .filter(|k| k.dropped > 0)
        .map(|k| {
            format!(
                "sandbox-run: output: the caller stopped reading {}; {} bytes of the command's output were dropped\n",
                k.name(),
                k.dropped
            )
        })
        .chain(terms)
        .collect();
    if let Some(err) = &mut sinks[1] {
        for l in &lines {
            err.say(l);
        }
        err.flush();
        // What is left cannot go now: point fd 2 at /dev/null rather than block on it.
        err.give_up();
    } else {
        // No stream went to sandbox-run's stderr (it and stdout share the command's pty).
        lines.iter().for_each(|l| {
            crate::sink::line(l.trim_end_matches('\n'));
        });
    }
    if seqpacket {
        for (r, fd) in channel::recv_all(rec_r.as_raw_fd()) {
            match (r, fd) {
                (Record::Layer, Some(fd)) => f.layer = Some(std::sync::Arc::new(fd)),
                // arrived after the sandbox ended: nothing left to answer
                (Record::Notify, Some(_)) => notify_pending = false,
                (Record::Handing, _) => f.handing = true,
                (r, _) => early.push(r),
            }
        }
    } else {
        early.extend(channel::read_all(rec_r.as_raw_fd()));
    }
    for r in early {
        match r {
            Record::Failed(e) if f.failure.is_none() => f.failure = Some(e),
            Record::Failed(_) => {}
            Record::Exited(s) => f.status = Some(s),
            Record::Landlock { abi, status } => f.landlock = Some((abi, status)),
            Record::Ready => f.ready = true,
            Record::Full => f.disk_full = true,
            Record::Listener | Record::Handing | Record::Layer | Record::Trusted { .. } => {}
            Record::Forward { .. } | Record::Names => {}
            Record::Notify => {}
            Record::Unnamed(e) => {
                if o.verbose {
                    eprintln!(
                        "sandbox-run: seccomp: the kernel gave the filter no listener ({}): refused calls were refused, unnamed",
                        nix::errno::Errno::from_raw(e).desc()
                    );
                }
                f.refusals_unnamed = Some(e);
            }
            Record::Timing { phase, micros } => {
                let us = micros.wrapping_sub(spawn_micros);
                f.timings
                    .push((phase, Duration::from_micros(u64::from(us))));
            }
        }
    }
    f.spawned_to_end = spawned.elapsed();
    if notify && f.ready {
        f.refusals_named = Some(f.refusals_unnamed.is_none() && !notify_pending);
    }
    if let Some(l) = listener {
        f.refused_calls_cut = l.cut;
        f.paths_dropped = l.paths_dropped;
        (f.refused_calls, f.paths_seen) = l.finish();
    }
    if f.status.is_none()
        && f.failure.is_none()
        && !f.timed_out
        && f.interrupted.is_none()
        && !f.disk_stopped.is_some_and(|o| o.stopped)
    {
        // Not a failed step (it used to read `fork: No child processes`): say what ended the
        // sandbox; the report's status comes from the cgroup's OOM count and this.
        f.lost = Some(match stage2 {
            Ok(st) => Lost::from_stage2(st),
            Err(e) => Lost::Exited(-e.raw_os_error().unwrap_or(0)),
        });
    }
    f.output_capped = streams
        .iter()
        .filter(|s| s.capped)
        .map(|s| s.name)
        .collect();
    let [out, err] = streams;
    for scan in [out.scan, err.scan].into_iter().flatten() {
        f.paths_seen.extend(scan.finish(&plan.cwd));
    }
    f.out = out.tail.buf.into();
    f.err = err.tail.buf.into();
    f.duration = started.elapsed();
    Ok(f)
}

/// A line of sandbox-run's own on its stderr from the loop, never waiting for the caller:
/// through the stderr sink when the command's stderr has one, else a sink of its own.
/// Whether it was taken.
fn say_now(sinks: &mut [Option<Sink>; 2], line: &str) -> bool {
    let mut own;
    let (err, mine) = match &mut sinks[1] {
        Some(err) => (err, false),
        None => {
            own = Sink::open(2);
            (&mut own, true)
        }
    };
    let taken = err.say(line);
    err.flush();
    // a sink of its own loses what it still holds when it goes
    taken && !(mine && err.waiting().is_some())
}

/// The end of a run's output: read the command's pipes to their end and pass on what the
/// caller takes, until `until`, or `stall` without the caller taking anything, or a signal;
/// then drop the rest (counted in each sink). The sandbox is gone: nothing here holds it.
fn drain(
    streams: &mut [Stream; 2],
    sinks: &mut [Option<Sink>; 2],
    sfd: &SignalFd,
    until: Instant,
    stall: Duration,
    term: &Terminal,
) {
    let mut moved_at = Instant::now();
    loop {
        for s in streams.iter_mut() {
            while s.pump(sinks, false) {}
        }
        let pipes = streams.iter().any(|s| s.pipe.is_some());
        let waiting = sinks.iter().flatten().any(|k| k.waiting().is_some());
        if !pipes && !waiting {
            return;
        }
        let end = until.min(moved_at + stall);
        let wait = end.saturating_duration_since(Instant::now());
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        for s in streams.iter() {
            if s.wants(sinks, false) {
                fds.push(PollFd::new(
                    s.pipe.as_ref().unwrap().as_fd(),
                    PollFlags::POLLIN,
                ));
            }
        }
        for k in sinks.iter().flatten() {
            if let Some(fd) = k.waiting() {
                fds.push(PollFd::new(fd, PollFlags::POLLOUT));
            }
        }
        let timeout = PollTimeout::try_from(wait.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let n = match nix::poll::poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => 0,
            Ok(n) => n,
        };
        let mut signalled = false;
        if fds[0].any().unwrap_or(false) {
            while let Ok(Some(info)) = sfd.read_signal() {
                if info.ssi_signo == libc::SIGWINCH as u32 {
                    term.ptys.iter().flatten().for_each(Pty::copy_size);
                } else {
                    signalled = true;
                }
            }
        }
        drop(fds);
        if n == 0 || signalled {
            // Time is up, or sandbox-run was told to stop: do not wait for the caller.
            sinks.iter_mut().flatten().for_each(Sink::give_up);
            for s in streams.iter_mut() {
                // The writers are gone (the sandbox ended): the pipes end; a process that
                // escaped it could keep one open, so stop at what is there.
                while s.pump(sinks, true) {}
                s.pipe = None;
            }
            return;
        }
        for k in sinks.iter_mut().flatten() {
            if k.flush() {
                moved_at = Instant::now();
            }
        }
    }
}

/// Move this thread onto another CPU it may use than the one it runs on; returns the mask to
/// restore. Why: the fork of stage 2 is usually queued on the supervisor's own CPU, where it
/// would wait for the supervisor to finish the cgroup leaf (measured: "stage 2 started" 0.17
/// -> 0.42 ms), and the idle balancer moves it only at a later tick. Moving the supervisor
/// instead (the kernel's stopper thread does it at once) lets both run. `None` when there is
/// no other CPU (or no mask to read); the caller goes on where it is.
fn move_off_cpu() -> Option<libc::cpu_set_t> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: sched_getaffinity/sched_getcpu/sched_setaffinity with cpu_set_t values we own,
    // of the size we pass; the CPU_* helpers index within CPU_SETSIZE.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut mask) != 0 {
            return None;
        }
        let here = libc::sched_getcpu();
        let other = (0..libc::CPU_SETSIZE as usize)
            .find(|c| *c as i32 != here && libc::CPU_ISSET(*c, &mask))?;
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(other, &mut one);
        (libc::sched_setaffinity(0, size, &one) == 0).then_some(mask)
    }
}

/// Undo [`move_off_cpu`].
fn restore_cpus(mask: &libc::cpu_set_t) {
    // SAFETY: sched_setaffinity of this thread with a mask we own, of its size.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(mask), mask) };
}

/// What the supervisor serves to the sandbox's own network, from the sockets pid 1 passed.
#[derive(Default)]
struct Served {
    proxy: Option<crate::net::proxy::Proxy>,
    names: Option<crate::net::dns::NameService>,
    /// The loopback ports' listeners, until the proxy (whose log they share) starts.
    forwards: Vec<(u16, OwnedFd)>,
    /// The workload's word on the seccomp listener, taken by the loop: `Some(Some(fd))` the
    /// listener, `Some(None)` none (the kernel refused one).
    notified: Option<Option<OwnedFd>>,
    /// `-v`: told each refusal of the proxy and the name service.
    on_denied: Option<crate::net::OnDenied>,
}

/// Read what is on the channel while the sandbox runs. The proxy's socket starts the proxy
/// and the loopback ports that came before it; the name service's socket starts it; the
/// hand-over's records are noted in `f`; other records are kept for the end. Returns whether
/// to keep watching.
fn channel_records(
    plan: &Plan,
    kept: bool,
    rec: &OwnedFd,
    early: &mut Vec<Record>,
    served: &mut Served,
    f: &mut Finished,
    mut say: impl FnMut(String),
) -> bool {
    let proxy = &mut served.proxy;
    let on_denied = served.on_denied.clone();
    loop {
        match channel::recv(rec.as_raw_fd()) {
            Some((Record::Forward { index }, Some(fd))) => served.forwards.push((index, fd)),
            Some((Record::Names, Some(fd))) => {
                let allow = match plan.net {
                    NetMode::Filtered => crate::net::allow::AllowList::parse(&plan.network_allow),
                    _ => Ok(Default::default()),
                };
                let started = allow.and_then(|allow| {
                    let config = crate::net::dns::Config {
                        allow,
                        on_denied: on_denied.clone(),
                    };
                    crate::net::dns::NameService::start(std::net::UdpSocket::from(fd), config)
                        .map_err(|e| e.to_string())
                });
                match started {
                    Ok(n) => served.names = Some(n),
                    Err(e) => say(format!("sandbox-run: network: the name service: {e}\n")),
                }
                // `--net none`: the last of the network's records.
                if plan.net != NetMode::Filtered && !kept {
                    return false;
                }
            }
            Some((Record::Listener, Some(fd))) => {
                let config =
                    crate::net::allow::AllowList::parse(&plan.network_allow).map(|allow| {
                        crate::net::proxy::Config {
                            allow,
                            profile: plan.profile.clone(),
                            warn: true,
                            secrets: plan.secret_set.clone(),
                            extra_roots: plan.ca_certs.iter().map(|s| s.path.clone()).collect(),
                            on_denied: on_denied.clone(),
                        }
                    });
                let started = config.and_then(|c| {
                    crate::net::proxy::Proxy::start(std::net::TcpListener::from(fd), c)
                        .map_err(|e| e.to_string())
                });
                // Secrets: the run's CA joins the trust bundle, then pid 1 may start the
                // workload (it waits for this word).
                let started = started.and_then(|p| match trust_run_ca(plan, &p) {
                    Ok(()) => Ok(p),
                    Err(e) => {
                        let _ = p.stop();
                        Err(e)
                    }
                });
                if !plan.secrets.is_empty() {
                    channel::send_trusted(rec.as_raw_fd(), started.is_ok());
                }
                match started {
                    Ok(p) => *proxy = Some(p),
                    Err(e) => say(format!("sandbox-run: network: starting the proxy: {e}\n")),
                }
                if let Some(p) = proxy.as_ref() {
                    let ports = crate::net::allow::AllowList::parse(&plan.network_allow)
                        .map(|a| crate::net::proxy::loopback_ports(&a))
                        .unwrap_or_default();
                    for (i, fd) in std::mem::take(&mut served.forwards) {
                        let Some(lp) = ports.get(usize::from(i)) else {
                            continue;
                        };
                        let l = std::net::TcpListener::from(fd);
                        if let Err(e) = p.forward(l, lp.clone()) {
                            say(format!(
                                "sandbox-run: network: serving {}:{}: {e}\n",
                                lp.host, lp.port
                            ));
                        }
                    }
                }
                if !kept {
                    return false;
                }
            }
            Some((Record::Handing, _)) => f.handing = true,
            Some((Record::Layer, Some(fd))) => f.layer = Some(std::sync::Arc::new(fd)),
            Some((Record::Notify, fd)) => served.notified = Some(fd),
            Some((Record::Unnamed(e), _)) => {
                served.notified = Some(None);
                early.push(Record::Unnamed(e));
            }
            Some((r, _)) => early.push(r),
            // End of file (every writer gone) or nothing more yet.
            None => {
                let mut b = [0u8; 1];
                // SAFETY: recv(MSG_PEEK|MSG_DONTWAIT) into a stack byte.
                let n = unsafe {
                    libc::recv(
                        rec.as_raw_fd(),
                        b.as_mut_ptr().cast(),
                        1,
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                if n > 0 {
                    continue; // a record that did not decode: skip it
                }
                return n < 0 && nix::errno::Errno::last() == nix::errno::Errno::EAGAIN;
            }
        }
    }
}

/// Whether every writer of the channel is gone (a peek reads end of file).
fn channel_at_eof(rec: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv(MSG_PEEK|MSG_DONTWAIT) into a stack byte.
    let n = unsafe {
        libc::recv(
            rec.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

/// The secrets' part of the report: every secret of the plan, with the proxy's counts.
fn secret_log(
    plan: &Plan,
    proxy: Option<&crate::net::proxy::Proxy>,
) -> (
    Vec<crate::net::secret::SecretUse>,
    Vec<crate::net::secret::Misdirected>,
) {
    if let Some(p) = proxy {
        return p.secret_log();
    }
    // No proxy ran (the run failed before it): every secret, never injected.
    let uses = plan
        .secrets
        .iter()
        .map(|(name, hosts)| crate::net::secret::SecretUse {
            name: name.clone(),
            hosts: hosts.clone(),
            injections: 0,
        })
        .collect();
    (uses, Vec::new())
}

/// A run with secrets: the proxy's CA, appended to the sandbox's trust bundle.
fn trust_run_ca(plan: &Plan, proxy: &crate::net::proxy::Proxy) -> Result<(), String> {
    if plan.secrets.is_empty() {
        return Ok(());
    }
    let pem = proxy
        .ca_pem()
        .ok_or("the proxy made no CA for the run's secrets")?;
    match &plan.trust {
        Some(b) => b.add(&pem),
        None => Err("the run has secrets but no trust bundle".into()),
    }
}

/// SIGTERM to every process of the sandbox: stage 2 relays it to pid 1, which sends it to
/// every other process of the pid namespace.
fn terminate(stage2: i32) {
    // SAFETY: signal to our own unreaped child.
    unsafe { libc::kill(stage2, libc::SIGTERM) };
}

/// One line explaining a setup failure, with a fix where we know one.
pub fn failure_line(e: &StepError, plan: &Plan) -> String {
    // Ubuntu's AppArmor restriction lets the unshare succeed and denies the capabilities in
    // the new namespace: any step that needs them fails with EPERM or EACCES.
    let in_userns = matches!(
        e.step,
        Step::UnshareUser
            | Step::Setgroups
            | Step::UidMap
            | Step::GidMap
            | Step::Unshare
            | Step::Hostname
            | Step::LoopbackUp
            | Step::NetNs
            | Step::MountPrivate
            | Step::MountRoot
            | Step::MountBind
            | Step::MountRemountRo
            | Step::MountProc
            | Step::MountDev
            | Step::MountTmpfs
            | Step::MountOverlay
            | Step::PivotRoot
    );
    let apparmor = (in_userns && matches!(e.errno, libc::EPERM | libc::EACCES))
        .then(|| crate::apparmor::hint(&crate::apparmor::Facts::probe()))
        .flatten();
    let hint = match (e.step, e.errno) {
        _ if apparmor.is_some() => "",
        (Step::UnshareUser, libc::EPERM | libc::ENOSPC | libc::EACCES) => {
            crate::layers::ns::FIX
        }
        (Step::NetNs, libc::ENOSPC | libc::EPERM) => " (this host limits network namespaces: raise the sysctl user.max_net_namespaces, or allow unshare(CLONE_NEWNET) in the container's seccomp profile; --net host runs without one, on the host's network)",
        (Step::MountProc, libc::EPERM) => " (a fresh /proc cannot be mounted here: the host's /proc is partly covered, as in many containers)",
        (Step::MountOverlay, _) => " (overlayfs in a user namespace needs Linux 5.11+; use repo = \"ro\" or \"rw\")",
        (Step::Exec, libc::ENOENT) => " (not found inside the sandbox: is its directory mounted?)",
        (Step::ProxySocket, libc::ETIMEDOUT | libc::ECANCELED) if !plan.secrets.is_empty() => " (the supervisor did not add the run's CA to the sandbox's trust bundle, so the workload was not started; see the line above)",
        _ => "",
    };
    // Inside a container, its own setting is the cause to name, where it is the likely one.
    let facts = crate::layers::container::Facts::probe();
    let hint = crate::layers::container::hint(e.step, e.errno, facts).unwrap_or(hint);
    let errno = std::io::Error::from_raw_os_error(e.errno).to_string();
    let errno = errno
        .split(" (os error")
        .next()
        .unwrap_or(&errno)
        .to_string();
    let mount = (e.at as usize)
        .checked_sub(1)
        .and_then(|i| plan.mounts.get(i));
    let what = match (e.step, mount) {
        (Step::Exec, _) => format!("exec {}", plan.program.display()),
        (_, Some(op)) => format!("{} {}", e.step.name(), op.dst().display()),
        _ => e.step.name().to_string(),
    };
    match apparmor {
        Some(a) => format!("{what}: {errno} ({a})"),
        None => format!("{what}: {errno}{hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_only_the_last_bytes() {
        let mut t = Tail {
            buf: VecDeque::new(),
            on: true,
        };
        for i in 0..200u32 {
            t.push(&[(i % 251) as u8; 1000]);
        }
        assert_eq!(t.buf.len(), TAIL_BYTES);
        assert_eq!(*t.buf.back().unwrap(), 199);
        let mut big = Tail {
            buf: VecDeque::new(),
            on: true,
        };
        big.push(&vec![7u8; 3 * TAIL_BYTES]);
        assert_eq!(big.buf.len(), TAIL_BYTES);
        let mut off = Tail {
            buf: VecDeque::new(),
            on: false,
        };
        off.push(b"x");
        assert!(off.buf.is_empty());
    }
}

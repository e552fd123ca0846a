//! The caller's terminal stays the caller's. Each test plays a user at a terminal: a pty pair of
//! the test's own, whose slave is sandbox-run's fds 0, 1 and 2 and its controlling terminal
//! (as a shell would start it), with keystrokes typed on the master side before and during the
//! run. From inside the sandbox the probe (`probe tty`) tries to read them from fds 1 and 2,
//! turns echo off, and pushes a byte with TIOCSTI. The command must get a pseudo-terminal of
//! sandbox-run's (isatty, the window size, colours and output in order still work), never hold
//! the caller's terminal (checked in `/proc/PID/fd` of every process under sandbox-run), read
//! nothing the user typed (which is still there for the caller after the run), and leave the
//! terminal's modes as they were, however the run ends. The positive control runs the same
//! probe bare on the same kind of terminal: there the reads and the mode change succeed.

#[path = "support/mod.rs"]
mod support;

use nix::pty::{openpty, OpenptyResult, Winsize};
use nix::sys::termios::{tcgetattr, Termios};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{probe, slack, BIN};

const ROWS: u16 = 37;
const COLS: u16 = 123;

/// The user's terminal: a pty pair; the slave is what sandbox-run gets.
struct Caller {
    master: OwnedFd,
    slave: OwnedFd,
    /// The slave's device number: no process of the sandbox may hold it.
    rdev: u64,
    before: Termios,
    /// Everything read from the master so far.
    seen: Vec<u8>,
}

impl Caller {
    fn new() -> Caller {
        let ws = Winsize {
            ws_row: ROWS,
            ws_col: COLS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let OpenptyResult { master, slave } = openpty(Some(&ws), None).expect("openpty");
        let rdev = nix::sys::stat::fstat(&slave).unwrap().st_rdev;
        let before = tcgetattr(slave.as_fd()).unwrap();
        Caller {
            master,
            slave,
            rdev,
            before,
            seen: Vec::new(),
        }
    }

    /// The user types `text` (a line).
    fn type_in(&self, text: &str) {
        nix::unistd::write(&self.master, text.as_bytes()).unwrap();
    }

    /// `cmd` with the slave as its fds 0, 1 and 2 and as the controlling terminal of a session
    /// of its own (its process group is the terminal's foreground one, as under a shell).
    fn start(&self, cmd: &mut Command) -> Child {
        self.start_with_stdout(cmd, Stdio::from(self.slave.try_clone().unwrap()))
    }

    /// [`Caller::start`], with `stdout` as the command's fd 1.
    fn start_with_stdout(&self, cmd: &mut Command, stdout: Stdio) -> Child {
        let io = || Stdio::from(self.slave.try_clone().unwrap());
        self.start_on(cmd.stdin(io()).stdout(stdout).stderr(io()))
    }

    /// [`Caller::start`], with `stderr` as the command's fd 2.
    fn start_with_stderr(&self, cmd: &mut Command, stderr: Stdio) -> Child {
        let io = || Stdio::from(self.slave.try_clone().unwrap());
        self.start_on(cmd.stdin(io()).stdout(io()).stderr(stderr))
    }

    /// Start `cmd` (its fds set) in a session of its own whose controlling terminal is fd 0.
    fn start_on(&self, cmd: &mut Command) -> Child {
        // SAFETY: setsid and TIOCSCTTY on fd 0 between fork and exec: async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().expect("start on the terminal")
    }

    /// Read what the terminal shows until `want` appears (true) or `bound` passes (false).
    fn read_until(&mut self, want: &str, bound: Duration) -> bool {
        let t = Instant::now();
        loop {
            if String::from_utf8_lossy(&self.seen).contains(want) {
                return true;
            }
            if t.elapsed() > bound {
                return false;
            }
            self.read_for(Duration::from_millis(50));
        }
    }

    /// Read what the terminal shows for `d`.
    fn read_for(&mut self, d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            let mut fds = [nix::poll::PollFd::new(
                self.master.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let left = d.saturating_sub(t.elapsed()).as_millis() as u16;
            if nix::poll::poll(&mut fds, left).unwrap_or(0) <= 0 {
                return;
            }
            let mut buf = [0u8; 4096];
            match nix::unistd::read(&self.master, &mut buf) {
                Ok(n) if n > 0 => self.seen.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// What the caller's next program would read from the terminal now (without waiting).
    fn pending_input(&self) -> String {
        let mut got = Vec::new();
        loop {
            let mut fds = [nix::poll::PollFd::new(
                self.slave.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            if nix::poll::poll(&mut fds, 100u16).unwrap_or(0) <= 0 {
                break;
            }
            let mut buf = [0u8; 256];
            match nix::unistd::read(&self.slave, &mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// The terminal's modes are those it had before the run.
    fn assert_modes_kept(&self, when: &str) {
        let now = tcgetattr(self.slave.as_fd()).unwrap();
        let (a, b): (libc::termios, libc::termios) = (self.before.clone().into(), now.into());
        assert_eq!(
            (a.c_iflag, a.c_oflag, a.c_cflag, a.c_lflag, a.c_cc),
            (b.c_iflag, b.c_oflag, b.c_cflag, b.c_lflag, b.c_cc),
            "{when}: the terminal's modes changed"
        );
    }
}

/// A repo and a profile that allows the probe; the cgroup best-effort (not what this tests).
fn fixture(name: &str) -> PathBuf {
    fixture_with(name, "")
}

/// [`fixture`] with more TOML.
fn fixture_with(name: &str, more: &str) -> PathBuf {
    let base = support::scratch(&format!("terminal-{name}"));
    let extra =
        format!("[layers]\ncgroup = \"best-effort\"\n[limits]\nkill_grace = \"1s\"\n{more}");
    support::probe_profile(&base, "validate", "", &extra);
    base
}

fn sandbox(base: &Path, timeout: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("-q")
        .arg("--profile")
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"))
        .args(["--timeout", timeout, "--"])
        .arg(probe())
        .args(args);
    c
}

fn wait_bounded(child: &mut Child, bound: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t.elapsed() > bound {
            let _ = child.kill();
            panic!("sandbox-run did not end within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every process under `root` (its descendants, by parent pid), `root` itself excluded.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // after the command name's closing parenthesis: state, then ppid
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: i32 = rest.split(' ').nth(1).unwrap().parse().unwrap();
        parent.push((pid, ppid));
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// The processes under `root` that hold the device `rdev` open, and whether the workload (a
/// process running `probe <attack>`) was among those whose fds could be read.
fn holders(root: i32, rdev: u64, attack: &str) -> (Vec<String>, bool) {
    let mut bad = Vec::new();
    let mut saw_workload = false;
    for pid in descendants(root) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.len() > 1 && args[0].ends_with(b"/probe") && args[1] == attack.as_bytes() {
            saw_workload = true;
        }
        for fd in fds.flatten() {
            if let Ok(st) = nix::sys::stat::stat(&fd.path()) {
                if st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == rdev {
                    bad.push(format!("pid {pid} fd {}", fd.file_name().to_string_lossy()));
                }
            }
        }
    }
    (bad, saw_workload)
}

/// The attack, and the things that must still work: from a real terminal, the command's
/// reads of fds 1 and 2 get nothing the user typed (before or during the run), echo-off and
/// TIOCSTI leave the caller's terminal as it was, and no process of the sandbox holds it;
/// isatty, the window size, a colour and the order of the output come through.
#[test]
fn the_command_gets_a_pty_of_its_own_and_never_the_callers_keystrokes() {
    attack_from_a_terminal(false);
}

/// The same, with stage 2 re-exec'd rather than forked (its fds are set up the other way).
#[test]
fn the_same_with_stage_2_reexecd() {
    attack_from_a_terminal(true);
}

fn attack_from_a_terminal(reexec: bool) {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture(if reexec { "attack-exec" } else { "attack" });
    let mut term = Caller::new();
    term.type_in("typed-ahead\n");
    let mut cmd = sandbox(&base, "30s", &["tty", "2000"]);
    if reexec {
        cmd.env("SANDBOX_RUN_STAGE2", "exec");
    }
    let mut child = term.start(&mut cmd);
    assert!(
        term.read_until("waiting", slack(20.0)),
        "no `waiting` from the probe; the terminal showed:\n{}",
        term.shown()
    );
    // While the command waits for keystrokes: the user types, and nothing under sandbox-run
    // holds the terminal.
    let (bad, saw) = holders(child.id() as i32, term.rdev, "tty");
    term.type_in("typed-late\n");
    assert!(
        bad.is_empty(),
        "the sandbox holds the caller's terminal: {bad:?}"
    );
    assert!(saw, "the workload's fds could not be inspected");
    let st = wait_bounded(&mut child, slack(20.0));
    term.read_for(Duration::from_millis(300));
    let shown = term.shown();
    assert!(st.success(), "sandbox-run failed: {st:?}\n{shown}");
    // The attack got nothing.
    for line in [
        "typed-ahead fd1: nothing",
        "typed-ahead fd2: nothing",
        "typed-late fd1: nothing",
        "typed-late fd2: nothing",
    ] {
        assert!(shown.contains(line), "want `{line}` in:\n{shown}");
    }
    let input = term.pending_input();
    assert_eq!(
        input, "typed-ahead\ntyped-late\n",
        "what the user typed is not all there for the caller (the command took it, or pushed more)"
    );
    term.assert_modes_kept("after a normal exit");
    // It still looks and works like a terminal, output in order.
    let order = [
        "isatty 0=0 1=1 2=1",
        &format!("winsize {ROWS}x{COLS}"),
        "colour \x1b[31mred\x1b[0m",
        "typed-ahead fd1",
        "waiting",
        "echo-off fd1",
        "tiocsti fd1",
        "done",
        "tty: ok",
    ];
    let mut at = 0;
    for want in order {
        let Some(i) = shown[at..].find(want) else {
            panic!("want `{want}` after byte {at} of:\n{shown:?}");
        };
        at += i + want.len();
    }
    // The output is passed verbatim: the caller's terminal turns \n into \r\n once.
    assert!(
        shown.contains("done\r\n") && !shown.contains("\r\r\n"),
        "{shown:?}"
    );
}

/// The positive control: the same probe, bare on a terminal, reads what the user typed and
/// changes the terminal's modes (what the sandbox must prevent is real).
#[test]
fn the_probe_bare_on_a_terminal_reads_the_keystrokes_and_turns_echo_off() {
    let mut term = Caller::new();
    term.type_in("typed-ahead\n");
    let mut cmd = Command::new(probe());
    cmd.args(["tty", "1000"]);
    let mut child = term.start(&mut cmd);
    assert!(term.read_until("waiting", slack(10.0)), "{}", term.shown());
    term.type_in("typed-late\n");
    wait_bounded(&mut child, slack(10.0));
    term.read_for(Duration::from_millis(200));
    let shown = term.shown();
    assert!(
        shown.contains("typed-ahead fd1: \"typed-ahead\\n\""),
        "{shown}"
    );
    assert!(
        shown.contains("typed-late fd1: \"typed-late\\n\""),
        "{shown}"
    );
    assert!(shown.contains("echo-off fd1: ok"), "{shown}");
    let now: libc::termios = tcgetattr(term.slave.as_fd()).unwrap().into();
    assert_eq!(now.c_lflag & libc::ECHO, 0, "echo should be off now");
}

/// How a run that holds the terminal open may end.
enum End {
    Timeout,
    /// SIGTERM to sandbox-run.
    Term,
    /// SIGKILL to sandbox-run.
    KillSupervisor,
    /// SIGKILL to every process under sandbox-run (the command tree).
    KillTree,
}

/// The command turns echo off on everything it has and then waits; the run ends the hard way.
/// The caller's terminal keeps its modes, and what the user typed is still there.
fn modes_survive(end: End, name: &str) {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture(name);
    let mut term = Caller::new();
    term.type_in("typed-ahead\n");
    let timeout = if matches!(end, End::Timeout) {
        "3s"
    } else {
        "60s"
    };
    let mut child = term.start(&mut sandbox(&base, timeout, &["tty", "0", "sleep"]));
    assert!(
        term.read_until("done", slack(20.0)),
        "no `done` from the probe:\n{}",
        term.shown()
    );
    let pid = child.id() as i32;
    match end {
        End::Timeout => {}
        End::Term => {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
        }
        End::KillSupervisor => child.kill().unwrap(),
        End::KillTree => {
            for p in descendants(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    wait_bounded(&mut child, slack(20.0));
    // What sandbox-run left behind (a SIGKILLed supervisor's sandbox dies by its parent-death
    // signal) is gone before we look.
    std::thread::sleep(Duration::from_millis(200));
    term.read_for(Duration::from_millis(200));
    assert!(
        term.shown().contains("typed-ahead fd1: nothing"),
        "{}",
        term.shown()
    );
    term.assert_modes_kept(name);
    assert_eq!(term.pending_input(), "typed-ahead\n", "{name}");
}

#[test]
fn the_modes_survive_a_timeout() {
    modes_survive(End::Timeout, "timeout");
}

#[test]
fn the_modes_survive_sigterm_to_sandbox_run() {
    modes_survive(End::Term, "sigterm");
}

#[test]
fn the_modes_survive_sigkill_to_sandbox_run() {
    modes_survive(End::KillSupervisor, "sigkill");
}

#[test]
fn the_modes_survive_sigkill_of_the_command_tree() {
    modes_survive(End::KillTree, "killtree");
}

/// The caller's window changes size during the run: the command's pty follows, and the command
/// gets SIGWINCH.
#[test]
fn a_resize_reaches_the_command() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("winch");
    let mut term = Caller::new();
    let mut child = term.start(&mut sandbox(&base, "30s", &["winch", "10"]));
    assert!(
        term.read_until("waiting-winch", slack(20.0)),
        "{}",
        term.shown()
    );
    let ws = libc::winsize {
        ws_row: 50,
        ws_col: 160,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ from a winsize we own onto our master (the kernel signals the
    // terminal's foreground process group: sandbox-run's).
    assert_eq!(
        unsafe { libc::ioctl(term.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
        0
    );
    let st = wait_bounded(&mut child, slack(20.0));
    term.read_for(Duration::from_millis(200));
    let shown = term.shown();
    assert!(shown.contains(&format!("winsize {ROWS}x{COLS}")), "{shown}");
    assert!(shown.contains("winch: ok winsize 50x160"), "{shown}");
    assert!(st.success(), "{st:?}: {shown}");
}

/// The report says what the command got: `pty` for both on a terminal; without one, the
/// caller's own stdout (`inherited`, no pty made) and a relayed pipe for stderr. With `capture` (the `validate`
/// profile's default), pipes either way, as before.
#[test]
fn the_report_says_what_the_command_got() {
    if !support::sandbox_works() {
        return;
    }
    // (stderr off a terminal is a pipe of sandbox-run's either way: it reads the command's
    // error texts for the refusals they name)
    report_says(
        "report",
        "[report]\ncapture = false\n",
        "pty",
        ["inherited", "pipe"],
    );
    report_says("report-capture", "", "pipe", ["pipe", "pipe"]);
}

fn report_says(name: &str, more: &str, on_tty: &str, off_tty: [&str; 2]) {
    let base = fixture_with(name, more);
    let report = base.join("report.json");
    let with_report = || {
        let mut c = sandbox(&base, "30s", &["tty", "0"]);
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let split = args.iter().position(|a| a == "--").unwrap();
        c = Command::new(BIN);
        c.args(&args[..split])
            .arg("--report")
            .arg(&report)
            .args(&args[split..]);
        c
    };
    let term = Caller::new();
    let mut cmd = with_report();
    let mut child = term.start(&mut cmd);
    wait_bounded(&mut child, slack(20.0));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["stdout"], on_tty, "{v}");
    assert_eq!(v["sandbox"]["stderr"], on_tty, "{v}");

    // No terminal: pipes of the caller's, inherited, and no pty anywhere.
    let out = with_report().stdin(Stdio::null()).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("isatty 0=0 1=0 2=0"), "{shown}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["stdout"], off_tty[0], "{v}");
    assert_eq!(v["sandbox"]["stderr"], off_tty[1], "{v}");
}

/// Variants the pty was not written for: only stderr is the terminal (stdout a pipe of the
/// caller's), and the caller leaked its terminal to sandbox-run as fd 5 (no close-on-exec).
/// Only fd 2 gets a pty; nothing under sandbox-run holds the terminal, by any fd number.
#[test]
fn the_terminal_on_stderr_only_or_leaked_above_2_is_not_held() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("variants");
    let term = Caller::new();
    term.type_in("typed-ahead\n");
    let (out_r, out_w) = nix::unistd::pipe().unwrap();
    let mut cmd = sandbox(&base, "30s", &["tty", "1500"]);
    let leak = term.slave.as_raw_fd();
    // SAFETY: dup2 between fork and exec: async-signal-safe; fd 5 is the child's own.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(leak, 5) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = term.start_with_stdout(&mut cmd, Stdio::from(out_w));
    // The Command keeps its copy of the pipe's write end until dropped.
    drop(cmd);
    // Looked at all along the run: stage 2, pid 1 and the workload each hold fds in turn.
    let mut bad = Vec::new();
    let t = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < slack(20.0), "sandbox-run did not end");
        bad.extend(holders(child.id() as i32, term.rdev, "tty").0);
        std::thread::sleep(Duration::from_millis(50));
    };
    bad.sort();
    bad.dedup();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(out_r), &mut out).unwrap();
    assert!(st.success(), "{st:?} {out}");
    assert!(
        bad.is_empty(),
        "the sandbox holds the caller's terminal: {bad:?}"
    );
    assert!(out.contains("isatty 0=0 1=0 2=1"), "{out}");
    assert!(out.contains("typed-ahead fd2: nothing"), "{out}");
    term.assert_modes_kept("stderr only");
    assert_eq!(term.pending_input(), "typed-ahead\n");
}

/// Another variant: stdout and stderr on two different terminals. Each gets a pty of its own;
/// neither terminal is held, read or changed.
#[test]
fn two_terminals_get_two_ptys() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("two");
    let mut out = Caller::new();
    let err = Caller::new();
    out.type_in("typed-ahead\n");
    err.type_in("typed-ahead\n");
    let mut cmd = sandbox(&base, "30s", &["tty", "500"]);
    let mut child = out.start_with_stderr(&mut cmd, Stdio::from(err.slave.try_clone().unwrap()));
    drop(cmd);
    let mut bad = Vec::new();
    let t = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < slack(20.0), "sandbox-run did not end");
        for term in [&out, &err] {
            bad.extend(holders(child.id() as i32, term.rdev, "tty").0);
        }
        out.read_for(Duration::from_millis(50));
    };
    out.read_for(Duration::from_millis(200));
    let shown = out.shown();
    assert!(st.success(), "{st:?} {shown}");
    bad.sort();
    bad.dedup();
    assert!(
        bad.is_empty(),
        "the sandbox holds a caller's terminal: {bad:?}"
    );
    assert!(shown.contains("isatty 0=0 1=1 2=1"), "{shown}");
    assert!(shown.contains("typed-ahead fd2: nothing"), "{shown}");
    for (name, term) in [("stdout's", &out), ("stderr's", &err)] {
        term.assert_modes_kept(name);
        assert_eq!(term.pending_input(), "typed-ahead\n", "{name}");
    }
}

/// What a terminal does with bytes besides showing them: a query (`ESC [ 6 n`) makes it type
/// an answer into the caller's input, `ESC ] 52` sets the clipboard the user pastes from next,
/// others set the title or the paste mode for after the run. Only text, colours, cursor moves
/// and line erases reach the caller's terminal from the sandbox, the cursor is shown again at
/// the end, and one line says how many sequences were held back. The control writes the same
/// bytes bare: all of them reach the terminal.
#[test]
fn only_text_colours_and_cursor_moves_reach_the_callers_terminal() {
    let payload: &[u8] = b"<\x1b[31mred\x1b[0m|\x1b[6n|\x1b]52;c;cm0gLXJmIH4K\x07|\x1b]0;title\x1b\\|\x1b[?2004l|\xc2\x9b6n|\x1b[?25l>";
    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    let has = |seen: &[u8], what: &[u8]| seen.windows(what.len()).any(|w| w == what);

    let mut bare = Caller::new();
    let mut cmd = Command::new(probe());
    cmd.args(["out-hex", &hex]);
    let mut child = bare.start(&mut cmd);
    wait_bounded(&mut child, slack(10.0));
    bare.read_for(Duration::from_millis(300));
    assert!(has(&bare.seen, payload), "control: {:?}", bare.shown());

    let base = fixture("sequences");
    let mut term = Caller::new();
    let mut child = term.start(&mut sandbox(&base, "30s", &["out-hex", &hex]));
    let st = wait_bounded(&mut child, slack(30.0));
    assert!(
        term.read_until("control sequences", slack(5.0)),
        "{st:?}: {:?}",
        term.shown()
    );
    let seen = term.seen.clone();
    assert!(
        has(&seen, b"<\x1b[31mred\x1b[0m|||||6n|\x1b[?25l>"),
        "text and colours pass, the rest is held back: {:?}",
        term.shown()
    );
    for bad in [
        &b"\x1b[6n"[..],
        b"\x1b]",
        b"\x1b[?2004",
        b"\xc2\x9b",
        b"cm0gLXJmIH4K",
        b"title",
    ] {
        assert!(!has(&seen, bad), "{bad:?} reached: {:?}", term.shown());
    }
    let end = seen.windows(2).rposition(|w| w == b"25").unwrap();
    assert!(
        has(&seen, b"\x1b[?25h") && seen[end + 2] == b'h',
        "the cursor is shown again: {:?}",
        term.shown()
    );
    assert!(
        term.shown().contains(
            "sandbox-run: terminal: 5 control sequences in the command's stdout were not passed"
        ),
        "{:?}",
        term.shown()
    );
    assert!(st.success(), "{st:?}");
}

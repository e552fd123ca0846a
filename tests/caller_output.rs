//! The timeout and signals hold whatever the caller does with sandbox-run's own stdout and
//! stderr. When sandbox-run pipes the command's output (`--capture` with `--report`, `--report
//! -`, `validate --gene`), it writes what it reads to its own stdout and stderr: a caller that
//! stops reading them must not keep the sandbox alive past its timeout, nor make sandbox-run
//! deaf to SIGTERM. Each attack is a caller that holds a pipe open and never reads it, beside a
//! positive control: a caller that reads, late, gets every byte in order up to the output cap.

#[path = "support/mod.rs"]
mod support;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::{probe, slack, BIN};

/// Lines of `probe write-lines` a command never finishes printing (16 TB).
const FOREVER: u64 = 1_000_000_000_000;

/// A repo and a profile that allows the probe, with these `[limits]` (a 1 s kill grace when
/// empty), and the cgroup layer best-effort (this file tests the supervisor's output path, not
/// the cgroup).
fn fixture(name: &str, limits: &str) -> PathBuf {
    fixture_on("validate", name, limits)
}

/// [`fixture`] on another base profile.
fn fixture_on(profile: &str, name: &str, limits: &str) -> PathBuf {
    let base = support::scratch(&format!("caller-output-{name}"));
    let limits = if limits.is_empty() {
        "kill_grace = \"1s\""
    } else {
        limits
    };
    let extra = format!("[layers]\ncgroup = \"best-effort\"\n[limits]\n{limits}\n");
    support::probe_profile(&base, profile, "", &extra);
    base
}

fn sandbox(base: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("-q")
        .arg("--profile")
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"))
        .stdin(Stdio::null());
    c
}

/// `validate --gene` with one command, the probe's `args` (its path first).
fn validate(base: &Path, args: &[&str], report: &str) -> Command {
    let cmd = std::iter::once(probe().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let gene = base.join("gene.json");
    let json = serde_json::json!({"type": "Gene", "id": "gene_caller", "validation": [cmd]});
    std::fs::write(&gene, json.to_string()).unwrap();
    let mut c = Command::new(BIN);
    c.args(["validate", "--timeout", "2s", "--profile"])
        .arg(base.join("p.toml"))
        .arg("--gene")
        .arg(&gene)
        .arg("--repo")
        .arg(base.join("repo"))
        .args(["--report", report])
        .stdin(Stdio::null());
    c
}

/// Wait for `child` at most `bound`; past it, SIGKILL it and return `None` (a hang).
fn wait_bounded(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if t.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read all of `r` on a thread.
fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// Probe processes still running whose command line holds `marker` (this checkout's probe).
fn survivors(marker: &str) -> Vec<String> {
    let exe = probe().display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.starts_with(&exe) && cmd.contains(marker) {
                out.push(format!("{name}: {cmd}"));
            }
        }
    }
    out
}

/// Bytes waiting in the pipe whose read end is `fd`.
fn queued(fd: i32) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD into an int we own, on an fd we own.
    unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    n
}

/// Wait until the pipe `fd` is full (holds bytes, and no more for 300 ms): the caller's pipe
/// has stopped sandbox-run's writes.
fn wait_full(fd: i32) {
    let t = Instant::now();
    let mut last = -1;
    let mut since = Instant::now();
    while t.elapsed() < slack(10.0) {
        let n = queued(fd);
        if n != last {
            last = n;
            since = Instant::now();
        } else if n > 0 && since.elapsed() > Duration::from_millis(300) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the caller's pipe never filled ({last} bytes)");
}

/// Every byte of `got` is the start of what `probe write-lines` prints, in order.
fn assert_lines_in_order(got: &[u8], what: &str) {
    let mut expect = Vec::with_capacity(got.len() + 16);
    let mut i = 0u64;
    while expect.len() < got.len() {
        expect.extend_from_slice(format!("{i:015}\n").as_bytes());
        i += 1;
    }
    if let Some(at) = got.iter().zip(&expect).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {at} differs: got {:?}, expected {:?}",
            String::from_utf8_lossy(&got[at.saturating_sub(16)..(at + 16).min(got.len())]),
            String::from_utf8_lossy(&expect[at.saturating_sub(16)..at + 16]),
        );
    }
}

fn report_at(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    support::schema::assert_valid_report(&v);
    v
}

/// A run timed out, said so, and listed `output`: what the caller did not take was dropped.
fn assert_timed_out_and_dropped(v: &serde_json::Value) {
    let res = &v["results"][0];
    assert_eq!(res["status"], "timeout", "{v:#}");
    assert_eq!(res["exit_code"], 124, "{v:#}");
    assert!(
        res["limits_hit"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("output")),
        "{v:#}"
    );
}

/// Timeout 2 s + grace 1 s, and the margin of these tests.
fn bound() -> Duration {
    Duration::from_secs(3) + slack(2.0)
}

/// `--capture`, a command that prints forever on stdout, and a caller that never reads
/// sandbox-run's stdout (it holds the pipe open): exit 124 within the timeout and grace, no
/// process of the sandbox left, the report says `timeout` and `output`, stderr says what was
/// dropped. Before, the supervisor blocked in its write to the full pipe: the timeout never
/// acted and the command printed on.
#[test]
fn a_caller_that_never_reads_stdout_does_not_hold_the_timeout() {
    if !support::sandbox_works() {
        return;
    }
    let other = never_read(1, "stdout");
    assert!(
        other.contains("sandbox-run: output: the caller stopped reading stdout;"),
        "{other}"
    );
}

/// The same with stderr: the command prints forever on its stderr, the caller never reads
/// sandbox-run's stderr (where also its own lines go). The report says what stderr could not.
#[test]
fn a_caller_that_never_reads_stderr_does_not_hold_the_timeout() {
    if !support::sandbox_works() {
        return;
    }
    never_read(2, "stderr");
}

/// A command printing forever on its fd `fd` under `--capture --timeout 2s`, with the caller
/// holding that stream of sandbox-run's open and never reading it: exit 124 within
/// [`bound`], nothing of the sandbox left, the report says `timeout` and `output`. Returns
/// what came on the other stream.
fn never_read(fd: i32, name: &str) -> String {
    let base = fixture(name, "");
    let report = base.join("report.json");
    let n = (FOREVER + fd as u64).to_string();
    let t = Instant::now();
    let mut child = sandbox(&base)
        .arg("--report")
        .arg(&report)
        .args(["--capture", "--timeout", "2s", "--"])
        .arg(probe())
        .args(["write-lines", &fd.to_string(), &n])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (held, other): (Box<dyn Read + Send>, _) = match fd {
        1 => (Box::new(out), reader(err)),
        _ => (Box::new(err), reader(out)),
    };
    let st = wait_bounded(&mut child, bound());
    let took = t.elapsed();
    drop(held);
    let other = String::from_utf8_lossy(&other.join().unwrap()).into_owned();
    assert_eq!(
        st.and_then(|s| s.code()),
        Some(124),
        "took {took:?}; {other}"
    );
    assert!(survivors(&n).is_empty(), "{:?}", survivors(&n));
    assert_timed_out_and_dropped(&report_at(&report));
    other
}

/// The same with a terminal nobody reads (its output queue full, as with a window that stopped
/// scrolling or Ctrl-S) and with a socket (node gives its child processes socket pairs).
#[test]
fn a_terminal_or_a_socket_nobody_reads_does_not_hold_the_timeout() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("tty-socket", "");
    let report = base.join("report.json");
    let pty = nix::pty::openpty(None, None).unwrap();
    let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    for (what, out, n) in [
        ("terminal", pty.slave, FOREVER + 7),
        ("socket", std::os::fd::OwnedFd::from(theirs), FOREVER + 8),
    ] {
        let n = n.to_string();
        let t = Instant::now();
        let mut child = sandbox(&base)
            .arg("--report")
            .arg(&report)
            .args(["--capture", "--timeout", "2s", "--"])
            .arg(probe())
            .args(["write-lines", "1", &n])
            .stdout(Stdio::from(out))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let st = wait_bounded(&mut child, bound());
        let took = t.elapsed();
        assert_eq!(
            st.and_then(|s| s.code()),
            Some(124),
            "{what}: took {took:?}"
        );
        assert!(survivors(&n).is_empty(), "{what}: {:?}", survivors(&n));
        assert_timed_out_and_dropped(&report_at(&report));
    }
    drop((pty.master, mine));
}

/// SIGTERM to sandbox-run while the caller's stdout is full: it tears the sandbox down and
/// exits 143 at once (the command dies of the relayed SIGTERM), not when the caller reads.
#[test]
fn sigterm_acts_while_the_caller_does_not_read() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("sigterm", "");
    let report = base.join("report.json");
    let n = (FOREVER + 3).to_string();
    let mut child = sandbox(&base)
        .arg("--report")
        .arg(&report)
        .args(["--capture", "--timeout", "60s", "--"])
        .arg(probe())
        .args(["write-lines", "1", &n])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = child.stdout.take().unwrap();
    wait_full(held.as_raw_fd());
    let t = Instant::now();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_bounded(&mut child, Duration::from_secs(1) + slack(2.0));
    let took = t.elapsed();
    drop(held);
    assert_eq!(st.and_then(|s| s.code()), Some(143), "took {took:?}");
    assert!(survivors(&n).is_empty(), "{:?}", survivors(&n));
    let v = report_at(&report);
    assert_eq!(v["results"][0]["exit_code"], 143, "{v:#}");
}

/// Positive control: a caller that starts reading late (the command waits meanwhile, nothing
/// is dropped) gets every byte in order, up to the output cap, then the cap's line; under the
/// cap, all of it and no line; and output that the command finished printing before the caller
/// reads (the sandbox has ended) still arrives whole.
#[test]
fn a_caller_that_reads_late_gets_every_byte_in_order_up_to_the_cap() {
    if !support::sandbox_works() {
        return;
    }
    // a grace longer than the caller's pause at the end (the last case)
    let base = fixture("reads", "kill_grace = \"5s\"\noutput = \"1M\"");
    let report = base.join("report.json");
    let run = |lines: u64, pause: Duration| {
        let mut child = sandbox(&base)
            .arg("--report")
            .arg(&report)
            .args(["--capture", "--timeout", "60s", "--"])
            .arg(probe())
            .args(["write-lines", "1", &lines.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        // A caller busy elsewhere before it reads.
        wait_full(out.as_raw_fd());
        std::thread::sleep(pause);
        let out = reader(out);
        let err = reader(child.stderr.take().unwrap());
        let st = wait_bounded(&mut child, slack(30.0));
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        let err = String::from_utf8_lossy(&err).into_owned();
        assert_eq!(st.and_then(|s| s.code()), Some(0), "{err}");
        assert!(!err.contains("stopped reading"), "{err}");
        (out, err, report_at(&report))
    };

    // 2 MiB through a 1 MiB cap, the caller away longer than the grace: the first MiB, in order
    let (out, err, v) = run(2 * 65536, Duration::from_millis(6000));
    assert_eq!(out.len(), 1 << 20, "{err}");
    assert_lines_in_order(&out, "stdout");
    assert!(
        err.contains("sandbox-run: output: stdout passed the 1M cap; the rest was dropped"),
        "{err}"
    );
    assert!(err.contains("write-lines: ok lines=131072"), "{err}");
    assert_eq!(v["results"][0]["limits_hit"], serde_json::json!(["output"]));

    // under the cap: everything
    let (out, err, v) = run(40000, Duration::from_millis(1500));
    assert_eq!(out.len(), 40000 * 16, "{err}");
    assert_lines_in_order(&out, "stdout");
    assert!(!err.contains("sandbox-run: output"), "{err}");
    assert_eq!(v["results"][0]["limits_hit"], serde_json::json!([]));

    // 96 KiB: the command is done and its sandbox gone before the caller reads
    let (out, err, v) = run(6144, Duration::from_millis(1500));
    assert_eq!(out.len(), 6144 * 16, "{err}");
    assert_lines_in_order(&out, "stdout");
    assert!(err.contains("write-lines: ok lines=6144"), "{err}");
    assert_eq!(v["results"][0]["limits_hit"], serde_json::json!([]));
}

/// `--report -`: the command's stdout goes to sandbox-run's stderr, which the caller never
/// reads; it reads stdout, where the report comes, complete, at the timeout.
#[test]
fn report_to_stdout_with_stderr_unread_still_times_out_and_writes_the_report() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("report-stdout", "");
    let n = (FOREVER + 4).to_string();
    let t = Instant::now();
    let mut child = sandbox(&base)
        .args(["--report", "-", "--timeout", "2s", "--"])
        .arg(probe())
        .args(["write-lines", "1", &n])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = child.stderr.take().unwrap();
    let out = reader(child.stdout.take().unwrap());
    let st = wait_bounded(&mut child, bound());
    let took = t.elapsed();
    drop(held);
    let out = String::from_utf8_lossy(&out.join().unwrap()).into_owned();
    assert_eq!(st.and_then(|s| s.code()), Some(124), "took {took:?}; {out}");
    assert!(survivors(&n).is_empty(), "{:?}", survivors(&n));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    support::schema::assert_valid_report(&v);
    assert_timed_out_and_dropped(&v);
}

/// `validate --gene` pipes always: the same with its report on stdout (stderr never read),
/// and with its report in a file (stdout never read).
#[test]
fn validate_gene_holds_the_timeout_whatever_the_caller_reads() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("gene", "");
    let n = (FOREVER + 5).to_string();
    let t = Instant::now();
    let mut child = validate(&base, &["write-lines", "1", &n], "-")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = child.stderr.take().unwrap();
    let out = reader(child.stdout.take().unwrap());
    let st = wait_bounded(&mut child, bound());
    let took = t.elapsed();
    drop(held);
    let out = String::from_utf8_lossy(&out.join().unwrap()).into_owned();
    assert_eq!(st.and_then(|s| s.code()), Some(124), "took {took:?}; {out}");
    assert!(survivors(&n).is_empty(), "{:?}", survivors(&n));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    support::schema::assert_valid_report(&v);
    assert_timed_out_and_dropped(&v);

    let report = base.join("report.json");
    let n = (FOREVER + 6).to_string();
    let t = Instant::now();
    let mut child = validate(&base, &["write-lines", "1", &n], report.to_str().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = child.stdout.take().unwrap();
    let st = wait_bounded(&mut child, bound());
    let took = t.elapsed();
    drop(held);
    assert_eq!(st.and_then(|s| s.code()), Some(124), "took {took:?}");
    assert!(survivors(&n).is_empty(), "{:?}", survivors(&n));
    assert_timed_out_and_dropped(&report_at(&report));
}

/// `--net filtered`: the proxy says on sandbox-run's stderr which host it denied, from its own
/// thread. With that stderr full (the command filled it, the caller never reads it) the line
/// must not block either: before, the proxy's thread blocked in its write holding std's stderr
/// lock, and sandbox-run hung at its own next line after the teardown, the report unwritten.
#[test]
fn a_proxy_line_to_a_full_stderr_does_not_hang_sandbox_run() {
    if !support::sandbox_works() {
        return;
    }
    if !Path::new("/usr/bin/curl").exists() {
        eprintln!("skip: curl not installed");
        return;
    }
    let base = fixture_on("ci", "proxy", "");
    let report = base.join("report.json");
    let repo = base.join("repo");
    // 150 KB on stderr (more than the caller's pipe takes), a pause for it to go as far as it
    // can, then a connection the proxy denies.
    std::fs::write(
        repo.join("fill-then-connect.sh"),
        "i=0\nwhile [ $i -lt 2000 ]; do echo eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee >&2; i=$((i+1)); done\n\
         sleep 1\ncurl -sS https://denied.invalid/ >/dev/null 2>&1\nsleep 100\n",
    )
    .unwrap();
    let t = Instant::now();
    let mut child = sandbox(&base)
        .current_dir(&repo)
        .arg("--report")
        .arg(&report)
        .args(["--capture", "--net", "filtered", "--timeout", "3s", "--"])
        .args(["sh", "fill-then-connect.sh"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = child.stderr.take().unwrap();
    let st = wait_bounded(&mut child, Duration::from_secs(4) + slack(2.0));
    let took = t.elapsed();
    drop(held);
    assert_eq!(st.and_then(|s| s.code()), Some(124), "took {took:?}");
    assert!(survivors_named("fill-then-connect.sh").is_empty());
    let v = report_at(&report);
    assert_timed_out_and_dropped(&v);
    let conns = &v["sandbox"]["network"]["connections"];
    assert_eq!(conns[0]["host"], "denied.invalid", "{v:#}");
    assert_eq!(conns[0]["allowed"], false, "{v:#}");
}

/// Processes whose command line holds `marker` (other than this test process).
fn survivors_named(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (name != me && name.bytes().all(|b| b.is_ascii_digit()) && cmd.contains(marker))
                .then(|| format!("{name}: {cmd}"))
        })
        .collect()
}

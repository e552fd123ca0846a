//! Nothing a sandboxed command starts outlives its time limit or sandbox-run itself.
//! Each test looks for leftovers in /proc by a marker only its own run carries.

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{probe, slack, BIN};

/// A repo and a profile that allows the probe (by exact path) and node, with the cgroup
/// layer best-effort (this file tests the timeout and signal chain, not the cgroup).
fn fixture(name: &str) -> PathBuf {
    let base = support::scratch(&format!("teardown-{name}"));
    let extra = "repo = \"rw\"\n[layers]\ncgroup = \"best-effort\"\n";
    support::probe_profile(&base, "validate", "programs = [\"node\"]", extra);
    base
}

fn sandbox(base: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("-q")
        .arg("--profile")
        .arg(base.join("p.toml"))
        .arg("--repo")
        .arg(base.join("repo"));
    c
}

/// Processes whose command line contains `marker` (other than ourselves).
fn survivors(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    // Only this checkout's processes: another checkout's tests may run the same probe line.
    let ours = probe().display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && cmd.contains(&ours) {
                out.push(format!("{name}: {cmd}"));
            }
        }
    }
    out
}

/// The probe processes among [`survivors`]: sandbox-run's own command line carries the marker
/// too, and so, for a moment, does its forked child before it execs stage 2.
fn probes(marker: &str) -> usize {
    let exe = format!(": {}", probe().display());
    survivors(marker)
        .iter()
        .filter(|s| s.contains(&exe))
        .count()
}

#[test]
fn a_tree_that_ignores_sigterm_and_a_daemon_are_gone_after_timeout_and_grace() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("timeout");
    let marker = base.join("repo/daemon-alive");
    // sh is not on the profile: the probe forks the daemon itself, then ignores SIGTERM.
    // The daemon writes only after this run should long be over.
    let bound = slack(3.0);
    let daemon_secs = (bound.as_secs() + 1).to_string();
    // Time enough for the parent to fork the daemon and exit (1 s here, 10 s under TCG).
    let timeout = format!("{}s", slack(1.0).as_secs());
    let started = Instant::now();
    let mut child = sandbox(&base)
        .args(["--timeout", &timeout, "--kill-grace", "1s", "--"])
        .arg(probe())
        .args(["fork-daemon", &daemon_secs])
        .arg(&marker)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let st = child.wait().unwrap();
    // The daemon was born and the parent exited: the sandbox ends with the workload.
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert_eq!(st.code(), Some(0));

    let started = Instant::now();
    let st = sandbox(&base)
        .args(["--timeout", "1s", "--kill-grace", "1s", "--"])
        .arg(probe())
        .args(["ignore-term-sleep", "30"])
        .status()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(st.code(), Some(124));
    assert!(
        took >= Duration::from_secs(2),
        "SIGKILL came before the grace period: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2) + slack(1.0),
        "timeout 1s + grace 1s + 1s exceeded: {took:?}"
    );
    assert!(
        survivors("ignore-term-sleep 30").is_empty(),
        "{:?}",
        survivors("ignore-term-sleep 30")
    );
    // The daemon would have written its marker by now.
    std::thread::sleep(
        (started + bound + Duration::from_secs(2)).saturating_duration_since(Instant::now()),
    );
    assert!(!marker.exists(), "a daemon outlived its sandbox");
    assert!(survivors(&marker.display().to_string()).is_empty());
}

#[test]
fn sigkill_to_sandbox_run_leaves_nothing_behind() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("sigkill");
    let mut child = sandbox(&base)
        .arg("--")
        .arg(probe())
        .args(["ignore-term-sleep", "31"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while probes("ignore-term-sleep 31") == 0 && t.elapsed() < slack(5.0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        probes("ignore-term-sleep 31") > 0,
        "the probe never started: {:?}",
        survivors("ignore-term-sleep 31")
    );
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let t = Instant::now();
    while !survivors("ignore-term-sleep 31").is_empty() && t.elapsed() < slack(1.0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        survivors("ignore-term-sleep 31").is_empty(),
        "{:?}",
        survivors("ignore-term-sleep 31")
    );
}

#[test]
fn sigterm_to_sandbox_run_is_relayed_and_gives_143() {
    if !support::sandbox_works() {
        return;
    }
    let base = fixture("sigterm");
    let mut child = sandbox(&base)
        .arg("--")
        .arg(probe())
        .args(["sleep", "32"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while probes("sleep 32") == 0 && t.elapsed() < slack(5.0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    // SAFETY: signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(143));
    assert!(t.elapsed() < slack(3.0), "took {:?}", t.elapsed());
    assert!(survivors("sleep 32").is_empty());
}

#[test]
fn an_abortcontroller_in_a_node_workflow_runner_tears_everything_down() {
    if !support::sandbox_works() {
        return;
    }
    if !Path::new("/usr/bin/node").exists() {
        eprintln!("skip: node not installed");
        return;
    }
    let base = fixture("abort");
    // What a workflow runner does: spawn the adapter call with a signal, abort it later.
    let runner = format!(
        r#"
const {{ spawn }} = require('child_process');
const ac = new AbortController();
const child = spawn({bin:?}, ['-q', '--profile', {profile:?}, '--repo', {repo:?}, '--kill-grace', '1s', '--',
                              {probe:?}, 'ignore-term-sleep', '33'], {{ signal: ac.signal, stdio: 'inherit' }});
child.on('error', () => {{}});
child.on('exit', (code, sig) => {{ console.log('exit', code, sig); }});
setTimeout(() => ac.abort(), 500);
"#,
        bin = BIN,
        profile = base.join("p.toml").display().to_string(),
        repo = base.join("repo").display().to_string(),
        probe = probe().display().to_string(),
    );
    let script = base.join("runner.js");
    std::fs::write(&script, runner).unwrap();
    let t = Instant::now();
    let out = Command::new("/usr/bin/node")
        .arg(&script)
        .env_remove("NODE_OPTIONS")
        .output()
        .unwrap();
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    // node's abort sends SIGTERM; sandbox-run relays it, the probe ignores it, SIGKILL after 1 s.
    assert!(
        text.contains("exit 143 null"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_millis(500 + 1000) + slack(1.0),
        "took {took:?}"
    );
    assert!(
        survivors("ignore-term-sleep 33").is_empty(),
        "{:?}",
        survivors("ignore-term-sleep 33")
    );
}

/// The leftovers of killed runs are swept by the next run, and only those: a sandbox-run in
/// another pid namespace (a container sharing this cgroup tree, a CI step under `unshare
/// --pid`) cannot judge a leaf by the pid in its name, and must not take a live run's leaf for
/// a leftover and kill it, in either direction. Its maker's lock on the leaf tells it apart.
/// Control: a leaf made in a namespace whose maker is gone (no lock) is still swept, and its
/// process killed, by the next run that can see that process.
#[test]
fn a_run_in_another_pid_namespace_leaves_a_live_runs_cgroup_alone() {
    if !support::cgroup_available() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a second pid namespace without a user namespace needs root");
        return;
    }
    let base = support::scratch("teardown-pidns");
    support::probe_profile(&base, "validate", "", "");
    let args = |marker: &str| -> Vec<String> {
        let mut v: Vec<String> = ["-q", "--profile"].map(String::from).to_vec();
        v.push(base.join("p.toml").display().to_string());
        v.push("--repo".into());
        v.push(base.join("repo").display().to_string());
        v.push("--".into());
        v.push(probe().display().to_string());
        v.extend(marker.split(' ').map(String::from));
        v
    };
    // A run in a child pid namespace, its pid there near that namespace's pid_max (from Linux
    // 6.14 each namespace has its own, above the host's), so that the number in its leaf's name
    // is nobody on the host; a run on the host beside it.
    let in_child = |marker: &str| {
        let mut c = Command::new("unshare");
        c.args([
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--",
            "sh",
            "-c",
        ])
        .arg("m=$(cat /proc/sys/kernel/pid_max); echo $((m - 100)) >/proc/sys/kernel/ns_last_pid; \"$@\"")
        .arg("sh")
        .arg(BIN)
        .args(args(marker));
        c
    };
    let on_host = |marker: &str| {
        let mut c = Command::new(BIN);
        c.args(args(marker));
        c
    };
    let started = |marker: &str| {
        let t = Instant::now();
        loop {
            if let Some(pid) = survivors(marker)
                .iter()
                .find(|s| s.contains(&format!(": {}", probe().display())))
                .and_then(|s| s.split(':').next().map(String::from))
            {
                return pid;
            }
            assert!(
                t.elapsed() < slack(10.0),
                "{marker}: the probe never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for (live, other, case) in [
        (
            in_child("sleep 41"),
            on_host("pid"),
            "live in a child namespace, the other on the host",
        ),
        (
            on_host("sleep 43"),
            in_child("pid"),
            "live on the host, the other in a child namespace",
        ),
    ] {
        let (mut live, mut other) = (live, other);
        let marker = if case.starts_with("live in") {
            "sleep 41"
        } else {
            "sleep 43"
        };
        let mut run = live.stdout(Stdio::null()).spawn().unwrap();
        started(marker);
        let o = other.output().unwrap();
        let still = run.try_wait().unwrap();
        let _ = run.kill();
        let _ = run.wait();
        let t = Instant::now();
        while probes(marker) > 0 && t.elapsed() < slack(5.0) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            o.status.success(),
            "{case}: the other run: {:?} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            still, None,
            "{case}: the live run was ended by the other run"
        );
    }

    // A leftover of a run from a pid namespace that is gone: a leaf named for another
    // namespace, nobody holding it, a process inside. The next run on the host sweeps it.
    let mut holder = on_host("sleep 44").spawn().unwrap();
    let probe_pid = started("sleep 44");
    let cg = std::fs::read_to_string(format!("/proc/{probe_pid}/cgroup")).unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let rel = cg
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            (ctrl.split(',').any(|c| c == "pids") || ctrl.is_empty()).then(|| path.to_string())
        })
        .unwrap();
    let mount = if Path::new("/sys/fs/cgroup/pids").is_dir() {
        "/sys/fs/cgroup/pids"
    } else {
        "/sys/fs/cgroup"
    };
    // The leaf: `sandbox-run-PID-N-NS` (as root), `run-PID-N-NS` (in a delegated subtree).
    let leaf = PathBuf::from(format!("{mount}{rel}"));
    let (parent, prefix) = leaf
        .ancestors()
        .find_map(|d| {
            let name = d.file_name()?.to_string_lossy().into_owned();
            let prefix = ["sandbox-run-", "run-"].into_iter().find(|p| {
                name.strip_prefix(p)
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            })?;
            Some((d.parent()?.to_path_buf(), prefix))
        })
        .unwrap_or_else(|| panic!("no sandbox-run leaf above {}", leaf.display()));
    let dead = parent.join(format!("{prefix}7-0-4000000001"));
    let _ = std::fs::create_dir(&dead);
    let mut orphan = Command::new("sleep").arg("42").spawn().unwrap();
    std::fs::write(dead.join("cgroup.procs"), orphan.id().to_string()).unwrap();
    let next = on_host("pid").output().unwrap();
    assert!(
        next.status.success(),
        "the next run: {}",
        String::from_utf8_lossy(&next.stderr)
    );
    let t = Instant::now();
    let swept = loop {
        if let Some(s) = orphan.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > slack(5.0) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if swept.is_none() {
        let _ = orphan.kill();
        let _ = orphan.wait();
    }
    let _ = std::fs::remove_dir(&dead);
    assert!(
        swept.is_some() && !dead.exists(),
        "a dead namespace's leftover leaf was not swept"
    );
}

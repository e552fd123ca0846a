//! The cgroup layer against the real kernel: no mocks, real processes in real leaves.
//!
//! Runs on whatever this host offers (cgroup v1/hybrid here, pure v2 in the VM); the checks
//! read the files of the version in use. Each test creates its own leaf and cleans up in
//! `Drop` even when it fails (the `Leaf` kills and removes itself; the spawned children are
//! killed and reaped by `Children`). The tests take one lock, so the CPU measurement is not
//! disturbed by a fork bomb next door and each can check that nothing of this process is left
//! anywhere under /sys/fs/cgroup.
//!
//! Without root and without a delegated cgroup they print why they skip, unless
//! `SANDBOX_RUN_TEST_REQUIRE` names `cgroup` (or `cgroup2`, which also demands cgroup v2).

use sandbox_run::layers::cgroup::{Host, Leaf, Limits, Op, Version};

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

const MIB: u64 = 1 << 20;

fn required() -> Option<String> {
    let r = std::env::var("SANDBOX_RUN_TEST_REQUIRE").unwrap_or_default();
    r.split(',')
        .map(str::trim)
        .find(|w| w.starts_with("cgroup"))
        .map(str::to_string)
}

/// The host's cgroup place, or `None` (and a printed reason) when this host has none for us.
fn host(test: &str) -> Option<Host> {
    let skip = |why: String| {
        if let Some(r) = required() {
            panic!("{test}: SANDBOX_RUN_TEST_REQUIRE asks for {r}, but {why}");
        }
        eprintln!("SKIP {test}: {why}");
        None
    };
    // SAFETY: geteuid has no failure mode.
    let root = unsafe { libc::geteuid() } == 0;
    // Rootless with nothing delegated: a delegated scope from systemd --user for this test
    // process, as sandbox-run asks for one.
    let mut notes = Vec::new();
    let detected = Host::detect_or_delegate(&mut notes);
    for n in notes {
        eprintln!("{test}: {n}");
    }
    match detected {
        Ok(h) => {
            if required().as_deref() == Some("cgroup2") && h.version() != Version::V2 {
                panic!(
                    "{test}: cgroup2 is required but this host gives {}",
                    h.describe()
                );
            }
            eprintln!("{test}: {}", h.describe());
            Some(h)
        }
        Err(e) if !root => skip(format!("not root, and no delegated cgroup: {e}")),
        Err(e) => skip(format!("no cgroup controllers available: {e}")),
    }
}

/// Children of this test: killed and reaped on drop, so no zombie outlives a failed test.
#[derive(Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    /// Start `sh -c SCRIPT` held on its stdin, move it into `leaf`, then release it: the
    /// script runs no code of its own before it is inside. Returns its index.
    fn spawn_in(&mut self, leaf: &Leaf, script: &str, stderr: Stdio) -> usize {
        let mut c = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("read _go; {script}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn /bin/sh");
        let mut stdin = c.stdin.take().unwrap();
        self.0.push(c);
        let i = self.0.len() - 1;
        leaf.add(self.0[i].id() as i32)
            .expect("add the child to the leaf");
        assert!(leaf.procs().contains(&(self.0[i].id() as i32)));
        stdin.write_all(b"go\n").expect("release the child");
        i
    }

    fn pid(&self, i: usize) -> i32 {
        self.0[i].id() as i32
    }

    /// Wait for child `i` to end, at most `limit`.
    fn wait(&mut self, i: usize, limit: Duration) -> ExitStatus {
        let until = Instant::now() + limit;
        loop {
            if let Some(s) = self.0[i].try_wait().expect("try_wait") {
                return s;
            }
            assert!(
                Instant::now() < until,
                "child {i} still runs after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A process that exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
            !matches!(state, Some('Z' | 'X') | None)
        }
        Err(_) => false,
    }
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every group under /sys/fs/cgroup named after this test process (`sandbox-run-<pid>-*`,
/// `run-<pid>-*`).
fn leftovers() -> Vec<PathBuf> {
    let pid = std::process::id();
    let names = [format!("sandbox-run-{pid}-"), format!("run-{pid}-")];
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::from("/sys/fs/cgroup")];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            // (not the systemd --user scope this process may be in: `host` asked for it)
            if names.iter().any(|n| name.starts_with(n.as_str())) && !name.ends_with(".scope") {
                out.push(e.path());
            }
            todo.push(e.path());
        }
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// The leaf directory holding `file`.
fn with_file<'a>(leaf: &'a Leaf, file: &str) -> &'a Path {
    leaf.paths()
        .into_iter()
        .find(|p| p.join(file).exists())
        .unwrap_or_else(|| panic!("no {file} in {:?}", leaf.paths()))
}

/// The limits as the kernel holds them now.
fn assert_limits(leaf: &Leaf, l: &Limits) {
    match leaf.version() {
        Version::V2 => {
            let d = leaf.path_v2().unwrap();
            assert_eq!(read(&d.join("memory.max")), l.memory_max.to_string());
            if d.join("memory.swap.max").exists() {
                assert_eq!(read(&d.join("memory.swap.max")), "0");
            }
            assert_eq!(read(&d.join("cpu.max")), l.cpu_max());
            assert_eq!(read(&d.join("pids.max")), l.pids_max.to_string());
        }
        Version::V1 => {
            let m = with_file(leaf, "memory.limit_in_bytes");
            assert_eq!(
                read(&m.join("memory.limit_in_bytes")),
                l.memory_max.to_string()
            );
            if m.join("memory.memsw.limit_in_bytes").exists() {
                assert_eq!(
                    read(&m.join("memory.memsw.limit_in_bytes")),
                    l.memory_max.to_string()
                );
            }
            assert!(read(&m.join("memory.oom_control")).contains("oom_kill_disable 0"));
            let c = with_file(leaf, "cpu.cfs_quota_us");
            assert_eq!(read(&c.join("cpu.cfs_period_us")), "100000");
            assert_eq!(
                read(&c.join("cpu.cfs_quota_us")),
                l.cpu_quota_us().to_string()
            );
            let p = with_file(leaf, "pids.max");
            assert_eq!(read(&p.join("pids.max")), l.pids_max.to_string());
        }
    }
}

/// Remove the leaf and check that no directory of it, or of this process, is left.
fn remove_and_check(leaf: Leaf) {
    let dirs: Vec<PathBuf> = leaf.paths().iter().map(|p| p.to_path_buf()).collect();
    leaf.remove().expect("remove the leaf");
    for d in &dirs {
        assert!(!d.exists(), "{} is still there", d.display());
    }
    assert_eq!(leftovers(), Vec::<PathBuf>::new());
}

#[test]
fn limits_join_kill_and_remove() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("limits_join_kill_and_remove") else {
        return;
    };
    let limits = Limits {
        memory_max: 64 * MIB,
        cpus: 0.5,
        pids_max: 32,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    assert_limits(&leaf, &limits);
    for d in leaf.paths() {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("{}{}-", host.leaf_prefix(), std::process::id())));
    }

    // A tree: the shell and two background sleeps (born inside: they were forked in there).
    let i = kids.spawn_in(&leaf, "sleep 30 & sleep 30 & exec sleep 31", Stdio::null());
    assert!(
        wait_until(Duration::from_secs(5), || leaf.procs().len() == 3),
        "procs: {:?}",
        leaf.procs()
    );
    let pids = leaf.procs();
    assert!(pids.contains(&kids.pid(i)));
    assert!(pids.iter().all(|p| alive(*p)));

    let t = Instant::now();
    leaf.kill().expect("kill");
    eprintln!("kill of 3 processes took {:?}", t.elapsed());
    assert_eq!(leaf.procs(), Vec::<i32>::new());
    assert_eq!(
        kids.wait(i, Duration::from_secs(2)).signal(),
        Some(libc::SIGKILL)
    );
    // The orphaned sleeps are reaped by init; none may be running.
    assert!(
        wait_until(Duration::from_secs(1), || pids.iter().all(|p| !alive(*p))),
        "still alive: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
    let u = leaf.usage();
    eprintln!("usage: {u:?}");
    assert!(u.peak_memory_bytes.is_some_and(|p| p > 0), "{u:?}");
    assert!(
        u.cpu_user_usec.is_some() && u.cpu_system_usec.is_some(),
        "{u:?}"
    );
    assert_eq!((u.oom_kills, u.pids_max_hits), (0, 0));
    remove_and_check(leaf);
}

/// `remove` on a leaf that still holds a tree, without a `kill` first: the rmdir is refused
/// (EBUSY), the leaf is killed and then removed. Nothing of the tree is left running.
#[test]
fn remove_kills_what_is_still_inside() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("remove_kills_what_is_still_inside") else {
        return;
    };
    let limits = Limits {
        memory_max: 64 * MIB,
        cpus: 1.0,
        pids_max: 16,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    let i = kids.spawn_in(&leaf, "sleep 30 & exec sleep 31", Stdio::null());
    assert!(
        wait_until(Duration::from_secs(5), || leaf.procs().len() == 2),
        "procs: {:?}",
        leaf.procs()
    );
    let pids = leaf.procs();
    let t = Instant::now();
    remove_and_check(leaf);
    eprintln!("remove of a leaf with 2 processes took {:?}", t.elapsed());
    assert_eq!(
        kids.wait(i, Duration::from_secs(2)).signal(),
        Some(libc::SIGKILL)
    );
    assert!(
        wait_until(Duration::from_secs(1), || pids.iter().all(|p| !alive(*p))),
        "still alive: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
}

/// A program that allocates (and touches) memory without end, 1 MiB at a time.
fn memory_hog() -> Option<String> {
    if Path::new("/usr/bin/python3").exists() {
        Some(
            "exec /usr/bin/python3 -c 'b = []\nwhile True: b.append(bytes([1]) * (1 << 20))'"
                .into(),
        )
    } else if Path::new("/usr/bin/perl").exists() {
        Some("exec /usr/bin/perl -e 'my @a; while (1) { push @a, \"x\" x (1 << 20) }'".into())
    } else {
        None
    }
}

#[test]
fn memory_hog_is_oom_killed_at_the_cap() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("memory_hog_is_oom_killed_at_the_cap") else {
        return;
    };
    let Some(hog) = memory_hog() else {
        eprintln!("SKIP memory_hog_is_oom_killed_at_the_cap: neither python3 nor perl");
        return;
    };
    let cap = 64 * MIB;
    let limits = Limits {
        memory_max: cap,
        cpus: 2.0,
        pids_max: 64,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    let i = kids.spawn_in(&leaf, &hog, Stdio::null());
    let status = kids.wait(i, Duration::from_secs(30));
    let u = leaf.usage();
    let peak = u.peak_memory_bytes.expect("peak memory");
    eprintln!(
        "memory hog: {status:?}; peak {:.1} MiB of a {} MiB cap; oom kills {}",
        peak as f64 / MIB as f64,
        cap / MIB,
        u.oom_kills
    );
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(u.oom_kills >= 1, "{u:?}");
    assert!(peak <= cap, "peak {peak} above the cap {cap}");
    assert!(peak >= cap / 100 * 85, "peak {peak} not near the cap {cap}");
    leaf.kill().expect("kill");
    remove_and_check(leaf);
}

#[test]
fn half_a_cpu_halves_a_busy_loop() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("half_a_cpu_halves_a_busy_loop") else {
        return;
    };
    let limits = Limits {
        memory_max: 64 * MIB,
        cpus: 0.5,
        pids_max: 16,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    let i = kids.spawn_in(&leaf, "while :; do :; done", Stdio::null());
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    leaf.kill().expect("kill");
    let wall = t.elapsed().as_secs_f64();
    assert_eq!(
        kids.wait(i, Duration::from_secs(2)).signal(),
        Some(libc::SIGKILL)
    );
    let u = leaf.usage();
    let cpu = (u.cpu_user_usec.expect("user") + u.cpu_system_usec.expect("system")) as f64 / 1e6;
    let want = limits.cpus * wall;
    eprintln!(
        "busy loop at cpus=0.5 for {wall:.3} s wall: {cpu:.3} s CPU (user {} us, system {} us), expected {want:.3} s",
        u.cpu_user_usec.unwrap(),
        u.cpu_system_usec.unwrap()
    );
    assert!(
        (cpu - want).abs() <= 0.2 * want,
        "CPU {cpu:.3} s is not within 20 % of {want:.3} s"
    );
    remove_and_check(leaf);
}

#[test]
fn forks_fail_at_pids_max() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("forks_fail_at_pids_max") else {
        return;
    };
    let limits = Limits {
        memory_max: 128 * MIB,
        cpus: 1.0,
        pids_max: 8,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    // 20 background sleeps: the 8th process in the leaf is the last one that may start.
    let i = kids.spawn_in(
        &leaf,
        "n=0; while [ $n -lt 20 ]; do sleep 30 & n=$((n+1)); done; wait",
        Stdio::piped(),
    );
    assert!(
        wait_until(Duration::from_secs(5), || leaf.usage().pids_max_hits >= 1),
        "no pids.max hit: {:?}",
        leaf.usage()
    );
    std::thread::sleep(Duration::from_millis(200));
    let n = leaf.procs().len();
    assert!(n <= 8, "{n} processes in a leaf capped at 8");
    leaf.kill().expect("kill");
    assert_eq!(leaf.procs(), Vec::<i32>::new());
    kids.wait(i, Duration::from_secs(2));
    let mut err = String::new();
    kids.0[i]
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let u = leaf.usage();
    eprintln!(
        "fork loop: {n} processes at most, pids.max hits {}, shell said {:?}",
        u.pids_max_hits,
        err.lines().next().unwrap_or("")
    );
    assert!(u.pids_max_hits >= 1);
    assert!(err.to_lowercase().contains("fork"), "stderr: {err}");
    remove_and_check(leaf);
}

#[test]
fn fork_bomb_is_contained_and_killed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("fork_bomb_is_contained_and_killed") else {
        return;
    };
    let limits = Limits {
        memory_max: 256 * MIB,
        cpus: 1.0,
        pids_max: 16,
    };
    let mut kids = Children::default();
    let leaf = host.create_leaf(&limits).expect("create the leaf");
    // bash keeps going when a fork fails (dash gives up), so the swarm stays at the cap
    // until it is killed.
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    kids.spawn_in(
        &leaf,
        &format!("exec {shell} -c 'b() {{ while :; do b & done; }}; b' 2>/dev/null"),
        Stdio::null(),
    );
    // Watch for a second, and on until the bomb has hit the cap (a loaded or emulated machine
    // may take longer to start 16 shells), but no longer than 30 s.
    let mut most = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1)
        || (leaf.usage().pids_max_hits == 0 && start.elapsed() < Duration::from_secs(30))
    {
        most = most.max(leaf.procs().len());
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Instant::now();
    leaf.kill().expect("kill the fork bomb");
    let took = t.elapsed();
    let u = leaf.usage();
    eprintln!(
        "fork bomb: at most {most} processes seen, pids.max hits {}, killed in {took:?}",
        u.pids_max_hits
    );
    assert!(most <= 16, "{most} processes in a leaf capped at 16");
    assert!(
        most >= 8,
        "the fork bomb did not take off: {most} processes at most"
    );
    assert!(u.pids_max_hits >= 1, "{u:?}");
    assert_eq!(leaf.procs(), Vec::<i32>::new());
    remove_and_check(leaf);
}

/// Groups made by hand for a "killed sandbox-run": removed (their processes killed) on drop.
struct HandMade(Vec<PathBuf>);

impl Drop for HandMade {
    fn drop(&mut self) {
        for d in &self.0 {
            for p in read_procs(d) {
                // SAFETY: kill takes plain integers.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
        for d in &self.0 {
            let _ = wait_until(Duration::from_secs(2), || {
                !d.exists() || std::fs::remove_dir(d).is_ok()
            });
        }
    }
}

fn read_procs(d: &Path) -> Vec<i32> {
    std::fs::read_to_string(d.join("cgroup.procs"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn remove_stale_clears_the_leaf_of_a_dead_sandbox_run() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("remove_stale_clears_the_leaf_of_a_dead_sandbox_run") else {
        return;
    };
    let limits = Limits {
        memory_max: 64 * MIB,
        cpus: 1.0,
        pids_max: 16,
    };
    let mut kids = Children::default();
    // Our own live leaf (this also prepares the parent on v2).
    let live = host.create_leaf(&limits).expect("create the leaf");

    // A pid that no longer exists: a child that ran and was reaped.
    let mut gone = Command::new("/bin/true").spawn().expect("spawn true");
    let dead = gone.id() as i32;
    gone.wait().unwrap();
    assert!(!alive(dead));
    let name = format!("{}{dead}-0", host.leaf_prefix());
    let mut made = HandMade(Vec::new());
    for parent in host.leaf_parents() {
        let d = parent.join(&name);
        std::fs::create_dir(&d).expect("mkdir the stale leaf");
        made.0.push(d);
    }
    // Its orphan, still running.
    let orphan = Command::new("/bin/sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    kids.0.push(orphan);
    for d in &made.0 {
        std::fs::write(d.join("cgroup.procs"), kids.pid(0).to_string()).expect("join");
    }

    let removed = host.remove_stale().expect("remove_stale");
    eprintln!("remove_stale removed {removed:?}");
    for d in &made.0 {
        assert!(removed.contains(d), "{} not removed", d.display());
        assert!(!d.exists(), "{} still there", d.display());
    }
    assert_eq!(
        kids.wait(0, Duration::from_secs(2)).signal(),
        Some(libc::SIGKILL)
    );
    // A leaf whose owner (this process) lives is left alone.
    for d in live.paths() {
        assert!(d.exists(), "{} was removed", d.display());
        assert!(!removed.iter().any(|r| r == d));
    }
    remove_and_check(live);
}

#[test]
fn a_rejected_limit_leaves_nothing_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("a_rejected_limit_leaves_nothing_behind") else {
        return;
    };
    // pids.max above PID_MAX_LIMIT (4194304): the kernel says EINVAL after the mkdir and the
    // memory and CPU writes.
    let e = host
        .create_leaf(&Limits {
            memory_max: 64 * MIB,
            cpus: 1.0,
            pids_max: 10_000_000,
        })
        .expect_err("pids.max of 10 million is accepted");
    eprintln!("{e}");
    assert_eq!((e.op, e.errno), (Op::Write, Some(libc::EINVAL)));
    let path = e.path.clone().expect("the error names the file");
    assert!(path.ends_with("pids.max"), "{e}");
    let s = e.to_string();
    assert_eq!(
        s,
        format!("cgroup: write {}: Invalid argument", path.display())
    );
    assert!(!path.parent().unwrap().exists());
    assert_eq!(leftovers(), Vec::<PathBuf>::new());
}

/// Without a freezer (v1), `kill` loops SIGKILL over `cgroup.procs`; it must still empty a
/// fork bomb (the pids limit bounds the race).
#[test]
fn v1_kill_without_freezer_empties_a_fork_bomb() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = host("v1_kill_without_freezer_empties_a_fork_bomb") else {
        return;
    };
    if host.version() != Version::V1 {
        eprintln!("SKIP v1_kill_without_freezer_empties_a_fork_bomb: not a cgroup v1 host");
        return;
    }
    let limits = Limits {
        memory_max: 256 * MIB,
        cpus: 1.0,
        pids_max: 16,
    };
    // Which hierarchy is which, from the files of a real leaf.
    let probe = host.create_leaf(&limits).expect("create the probe leaf");
    let mut hierarchies = Vec::new();
    for d in probe.paths() {
        let mut c = Vec::new();
        for (file, controller) in [
            ("memory.limit_in_bytes", "memory"),
            ("cpu.cfs_quota_us", "cpu"),
            ("cpuacct.usage", "cpuacct"),
            ("pids.max", "pids"),
        ] {
            if d.join(file).exists() {
                c.push(controller);
            }
        }
        if !c.is_empty() {
            hierarchies.push((c.join(","), d.parent().unwrap().to_path_buf()));
        }
    }
    probe.remove().expect("remove the probe leaf");
    let no_freezer = Host::v1_at(hierarchies);
    let mut kids = Children::default();
    let leaf = no_freezer.create_leaf(&limits).expect("create the leaf");
    assert!(leaf
        .paths()
        .iter()
        .all(|p| !p.join("freezer.state").exists()));
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    kids.spawn_in(
        &leaf,
        &format!("exec {shell} -c 'b() {{ while :; do b & done; }}; b' 2>/dev/null"),
        Stdio::null(),
    );
    assert!(wait_until(Duration::from_secs(2), || leaf.procs().len() >= 8));
    let t = Instant::now();
    leaf.kill().expect("kill the fork bomb without a freezer");
    eprintln!("fork bomb without freezer killed in {:?}", t.elapsed());
    assert_eq!(leaf.procs(), Vec::<i32>::new());
    remove_and_check(leaf);
}

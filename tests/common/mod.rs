//! Shared helpers for the end-to-end tests (`attacks`, `real_programs`): fixture repos and
//! secrets, test profiles, running `sandbox-run` and the attack probe, parsing the probe's
//! result line, and turning "the host lacks X" into a skip, or into a failure when
//! `SANDBOX_RUN_TEST_REQUIRE` names X.
//!
//! Fixtures live under `$SANDBOX_RUN_TEST_TMP` when set (the rootless runs of `scripts/test`
//! point it at a directory the unprivileged user owns), else under `CARGO_TARGET_TMPDIR`.
//! Every test uses its own uniquely named directory: tests run in parallel.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-run");

/// The attack probe (`examples/probe.rs`), built by `cargo test` next to the binary.
pub fn probe() -> PathBuf {
    let p = Path::new(BIN)
        .parent()
        .expect("the binary has a directory")
        .join("examples/probe");
    assert!(
        p.is_file(),
        "the attack probe {} does not exist: run `cargo test` (plain `cargo test` builds the \
         examples; `--all-targets` or `--test NAME` do not) or `cargo build --examples`; \
         scripts/test does it",
        p.display()
    );
    // `cargo test --test NAME` does not rebuild examples: refuse a probe older than its source
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/probe.rs");
    let mtime = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    if let (Some(bin), Some(source)) = (mtime(&p), mtime(&src)) {
        assert!(
            bin >= source,
            "the attack probe {} is older than examples/probe.rs: rebuild it with \
             `cargo build --examples` (or plain `cargo test`)",
            p.display()
        );
    }
    p
}

/// The directory of the probe: test profiles bind it read-only so the probe runs inside.
pub fn probe_dir() -> PathBuf {
    probe().parent().unwrap().to_path_buf()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The base directory of every fixture of this test run.
pub fn test_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let base = std::env::var_os("SANDBOX_RUN_TEST_TMP")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
        std::fs::create_dir_all(&base)
            .unwrap_or_else(|e| panic!("fixture base {}: {e}", base.display()));
        std::fs::canonicalize(&base).unwrap()
    })
    .clone()
}

// ---------------------------------------------------------------------------------------------
// Required features and skips

/// Is `feature` listed in `SANDBOX_RUN_TEST_REQUIRE` (comma-separated: userns, landlock,
/// seccomp, cgroup)? `cgroup` and `cgroup2` are the same feature.
pub fn required(feature: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        if s == "cgroup2" {
            "cgroup".to_string()
        } else {
            s
        }
    };
    let want = norm(feature);
    std::env::var("SANDBOX_RUN_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|f| norm(f) == want)
}

/// Report a skip on stderr; a failure instead when the feature is required.
pub fn skip(feature: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("?")
        .rsplit("::")
        .next()
        .unwrap_or("?")
        .to_string();
    if required(feature) {
        panic!(
            "{test}: {why}; but SANDBOX_RUN_TEST_REQUIRE names {feature:?}, so this is a failure"
        );
    }
    log_skip(&format!("SKIP {test}: {why} (feature {feature})"));
}

/// Print a skip, and append it to `$SANDBOX_RUN_TEST_SKIPLOG` when set: `scripts/test` shows
/// the collected skips after each run (the harness hides a passing test's stderr).
fn log_skip(line: &str) {
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("SANDBOX_RUN_TEST_SKIPLOG").filter(|p| !p.is_empty()) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            use std::io::Write;
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Report a skip for something that is not a sandbox feature (a missing toolchain).
pub fn skip_tool(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    log_skip(&format!("SKIP {test}: {why}"));
}

/// Can a read-write repo have its disk cap here (a copy-on-write layer on tmpfs, which needs
/// tmpfs's `user.*` xattrs: Linux 6.6)? Otherwise a skip (sandbox-run binds the repo as it
/// is and reports `disk` under `degraded`).
pub fn disk_cap_works() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut n = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let v = (n.next().unwrap_or(0), n.next().unwrap_or(0));
    if v < (6, 6) {
        skip(
            "disk",
            &format!(
                "Linux {}.{}: the repo's layer needs tmpfs user xattrs (6.6); before, the repo is bound as it is",
                v.0, v.1
            ),
        );
        return false;
    }
    true
}

/// The landlock ABI of the running kernel (0: none).
pub fn landlock_abi() -> u8 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    if v < 0 {
        0
    } else {
        v as u8
    }
}

/// True when the kernel's landlock ABI is at least `min`; else a skip (or a failure when
/// landlock is required).
pub fn need_landlock(min: u8, what: &str) -> bool {
    let abi = landlock_abi();
    if abi >= min {
        return true;
    }
    // No landlock at all fails where the host is known to have it; an older ABI is what that
    // kernel is (Debian 12's 6.1 has ABI 2), not a missing feature.
    let feature = if abi == 0 {
        "landlock".to_string()
    } else {
        format!("landlock-abi-{min}")
    };
    skip(
        &feature,
        &format!("{what} needs landlock ABI >= {min}, this kernel has {abi}"),
    );
    false
}

/// The JSON report of a probe run (which must succeed).
pub fn probe_report(f: &Fixture, profile: &Path, repo: &Path, opts: &[&str]) -> serde_json::Value {
    let report = f.path("report.json");
    let _ = std::fs::remove_file(&report);
    let mut o = vec!["--report", report.to_str().unwrap()];
    o.extend_from_slice(opts);
    run_probe(profile, repo, &o, &["pid"]).assert_ok();
    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
}

/// On a kernel whose landlock ABI cannot do `what` (a `landlock_missing` entry), the report
/// of a run that asks for it says so.
pub fn assert_landlock_reports_missing(
    f: &Fixture,
    profile: &Path,
    repo: &Path,
    opts: &[&str],
    what: &str,
) {
    let v = probe_report(f, profile, repo, opts);
    let fs = &v["sandbox"]["filesystem"];
    assert!(
        fs["landlock_missing"]
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x == what)),
        "landlock ABI {}: the report must list {what:?} under landlock_missing: {fs}",
        landlock_abi()
    );
}

/// True when the kernel filters with seccomp; else a skip (or failure when required).
pub fn need_seccomp() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if status.lines().any(|l| l.starts_with("Seccomp:")) {
        return true;
    }
    skip("seccomp", "this kernel has no seccomp support");
    false
}

/// Can sandbox-run start a sandbox here at all? Checked once with a trivial run; a host
/// without user namespaces (or landlock, or seccomp, which the test profiles require) is a
/// skip, a failure when SANDBOX_RUN_TEST_REQUIRE names it. Any other setup failure is a
/// launcher bug and fails the test that asked.
pub fn sandbox_works() -> bool {
    static WORKS: OnceLock<Result<(), (&'static str, String)>> = OnceLock::new();
    let r = WORKS.get_or_init(|| {
        let f = Fixture::new("availability");
        let repo = f.repo("repo");
        let p = f.profile(&Spec::default());
        let r = run_probe(&p, &repo, &[], &["pid"]).run;
        if r.code == Some(0) {
            return Ok(());
        }
        let lower = r.stderr.to_ascii_lowercase();
        if r.code == Some(125) {
            let no_seccomp = !std::fs::read_to_string("/proc/self/status")
                .unwrap_or_default()
                .contains("\nSeccomp:");
            // a feature counts as missing only when the host really lacks it; anything
            // else is a launcher failure
            for (feature, word, missing) in [
                ("userns", "user namespace", true),
                ("landlock", "landlock", landlock_abi() == 0),
                ("seccomp", "seccomp", no_seccomp),
            ] {
                if missing && lower.contains(word) {
                    return Err((
                        feature,
                        format!("{word} is not available: {}", r.stderr.trim()),
                    ));
                }
            }
        }
        panic!("sandbox-run cannot run a trivial sandbox here (not a missing feature):\n{r}");
    });
    match r {
        Ok(()) => true,
        Err((feature, why)) => {
            skip(feature, why);
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// A scratch directory for one test; removed when dropped (kept when the test panics, so a
/// failure can be inspected).
pub struct Fixture {
    pub dir: PathBuf,
    profiles: std::cell::Cell<u32>,
}

impl Fixture {
    /// `<base>/e2e-NAME-PID`, created empty.
    pub fn new(name: &str) -> Fixture {
        Fixture::new_in(&test_base(), name)
    }

    /// The same under another base directory (e.g. `/tmp`).
    pub fn new_in(base: &Path, name: &str) -> Fixture {
        let dir = base.join(format!("e2e-{name}-{}", std::process::id()));
        if dir.symlink_metadata().is_ok() {
            make_writable(&dir);
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fixture {
            dir,
            profiles: std::cell::Cell::new(0),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Write a file (parents created); returns its path.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A repo directory with a known file `inside.txt` and a subdirectory `src/`.
    pub fn repo(&self, name: &str) -> PathBuf {
        let r = self.dir.join(name);
        std::fs::create_dir_all(r.join("src")).unwrap();
        std::fs::write(r.join("inside.txt"), INSIDE).unwrap();
        std::fs::write(r.join("src/lib.txt"), "source\n").unwrap();
        r
    }

    /// A repo with a minimal `.git` directory: `hooks/pre-commit.sample`, `config`, `HEAD`,
    /// `description`, empty `objects/` and `refs/heads/` (the shape of a git dir; no git
    /// needed).
    pub fn git_repo(&self, name: &str) -> PathBuf {
        let r = self.repo(name);
        let g = r.join(".git");
        std::fs::create_dir_all(g.join("hooks")).unwrap();
        std::fs::create_dir_all(g.join("objects")).unwrap();
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::write(g.join("hooks/pre-commit.sample"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::write(g.join("config"), GIT_CONFIG).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("description"), "fixture\n").unwrap();
        r
    }

    /// Write a test profile (see [`Spec`]); returns its path.
    pub fn profile(&self, spec: &Spec) -> PathBuf {
        let n = self.profiles.get() + 1;
        self.profiles.set(n);
        let p = self.dir.join(format!("profile-{n}.toml"));
        std::fs::write(&p, spec.to_toml()).unwrap();
        p
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("fixture kept for inspection: {}", self.dir.display());
            return;
        }
        make_writable(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Best effort: give the owner write access everywhere below `dir`, so a fixture whose
/// files a test made read-only can be removed.
fn make_writable(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if let Ok(m) = p.symlink_metadata() {
                if m.is_dir() {
                    let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
                    make_writable(&p);
                }
            }
        }
    }
}

pub const INSIDE: &str = "a file inside the repo\n";
pub const SECRET: &str = "sbx-e2e-secret-value-7f3a\n";
pub const GIT_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";

// ---------------------------------------------------------------------------------------------
// Test profiles

/// A test profile: it `extends` a built-in one, makes the (not yet built) cgroup layer
/// best-effort, allows the probe by its exact path and binds its directory read-only.
/// Lists replace the parent's, so the probe's entries are always added here.
#[derive(Debug, Clone)]
pub struct Spec {
    pub extends: String,
    /// `overlay`, `rw` or `ro`; `None` keeps the parent's.
    pub repo: Option<String>,
    /// `none` or `host`; `None` keeps the parent's.
    pub net: Option<String>,
    pub tcp_connect: Option<Vec<u16>>,
    /// `None` keeps the parent's `tcp_bind`.
    pub tcp_bind: Option<Vec<u16>>,
    /// `None` keeps the parent's program list.
    pub programs: Option<Vec<String>>,
    /// Exact program paths allowed besides the probe.
    pub paths: Vec<PathBuf>,
    /// Read-only binds besides the probe's directory.
    pub extra_ro: Vec<PathBuf>,
    pub extra_rw: Vec<PathBuf>,
    /// `None` keeps the parent's keep list.
    pub env_keep: Option<Vec<String>>,
    /// Leave the probe out (for profiles that run real programs only).
    pub no_probe: bool,
    /// More `[layers]` keys (`namespaces = "best-effort"`).
    pub layers: Vec<(String, String)>,
    /// `[limits] disk`; `None` keeps the parent's.
    pub disk: Option<String>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            extends: "validate".into(),
            repo: None,
            net: None,
            tcp_connect: None,
            tcp_bind: None,
            programs: None,
            paths: Vec::new(),
            extra_ro: Vec::new(),
            extra_rw: Vec::new(),
            env_keep: None,
            no_probe: false,
            layers: Vec::new(),
            disk: None,
        }
    }
}

impl Spec {
    pub fn extends(base: &str) -> Spec {
        Spec {
            extends: base.into(),
            ..Spec::default()
        }
    }
    pub fn repo(mut self, mode: &str) -> Spec {
        self.repo = Some(mode.into());
        self
    }
    pub fn net(mut self, mode: &str) -> Spec {
        self.net = Some(mode.into());
        self
    }
    pub fn tcp_connect(mut self, ports: &[u16]) -> Spec {
        self.tcp_connect = Some(ports.to_vec());
        self
    }
    pub fn tcp_bind(mut self, ports: &[u16]) -> Spec {
        self.tcp_bind = Some(ports.to_vec());
        self
    }
    pub fn programs(mut self, names: &[&str]) -> Spec {
        self.programs = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }
    pub fn path(mut self, p: &Path) -> Spec {
        self.paths.push(p.to_path_buf());
        self
    }
    pub fn extra_ro(mut self, p: &Path) -> Spec {
        self.extra_ro.push(p.to_path_buf());
        self
    }
    pub fn extra_rw(mut self, p: &Path) -> Spec {
        self.extra_rw.push(p.to_path_buf());
        self
    }
    pub fn env_keep(mut self, names: &[&str]) -> Spec {
        self.env_keep = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }
    pub fn no_probe(mut self) -> Spec {
        self.no_probe = true;
        self
    }
    pub fn layer(mut self, key: &str, value: &str) -> Spec {
        self.layers.push((key.into(), value.into()));
        self
    }

    /// `[limits] disk` (`"off"`: the read-write repo is bound as it is, no copy-back).
    pub fn disk(mut self, cap: &str) -> Spec {
        self.disk = Some(cap.to_string());
        self
    }

    pub fn to_toml(&self) -> String {
        use toml::Value;
        let s = |v: &str| Value::String(v.to_string());
        let paths = |v: &[PathBuf]| {
            Value::Array(
                v.iter()
                    .map(|p| Value::String(p.display().to_string()))
                    .collect(),
            )
        };
        let mut gate_paths = self.paths.clone();
        let mut ro = self.extra_ro.clone();
        if !self.no_probe {
            gate_paths.insert(0, probe());
            ro.insert(0, probe_dir());
        }
        let mut top = toml::Table::new();
        top.insert("extends".into(), s(&self.extends));
        top.insert(
            "description".into(),
            s("sandbox-run end-to-end test profile"),
        );
        let mut gate = toml::Table::new();
        gate.insert("paths".into(), paths(&gate_paths));
        if let Some(p) = &self.programs {
            gate.insert(
                "programs".into(),
                Value::Array(p.iter().map(|x| s(x)).collect()),
            );
        }
        top.insert("gate".into(), Value::Table(gate));
        let mut fs = toml::Table::new();
        fs.insert("extra_ro".into(), paths(&ro));
        fs.insert("extra_rw".into(), paths(&self.extra_rw));
        if let Some(m) = &self.repo {
            fs.insert("repo".into(), s(m));
        }
        top.insert("filesystem".into(), Value::Table(fs));
        let mut net = toml::Table::new();
        if let Some(m) = &self.net {
            net.insert("mode".into(), s(m));
        }
        for (key, list) in [
            ("tcp_connect", &self.tcp_connect),
            ("tcp_bind", &self.tcp_bind),
        ] {
            if let Some(ports) = list {
                net.insert(
                    key.into(),
                    Value::Array(ports.iter().map(|p| Value::Integer(*p as i64)).collect()),
                );
            }
        }
        if !net.is_empty() {
            top.insert("network".into(), Value::Table(net));
        }
        if let Some(k) = &self.env_keep {
            let mut env = toml::Table::new();
            env.insert(
                "keep".into(),
                Value::Array(k.iter().map(|x| s(x)).collect()),
            );
            top.insert("env".into(), Value::Table(env));
        }
        let mut layers = toml::Table::new();
        layers.insert("cgroup".into(), s("best-effort"));
        for (k, v) in &self.layers {
            layers.insert(k.clone(), s(v));
        }
        top.insert("layers".into(), Value::Table(layers));
        if let Some(d) = &self.disk {
            let mut limits = toml::Table::new();
            limits.insert("disk".into(), s(d));
            top.insert("limits".into(), Value::Table(limits));
        }
        toml::to_string(&top).unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Running

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Run {
    /// The command, for messages.
    pub cmd: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from_output(cmd: String, o: Output) -> Run {
        use std::os::unix::process::ExitStatusExt;
        Run {
            cmd,
            code: o.status.code(),
            signal: o.status.signal(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Both streams, for searching the child's output wherever it went.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, Some(code), "expected exit {code}:\n{self}");
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "  command: {}", self.cmd)?;
        writeln!(f, "  exit: {:?} signal: {:?}", self.code, self.signal)?;
        writeln!(f, "  stdout: {}", indent(&self.stdout))?;
        write!(f, "  stderr: {}", indent(&self.stderr))
    }
}

fn indent(s: &str) -> String {
    if s.is_empty() {
        return "(empty)".into();
    }
    s.trim_end().replace('\n', "\n          ")
}

/// Shell-like rendering of a command for messages.
pub fn render(c: &Command) -> String {
    let mut parts: Vec<String> = c
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        .collect();
    parts.push(c.get_program().to_string_lossy().into_owned());
    parts.extend(c.get_args().map(|a| {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains([' ', '\'', '"', '$', '|', '&']) {
            format!("'{}'", a.replace('\'', "'\\''"))
        } else {
            a.into_owned()
        }
    }));
    parts.join(" ")
}

/// `sandbox-run --profile P --repo R OPTS -- ARGV` with a predictable environment: no user
/// profile directories, stdin from /dev/null, cwd the repo. The caller adds env or stdio.
pub fn sandbox_command<S: AsRef<OsStr>>(
    profile: &Path,
    repo: &Path,
    opts: &[&str],
    argv: &[S],
) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--profile")
        .arg(profile)
        .arg("--repo")
        .arg(repo)
        .args(opts)
        .arg("--")
        .args(argv)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
        .current_dir(repo)
        .stdin(Stdio::null());
    c
}

/// Run a command to completion, at most `limit` (then it is killed and the test fails).
pub fn run_command(mut c: Command, limit: Duration) -> Run {
    // Under TCG (scripts/vm-test) everything is ~10x slower: the limit is a hang guard, not a
    // timing assertion, so it stretches with the slowdown.
    let slowdown = std::env::var("SANDBOX_RUN_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let limit = limit * slowdown;
    let cmd = render(&c);
    if c.get_current_dir().is_none() {
        c.current_dir(test_base());
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = spawn_retrying(&mut c).unwrap_or_else(|e| panic!("cannot start {cmd}: {e}"));
    // Read both pipes in threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {limit:?}: {cmd}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let o = Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    };
    Run::from_output(cmd, o)
}

/// Spawn, retrying for a while on ETXTBSY: a program the test has just written (a copy of
/// the probe) is briefly "busy" while another test thread's fork still holds the writable fd.
pub fn spawn_retrying(c: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match c.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

pub const LIMIT: Duration = Duration::from_secs(60);

/// The probe's verdict, parsed from its result line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(String),
    Denied(i32),
    Killed(i32),
    /// `stdin: eof bytes=0`, `getenv: unset`.
    Nothing(String),
    Error(String),
    /// No result line (the probe did not run, or sandbox-run failed before it).
    Missing,
}

/// A probe run: the process result plus the parsed verdict and data lines.
#[derive(Debug, Clone)]
pub struct ProbeRun {
    pub run: Run,
    pub attack: String,
    pub outcome: Outcome,
    /// Lines printed after the result line (`list`, `status`, `fds`, `env`).
    pub lines: Vec<String>,
}

impl std::fmt::Display for ProbeRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.run)
    }
}

impl ProbeRun {
    pub fn parse(attack: &str, run: Run) -> ProbeRun {
        let text = if attack == "write-bytes" {
            &run.stderr
        } else {
            &run.stdout
        };
        let prefix = format!("{attack}: ");
        let mut outcome = Outcome::Missing;
        let mut lines = Vec::new();
        let mut found = false;
        for l in text.lines() {
            if found {
                lines.push(l.to_string());
                continue;
            }
            if let Some(rest) = l.strip_prefix(&prefix) {
                found = true;
                outcome = parse_outcome(rest);
            }
        }
        ProbeRun {
            run,
            attack: attack.to_string(),
            outcome,
            lines,
        }
    }

    pub fn code(&self) -> Option<i32> {
        self.run.code
    }

    /// The attempt succeeded: exit 0 and an `ok` line. Returns the detail.
    pub fn assert_ok(&self) -> String {
        match (&self.outcome, self.run.code) {
            (Outcome::Ok(d), Some(0)) => d.clone(),
            _ => panic!("expected `{}` to SUCCEED:\n{self}", self.attack),
        }
    }

    /// The kernel refused: exit 1 and a `denied errno=N` line (or the attempt's child was
    /// killed). A gate denial (126), a sandbox failure (125) or a probe error (2) is NOT a
    /// refusal: they would make a broken test pass.
    pub fn assert_refused(&self) -> &Outcome {
        match (&self.outcome, self.run.code) {
            (Outcome::Denied(_) | Outcome::Killed(_), Some(1)) => &self.outcome,
            _ => panic!(
                "expected `{}` to be REFUSED by the kernel (exit 1, `denied errno=N`):\n{self}",
                self.attack
            ),
        }
    }

    /// Refused with one of these errnos.
    pub fn assert_errno(&self, allowed: &[i32]) -> i32 {
        match self.assert_refused() {
            Outcome::Denied(e) if allowed.contains(e) => *e,
            other => panic!(
                "expected `{}` to be denied with one of {:?}, got {other:?}:\n{self}",
                self.attack,
                allowed.iter().map(|e| errno_name(*e)).collect::<Vec<_>>()
            ),
        }
    }

    /// The attempt's child was killed by `sig`.
    pub fn assert_killed(&self, sig: i32) {
        match self.assert_refused() {
            Outcome::Killed(s) if *s == sig => {}
            other => panic!(
                "expected `{}` to be killed by signal {sig}, got {other:?}:\n{self}",
                self.attack
            ),
        }
    }

    /// `stdin: eof` / `getenv: unset`: exit 1 and the given word.
    pub fn assert_nothing(&self, what: &str) {
        match (&self.outcome, self.run.code) {
            (Outcome::Nothing(w), Some(1)) if w.starts_with(what) => {}
            _ => panic!("expected `{}` to report `{what}`:\n{self}", self.attack),
        }
    }
}

fn parse_outcome(rest: &str) -> Outcome {
    if rest == "ok" {
        return Outcome::Ok(String::new());
    }
    if let Some(d) = rest.strip_prefix("ok ") {
        return Outcome::Ok(d.to_string());
    }
    let number = |s: &str| -> Option<i32> {
        s.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
    };
    if let Some(d) = rest.strip_prefix("denied errno=") {
        return number(d).map_or(Outcome::Error(rest.into()), Outcome::Denied);
    }
    if let Some(d) = rest.strip_prefix("killed signal=") {
        return number(d).map_or(Outcome::Error(rest.into()), Outcome::Killed);
    }
    if let Some(d) = rest.strip_prefix("error ") {
        return Outcome::Error(d.to_string());
    }
    Outcome::Nothing(rest.to_string())
}

/// A field of the probe's `status` lines (`/proc/self/status`): `status_field(lines, "CapEff")`.
pub fn status_field<'a>(lines: &'a [String], key: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Run the probe in a sandbox made from `profile` for `repo`.
pub fn run_probe(profile: &Path, repo: &Path, opts: &[&str], args: &[&str]) -> ProbeRun {
    run_probe_with(profile, repo, opts, args, |_| {})
}

/// [`run_probe`], letting the caller adjust the `sandbox-run` command (env, stdio, pre_exec).
pub fn run_probe_with(
    profile: &Path,
    repo: &Path,
    opts: &[&str],
    args: &[&str],
    adjust: impl FnOnce(&mut Command),
) -> ProbeRun {
    let mut argv: Vec<&OsStr> = vec![probe_os()];
    argv.extend(args.iter().map(OsStr::new));
    let mut c = sandbox_command(profile, repo, opts, &argv);
    adjust(&mut c);
    ProbeRun::parse(args[0], run_command(c, LIMIT))
}

fn probe_os() -> &'static OsStr {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(probe).as_os_str()
}

/// Run the probe directly on the host, unconfined: the positive control that the probe CAN
/// do the thing when no sandbox stops it.
pub fn host_probe(args: &[&str]) -> ProbeRun {
    host_probe_with(args, |_| {})
}

pub fn host_probe_with(args: &[&str], adjust: impl FnOnce(&mut Command)) -> ProbeRun {
    let mut c = Command::new(probe());
    c.args(args).stdin(Stdio::null());
    adjust(&mut c);
    ProbeRun::parse(args[0], run_command(c, LIMIT))
}

pub fn errno_name(e: i32) -> String {
    let s = std::io::Error::from_raw_os_error(e).to_string();
    format!("{e} ({})", s.split(" (os error").next().unwrap_or(&s))
}

/// Find a program the way a shell would, in the given PATH (or the process's).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Copy a directory tree (files and directories only).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            copy_tree(&e.path(), &t);
        } else if ty.is_file() {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// A unix socket listening at `path`, however long: a path that does not fit in `sun_path`
/// (108 bytes, e.g. a fixture of a deep checkout) is bound through its directory, opened
/// `O_PATH`, as `/proc/self/fd/N/NAME` (the probe's `unix-connect` connects the same way).
pub fn bind_unix(path: &Path) -> std::os::unix::net::UnixListener {
    use std::os::unix::fs::OpenOptionsExt;
    if path.as_os_str().len() < 108 {
        return std::os::unix::net::UnixListener::bind(path)
            .unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path.parent().unwrap())
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    use std::os::fd::AsRawFd;
    let short = format!(
        "/proc/self/fd/{}/{}",
        dir.as_raw_fd(),
        path.file_name().unwrap().to_string_lossy()
    );
    std::os::unix::net::UnixListener::bind(&short)
        .unwrap_or_else(|e| panic!("bind {} as {short}: {e}", path.display()))
}

/// `c` run in a user namespace of its own in which the sysctl `name` (a path under
/// /proc/sys, e.g. `user/max_user_namespaces`) is 0: no such namespace can be created below
/// it, everything else as on the host. The capabilities `unshare` gets serve only to set the
/// sysctl; the command gets none (unless it runs as uid 0 there, i.e. the test runs as root).
pub fn under_zero_sysctl(c: Command, name: &str) -> Command {
    let mut w = Command::new("unshare");
    let script = format!(
        "echo 0 >/proc/sys/{name} && exec setpriv --inh-caps=-all --ambient-caps=-all -- \"$@\""
    );
    w.args([
        "--user",
        "--map-current-user",
        "--keep-caps",
        "--",
        "/bin/sh",
        "-c",
    ])
    .arg(script)
    .arg("sh");
    w.arg(c.get_program()).args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        w.current_dir(d);
    }
    w.stdin(Stdio::null());
    w
}

/// The children of `pid` (from its main thread's `children` file).
pub fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// git on the host, and scripts inside a read-write sandbox

/// git on the host, as the test user, with no system or global config of the host's (HOME
/// is the fixture dir), so only what the repo holds counts.
pub fn host_git(f: &Fixture, dir: &Path, args: &[&str]) -> Run {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(["-c", "protocol.file.allow=always"])
        .args(args)
        .env("HOME", &f.dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    run_command(c, Duration::from_secs(30))
}

pub fn have_git() -> bool {
    if which("git").is_none() {
        skip_tool("git is not installed");
        return false;
    }
    true
}

/// A real git repo with one commit.
pub fn real_repo(f: &Fixture, name: &str) -> PathBuf {
    let r = f.path(name);
    std::fs::create_dir_all(&r).unwrap();
    host_git(f, &r, &["init", "-q", "-b", "main"]).assert_code(0);
    std::fs::write(r.join("file.txt"), "one\n").unwrap();
    host_git(f, &r, &["add", "file.txt"]).assert_code(0);
    host_git(f, &r, &["commit", "-qm", "init"]).assert_code(0);
    r
}

/// The ci profile (shells, git, the repo's own scripts; repo read-write).
pub fn ci_profile(f: &Fixture) -> PathBuf {
    f.profile(&Spec::extends("ci"))
}

/// Run `script` (bash) inside the sandbox from the repo `repo`; the script lives outside the
/// repo's tracked files (written into it untracked).
pub fn inside(p: &Path, repo: &Path, script: &str) -> Run {
    std::fs::write(repo.join(".sandbox-test.sh"), script).unwrap();
    let c = sandbox_command(p, repo, &[], &["bash", ".sandbox-test.sh"]);
    let r = run_command(c, slack_secs(60));
    let _ = std::fs::remove_file(repo.join(".sandbox-test.sh"));
    r
}

pub fn slack_secs(s: u64) -> Duration {
    let factor = std::env::var("SANDBOX_RUN_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    Duration::from_secs(s * factor)
}

/// The ci profile (bash; repo read-write) with these `[limits]`, and the fixture's `scripts/`
/// bound read-only (for scripts that must not lie in the repo).
pub fn ci_with(f: &Fixture, name: &str, limits: &[(&str, &str)]) -> PathBuf {
    let scripts = f.path("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let spec = Spec::extends("ci").extra_ro(&scripts);
    let mut t: toml::Table = toml::from_str(&spec.to_toml()).unwrap();
    let l = t
        .entry("limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap();
    for (k, v) in limits {
        l.insert(k.to_string(), toml::Value::String(v.to_string()));
    }
    let p = f.path(&format!("profile-{name}.toml"));
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

//! What the sandboxed steps of a job wrote to `GITHUB_ENV` and `GITHUB_PATH` and did not hand
//! to the runner ([`super::export`]): kept for the later sandboxed steps of the same job,
//! which get it as the runner would have given it (variables set, `GITHUB_PATH` entries in
//! front of PATH, latest first), inside their sandbox only.
//!
//! **Where.** `STATE/sandbox-run/jobs/<key>/kept.json` ([`crate::state::dir`]: every
//! component opened without following a link, sandbox-run's own directories owned by the
//! user and the job's 0700), never where a step can write (`$RUNNER_TEMP`, the repo, the kept
//! home: [`super::prepare`] refuses a job directory inside any of them). The key is the job's
//! identity as the runner gives it (`GITHUB_RUN_ID`, `GITHUB_RUN_ATTEMPT`, `GITHUB_JOB`,
//! `RUNNER_NAME`, `RUNNER_TEMP`), which no sandboxed step can change: those names never reach
//! the runner from one. Without `GITHUB_RUN_ID` nothing is kept.
//!
//! **Which value wins.** A step's own `env:` and an unsandboxed step's `GITHUB_ENV` win over
//! an earlier one's, at the runner. So each kept variable remembers a fingerprint of the
//! caller's value when it was kept; a later step gets the kept value only while the caller's
//! value is still that one (unset included), else the caller's (someone after the step set
//! it). The fingerprint, not the value: the file never holds the runner's own values.
//!
//! Nothing here reaches sandbox-run's own configuration: the kept variables go only into the
//! environment the workload gets ([`Kept::caller_env`], then the env layer's rules as for any
//! caller variable), the PATH entries only into the workload's PATH ([`Kept::workload_path`]),
//! never into the PATH the gate resolves the program with.

use crate::layers::ns::Ids;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file in the job's directory.
const FILE: &str = "kept.json";
/// A job directory untouched this long (7 days) is removed by the next job's first step.
const STALE_SECS: i64 = 7 * 24 * 3600;
/// The most bytes of kept state read or written.
pub const STATE_MAX: u64 = 8 << 20;

/// One kept `GITHUB_ENV` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Var {
    pub name: String,
    pub value: String,
    /// [`fingerprint`] of the caller's value when the step set it; `None`: it was unset.
    pub before: Option<u64>,
}

/// What is kept for a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kept {
    /// Variables, one per name, in the order last set.
    pub env: Vec<Var>,
    /// `GITHUB_PATH` entries in the order added: the last is the first in PATH.
    pub path: Vec<String>,
}

/// FNV-1a, 64 bits: to tell whether the caller's value changed, without keeping it.
pub fn fingerprint(value: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in value.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The fingerprint of each caller variable, by name.
pub fn fingerprints(caller: &[(String, String)]) -> BTreeMap<String, u64> {
    caller
        .iter()
        .map(|(k, v)| (k.clone(), fingerprint(v)))
        .collect()
}

fn var<'a>(caller: &'a [(String, String)], k: &str) -> Option<&'a str> {
    caller
        .iter()
        .rev()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
}

/// The job's directory name: `run-<GITHUB_RUN_ID>-<fingerprint of the identity>`; `None`
/// without a run id.
pub fn key(caller: &[(String, String)]) -> Option<String> {
    let run = var(caller, "GITHUB_RUN_ID").filter(|v| !v.is_empty())?;
    let mut id = String::new();
    for k in [
        "GITHUB_RUN_ID",
        "GITHUB_RUN_ATTEMPT",
        "GITHUB_JOB",
        "RUNNER_NAME",
        "RUNNER_TEMP",
    ] {
        id.push_str(var(caller, k).unwrap_or(""));
        id.push('\0');
    }
    let digits: String = run.chars().filter(char::is_ascii_digit).take(20).collect();
    Some(format!("run-{digits}-{:016x}", fingerprint(&id)))
}

impl Kept {
    /// A step set `name` to `value`; `before`: the caller's fingerprints for that step.
    pub fn set(&mut self, name: &str, value: &str, before: &BTreeMap<String, u64>) {
        self.env.retain(|v| v.name != name);
        self.env.push(Var {
            name: name.to_string(),
            value: value.to_string(),
            before: before.get(name).copied(),
        });
    }

    /// `name` reached the runner: the runner's value is the one now.
    pub fn forget(&mut self, name: &str) {
        self.env.retain(|v| v.name != name);
    }

    /// A step added `entry` to `GITHUB_PATH` (moved to the front when it was there).
    pub fn add_path(&mut self, entry: &str) {
        self.path.retain(|p| p != entry);
        self.path.push(entry.to_string());
    }

    /// The runner added `entry` to PATH itself.
    pub fn forget_path(&mut self, entry: &str) {
        self.path.retain(|p| p != entry);
    }

    /// The kept value of `name` that still applies for a step whose caller's environment is
    /// `caller`.
    fn applies<'a>(&'a self, name: &str, caller: &[(String, String)]) -> Option<&'a str> {
        let v = self.env.iter().find(|v| v.name == name)?;
        (var(caller, name).map(fingerprint) == v.before).then_some(v.value.as_str())
    }

    /// The caller's environment as the runner would have given it to this step: each kept
    /// variable (but `PATH`, see [`Kept::workload_path`]) set, where it still applies. For the
    /// workload's environment only (the env layer's rules follow).
    pub fn caller_env(&self, caller: &[(String, String)]) -> Vec<(String, String)> {
        let mut out = caller.to_vec();
        for v in &self.env {
            if v.name == "PATH" || self.applies(&v.name, caller) != Some(v.value.as_str()) {
                continue;
            }
            out.retain(|(n, _)| *n != v.name);
            out.push((v.name.clone(), v.value.clone()));
        }
        out
    }

    /// The workload's PATH: the kept `GITHUB_PATH` entries, latest first, in front of `base`
    /// (the sandbox's PATH), or of a kept `PATH` variable that still applies.
    pub fn workload_path(&self, base: &str, caller: &[(String, String)]) -> String {
        let base = self.applies("PATH", caller).unwrap_or(base);
        let mut parts: Vec<&str> = self.path.iter().rev().map(String::as_str).collect();
        parts.push(base);
        parts.join(":")
    }

    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.path.is_empty()
    }
}

/// A job's directory and what it kept when the step started.
#[derive(Debug, Clone)]
pub struct Job {
    pub dir: PathBuf,
    pub kept: Kept,
}

impl Job {
    /// The job of the step whose caller's environment is `caller` (sandbox-run's own, whose
    /// effective uid is `euid`), for the user `ids`: its directory made (or checked) and its
    /// kept state read. `None` outside a job.
    pub fn open(caller: &[(String, String)], euid: u32, ids: Ids) -> Result<Option<Job>, String> {
        let Some(key) = key(caller) else {
            return Ok(None);
        };
        let what = "file commands: job state";
        let (base, mut below) = crate::state::location(
            ids.uid,
            euid,
            |k| var(caller, k).map(String::from),
            crate::state::passwd_home(ids.uid),
            what,
        )?;
        below.push("jobs".into());
        below.push(key);
        let dir = crate::state::ensure(&base, &below, 3, ids, what)?;
        if let Some(jobs) = dir.parent() {
            sweep(jobs, dir.file_name().unwrap_or_default());
        }
        let kept = read(&dir)?;
        Ok(Some(Job { dir, kept }))
    }

    /// Replace the kept state (by rename: a link there is replaced, never followed).
    pub fn save(&self, kept: &Kept) -> Result<(), String> {
        let fail = |e: String| {
            format!(
                "file commands: job state {}: {e}",
                self.dir.join(FILE).display()
            )
        };
        let bytes = serde_json::to_vec(kept).map_err(|e| fail(e.to_string()))?;
        if bytes.len() as u64 > STATE_MAX {
            return Err(fail(format!("larger than {STATE_MAX} bytes; not kept")));
        }
        let tree = crate::hostfs::Tree::open(&self.dir).map_err(|e| fail(e.to_string()))?;
        tree.put_bytes(std::ffi::OsStr::new(FILE), &bytes, 0o600)
            .map_err(|e| fail(e.to_string()))
    }
}

/// A job's state is left when the job ends (nothing tells sandbox-run it did): remove the other
/// jobs' directories in `jobs` untouched for [`STALE_SECS`] (housekeeping, not a guard: no
/// step can reach them). Never follows a link; best effort.
fn sweep(jobs: &Path, current: &std::ffi::OsStr) {
    let Ok(tree) = crate::hostfs::Tree::open(jobs) else {
        return;
    };
    let Ok(names) = tree.names() else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    for name in names {
        if name == current || !name.to_string_lossy().starts_with("run-") {
            continue;
        }
        let stale = match tree.stat(&name) {
            Ok(Some(st)) => now - st.st_mtime > STALE_SECS,
            _ => false,
        };
        if stale {
            crate::state::remove_entry(&tree, &name);
        }
    }
}

/// The kept state in `dir` (no link followed, bounded); empty when there is none yet.
fn read(dir: &Path) -> Result<Kept, String> {
    let path = dir.join(FILE);
    let fail = |e: String| {
        format!(
            "file commands: job state {}: {e}; remove it to start the job's state afresh",
            path.display()
        )
    };
    let bytes = crate::hostfs::Dir::open(dir)
        .and_then(|d| d.read_small(Path::new(FILE), STATE_MAX))
        .map_err(|e| fail(e.to_string()))?;
    match bytes {
        None => Ok(Kept::default()),
        Some(b) => serde_json::from_slice(&b).map_err(|e| fail(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_key_is_the_jobs_identity() {
        let a = env(&[
            ("GITHUB_RUN_ID", "1234"),
            ("GITHUB_RUN_ATTEMPT", "1"),
            ("GITHUB_JOB", "test"),
        ]);
        let k = key(&a).unwrap();
        assert!(k.starts_with("run-1234-"), "{k}");
        let mut b = a.clone();
        b[1].1 = "2".into();
        assert_ne!(key(&b), Some(k.clone()));
        let mut c = a.clone();
        c.push(("RUNNER_NAME".into(), "other".into()));
        assert_ne!(key(&c), Some(k.clone()));
        // a run id of the step's choosing cannot climb out of the jobs directory
        let d = env(&[("GITHUB_RUN_ID", "../../x/1")]);
        assert!(key(&d).unwrap().starts_with("run-1-"));
        assert_eq!(key(&env(&[("GITHUB_JOB", "t")])), None);
        assert_eq!(key(&env(&[("GITHUB_RUN_ID", "")])), None);
    }

    #[test]
    fn kept_values_apply_as_the_runner_would() {
        let step1 = env(&[("VERSION", "dev"), ("PATH", "/usr/bin")]);
        let mut k = Kept::default();
        let fp = fingerprints(&step1);
        k.set("VERSION", "1.2", &fp);
        k.set("NEW", "n", &fp);
        k.set("PATH", "/opt/p:/usr/bin", &fp);
        k.add_path("/a");
        k.add_path("/b");
        k.add_path("/a");
        // the next step, same caller: every kept value
        let next = k.caller_env(&step1);
        assert!(next.contains(&("VERSION".into(), "1.2".into())), "{next:?}");
        assert!(next.contains(&("NEW".into(), "n".into())));
        // PATH only through workload_path
        assert!(next.contains(&("PATH".into(), "/usr/bin".into())));
        assert_eq!(k.workload_path("/sbx/bin", &step1), "/a:/b:/opt/p:/usr/bin");
        // a step's own env: (or a later unsandboxed step) set it since: the caller's wins
        let other = env(&[("VERSION", "x"), ("NEW", "y"), ("PATH", "/other")]);
        let next = k.caller_env(&other);
        assert!(next.contains(&("VERSION".into(), "x".into())), "{next:?}");
        assert!(next.contains(&("NEW".into(), "y".into())), "{next:?}");
        assert_eq!(k.workload_path("/sbx/bin", &other), "/a:/b:/sbx/bin");
        // set again by a later sandboxed step: the latest value, once
        k.set("VERSION", "1.3", &fingerprints(&step1));
        assert_eq!(k.env.iter().filter(|v| v.name == "VERSION").count(), 1);
        assert!(k
            .caller_env(&step1)
            .contains(&("VERSION".into(), "1.3".into())));
        k.forget("VERSION");
        k.forget_path("/b");
        assert!(k
            .caller_env(&step1)
            .contains(&("VERSION".into(), "dev".into())));
        assert_eq!(k.path, ["/a"]);
    }

    #[test]
    fn the_state_is_read_back_and_a_link_is_refused() {
        let base =
            crate::testdir::base().join(format!("sandbox-run-job-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let job = Job {
            dir: base.clone(),
            kept: Kept::default(),
        };
        assert_eq!(read(&base).unwrap(), Kept::default());
        let mut k = Kept::default();
        k.set("A", "1\n2", &BTreeMap::new());
        k.add_path("/opt/x");
        job.save(&k).unwrap();
        assert_eq!(read(&base).unwrap(), k);
        std::fs::remove_file(base.join(FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", base.join(FILE)).unwrap();
        let e = read(&base).unwrap_err();
        assert!(e.contains("remove it"), "{e}");
        // saving replaces the link, never writes through it
        job.save(&k).unwrap();
        assert_eq!(read(&base).unwrap(), k);
        std::fs::write(base.join(FILE), "{\"env\":[],\"path\":[],\"x\":1}").unwrap();
        assert!(read(&base).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn stale_jobs_are_swept_and_links_never_followed() {
        let base =
            crate::testdir::base().join(format!("sandbox-run-job-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let keep = base.join("keep");
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(keep.join("x"), "x").unwrap();
        for d in ["run-1-old", "run-2-new", "run-3-me", "other"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(&keep, base.join("run-4-link")).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(8 * 24 * 3600);
        for d in ["run-1-old", "run-3-me", "other"] {
            std::fs::File::open(base.join(d))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        sweep(&base, std::ffi::OsStr::new("run-3-me"));
        assert!(!base.join("run-1-old").exists());
        for d in ["run-2-new", "run-3-me", "other"] {
            assert!(base.join(d).exists(), "{d}");
        }
        assert!(keep.join("x").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}

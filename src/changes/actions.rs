//! GitHub Actions' file commands on the way back.
//!
//! A step talks to the runner through files the runner names in its environment
//! (`GITHUB_ENV`, `GITHUB_PATH`, `GITHUB_OUTPUT`, `GITHUB_STATE`, `GITHUB_STEP_SUMMARY`, each
//! made empty under `$RUNNER_TEMP/_runner_file_commands/` before the step). After the step the
//! runner applies them to every later step, sandboxed or not: it refuses only `NODE_OPTIONS`
//! in `GITHUB_ENV`, so `BASH_ENV` or `LD_PRELOAD` written there run on the host in the next
//! `shell: bash` step or node action, and a `GITHUB_PATH` entry into a directory the step
//! wrote puts its programs in front of every later step (a post step's `git` included).
//!
//! So inside the sandbox each variable names a private copy ([`INSIDE`], empty at start), the
//! runner's own files stay read-only with everything else `$RUNNER_TEMP` held before the step
//! (the event file `GITHUB_EVENT_PATH`, other actions' files): a step may add to
//! `$RUNNER_TEMP`, never change what is there. After the sandbox is gone, [`apply`] reads the
//! copies (no link followed, bounded), parses them as the runner does (its `SetEnvFileCommand`,
//! `EnvFileKeyValuePairs` and `AddPathFileCommand`: lines end at `\n` only, `NAME=VALUE` or
//! `NAME<<DELIMITER` ... `DELIMITER`; `GITHUB_PATH` lines end at `\n`, `\r\n` or `\r`) and
//! appends to the real files, opened without following a link, only what passes, written
//! anew in a form the runner reads back as exactly the entries that passed:
//!
//! - `GITHUB_ENV`: only the names the workflow listed in its `env:` as
//!   `SANDBOX_RUN_EXPORT_ENV` ([`export`]: any name a later host program reads can be code,
//!   `TAR_OPTIONS` for the tar of actions/cache, `GNUMAKEFLAGS`, make's `RM`..., so no list
//!   of bad names would do), and never, listed or not, sandbox-run's own names
//!   (`SANDBOX_RUN_*`, the export lists included: a step can never widen them), code-loading
//!   ones (`LD_*`, `layers::env`'s list), the runner's (`GITHUB_*`, `RUNNER_*`, `ACTIONS_*`),
//!   `PATH`, and the names sandbox-run takes its configuration from (`HOME`, `XDG_*`...).
//! - `GITHUB_PATH`: only the directories the workflow listed as `SANDBOX_RUN_EXPORT_PATH`,
//!   and of those only absolute entries, one directory each (no `:`), without `.` or `..`,
//!   none inside a directory the step could write (the repo, `$RUNNER_TEMP`, the kept home
//!   and `$HOME` as the step saw it, any read-write bind) or below a world-writable one
//!   (`/tmp`), as written or resolved.
//! - `GITHUB_OUTPUT`, `GITHUB_STATE`: every well-formed entry.
//! - `GITHUB_STEP_SUMMARY`: as written, up to the runner's own 1 MiB.
//!
//! What a step wrote to `GITHUB_ENV` or `GITHUB_PATH` and did not hand to the runner is kept
//! for the later sandboxed steps of the same job ([`job`]), outside anything a step can
//! write, and given to them inside their sandbox as the runner would have.
//!
//! A malformed entry stops the runner's parse (the step fails there); here it and the rest of
//! that file are refused. Every refusal is one line on stderr (the first [`STDERR_MAX`]) and
//! an entry of the report's `file_commands`.

pub mod export;
pub mod job;

use crate::layers::{landlock, mounts, ns::Ids};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file commands, by the variable that names each.
pub const FILES: &[&str] = &[
    "GITHUB_ENV",
    "GITHUB_PATH",
    "GITHUB_OUTPUT",
    "GITHUB_STATE",
    "GITHUB_STEP_SUMMARY",
];

/// Where the private copies are inside a sandbox with its own root (one file per variable).
pub const INSIDE: &str = "/run/sandbox-run/file-commands";

/// The most entries of `$RUNNER_TEMP` made read-only (one bind each); more is an error.
const TEMP_MAX_ENTRIES: usize = 1024;
/// The most bytes of a private copy read back.
const FILE_MAX: u64 = 4 << 20;
/// The runner's own limit for a step summary.
const SUMMARY_MAX: u64 = 1 << 20;
/// Refusals named on stderr; the rest are counted.
pub const STDERR_MAX: usize = 20;
/// Refusals listed in the report; the rest are counted.
const REPORT_MAX: usize = 256;
/// The longest name shown (stderr and report), in characters.
const NAME_SHOWN: usize = 1024;

/// What a run needs to bring the file commands back ([`apply`]).
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The private copies on the host: a fresh directory holding one file per variable, in a
    /// run directory of sandbox-run's own ([`crate::state::RunDir`]: private to the sandbox's
    /// user, removed after the run, and by the next run when this one was killed).
    pub dir: PathBuf,
    /// The run directory `dir` lies in, removed when the last copy of the setup goes.
    pub run: Option<std::sync::Arc<crate::state::RunDir>>,
    /// Each variable and the runner's real file it named (from the caller's environment).
    pub files: Vec<(String, PathBuf)>,
    /// Host directories the command could write: no `GITHUB_PATH` entry may lead into them.
    pub writable: Vec<PathBuf>,
    /// What the workflow listed for the runner's unsandboxed steps (the caller's environment).
    pub lists: export::Lists,
    /// The job's kept state, where the rest goes; `None` outside a job (then it is refused).
    pub job: Option<job::Job>,
    /// [`job::fingerprint`] of each caller variable, for [`job::Kept::set`].
    pub before: BTreeMap<String, u64>,
}

/// Why an entry did not reach the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not listed by the workflow (`SANDBOX_RUN_EXPORT_ENV`, `SANDBOX_RUN_EXPORT_PATH`).
    NotListed,
    /// A name sandbox-run takes its own configuration from (`SANDBOX_RUN_*`, `HOME`,
    /// `XDG_*`...).
    OwnConfig,
    /// Changes what code a later program loads (`BASH_ENV`, `LD_PRELOAD`...).
    LoadsCode,
    /// `PATH` in `GITHUB_ENV`.
    Path,
    /// One of the runner's own names (`GITHUB_*`, `RUNNER_*`, `ACTIONS_*`).
    RunnerName,
    /// An empty name.
    EmptyName,
    /// A NUL byte.
    Nul,
    /// Not a `NAME=VALUE` or `NAME<<DELIMITER` entry the runner would read: it and the rest of
    /// the file.
    Malformed,
    /// The file is not UTF-8 (the runner would decode it otherwise).
    NotUtf8,
    /// The file is larger than what is read back.
    TooLarge,
    /// The private copy is not a regular file any more (a link, a FIFO...).
    Unreadable,
    /// A `GITHUB_PATH` entry that is not an absolute path without `.` and `..`.
    NotAbsolute,
    /// A `GITHUB_PATH` entry with a `:` (more than one directory).
    Separator,
    /// A `GITHUB_PATH` entry inside a directory the command could write.
    WritableDir,
    /// A `GITHUB_PATH` entry below a world-writable directory.
    WorldWritable,
    /// The runner's file could not be appended to (a link, not a regular file, missing).
    NotApplied,
}

impl Reason {
    fn words(self) -> &'static str {
        match self {
            Reason::NotListed => "not listed in the workflow's env",
            Reason::OwnConfig => "sandbox-run takes its own configuration from it",
            Reason::LoadsCode => "it changes what code a later step loads",
            Reason::Path => "PATH is changed through GITHUB_PATH only",
            Reason::RunnerName => {
                "the runner's own variables (GITHUB_*, RUNNER_*, ACTIONS_*) are not set by a step"
            }
            Reason::EmptyName => "an empty name",
            Reason::Nul => "a NUL byte",
            Reason::Malformed => {
                "not an entry the runner reads (this one and the rest of the file)"
            }
            Reason::NotUtf8 => "the file is not UTF-8",
            Reason::TooLarge => "the file is too large",
            Reason::Unreadable => "the file is not a regular file any more",
            Reason::NotAbsolute => "not an absolute path without '.' and '..'",
            Reason::Separator => "a ':' would add more than one directory",
            Reason::WritableDir => "inside a directory the sandboxed step could write",
            Reason::WorldWritable => "below a world-writable directory",
            Reason::NotApplied => "the runner's file could not be appended to",
        }
    }
}

/// One entry that did not reach the runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The variable naming the file (`GITHUB_ENV`).
    pub file: String,
    /// The entry's name (`GITHUB_PATH`: the entry), or `line N`, or empty for the whole file.
    pub name: String,
    pub reason: Reason,
    /// Kept for the later sandboxed steps of the job ([`job`]).
    pub kept: bool,
}

/// What became of the file commands of one run (the report's `file_commands`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Entries appended to the runner's files (a non-empty step summary counts one).
    pub appended: u64,
    /// What was refused (the first 256).
    pub refused: Vec<Refused>,
    /// How many were refused in all.
    pub refused_count: u64,
}

// ---------------------------------------------------------------------------------------------
// Before the run
// ---------------------------------------------------------------------------------------------

/// What [`prepare`] needs of the plan.
pub struct Input<'a> {
    /// The caller's environment (the runner's, for this step).
    pub caller: &'a [(String, String)],
    pub namespaces: bool,
    pub ids: Ids,
    pub repo: &'a Path,
    pub home_kept: Option<&'a Path>,
    pub scratch: Option<&'a Path>,
    /// The job's kept state ([`job::Job::open`]), when the step runs in one.
    pub job: Option<&'a job::Job>,
}

/// Set the file commands up for a run: the existing entries of `$RUNNER_TEMP` read-only
/// (`ops`; without namespaces, `$RUNNER_TEMP` read-only whole through `landlock`), a private
/// copy of each file the caller's environment names, bound at [`INSIDE`], and `env` naming
/// them. `None` when the caller names no file command. Errors are one line (exit 125);
/// nothing is left on the host then.
pub fn prepare(
    i: &Input,
    ops: &mut Vec<mounts::Op>,
    landlock: Option<&mut landlock::Spec>,
    env: &mut BTreeMap<String, String>,
) -> Result<Option<Setup>, String> {
    let var = |k: &str| {
        i.caller
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let mut files = Vec::new();
    for name in FILES {
        if let Some(v) = var(name) {
            if !v.starts_with('/') {
                return Err(format!(
                    "file commands: {name} is {v:?}, not an absolute path"
                ));
            }
            files.push((name.to_string(), PathBuf::from(v)));
        }
    }
    let temp = var("RUNNER_TEMP")
        .filter(|v| v.starts_with('/'))
        .map(PathBuf::from);
    let mut writable = writable_dirs(i, ops, landlock.as_deref());
    writable.extend(temp.iter().cloned());
    if let Some(ws) = var("GITHUB_WORKSPACE").filter(|v| v.starts_with('/')) {
        writable.push(PathBuf::from(ws));
    }
    let mut landlock = landlock;
    if let Some(temp) = &temp {
        protect_temp(temp, i.namespaces, ops, landlock.as_deref_mut())?;
    }
    // What the job kept must lie where no step can write, or a step could choose it.
    if let Some(j) = i.job {
        let all = with_canonical(writable.clone());
        let real = std::fs::canonicalize(&j.dir).unwrap_or_else(|_| j.dir.clone());
        if let Some(w) = all
            .iter()
            .find(|w| j.dir.starts_with(w) || real.starts_with(w))
        {
            return Err(format!(
                "file commands: the job state directory {} lies in {}, which the sandboxed step can write; set XDG_STATE_HOME (in the runner's environment) to a directory no step can write",
                j.dir.display(),
                w.display()
            ));
        }
    }
    if files.is_empty() {
        ops.sort_by_key(|op| op.dst().components().count());
        return Ok(None);
    }
    let (dir, run) = make_private(&files, i.ids)?;
    writable.push(dir.clone());
    let writable = with_canonical(writable);
    let inside = if i.namespaces {
        ops.push(mounts::Op::Bind {
            src: dir.clone(),
            dst: INSIDE.into(),
            ro: false,
            optional: false,
        });
        PathBuf::from(INSIDE)
    } else {
        dir.clone()
    };
    ops.sort_by_key(|op| op.dst().components().count());
    if let Some(l) = landlock {
        l.read_write.push(inside.clone());
    }
    for (name, _) in &files {
        env.insert(
            name.clone(),
            inside.join(name).to_string_lossy().into_owned(),
        );
    }
    Ok(Some(Setup {
        dir,
        run: Some(std::sync::Arc::new(run)),
        files,
        writable,
        lists: export::Lists::from(i.caller),
        job: i.job.cloned(),
        before: job::fingerprints(i.caller),
    }))
}

/// The host directories the command could write, as the plan stands: the repo, the kept home,
/// the scratch dir, every read-write bind and copy-on-write lower dir, the git views, and
/// without namespaces landlock's read-write list (host paths then).
fn writable_dirs(i: &Input, ops: &[mounts::Op], landlock: Option<&landlock::Spec>) -> Vec<PathBuf> {
    let mut out = vec![i.repo.to_path_buf()];
    out.extend(i.home_kept.map(Path::to_path_buf));
    out.extend(i.scratch.map(Path::to_path_buf));
    for op in ops {
        match op {
            mounts::Op::Bind {
                src,
                dst,
                ro: false,
                ..
            } => {
                out.push(src.clone());
                out.push(dst.clone());
            }
            mounts::Op::Overlay { lower, kept, .. } if *kept => out.push(lower.clone()),
            mounts::Op::GitView { dir, .. } => out.push(dir.clone()),
            _ => {}
        }
    }
    if !i.namespaces {
        if let Some(l) = landlock {
            out.extend(l.read_write.iter().cloned());
        }
    }
    out
}

/// `dirs` and, for each that exists, its resolved path; sorted, without duplicates.
fn with_canonical(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        if let Ok(real) = std::fs::canonicalize(&d) {
            out.push(real);
        }
        out.push(d);
    }
    out.sort();
    out.dedup();
    out
}

/// What `$RUNNER_TEMP` holds before the step stays as it is: each entry (directory or regular
/// file; a link or a special file has nothing to protect) bound read-only onto itself, by fd,
/// no link followed ([`mounts::Op::RepoRo`]), when `$RUNNER_TEMP` is bound read-write. Without
/// namespaces there is no bind: landlock makes `$RUNNER_TEMP` read-only whole.
fn protect_temp(
    temp: &Path,
    namespaces: bool,
    ops: &mut Vec<mounts::Op>,
    landlock: Option<&mut landlock::Spec>,
) -> Result<(), String> {
    if !namespaces {
        if let Some(l) = landlock {
            let real = std::fs::canonicalize(temp).ok();
            let is_temp = |p: &PathBuf| p == temp || Some(p) == real.as_ref();
            if l.read_write.iter().any(is_temp) {
                l.read_write.retain(|p| !is_temp(p));
                l.read_exec.push(temp.to_path_buf());
            }
        }
        return Ok(());
    }
    let bound = ops
        .iter()
        .any(|op| matches!(op, mounts::Op::Bind { dst, ro: false, .. } if temp.starts_with(dst)));
    if !bound {
        return Ok(());
    }
    let fail = |e: std::io::Error| format!("file commands: RUNNER_TEMP {}: {e}", temp.display());
    let real = std::fs::canonicalize(temp).map_err(fail)?;
    let entries = crate::hostfs::Dir::open(&real)
        .and_then(|d| d.entries(Path::new(""), TEMP_MAX_ENTRIES))
        .map_err(fail)?;
    let mut names: Vec<_> = entries
        .into_iter()
        .filter(|(_, k)| matches!(k, crate::hostfs::Kind::Dir | crate::hostfs::Kind::File))
        .map(|(n, _)| n)
        .collect();
    names.sort();
    for name in names {
        ops.push(mounts::Op::RepoRo {
            repo: temp.to_path_buf(),
            rel: PathBuf::from(name),
            create: false,
        });
    }
    Ok(())
}

/// A fresh 0700 directory in a run directory of sandbox-run's own, with an empty file per
/// variable, owned by the workload's user. Not under `$TMPDIR`: a killed run would leave it
/// there, and root's private `$TMPDIR` would keep the workload's user out.
fn make_private(
    files: &[(String, PathBuf)],
    ids: Ids,
) -> Result<(PathBuf, crate::state::RunDir), String> {
    let run = crate::state::RunDir::make(ids, "file-commands", "file commands")?;
    let dir = run.subdir("copies")?;
    let made = (|| {
        use std::os::unix::fs::OpenOptionsExt;
        let chown = nix::unistd::geteuid().as_raw() != ids.uid;
        for (name, _) in files {
            let p = dir.join(name);
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&p)?;
            if chown {
                std::os::unix::fs::lchown(&p, Some(ids.uid), Some(ids.gid))?;
            }
        }
        Ok::<(), std::io::Error>(())
    })();
    match made {
        Ok(()) => Ok((dir, run)),
        Err(e) => Err(format!("file commands: {}: {e}", dir.display())),
    }
}

/// The `-v` line: which file commands are private copies, and where the host's copies are.
pub fn plan_line(s: &Setup) -> String {
    let names: Vec<&str> = s.files.iter().map(|(n, _)| n.as_str()).collect();
    let kept = match &s.job {
        Some(j) => format!(
            "the rest of GITHUB_ENV/GITHUB_PATH kept for the job's later sandboxed steps ({})",
            j.dir.display()
        ),
        None => {
            "the rest of GITHUB_ENV/GITHUB_PATH refused (no GITHUB_RUN_ID: no job to keep it for)"
                .into()
        }
    };
    format!(
        "file commands: {} are private copies ({}); the runner gets only what the workflow lists ({}: {}; {}: {}), {kept}",
        names.join(", "),
        s.dir.display(),
        export::EXPORT_ENV,
        list_words(&s.lists.env),
        export::EXPORT_PATH,
        list_words(&s.lists.path),
    )
}

/// A list for the `-v` line.
fn list_words(l: &[String]) -> String {
    match l.is_empty() {
        true => "none".into(),
        false => l.join(","),
    }
}

// ---------------------------------------------------------------------------------------------
// After the run
// ---------------------------------------------------------------------------------------------

/// Bring the file commands back: each private copy read (no link followed, bounded), filtered,
/// and what passes appended to the runner's real file; what a step wrote to `GITHUB_ENV` or
/// `GITHUB_PATH` and did not pass kept for the job's later sandboxed steps. Runs on the host
/// after the sandbox is gone. Refusals are named on stderr and returned for the report.
pub fn apply(s: &Setup) -> Report {
    let mut report = Report::default();
    let mut refused = Vec::new();
    let mut kept = s.job.as_ref().map(|j| j.kept.clone());
    let dir = crate::hostfs::Dir::open(&s.dir);
    for (name, real) in &s.files {
        let cap = match name.as_str() {
            "GITHUB_STEP_SUMMARY" => SUMMARY_MAX,
            _ => FILE_MAX,
        };
        let whole = |reason| Refused {
            file: name.clone(),
            name: String::new(),
            reason,
            kept: false,
        };
        let bytes = match dir.as_ref().map(|d| d.read_small(Path::new(name), cap)) {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) if e.to_string().contains("larger than") => {
                refused.push(whole(Reason::TooLarge));
                continue;
            }
            Ok(Err(_)) | Err(_) => {
                refused.push(whole(Reason::Unreadable));
                continue;
            }
        };
        let ctx = Ctx {
            writable: &s.writable,
            lists: &s.lists,
            keep: kept.is_some(),
        };
        let mut f = filter(name, &bytes, &ctx);
        if let Some(k) = kept.as_mut() {
            for (n, v) in &f.kept_env {
                k.set(n, v, &s.before);
            }
            for p in &f.kept_path {
                k.add_path(p);
            }
        }
        if name == "GITHUB_STEP_SUMMARY" && !f.out.is_empty() {
            if let Some(mut held) = held_summary() {
                // `learn` writes its own section first, then this ([`hold_summary`]).
                report.appended += f.appended;
                *held = Some(Some((real.clone(), std::mem::take(&mut f.out))));
            }
        }
        if !f.out.is_empty() {
            match append(real, &f.out) {
                Ok(()) => {
                    report.appended += f.appended;
                    if let Some(k) = kept.as_mut() {
                        f.passed_env.iter().for_each(|n| k.forget(n));
                        f.passed_path.iter().for_each(|p| k.forget_path(p));
                    }
                }
                Err(e) => {
                    eprintln!("sandbox-run: {name}: {}: {}", real.display(), io_words(&e));
                    refused.push(whole(Reason::NotApplied));
                }
            }
        }
        refused.append(&mut f.refused);
    }
    if let (Some(j), Some(k)) = (&s.job, &kept) {
        if *k != j.kept {
            if let Err(e) = j.save(k) {
                eprintln!("sandbox-run: {e}");
                refused.iter_mut().for_each(|r| r.kept = false);
            }
        }
    }
    for r in refused.iter().take(STDERR_MAX) {
        eprintln!("sandbox-run: {}", refusal_line(r));
    }
    if refused.len() > STDERR_MAX {
        eprintln!(
            "sandbox-run: file commands: {} more entries not passed to the runner (listed in the report)",
            refused.len() - STDERR_MAX
        );
    }
    report.refused_count = refused.len() as u64;
    refused.truncate(REPORT_MAX);
    report.refused = refused;
    report
}

/// The step's summary, held back by `learn` until its own section is written: `None` while
/// nobody holds it, `Some(None)` held with nothing yet, `Some(Some((file, bytes)))` held.
type Held = Option<Option<(PathBuf, Vec<u8>)>>;
static SUMMARY_HELD: std::sync::Mutex<Held> = std::sync::Mutex::new(None);

/// The held summary slot, when [`hold_summary`] asked for it.
fn held_summary() -> Option<std::sync::MutexGuard<'static, Held>> {
    let g = SUMMARY_HELD.lock().unwrap_or_else(|e| e.into_inner());
    g.is_some().then_some(g)
}

/// From now on [`apply`] keeps the step's filtered summary instead of appending it, so that
/// `learn` can put its own section first: a step that leaves an open fence or `<!--` in its
/// summary then cannot hide learn's. Whatever happens, the held text reaches the runner's file
/// when the guard goes ([`SummaryHold::release`] with learn's section in front of it).
pub fn hold_summary() -> SummaryHold {
    *SUMMARY_HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(None);
    SummaryHold(())
}

/// See [`hold_summary`].
pub struct SummaryHold(());

impl SummaryHold {
    /// Appends `first` (learn's section), then the step's own summary when it was held, to
    /// `file` in one write, with the care [`apply`] takes; the step's text is left out (one
    /// line says so) when both would pass the runner's 1 MiB, so that learn's section stays.
    pub fn release(self, file: &Path, first: &[u8]) -> std::io::Result<()> {
        let held = take_held();
        let mut bytes = first.to_vec();
        if let Some((real, theirs)) = held {
            if real != file {
                append(&real, &theirs)?;
            } else if (first.len() + theirs.len()) as u64 + existing(file) > SUMMARY_MAX {
                eprintln!(
                    "sandbox-run: GITHUB_STEP_SUMMARY: the step's own summary not passed to the runner: with learn's section it is larger than the runner's 1 MiB"
                );
            } else {
                bytes.extend_from_slice(&theirs);
            }
        }
        if bytes.is_empty() {
            return Ok(());
        }
        append(file, &bytes)
    }
}

/// What the runner's file holds already (it counts toward the runner's 1 MiB).
fn existing(file: &Path) -> u64 {
    std::fs::symlink_metadata(file).map_or(0, |m| m.len())
}

fn take_held() -> Option<(PathBuf, Vec<u8>)> {
    SUMMARY_HELD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .flatten()
}

impl Drop for SummaryHold {
    fn drop(&mut self) {
        if let Some((real, theirs)) = take_held() {
            if let Err(e) = append(&real, &theirs) {
                eprintln!(
                    "sandbox-run: GITHUB_STEP_SUMMARY: {}: {}",
                    real.display(),
                    io_words(&e)
                );
            }
        }
    }
}

/// An I/O error without its `(os error N)` tail.
fn io_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// The stderr line of a refusal (names quoted and escaped: they are the step's text).
pub fn refusal_line(r: &Refused) -> String {
    // Quoted, every character that could hide or reorder text escaped.
    let name = format!("\"{}\"", crate::visible::text(&r.name).replace('"', "\\\""));
    let list = match r.file.as_str() {
        "GITHUB_PATH" => export::EXPORT_PATH,
        _ => export::EXPORT_ENV,
    };
    match (r.kept, r.reason) {
        (true, Reason::NotListed) => format!(
            "{}: {} kept for later sandboxed steps only; to hand it to unsandboxed steps, list it in the workflow's env: {list}",
            r.file, name
        ),
        (true, why) => format!(
            "{}: {} kept for later sandboxed steps only, never handed to unsandboxed steps: {}",
            r.file,
            name,
            why.words()
        ),
        (false, Reason::NotListed) => format!(
            "{}: {} not passed to the runner: not listed in the workflow's env: {list} (and no job, GITHUB_RUN_ID, to keep it for later sandboxed steps)",
            r.file, name
        ),
        (false, why) if r.name.is_empty() => {
            format!("{}: not passed to the runner: {}", r.file, why.words())
        }
        (false, why) => format!(
            "{}: {} not passed to the runner: {}",
            r.file,
            name,
            why.words()
        ),
    }
}

/// Append `bytes` to the runner's file `path`: opened without following a link and without
/// creating it, a regular file with no other hard link; a last line without its newline gets
/// one first.
fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(bad("not a regular file"));
    }
    if m.nlink() != 1 {
        return Err(bad("the file has another hard link"));
    }
    if m.len() > 0 {
        let mut last = [0u8];
        f.read_exact_at(&mut last, m.len() - 1)?;
        if last[0] != b'\n' {
            f.write_all(b"\n")?;
        }
    }
    f.write_all(bytes)
}

/// What passes of one file, ready to append, and what is kept for the job.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Filtered {
    pub out: Vec<u8>,
    /// Entries in `out`.
    pub appended: u64,
    pub refused: Vec<Refused>,
    /// `GITHUB_ENV` entries kept for the job's later sandboxed steps, in order.
    pub kept_env: Vec<(String, String)>,
    /// `GITHUB_PATH` entries kept for them, in order.
    pub kept_path: Vec<String>,
    /// Names and entries in `out` (the runner's from now on).
    pub passed_env: Vec<String>,
    pub passed_path: Vec<String>,
}

/// What [`filter`] decides by.
pub struct Ctx<'a> {
    /// Host directories the command could write ([`Setup::writable`]).
    pub writable: &'a [PathBuf],
    /// What the workflow listed.
    pub lists: &'a export::Lists,
    /// Whether what does not pass is kept for the job.
    pub keep: bool,
}

/// Filter the private copy of the file command `file` (its variable's name).
pub fn filter(file: &str, bytes: &[u8], ctx: &Ctx) -> Filtered {
    let mut f = Filtered::default();
    let refuse = |f: &mut Filtered, name: &str, reason, kept| {
        f.refused.push(Refused {
            file: file.to_string(),
            name: shown(name),
            reason,
            kept,
        })
    };
    if file == "GITHUB_STEP_SUMMARY" {
        if !bytes.is_empty() {
            f.out = bytes.to_vec();
            f.appended = 1;
        }
        return f;
    }
    let Some(text) = decode(bytes) else {
        refuse(&mut f, "", Reason::NotUtf8, false);
        return f;
    };
    if file == "GITHUB_PATH" {
        for entry in path_lines(text) {
            let listed = ctx.lists.path.iter().any(|p| p == entry);
            let why = match entry.contains('\0') {
                true => Some(Reason::Nul),
                false if !listed => Some(Reason::NotListed),
                false => path_reason(entry, ctx.writable),
            };
            match why {
                Some(Reason::Nul) => refuse(&mut f, entry, Reason::Nul, false),
                Some(r) => {
                    refuse(&mut f, entry, r, ctx.keep);
                    f.kept_path.push(entry.to_string());
                }
                None => {
                    f.out.extend_from_slice(entry.as_bytes());
                    f.out.push(b'\n');
                    f.appended += 1;
                    f.passed_path.push(entry.to_string());
                }
            }
        }
        return f;
    }
    let is_env = file == "GITHUB_ENV";
    let parsed = parse_pairs(text);
    let mut out = String::new();
    for e in &parsed.entries {
        let nul = (is_env && e.value.contains('\0')).then_some(Reason::Nul);
        if let Some(r) = pair_reason(e.name, e.value).or(nul) {
            refuse(&mut f, e.name, r, false);
            continue;
        }
        match is_env
            .then(|| export::env_reason(ctx.lists, e.name))
            .flatten()
        {
            Some(r) => {
                refuse(&mut f, e.name, r, ctx.keep);
                f.kept_env.push((e.name.to_string(), e.value.to_string()));
            }
            None => {
                write_pair(&mut out, e.name, e.value);
                f.appended += 1;
                if is_env {
                    f.passed_env.push(e.name.to_string());
                }
            }
        }
    }
    if let Some(line) = parsed.malformed {
        refuse(&mut f, &format!("line {line}"), Reason::Malformed, false);
    }
    f.out = out.into_bytes();
    f
}

/// At most [`NAME_SHOWN`] characters of a name.
fn shown(name: &str) -> String {
    match name.char_indices().nth(NAME_SHOWN) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_string(),
    }
}

/// The text as the runner decodes it: UTF-8 with a leading byte-order mark dropped. `None`
/// for anything else (invalid UTF-8, or another encoding's byte-order mark, which the runner
/// would follow).
pub fn decode(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    Some(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Why an entry of a `NAME=VALUE` file may not reach the runner nor be kept, if it may not:
/// an empty name, a NUL byte in it.
pub fn pair_reason(name: &str, _value: &str) -> Option<Reason> {
    if name.is_empty() {
        return Some(Reason::EmptyName);
    }
    if name.contains('\0') {
        return Some(Reason::Nul);
    }
    None
}

/// One entry of a `NAME=VALUE` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

/// The entries of a file, up to the first malformed one (its line number, from 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed<'a> {
    pub entries: Vec<Pair<'a>>,
    pub malformed: Option<usize>,
}

/// The runner's line reader on Linux: a line ends at `\n` (a `\r` stays in it); the last one
/// may lack it (`false`); nothing after a final `\n`.
fn read_line<'a>(text: &'a str, at: &mut usize) -> Option<(&'a str, bool)> {
    if *at >= text.len() {
        return None;
    }
    let start = *at;
    match text[start..].find('\n') {
        None => {
            *at = text.len();
            Some((&text[start..], false))
        }
        Some(k) => {
            *at = start + k + 1;
            Some((&text[start..start + k], true))
        }
    }
}

/// Parse a `GITHUB_ENV`, `GITHUB_OUTPUT` or `GITHUB_STATE` file as the runner does
/// (`EnvFileKeyValuePairs`): empty lines skipped; a line whose first `=` comes before its
/// first `<<` is `NAME=VALUE` (split at that `=`); one whose first `<<` comes first is
/// `NAME<<DELIMITER` (both not empty), whose value is the lines up to the first line equal to
/// DELIMITER, joined by their `\n`, each of them ending in `\n` (the delimiter line may end the
/// file); anything else is malformed and ends the parse.
pub fn parse_pairs(text: &str) -> Parsed<'_> {
    let mut p = Parsed::default();
    let mut at = 0;
    let mut line_no = 0;
    while let Some((line, _)) = read_line(text, &mut at) {
        line_no += 1;
        if line.is_empty() {
            continue;
        }
        let eq = line.find('=');
        let heredoc = line.find("<<");
        match (eq, heredoc) {
            (Some(e), h) if h.is_none_or(|h| e < h) => p.entries.push(Pair {
                name: &line[..e],
                value: &line[e + 1..],
            }),
            (_, Some(h)) => {
                let (name, delimiter) = (&line[..h], &line[h + 2..]);
                if name.is_empty() || delimiter.is_empty() {
                    p.malformed = Some(line_no);
                    return p;
                }
                let start = at;
                let mut end = at;
                let first = line_no;
                loop {
                    line_no += 1;
                    match read_line(text, &mut at) {
                        None => {
                            p.malformed = Some(first);
                            return p;
                        }
                        Some((l, _)) if l == delimiter => break,
                        Some((_, false)) => {
                            p.malformed = Some(first);
                            return p;
                        }
                        Some((_, true)) => end = at - 1,
                    }
                }
                p.entries.push(Pair {
                    name,
                    value: if end > start { &text[start..end] } else { "" },
                });
            }
            _ => {
                p.malformed = Some(line_no);
                return p;
            }
        }
    }
    p
}

/// Write one entry so that [`parse_pairs`] (and the runner) reads back exactly it: `NAME=VALUE`
/// for a value of one line, else `NAME<<DELIMITER` with a delimiter that no line of the value
/// equals. A name from [`parse_pairs`] has no `=`, no `<<`, and (in heredoc form) does not end
/// in `<`, so its first `=` or `<<` is the one written here.
pub fn write_pair(out: &mut String, name: &str, value: &str) {
    if !value.contains('\n') {
        out.push_str(name);
        out.push('=');
        out.push_str(value);
        out.push('\n');
        return;
    }
    let mut n = 0u32;
    let delimiter = loop {
        let d = format!("SANDBOX_RUN_EOF_{n}");
        if !value.split('\n').any(|l| l == d) {
            break d;
        }
        n += 1;
    };
    out.push_str(name);
    out.push_str("<<");
    out.push_str(&delimiter);
    out.push('\n');
    out.push_str(value);
    out.push('\n');
    out.push_str(&delimiter);
    out.push('\n');
}

/// The lines of a `GITHUB_PATH` file as the runner reads them (`File.ReadAllLines`: a line
/// ends at `\r\n`, `\n` or `\r`), empty ones skipped.
pub fn path_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        if b[i] == b'\n' || b[i] == b'\r' {
            out.push(&text[start..i]);
            if b[i] == b'\r' && b.get(i + 1) == Some(&b'\n') {
                i += 1;
            }
            start = i + 1;
        }
        i += 1;
    }
    if start < b.len() {
        out.push(&text[start..]);
    }
    out.retain(|l| !l.is_empty());
    out
}

/// Why a `GITHUB_PATH` entry may not reach the runner, if it may not. Looks at the host: the
/// entry as written and resolved (as far as it exists) must lie outside `writable` (resolved
/// paths included, see [`Setup::writable`]), and no directory on the way, written or resolved,
/// may be world-writable.
pub fn path_reason(entry: &str, writable: &[PathBuf]) -> Option<Reason> {
    if entry.contains('\0') {
        return Some(Reason::Nul);
    }
    if entry.contains(':') {
        return Some(Reason::Separator);
    }
    if !entry.starts_with('/') || entry.split('/').any(|c| c == "." || c == "..") {
        return Some(Reason::NotAbsolute);
    }
    let lexical = Path::new(entry);
    let real = resolve(lexical);
    let inside = |p: &Path| writable.iter().any(|w| p.starts_with(w));
    if inside(lexical) || inside(&real) {
        return Some(Reason::WritableDir);
    }
    let world = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        p.ancestors()
            .any(|a| std::fs::metadata(a).is_ok_and(|m| m.is_dir() && m.mode() & 0o002 != 0))
    };
    if world(lexical) || world(&real) {
        return Some(Reason::WorldWritable);
    }
    None
}

/// `p` with its longest existing ancestor resolved (links followed) and the rest appended.
fn resolve(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> (Vec<(&str, &str)>, Option<usize>) {
        let p = parse_pairs(text);
        (
            p.entries.iter().map(|e| (e.name, e.value)).collect(),
            p.malformed,
        )
    }

    #[test]
    fn the_runners_parser() {
        type Want<'a> = (&'a str, Vec<(&'a str, &'a str)>, Option<usize>);
        let table: Vec<Want> = vec![
            ("", vec![], None),
            ("A=1\n", vec![("A", "1")], None),
            ("A=1", vec![("A", "1")], None),
            ("A=1\n\nB=2\n", vec![("A", "1"), ("B", "2")], None),
            ("A=x=y\n", vec![("A", "x=y")], None),
            ("A=\n", vec![("A", "")], None),
            // the runner checks the line, not the name: an empty name is an entry
            ("=x\n", vec![("", "x")], None),
            // `=` before `<<`: a plain value holding `<<`
            ("A=x<<EOF\n", vec![("A", "x<<EOF")], None),
            // `<<` before `=`: a heredoc whose delimiter holds `=`
            ("A<<E=1\nv\nE=1\n", vec![("A", "v")], None),
            ("A<<EOF\nl1\nl2\nEOF\n", vec![("A", "l1\nl2")], None),
            ("A<<EOF\nl1\nEOF", vec![("A", "l1")], None),
            ("A<<EOF\nEOF\n", vec![("A", "")], None),
            ("A<<EOF\n\nEOF\n", vec![("A", "")], None),
            ("A<<EOF\nx\n\nEOF\n", vec![("A", "x\n")], None),
            // a `\r` is part of the line: `EOF\r` is not the delimiter
            (
                "A<<EOF\nx\nEOF\r\nB=2\nEOF\n",
                vec![("A", "x\nEOF\r\nB=2")],
                None,
            ),
            ("A=1\r\n", vec![("A", "1\r")], None),
            // a second NAME= line inside a value stays in the value
            (
                "M<<EOF\nfirst\nBASH_ENV=/tmp/x\nEOF\nC=3\n",
                vec![("M", "first\nBASH_ENV=/tmp/x"), ("C", "3")],
                None,
            ),
            // delimiter compared whole: ` EOF` and `EOF ` do not end it
            ("A<<EOF\n EOF\nEOF \nEOF\n", vec![("A", " EOF\nEOF ")], None),
            // malformed: the entries before it stand, the parse stops
            ("A=1\nnonsense\nB=2\n", vec![("A", "1")], Some(2)),
            ("A=1\n<<EOF\nx\nEOF\n", vec![("A", "1")], Some(2)),
            ("A<<\nx\n\n", vec![], Some(1)),
            ("A=1\nB<<EOF\nx\n", vec![("A", "1")], Some(2)),
            ("B<<EOF\nx", vec![], Some(1)),
            ("B<<EOF\nx\nEOFX\nC=1", vec![], Some(1)),
        ];
        for (text, want, malformed) in table {
            assert_eq!(pairs(text), (want, malformed), "{text:?}");
        }
    }

    #[test]
    fn what_is_written_reads_back_as_the_same_entries() {
        let values = [
            "",
            "x",
            "a=b",
            "a<<b",
            "l1\nl2",
            "x\n",
            "\n",
            "\n\n",
            "SANDBOX_RUN_EOF_0\nSANDBOX_RUN_EOF_1",
            "a\r\nb\r",
            "EOF\nB=2",
        ];
        let names = ["A", "a<", "x y", "N-1.2", "\u{e9}"];
        for name in names {
            for value in values {
                // never from the parser: a heredoc's name ends before its first `<<`
                if name.ends_with('<') && value.contains('\n') {
                    continue;
                }
                let mut out = String::new();
                write_pair(&mut out, name, value);
                write_pair(&mut out, "NEXT", "1");
                let p = parse_pairs(&out);
                assert_eq!(p.malformed, None, "{out:?}");
                assert_eq!(
                    p.entries,
                    [
                        Pair { name, value },
                        Pair {
                            name: "NEXT",
                            value: "1"
                        }
                    ],
                    "{out:?}"
                );
            }
        }
    }

    fn refused(f: &Filtered) -> Vec<(&str, Reason, bool)> {
        f.refused
            .iter()
            .map(|r| (r.name.as_str(), r.reason, r.kept))
            .collect()
    }

    fn ctx<'a>(writable: &'a [PathBuf], lists: &'a export::Lists, keep: bool) -> Ctx<'a> {
        Ctx {
            writable,
            lists,
            keep,
        }
    }

    #[test]
    fn env_files_pass_only_listed_names_and_keep_the_rest() {
        let lists = export::Lists {
            env: vec![
                "FOO".into(),
                "ML".into(),
                "LD_PRELOAD".into(),
                "SANDBOX_RUN_EXPORT_ENV".into(),
            ],
            path: vec![],
        };
        let text = "FOO=bar\nTAR_OPTIONS=--checkpoint-action=exec=x\nBASH_ENV=/tmp/evil.sh\nLD_PRELOAD=/tmp/e.so\nPATH=/tmp/bin\nGITHUB_EVENT_PATH=/tmp/e.json\nSANDBOX_RUN_EXPORT_ENV=TAR_OPTIONS\nML<<EOF\nl1\nLD_PRELOAD=/x\nEOF\nZ=a\0b\nnot an entry\nLATE=1\n";
        let f = filter("GITHUB_ENV", text.as_bytes(), &ctx(&[], &lists, true));
        assert_eq!(
            String::from_utf8(f.out.clone()).unwrap(),
            "FOO=bar\nML<<SANDBOX_RUN_EOF_0\nl1\nLD_PRELOAD=/x\nSANDBOX_RUN_EOF_0\n"
        );
        assert_eq!(f.appended, 2);
        assert_eq!(f.passed_env, ["FOO", "ML"]);
        assert_eq!(
            refused(&f),
            [
                ("TAR_OPTIONS", Reason::NotListed, true),
                ("BASH_ENV", Reason::LoadsCode, true),
                ("LD_PRELOAD", Reason::LoadsCode, true),
                ("PATH", Reason::Path, true),
                ("GITHUB_EVENT_PATH", Reason::RunnerName, true),
                ("SANDBOX_RUN_EXPORT_ENV", Reason::OwnConfig, true),
                ("Z", Reason::Nul, false),
                ("line 13", Reason::Malformed, false),
            ]
        );
        let kept: Vec<&str> = f.kept_env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            kept,
            [
                "TAR_OPTIONS",
                "BASH_ENV",
                "LD_PRELOAD",
                "PATH",
                "GITHUB_EVENT_PATH",
                "SANDBOX_RUN_EXPORT_ENV"
            ]
        );
        assert_eq!(f.kept_env[0].1, "--checkpoint-action=exec=x");
        // outside a job: refused, not kept, and the line says so
        let f = filter("GITHUB_ENV", b"TAG=1\n", &ctx(&[], &lists, false));
        assert_eq!(refused(&f), [("TAG", Reason::NotListed, false)]);
        assert!(
            refusal_line(&f.refused[0]).contains("no job"),
            "{:?}",
            f.refused
        );
        // outputs pass whole, whatever their names
        let f = filter(
            "GITHUB_OUTPUT",
            b"\xef\xbb\xbfx=1\nLD_PRELOAD=2\n",
            &ctx(&[], &lists, true),
        );
        assert_eq!(f.out, b"x=1\nLD_PRELOAD=2\n");
        assert!(f.refused.is_empty() && f.kept_env.is_empty());
        // another encoding: nothing
        let f = filter(
            "GITHUB_ENV",
            b"\xff\xfeA\0=\x001\0",
            &ctx(&[], &lists, true),
        );
        assert!(f.out.is_empty());
        assert_eq!(refused(&f), [("", Reason::NotUtf8, false)]);
        // the summary as written
        let f = filter(
            "GITHUB_STEP_SUMMARY",
            b"# hi\n\xff",
            &ctx(&[], &lists, true),
        );
        assert_eq!((f.out.as_slice(), f.appended), (&b"# hi\n\xff"[..], 1));
    }

    #[test]
    fn refusal_lines_say_how_to_list() {
        let r = |file: &str, name: &str, reason, kept| Refused {
            file: file.into(),
            name: name.into(),
            reason,
            kept,
        };
        assert_eq!(
            refusal_line(&r("GITHUB_ENV", "TAR_OPTIONS", Reason::NotListed, true)),
            "GITHUB_ENV: \"TAR_OPTIONS\" kept for later sandboxed steps only; to hand it to unsandboxed steps, list it in the workflow's env: SANDBOX_RUN_EXPORT_ENV"
        );
        assert!(
            refusal_line(&r("GITHUB_PATH", "/x", Reason::NotListed, true))
                .ends_with("SANDBOX_RUN_EXPORT_PATH"),
        );
        assert_eq!(
            refusal_line(&r("GITHUB_ENV", "LD_PRELOAD", Reason::LoadsCode, true)),
            "GITHUB_ENV: \"LD_PRELOAD\" kept for later sandboxed steps only, never handed to unsandboxed steps: it changes what code a later step loads"
        );
        assert_eq!(
            refusal_line(&r("GITHUB_ENV", "", Reason::NotUtf8, false)),
            "GITHUB_ENV: not passed to the runner: the file is not UTF-8"
        );
    }

    #[test]
    fn path_lines_end_where_the_runners_do() {
        assert_eq!(path_lines(""), Vec::<&str>::new());
        assert_eq!(path_lines("/a\n/b"), ["/a", "/b"]);
        assert_eq!(path_lines("/a\r\n\n/b\r/c\r"), ["/a", "/b", "/c"]);
        assert_eq!(path_lines("\u{feff}/a"), ["\u{feff}/a"]);
    }

    #[test]
    fn path_entries() {
        // not below /tmp, which is world-writable
        let base =
            crate::testdir::base().join(format!("sandbox-run-fc-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (temp, repo, safe, open) = (
            base.join("temp"),
            base.join("repo"),
            base.join("safe"),
            base.join("open"),
        );
        for d in [&temp, &repo, &safe.join("bin"), &open] {
            std::fs::create_dir_all(d).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        for d in [&base, &temp, &repo, &safe] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::os::unix::fs::symlink(&temp, safe.join("to-temp")).unwrap();
        std::os::unix::fs::symlink(&safe, temp.join("to-safe")).unwrap();
        let writable = with_canonical(vec![temp.clone(), repo.clone()]);
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let cases = [
            (s(&safe.join("bin")), None),
            (s(&safe.join("not-yet/bin")), None),
            (s(&temp.join("evil")), Some(Reason::WritableDir)),
            (s(&temp), Some(Reason::WritableDir)),
            (
                s(&repo.join("node_modules/.bin")),
                Some(Reason::WritableDir),
            ),
            // resolved into a writable dir through a link outside it
            (s(&safe.join("to-temp/evil")), Some(Reason::WritableDir)),
            // written inside a writable dir, resolved outside it: the link is the step's
            (s(&temp.join("to-safe/bin")), Some(Reason::WritableDir)),
            (s(&open.join("bin")), Some(Reason::WorldWritable)),
            ("relative/bin".into(), Some(Reason::NotAbsolute)),
            (format!("{}/../temp/x", s(&safe)), Some(Reason::NotAbsolute)),
            (format!("{}/./bin", s(&safe)), Some(Reason::NotAbsolute)),
            (format!("/usr/bin:{}", s(&temp)), Some(Reason::Separator)),
            ("/usr/bin".into(), None),
        ];
        for (entry, want) in cases {
            assert_eq!(path_reason(&entry, &writable), want, "{entry}");
        }
        let text = format!(
            "{}\n{}\r/usr/bin\n/opt/unlisted\n",
            s(&temp.join("evil")),
            s(&safe.join("bin"))
        );
        // listed: the safe ones pass; a listed writable one is still kept back
        let lists = export::Lists {
            env: vec![],
            path: vec![
                s(&temp.join("evil")),
                s(&safe.join("bin")),
                "/usr/bin".into(),
            ],
        };
        let f = filter(
            "GITHUB_PATH",
            text.as_bytes(),
            &Ctx {
                writable: &writable,
                lists: &lists,
                keep: true,
            },
        );
        assert_eq!(
            String::from_utf8(f.out).unwrap(),
            format!("{}\n/usr/bin\n", s(&safe.join("bin")))
        );
        assert_eq!(f.appended, 2);
        assert_eq!(f.kept_path, [s(&temp.join("evil")), "/opt/unlisted".into()]);
        assert_eq!(
            f.refused
                .iter()
                .map(|r| (r.reason, r.kept))
                .collect::<Vec<_>>(),
            [(Reason::WritableDir, true), (Reason::NotListed, true)]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    fn spec(read_write: Vec<PathBuf>) -> landlock::Spec {
        landlock::Spec {
            list: Vec::new(),
            read_exec: Vec::new(),
            read_only: Vec::new(),
            read_write,
            devices: Vec::new(),
            tty_devices: Vec::new(),
            tcp_connect: None,
            tcp_bind: None,
            scope: true,
        }
    }

    #[test]
    fn prepare_makes_temp_read_only_and_the_copies_private() {
        let base =
            crate::testdir::base().join(format!("sandbox-run-fc-prepare-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let temp = base.join("_temp");
        std::fs::create_dir_all(temp.join("_github_workflow")).unwrap();
        std::fs::create_dir_all(temp.join("_runner_file_commands")).unwrap();
        std::fs::write(temp.join("step.sh"), "true\n").unwrap();
        std::os::unix::fs::symlink("/etc", temp.join("a-link")).unwrap();
        let real = temp.join("_runner_file_commands/set_env_1");
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let caller: Vec<(String, String)> = vec![
            ("RUNNER_TEMP".into(), s(&temp)),
            ("GITHUB_ENV".into(), s(&real)),
            ("GITHUB_WORKSPACE".into(), "/w/repo".into()),
        ];
        let ids = Ids {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        let input = |namespaces| Input {
            caller: &caller,
            namespaces,
            ids,
            repo: Path::new("/w/repo"),
            home_kept: None,
            scratch: None,
            job: None,
        };
        let rw_temp = mounts::Op::Bind {
            src: temp.clone(),
            dst: temp.clone(),
            ro: false,
            optional: false,
        };
        // with namespaces: each entry but the link bound read-only, the copies bound
        let mut ops = vec![rw_temp.clone()];
        let mut l = spec(vec![PathBuf::from("/tmp")]);
        let mut env = BTreeMap::new();
        let setup = prepare(&input(true), &mut ops, Some(&mut l), &mut env)
            .unwrap()
            .unwrap();
        let ro: Vec<PathBuf> = ops
            .iter()
            .filter_map(|op| match op {
                mounts::Op::RepoRo { repo, rel, .. } if *repo == temp => Some(rel.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ro,
            ["_github_workflow", "_runner_file_commands", "step.sh"].map(PathBuf::from)
        );
        assert!(ops.iter().any(|op| matches!(op,
            mounts::Op::Bind { src, dst, ro: false, .. } if *src == setup.dir && dst == Path::new(INSIDE))));
        assert_eq!(env["GITHUB_ENV"], format!("{INSIDE}/GITHUB_ENV"));
        assert!(l.read_write.contains(&PathBuf::from(INSIDE)));
        assert_eq!(setup.files, [("GITHUB_ENV".to_string(), real.clone())]);
        for w in [&temp, &setup.dir, &PathBuf::from("/w/repo")] {
            assert!(setup.writable.contains(w), "{w:?}: {:?}", setup.writable);
        }
        assert_eq!(
            std::fs::read(setup.dir.join("GITHUB_ENV")).unwrap(),
            Vec::<u8>::new()
        );
        let _ = std::fs::remove_dir_all(&setup.dir);
        // without namespaces: landlock makes $RUNNER_TEMP read-only, the copies are on the host
        let mut ops = Vec::new();
        let mut l = spec(vec![PathBuf::from("/tmp"), temp.clone()]);
        let mut env = BTreeMap::new();
        let setup = prepare(&input(false), &mut ops, Some(&mut l), &mut env)
            .unwrap()
            .unwrap();
        assert!(ops.is_empty(), "{ops:?}");
        assert!(!l.read_write.contains(&temp), "{:?}", l.read_write);
        assert!(l.read_exec.contains(&temp));
        assert!(l.read_write.contains(&setup.dir));
        assert_eq!(env["GITHUB_ENV"], s(&setup.dir.join("GITHUB_ENV")));
        let _ = std::fs::remove_dir_all(&setup.dir);
        // a relative file command is an error; none at all: nothing to bring back
        let bad = vec![("GITHUB_OUTPUT".to_string(), "out".to_string())];
        let mut i = input(true);
        i.caller = &bad;
        let e = prepare(&i, &mut Vec::new(), None, &mut BTreeMap::new()).unwrap_err();
        assert!(e.contains("GITHUB_OUTPUT"), "{e}");
        i.caller = &[];
        assert!(prepare(&i, &mut Vec::new(), None, &mut BTreeMap::new())
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn append_follows_no_link_and_ends_the_last_line() {
        let base =
            std::env::temp_dir().join(format!("sandbox-run-fc-append-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let real = base.join("set_env");
        std::fs::write(&real, "A=1").unwrap();
        append(&real, b"B=2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "A=1\nB=2\n");
        let link = base.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(append(&link, b"C=3\n").is_err());
        assert!(append(&base.join("missing"), b"C=3\n").is_err());
        std::fs::hard_link(&real, base.join("hard")).unwrap();
        assert!(append(&real, b"C=3\n").is_err());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "A=1\nB=2\n");
        std::fs::remove_dir_all(&base).unwrap();
    }
}

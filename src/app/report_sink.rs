//! The `--report` of `run` and `validate`: created before anything runs, written once at
//! the end, and a `sandbox_error` report for a failure (or a flag clap refused) first.

use super::resolve::workspace;
use super::Fail;
use crate::report;
use crate::workspace::Workspace;
use std::ffi::OsString;

/// The `--report` of one `run` or `validate`. The file is created before anything runs and
/// written once at the end; when the command fails first (exit 125: a bad profile, a missing
/// repo, a malformed gene, a required layer missing, a bad flag), [`Reporter::failed`] writes
/// a report with status `sandbox_error` and the error line. Every exit leaves a valid report.
pub struct Reporter {
    dest: Option<String>,
    started: std::time::SystemTime,
    /// The profile's name once loaded; before, what `--profile` said.
    pub(super) profile: String,
    /// `--repo` as given, for a report written before the repo was found.
    repo_flag: Option<std::path::PathBuf>,
    /// The repo, once found.
    repo: Option<std::path::PathBuf>,
    pub(super) gene_id: Option<String>,
    pub(super) commands: Vec<String>,
    /// The words of the failing command, for a failure's report.
    pub(super) argv: Vec<String>,
    /// `--allow-program`: the programs this command was allowed beside the profile's.
    pub(super) allowed_programs: Vec<String>,
    sink: Option<ReportSink>,
    /// The report path itself was refused: nothing can be written.
    refused: bool,
    written: bool,
}

impl Reporter {
    pub fn new(dest: Option<String>, profile: &str, repo_flag: Option<std::path::PathBuf>) -> Self {
        Reporter {
            dest,
            started: std::time::SystemTime::now(),
            profile: profile.to_string(),
            repo_flag,
            repo: None,
            gene_id: None,
            commands: Vec::new(),
            argv: Vec::new(),
            allowed_programs: Vec::new(),
            sink: None,
            refused: false,
            written: false,
        }
    }

    /// Create the report file now, before anything runs: no link inside `ws.repo` followed.
    pub(super) fn open(&mut self, ws: &Workspace) -> Result<(), Fail> {
        self.repo = Some(ws.repo.clone());
        match ReportSink::open(self.dest.as_deref(), &ws.repo) {
            Ok(sink) => {
                self.sink = sink;
                Ok(())
            }
            Err(fail) => {
                self.refused = true;
                Err(fail)
            }
        }
    }

    /// The report file's path in the repo, for the copy-back to leave alone.
    pub(super) fn keep_paths(&self, ws: &Workspace) -> Vec<std::path::PathBuf> {
        self.sink
            .as_ref()
            .map(|s| s.in_repo(ws))
            .unwrap_or_default()
    }

    /// The report with these results; nothing without `--report`.
    pub(super) fn write(
        &mut self,
        results: Vec<report::CommandResult>,
        sandbox: Option<report::Sandbox>,
    ) -> Result<(), Fail> {
        self.written = true;
        if self.sink.is_none() {
            return Ok(());
        }
        let r = self.report(results, sandbox);
        match &mut self.sink {
            Some(sink) => sink.write(&r),
            None => Ok(()),
        }
    }

    /// After `fail`: unless a report was written already (or its path was the failure), one
    /// whose result has status `sandbox_error` and the error line. Problems writing it are
    /// one more line on stderr; the exit code stays the failure's.
    pub fn failed(&mut self, fail: &Fail) {
        if self.dest.is_none() || self.written || self.refused {
            return;
        }
        if self.sink.is_none() {
            // The failure came before the repo was found, so which links the repo controls is
            // unknown: follow none at all on the way to the report.
            let root = std::path::Path::new("/");
            match ReportSink::open(self.dest.as_deref(), root) {
                Ok(sink) => self.sink = sink,
                Err(e) => {
                    eprintln!("sandbox-run: {}", e.msg);
                    return;
                }
            }
        }
        let cmd = self.commands.first().cloned().unwrap_or_default();
        let line = fail.line().replace('\n', " ");
        let result = report::sandbox_failed(&cmd, &self.argv, &line);
        if let Err(e) = self.write(vec![result], None) {
            eprintln!("sandbox-run: {}", e.msg);
        }
    }

    fn report(
        &self,
        results: Vec<report::CommandResult>,
        sandbox: Option<report::Sandbox>,
    ) -> report::Report {
        let repo = match (&self.repo, &self.repo_flag) {
            (Some(r), _) => r.clone(),
            (None, flag) => {
                let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
                match flag {
                    Some(f) => crate::hostfs::lexical(&cwd, f),
                    None => cwd,
                }
            }
        };
        report::Report {
            kind: "ValidationReport",
            schema: report::SCHEMA,
            id: report::new_id(self.started),
            gene_id: self.gene_id.clone(),
            profile: if self.profile.is_empty() {
                "(none)".into()
            } else {
                self.profile.clone()
            },
            allowed_programs: self.allowed_programs.clone(),
            repo: repo.display().to_string(),
            commands: self.commands.clone(),
            ok: !results.is_empty() && results.iter().all(|r| r.ok),
            results,
            sandbox,
            env_fingerprint: report::Fingerprint::probe(),
            started_at: crate::units::iso8601(self.started),
            finished_at: crate::units::iso8601(std::time::SystemTime::now()),
        }
    }
}

/// A flag problem clap found (exit 125) in a `run` or `validate` command line that names
/// `--report`: that report too says `sandbox_error` and the error line. `args` is the whole
/// command line (with `run` inserted where it was implied); the flags are read as written,
/// since clap could not parse them.
pub fn usage_error_report(args: &[OsString], msg: &str) {
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let global = ["-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"];
    let Some(at) = words.iter().position(|w| !global.contains(&w.as_str())) else {
        return;
    };
    if !matches!(words[at].as_str(), "run" | "validate") {
        return;
    }
    let flags_end = words.iter().position(|w| w == "--").unwrap_or(words.len());
    let flags = &words[at + 1..flags_end];
    let value = |name: &str| -> Option<String> {
        let eq = format!("{name}=");
        let mut found = None;
        for (i, w) in flags.iter().enumerate() {
            if w == name {
                found = flags.get(i + 1).cloned();
            } else if let Some(v) = w.strip_prefix(&eq) {
                found = Some(v.to_string());
            }
        }
        found.filter(|v| !v.is_empty())
    };
    let Some(dest) = value("--report") else {
        return;
    };
    let repo_flag = value("--repo").map(std::path::PathBuf::from);
    let mut rep = Reporter::new(
        Some(dest),
        &value("--profile").unwrap_or_default(),
        repo_flag.clone(),
    );
    let argv: Vec<String> = words.get(flags_end + 1..).unwrap_or_default().to_vec();
    rep.commands = match value("--command") {
        Some(c) => vec![c],
        None if !argv.is_empty() => vec![argv.join(" ")],
        None => Vec::new(),
    };
    rep.argv = argv;
    if let Ok(ws) = workspace(repo_flag.as_deref()) {
        if rep.open(&ws).is_err() {
            // The report path is refused: clap's message is the one the caller needs first.
            return;
        }
    }
    rep.failed(&Fail::usage(msg));
}

/// Where the report goes: stdout, or a file created before anything runs (DESIGN.md section
/// 3: no link inside the repo followed, see [`crate::hostfs::create_report`]) and written
/// through the same open file at the end, whatever the command did to the path meanwhile.
enum ReportSink {
    Stdout,
    File { dest: String, file: std::fs::File },
}

impl ReportSink {
    /// `--report DEST`, opened now; `None` without the flag.
    fn open(dest: Option<&str>, repo: &std::path::Path) -> Result<Option<ReportSink>, Fail> {
        let Some(dest) = dest else { return Ok(None) };
        if dest == "-" {
            return Ok(Some(ReportSink::Stdout));
        }
        let fail = |why: String| Fail::usage(format!("report {dest}: {why}"));
        let last = std::path::Path::new(dest).components().next_back();
        if dest.ends_with('/') || !matches!(last, Some(std::path::Component::Normal(_))) {
            return Err(fail("not a file name".into()));
        }
        let cwd = std::env::current_dir().map_err(|e| fail(format!("current directory: {e}")))?;
        let file = crate::hostfs::create_report(std::path::Path::new(dest), &cwd, repo)
            .map_err(|e| fail(report_open_error(&e)))?;
        Ok(Some(ReportSink::File {
            dest: dest.to_string(),
            file,
        }))
    }

    /// The report file's path in the repo, if it lies there: the copy-back of a read-write
    /// repo leaves it and its directories alone ([`crate::layers::overlay`]).
    fn in_repo(&self, ws: &Workspace) -> Vec<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        let ReportSink::File { file, .. } = self else {
            return Vec::new();
        };
        // Where the file opened at the start really is: the path as written may reach the
        // repo through a link of the caller's outside it.
        let at = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
        at.ok()
            .and_then(|at| {
                at.strip_prefix(&ws.repo)
                    .ok()
                    .map(|r| vec![r.to_path_buf()])
            })
            .unwrap_or_default()
    }

    fn write(&mut self, r: &report::Report) -> Result<(), Fail> {
        use std::io::{Seek, Write};
        let json =
            serde_json::to_string_pretty(r).map_err(|e| Fail::usage(format!("report: {e}")))?;
        match self {
            ReportSink::Stdout => writeln!(std::io::stdout(), "{json}")
                .map_err(|e| Fail::usage(format!("report -: {e}"))),
            ReportSink::File { dest, file } => {
                let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
                // In a writable repo the command could write into the file meanwhile (it is
                // the same inode): start from empty.
                let r = if regular {
                    file.set_len(0)
                        .and_then(|()| file.rewind())
                        .and_then(|()| writeln!(file, "{json}"))
                } else {
                    writeln!(file, "{json}")
                };
                r.map_err(|e| Fail::usage(format!("report {dest}: {e}")))
            }
        }
    }
}

/// Why the report file could not be created, in the words of the host boundary's rules.
fn report_open_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "a symlink inside the repo is on the way (not followed)".into(),
        Some(libc::EXDEV) => "leaves the repo by `..` inside it (not followed)".into(),
        Some(libc::ENXIO) => "a FIFO with no reader".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

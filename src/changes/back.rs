//! After a run with a kept layer: the disk layer stage 2 handed over becomes a [`Changeset`]
//! ([`super::scan`]), which is applied to the host all or nothing, kept for review, or thrown
//! away (`--changes apply|keep|discard`), and reported path by path.
//!
//! This runs in the supervisor once every process of the sandbox is gone, so neither the
//! timeout nor the kill grace cuts it. The apply runs as the user the sandbox ran as
//! ([`super::owner`]): files made in a user's repo are that user's, and the kernel checks that
//! user's permissions, not root's.

use super::{scan, Applied, Changeset, Entry, Kind, What};
use crate::hostfs::Tree;
use crate::layers::mounts::Op;
use crate::layers::ns::Ids;
use serde::Serialize;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// What `--changes` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Apply,
    Keep,
    Discard,
}

/// The report's entries of a changeset: at most this many, the rest counted.
pub const REPORT_ENTRIES: usize = 10_000;
/// Refused entries named on stderr; the rest are counted.
const NAMED: usize = 20;

/// The report's `repo_changes`: the disk layer, the changeset and what became of it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepoChanges {
    /// Bytes and files used on the disk layer when the command ended.
    pub disk_used_bytes: u64,
    pub disk_used_files: u64,
    /// The layer was full when the command ended: writes failed with ENOSPC.
    pub disk_full: bool,
    /// Entries applied: written (files, links, directories made or changed) and removed;
    /// entries refused.
    pub written: u64,
    pub removed: u64,
    pub refused: u64,
    /// `all`, `none`, `partial`, `kept` or `discarded`.
    pub applied: Option<Applied>,
    /// The ID of the kept changeset (`sandbox-run changes show ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changeset: Option<String>,
    /// Every entry, accepted or refused, up to [`REPORT_ENTRIES`].
    pub entries: Vec<ReportEntry>,
    /// Entries beyond [`REPORT_ENTRIES`].
    pub entries_omitted: u64,
    /// After a failure part-way: the paths left changed (`applied: partial`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
    /// Why nothing or only part was applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportEntry {
    /// Repo-relative, or absolute for a git dir outside the repo.
    pub path: String,
    pub kind: Kind,
    pub what: What,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// How an entry's path is shown: repo-relative, or absolute outside the repo.
pub fn shown(cs: &Changeset, e: &Entry) -> String {
    match (e.root, cs.roots.get(e.root)) {
        (0, _) | (_, None) => e.path.display().to_string(),
        (_, Some(root)) => root.join(&e.path).display().to_string(),
    }
}

/// What the kept changeset records of the run.
#[derive(Debug, Clone)]
pub struct Meta {
    pub profile: String,
    pub command: String,
}

/// What the way back takes of the run's plan (the caller fills it from the plan).
pub struct FromPlan<'a> {
    /// The disk layer's directory on the host, when the layer is on disk.
    pub layer_dir: Option<&'a Path>,
    /// Repo-relative paths the copy-back leaves alone.
    pub keep_paths: &'a [PathBuf],
    /// The run's mounts: its kept overlays, git views and the layer's cap.
    pub mounts: &'a [Op],
    /// The workload's ids, as which the changes are applied.
    pub ids: Ids,
}

/// The way back for one run: `layer` is the disk layer stage 2 handed over.
pub fn run(plan: &FromPlan, layer: &std::os::fd::OwnedFd, mode: Mode, meta: &Meta) -> RepoChanges {
    // A layer on disk is opened where it lies on the host, not through stage 2's bind of it:
    // a rename never crosses mounts, even within one filesystem.
    let disk = match (&plan.layer_dir, layer.try_clone()) {
        (Some(dir), _) => match Tree::open(dir) {
            Ok(t) => t,
            Err(e) => return failed(format!("the run's layer {}: {e}", dir.display())),
        },
        (None, Ok(fd)) => Tree::from_fd(fd),
        (None, Err(e)) => return failed(format!("the run's layer: {e}")),
    };
    let (used, files, full) = crate::layers::overlay::usage(&disk);
    let mut out = RepoChanges {
        disk_used_bytes: used,
        disk_used_files: files,
        disk_full: full,
        ..RepoChanges::default()
    };
    if mode == Mode::Discard {
        out.applied = Some(Applied::Discarded);
        return out;
    }
    let roots = match roots(plan, &disk) {
        Ok(r) => r,
        Err(e) => {
            return RepoChanges {
                error: Some(e),
                applied: Some(Applied::None),
                ..out
            }
        }
    };
    let limits = scan::Limits {
        keep: plan.keep_paths.to_vec(),
        max_bytes: crate::layers::overlay::disk_size(plan.mounts).filter(|s| *s > 0),
    };
    let cs = match scan::scan(&roots, &limits) {
        Ok(cs) => cs,
        Err((path, e)) => {
            let line = format!(
                "reading the run's changes at {}: {e}",
                crate::visible::path(&path)
            );
            eprintln!("sandbox-run: repo: {line}; nothing was applied");
            return RepoChanges {
                error: Some(line),
                applied: Some(Applied::None),
                ..out
            };
        }
    };
    say_refused(&cs);
    out.refused = cs.entries.iter().filter(|e| !e.accepted()).count() as u64;
    out.entries = cs
        .entries
        .iter()
        .take(REPORT_ENTRIES)
        .map(|e| ReportEntry {
            path: shown(&cs, e),
            kind: e.kind,
            what: e.what,
            bytes: e.bytes,
            refused: e.refused.clone(),
        })
        .collect();
    out.entries_omitted = cs.entries.len().saturating_sub(REPORT_ENTRIES) as u64;
    let sources: Vec<Tree> = roots.into_iter().map(|r| r.upper).collect();
    match mode {
        Mode::Discard => unreachable!("returned above"),
        Mode::Keep => {
            if !cs.entries.iter().any(Entry::accepted) {
                out.applied = Some(Applied::None);
                return out;
            }
            let kept = super::store::keep(
                &cs,
                &sources,
                super::store::Meta {
                    repo: cs.roots.first().cloned().unwrap_or_default(),
                    profile: meta.profile.clone(),
                    command: meta.command.clone(),
                    ..Default::default()
                },
            );
            match kept {
                Ok(id) => {
                    // Not an error: a log line, so that -q leaves it out.
                    tracing::warn!(
                        "repo: the run's changes were kept as {id}, the repo is untouched: review them with `sandbox-run changes show {id}` or `changes diff {id}`, apply them with `sandbox-run changes apply {id}`"
                    );
                    out.applied = Some(Applied::Kept);
                    out.changeset = Some(id);
                }
                Err(e) => {
                    eprintln!("sandbox-run: repo: keeping the run's changes: {e}");
                    out.applied = Some(Applied::None);
                    out.error = Some(e);
                }
            }
            out
        }
        Mode::Apply => {
            if !cs.entries.iter().any(Entry::accepted) {
                out.applied = Some(Applied::None);
                return out;
            }
            let targets = match cs
                .roots
                .iter()
                .map(|p| Tree::open(p).map_err(|e| format!("{}: {e}", p.display())))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("sandbox-run: repo: {e}; nothing was applied");
                    return RepoChanges {
                        error: Some(e),
                        applied: Some(Applied::None),
                        ..out
                    };
                }
            };
            let (uid, gid) = (plan.ids.uid, plan.ids.gid);
            let outcome = super::owner::run_as(uid, gid, || {
                super::apply::apply_moving(&cs, &sources, &targets)
            });
            match outcome {
                Ok(o) => {
                    if o.applied == Applied::All {
                        let accepted = cs.entries.iter().filter(|e| e.accepted());
                        let (gone, made): (Vec<&Entry>, Vec<&Entry>) =
                            accepted.partition(|e| e.kind == Kind::Removed);
                        out.written = made.len() as u64;
                        out.removed = gone.len() as u64;
                    }
                    out.left = o
                        .left
                        .iter()
                        .map(|(root, p)| match (root, cs.roots.get(*root)) {
                            (0, _) | (_, None) => p.display().to_string(),
                            (_, Some(r)) => r.join(p).display().to_string(),
                        })
                        .collect();
                    if let Some(e) = &o.error {
                        let what = match o.applied {
                            Applied::Partial => format!(
                                "applied in part, {} paths left changed (the report lists them)",
                                o.left.len()
                            ),
                            _ => "nothing was applied".into(),
                        };
                        eprintln!("sandbox-run: repo: applying the run's changes: {e}; {what}");
                    }
                    out.error = o.error;
                    out.applied = Some(o.applied);
                }
                Err(e) => {
                    eprintln!(
                        "sandbox-run: repo: applying the run's changes: {e}; nothing was applied"
                    );
                    out.error = Some(e);
                    out.applied = Some(Applied::None);
                }
            }
            out
        }
    }
}

fn failed(e: String) -> RepoChanges {
    eprintln!("sandbox-run: repo: {e}; nothing was applied");
    RepoChanges {
        error: Some(e),
        applied: Some(Applied::None),
        ..RepoChanges::default()
    }
}

/// One line per refused entry, the first [`NAMED`]; then a count.
fn say_refused(cs: &Changeset) {
    let refused: Vec<&Entry> = cs.entries.iter().filter(|e| !e.accepted()).collect();
    for e in refused.iter().take(NAMED) {
        let path = match (e.root, cs.roots.get(e.root)) {
            (0, _) | (_, None) => e.path.clone(),
            (_, Some(root)) => root.join(&e.path),
        };
        // The name is the command's: escaped; the reason is ours, with a net for controls.
        eprintln!(
            "sandbox-run: repo: refused {} ({})",
            crate::visible::path(&path),
            crate::visible::text_keeping(e.refused.as_deref().unwrap_or_default(), &['\\'])
        );
    }
    if refused.len() > NAMED {
        eprintln!(
            "sandbox-run: repo: {} more entries refused (the report lists them)",
            refused.len() - NAMED
        );
    }
}

/// The kept layer's roots: the repo, then each git dir outside it, with their upper dirs on
/// the disk layer, the host dirs opened without links, and the git dirs of the run in each.
fn roots(plan: &FromPlan, disk: &Tree) -> Result<Vec<scan::Root>, String> {
    let mut kept: Vec<(usize, PathBuf)> = plan
        .mounts
        .iter()
        .filter_map(|op| match op {
            Op::Overlay {
                lower,
                kept: true,
                root,
                ..
            } => Some((*root, lower.clone())),
            _ => None,
        })
        .collect();
    kept.sort();
    let mut out = Vec::new();
    for (root, path) in kept {
        let name = crate::layers::mounts::upper_name(root);
        let upper = disk
            .child(OsStr::new(&name))
            .map_err(|e| format!("the run's layer {name}: {e}"))?;
        let real = Tree::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let git_dirs = plan
            .mounts
            .iter()
            .filter_map(|op| match op {
                Op::GitView {
                    dir,
                    layer: Some(_),
                    root: r,
                    ..
                } if *r == root => dir.strip_prefix(&path).ok().map(PathBuf::from),
                _ => None,
            })
            .collect();
        out.push(scan::Root {
            path,
            upper,
            real,
            git_dirs,
        });
    }
    Ok(out)
}

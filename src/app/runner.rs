//! The runner shared by `run` and `validate`: one allowed command in a fresh sandbox (plan,
//! cgroup leaf, supervisor, the way back), with its stderr lines and its report entry.

use super::resolve::sandbox_path;
use super::{Fail, STARTED};
use crate::launcher::Start;
use crate::layers::channel::Phase;
use crate::policy;
use crate::profile::{Profile, Requirement};
use crate::report;
use crate::workspace::Workspace;

/// How many refusals a failed run names on stderr (the report has them all).
const STDERR_REFUSALS: usize = 10;

/// Removes a run's scratch dir when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::plan::remove_scratch(&self.0);
    }
}

/// Runs allowed commands, each in a fresh sandbox: shared by `run` and `validate`.
pub(super) struct Runner<'a> {
    /// Print the setup timings after each run.
    pub(super) timings: bool,
    /// `-v`: say what the sandbox did; `-vv`: the timings too.
    pub(super) verbose: u8,
    pub(super) profile: &'a Profile,
    pub(super) ws: &'a Workspace,
    pub(super) overrides: crate::plan::Overrides,
    pub(super) options: crate::supervisor::Options,
    /// `--allow-program`: named by `-v`.
    pub(super) allowed_programs: &'a [String],
}

impl Runner<'_> {
    pub(super) fn execute(
        &self,
        cmd: &str,
        v: &policy::Verdict,
    ) -> Result<(report::CommandResult, report::Sandbox), Fail> {
        let path = sandbox_path(self.profile);
        let found = policy::found_path(v, &path, &self.ws.cwd).ok_or_else(|| {
            Fail::usage(format!(
                "{}: changed since the gate checked it",
                v.argv.first().map(String::as_str).unwrap_or("")
            ))
        })?;
        let t0 = std::time::Instant::now();
        let host = crate::plan::Host::probe();
        let mut plan = crate::plan::build(self.profile, self.ws, v, &found, &self.overrides, &host)
            .map_err(Fail::usage)?;
        // A run without namespaces has a scratch dir on the host, a read-write repo without
        // .git a placeholder: gone when we return, however.
        let _scratch = plan.scratch.clone().map(Scratch);
        let _placeholder = match &plan.git_placeholder {
            Some(repo) => {
                Some(crate::layers::git::Placeholder::make(repo, plan.ids).map_err(Fail::usage)?)
            }
            None => None,
        };
        // A large disk cap: the repo's layer on disk, in a dir of this run's (gone when we return).
        let _layer = crate::plan::prepare_layer_dir(&mut plan, host.kernel).map_err(Fail::usage)?;
        if plan.repo_mode != crate::profile::RepoMode::Ro {
            crate::workspace::warn_foreign_owner(
                &self.ws.repo,
                plan.ids.uid,
                plan.git_placeholder.is_some(),
                crate::workspace::OWNER_SCAN_BEFORE,
            );
        }
        let planned = t0.elapsed();
        let limits = self.cgroup_limits();
        // On cgroup v2 stage 2 is born in its leaf, which must exist before the fork. On v1 as
        // root stage 2 moves itself in, so the leaf is made (and the host's cgroups looked at)
        // after the fork, beside stage 2's namespace setup (`supervisor::run` calls `make`).
        let late = nix::unistd::geteuid().is_root() && crate::layers::cgroup::Host::v1_only();
        let mut leaf = None;
        // How the cgroup was had (a scope asked of systemd --user): said after the layers.
        let mut notes = Vec::new();
        if !late {
            // Not root and nothing delegated: a delegated scope from systemd --user, if it
            // answers (before anything forks: it moves this process).
            let host = crate::layers::cgroup::Host::detect_or_delegate(&mut notes);
            let made = host.and_then(|h| self.cgroup_leaf(&h, &limits));
            leaf = match self.cgroup_or_degraded(made) {
                Ok(leaf) => leaf,
                Err(fail) => {
                    // the refusal follows: -v says first what was asked of systemd
                    for n in notes.iter().filter(|_| self.verbose > 0) {
                        eprintln!("sandbox-run: {n}");
                    }
                    return Err(fail);
                }
            };
            if leaf.is_none() {
                plan.degraded.push("cgroup".into());
            }
        }
        plan.cgroup_self_join = late;
        let cgrouped = t0.elapsed() - planned;
        // (after the measurement: printing is not the cgroup's time)
        if self.verbose == 0 {
            for n in &notes {
                tracing::debug!("{n}");
            }
        } else {
            let abi = crate::layers::landlock::kernel_abi();
            // On v1 as root the leaf is made after the fork: that is the cgroup it will have
            // (a failure to make it is a line of its own then).
            let cgroup = match (&leaf, late) {
                (Some(l), _) => Some(l.version().number()),
                (None, true) => Some(1),
                (None, false) => None,
            };
            eprintln!(
                "sandbox-run: {}",
                crate::explain::layers_line(&plan, abi, cgroup)
            );
            eprintln!("sandbox-run: {}", crate::explain::repo_line(self.ws));
            for n in &notes {
                eprintln!("sandbox-run: {n}");
            }
            if !self.allowed_programs.is_empty() {
                eprintln!(
                    "sandbox-run: gate: {} allowed for this command by --allow-program, beside profile {}'s programs",
                    self.allowed_programs.join(", "),
                    self.profile.name
                );
            }
            for line in crate::explain::plan_lines(&plan, abi) {
                eprintln!("sandbox-run: {line}");
            }
            if !late {
                self.say_cgroup(leaf.as_ref(), &limits);
            }
        }
        for d in &plan.degraded {
            self.warn_degraded(d);
        }
        let mut make = || {
            let made =
                crate::layers::cgroup::Host::detect().and_then(|h| self.cgroup_leaf(&h, &limits));
            let made = self.cgroup_or_degraded(made).map_err(|f| f.line())?;
            if self.verbose > 0 {
                self.say_cgroup(made.as_ref(), &limits);
            }
            if made.is_none() {
                self.warn_degraded("cgroup");
            }
            Ok(made)
        };
        let make: Option<crate::supervisor::MakeLeaf> = match late {
            true => Some(&mut make),
            false => None,
        };
        // -v: each refusal said when first seen, by the report's own judgement.
        let resource = crate::denials::resource::Limits {
            memory_max: limits.memory_max,
            pids_max: limits.pids_max,
            timeout: self.options.timeout,
            output_cap: self.options.output_cap,
        };
        let live = (self.verbose > 0).then(|| {
            std::sync::Arc::new(crate::supervisor::Live::new(super::live::judge(
                &plan, resource,
            )))
        });
        let options = crate::supervisor::Options {
            live: live.clone(),
            ..self.options.clone()
        };
        let finished =
            crate::supervisor::run(&plan, &options, &mut leaf, make).map_err(Fail::usage)?;
        if late && leaf.is_none() {
            plan.degraded.push("cgroup".into());
        }
        let cgroup = leaf.as_ref().map(|l| report::CgroupInForce {
            version: l.version().number(),
            memory_max: limits.memory_max,
            cpu_max: limits.cpu_max(),
            pids_max: limits.pids_max,
        });
        let t1 = std::time::Instant::now();
        if let Some(leaf) = leaf {
            if let Err(e) = leaf.remove() {
                eprintln!("sandbox-run: {e}");
            }
        }
        if self.timings || self.verbose > 1 {
            eprintln!(
                "sandbox-run: {}",
                timings_line(
                    STARTED.get().map_or(std::time::Duration::ZERO, |s| t0 - *s),
                    planned,
                    cgrouped,
                    &finished,
                    t1.elapsed()
                )
            );
        }
        let oom_kills = finished.usage.as_ref().map_or(0, |u| u.oom_kills);
        let error = match (&finished.failure, finished.lost) {
            (Some(e), _) => Some(crate::supervisor::failure_line(e, &plan)),
            // The OOM line below says what happened.
            (None, Some(lost)) if oom_kills == 0 => Some(lost.line()),
            _ => None,
        };
        if let Some(e) = &error {
            eprintln!("sandbox-run: {e}");
        }
        if oom_kills > 0 {
            eprintln!(
                "sandbox-run: out of memory: the kernel killed {oom_kills} process{} at the {} memory cap{}",
                if oom_kills == 1 { "" } else { "es" },
                crate::units::Size(limits.memory_max),
                match finished.lost {
                    Some(lost) => format!(" ({})", lost.line()),
                    None => String::new(),
                }
            );
        }
        if finished.timed_out {
            eprintln!(
                "sandbox-run: timed out after {}: the sandbox was torn down",
                crate::units::Duration(self.options.timeout)
            );
        }
        if let Some(c) = &finished.disk_stopped {
            eprintln!("{}", crate::layers::disk::stopped_line(c, &plan.mounts));
        }
        let mut result = report::ran(cmd, &plan, &finished, self.options.capture, error, resource);
        // A command that failed after refused lookups is told which host it wanted.
        let filtered = plan.net == crate::profile::NetMode::Filtered;
        let named = crate::net::dns::refusal_line(&finished.dns_refused, &plan.profile, filtered);
        let names_said = named.is_some() && result.exit_code != 0;
        if let Some(line) = named.filter(|_| result.exit_code != 0) {
            eprintln!("{line}");
        }
        result.repo_changes = self.way_back(cmd, &plan, &finished);
        let full_at_end = result.repo_changes.as_ref().is_some_and(|c| c.disk_full);
        let hit = finished.disk_stopped.is_some() || full_at_end || finished.disk_hit;
        if hit && !result.limits_hit.contains(&"disk") {
            result.limits_hit.push("disk");
        }
        let named = |r: &crate::denials::Refusal| {
            r.kind == crate::denials::Kind::Resource && r.sub == "disk"
        };
        if let (true, Some(cap)) = (hit, crate::layers::overlay::disk_size(&plan.mounts)) {
            if !result.denials.iter().any(named) {
                result
                    .denials
                    .push(crate::denials::resource::disk_full(cap));
            }
        }
        // Every refusal named: all of them with -v (but those the supervisor said as they
        // came: the refused calls, and what it judged during the run), else the first ones
        // when it failed. The names the name service refused were said in one line above,
        // with the profile: not again.
        let unsaid = |r: &&crate::denials::Refusal| {
            !(names_said && r.kind == crate::denials::Kind::Network && r.sub == "dns")
        };
        if let Some(live) = &live {
            let later: Vec<_> = result
                .denials
                .iter()
                .filter(|r| r.kind != crate::denials::Kind::Syscall && !live.said(r))
                .filter(unsaid)
                .cloned()
                .collect();
            for line in crate::denials::stderr_lines(&later, usize::MAX) {
                eprintln!("{line}");
            }
        } else if !result.ok {
            let first: Vec<_> = result.denials.iter().filter(unsaid).cloned().collect();
            for line in crate::denials::stderr_lines(&first, STDERR_REFUSALS) {
                eprintln!("{line}");
            }
        }
        if finished.disk_hit && finished.disk_stopped.is_none() {
            if let Some(cap) = crate::layers::overlay::disk_size(&plan.mounts) {
                eprintln!(
                    "sandbox-run: disk: the command filled the repo's layer, {} ([limits] disk): its writes past that failed with EFBIG (File too large)",
                    crate::units::Size(cap)
                );
            }
        }
        if finished.disk_full {
            if let Some(cap) = crate::layers::overlay::disk_size(&plan.mounts) {
                eprintln!(
                    "sandbox-run: disk: the command filled the repo's layer, {} ([limits] disk): its writes past that failed with ENOSPC",
                    crate::units::Size(cap)
                );
            }
        }
        // The sandbox is gone: what the step left for the runner, filtered.
        result.file_commands = plan
            .file_commands
            .as_ref()
            .map(crate::changes::actions::apply);
        if !result.ok && plan.repo_mode != crate::profile::RepoMode::Ro {
            // a file it could not write may be why: look deeper than before the run
            crate::workspace::warn_foreign_owner(
                &self.ws.repo,
                plan.ids.uid,
                plan.git_placeholder.is_some(),
                crate::workspace::OWNER_SCAN_AFTER_FAILURE,
            );
        }
        Ok((result, report::sandbox(&plan, &finished, cgroup)))
    }

    /// A run with a kept layer: what became of its writes to the repo ([`crate::changes`]).
    fn way_back(
        &self,
        cmd: &str,
        plan: &crate::plan::Plan,
        f: &crate::outcome::Finished,
    ) -> Option<crate::changes::back::RepoChanges> {
        use crate::changes::back::{Mode, RepoChanges};
        if !crate::layers::overlay::kept(&plan.mounts) {
            return None;
        }
        if let Some(o) = &f.disk_stopped {
            // past its cap: nothing of it is applied (the line above said so)
            return Some(RepoChanges {
                disk_used_bytes: o.count.bytes,
                disk_used_files: o.count.files,
                disk_full: true,
                applied: Some(crate::changes::Applied::None),
                error: Some("the command went past [limits] disk".into()),
                ..RepoChanges::default()
            });
        }
        let Some(layer) = &f.layer else {
            // The sandbox never handed its layer over: it failed to start, or its init died.
            if f.failure.is_none() && f.disk_stopped.is_none() {
                eprintln!("sandbox-run: repo: the sandbox ended before it handed its changes over; nothing was applied");
            }
            return Some(RepoChanges {
                applied: Some(crate::changes::Applied::None),
                error: Some("the sandbox ended before it handed its changes over".into()),
                ..RepoChanges::default()
            });
        };
        let mode = self.overrides.changes.unwrap_or(Mode::Apply);
        let meta = crate::changes::back::Meta {
            profile: self.profile.name.clone(),
            command: cmd.to_string(),
        };
        let from_plan = crate::changes::back::FromPlan {
            layer_dir: plan.layer_dir.as_deref(),
            keep_paths: &plan.keep_paths,
            mounts: &plan.mounts,
            ids: plan.ids,
        };
        Some(crate::changes::back::run(&from_plan, layer, mode, &meta))
    }

    fn cgroup_limits(&self) -> crate::layers::cgroup::Limits {
        let (l, o) = (&self.profile.limits, &self.overrides);
        crate::layers::cgroup::Limits {
            memory_max: o.memory.unwrap_or(l.memory).0,
            cpus: o.cpus.unwrap_or(l.cpus),
            pids_max: o.pids.unwrap_or(l.pids),
        }
    }

    /// This run's cgroup leaf on `host`, limited before anything runs in it. Leaves of earlier
    /// runs whose sandbox-run was killed are removed first.
    fn cgroup_leaf(
        &self,
        host: &crate::layers::cgroup::Host,
        limits: &crate::layers::cgroup::Limits,
    ) -> Result<crate::layers::cgroup::Leaf, crate::layers::cgroup::Error> {
        if let Err(e) = host.remove_stale() {
            tracing::warn!("{e}");
        }
        host.create_leaf(limits)
    }

    /// The leaf, or what its absence means for this profile: a refusal (the line to print,
    /// exit 125) when the layer is required, `None` (run degraded) when best-effort.
    fn cgroup_or_degraded(
        &self,
        r: Result<crate::layers::cgroup::Leaf, crate::layers::cgroup::Error>,
    ) -> Result<Option<crate::layers::cgroup::Leaf>, Fail> {
        match r {
            Ok(leaf) => Ok(Some(leaf)),
            Err(e) => match self.profile.layers.cgroup {
                Requirement::Required => {
                    // The detection's details, for -v (doctor prints them too).
                    tracing::info!("{e}");
                    let facts = crate::advice::Facts::probe();
                    let [msg, hint] = crate::advice::cgroup_refusal(&e, self.profile, &facts);
                    Err(Fail {
                        hint: Some(hint),
                        ..Fail::usage(msg)
                    })
                }
                Requirement::BestEffort => {
                    tracing::debug!("{e}");
                    Ok(None)
                }
            },
        }
    }

    /// `-v`: the cgroup in force.
    fn say_cgroup(
        &self,
        leaf: Option<&crate::layers::cgroup::Leaf>,
        limits: &crate::layers::cgroup::Limits,
    ) {
        match leaf {
            Some(l) => eprintln!(
                "sandbox-run: cgroup v{}: memory {}, cpus {}, pids {}",
                l.version().number(),
                crate::units::Size(limits.memory_max),
                limits.cpus,
                limits.pids_max
            ),
            None => eprintln!("sandbox-run: cgroup: none (degraded)"),
        }
    }

    fn warn_degraded(&self, layer: &str) {
        if self.profile.without.iter().any(|w| w == layer) {
            let flag = if layer == "filesystem" {
                "namespaces"
            } else {
                layer
            };
            tracing::warn!("degraded: running without the {layer} layer (--without {flag})");
        } else {
            tracing::warn!(
                "degraded: running without the {layer} layer (profile {} marks it best-effort)",
                self.profile.name
            );
        }
    }
}

/// `--timings`: each setup step's own duration, then the whole.
fn timings_line(
    before: std::time::Duration,
    plan: std::time::Duration,
    cgroup: std::time::Duration,
    f: &crate::outcome::Finished,
    teardown: std::time::Duration,
) -> String {
    let ms = |d: std::time::Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
    let mut parts = vec![
        format!("command line, profile, gate {}", ms(before)),
        format!("plan {}", ms(plan)),
        match f.leaf_made {
            // Made after the fork, on the other core: not on the path the total adds up.
            Some(beside) => format!(
                "cgroup {} (its leaf beside stage 2 {})",
                ms(cgroup),
                ms(beside)
            ),
            None => format!("cgroup {}", ms(cgroup)),
        },
    ];
    let mut last = std::time::Duration::ZERO;
    for (phase, at) in &f.timings {
        let name = match (phase, f.start) {
            (Phase::Stage2, Some(Start::Fork)) => "stage 2 started (fork)",
            (Phase::Stage2, Some(Start::ForkIntoCgroup)) => {
                "stage 2 started (fork into the cgroup)"
            }
            (Phase::Stage2, Some(Start::Exec)) => "stage 2 started (re-exec)",
            _ => phase.name(),
        };
        parts.push(format!("{name} {}", ms(at.saturating_sub(last))));
        last = *at;
    }
    parts.push(format!(
        "workload {}",
        ms(f.spawned_to_end.saturating_sub(last))
    ));
    parts.push(format!("cgroup removal {}", ms(teardown)));
    let total = before + plan + cgroup + f.spawned_to_end + teardown;
    format!("timings: {}; total {}", parts.join(", "), ms(total))
}

//! Resource refusals: the limits the command ran into, each with what it used where that is
//! known, and a value that would have been enough (twice the limit: a guess the user checks,
//! never more than the evidence says).

use super::{Kind, Patch, PathSeen, Refusal};
use crate::layers::cgroup::Usage;
use crate::units::{Duration, Size};

/// What the run came to, as far as its limits go (from `outcome::Finished`, which this
/// module may not name: the outcome holds refusals).
#[derive(Debug, Clone, Default)]
pub struct Ran<'a> {
    pub usage: Option<&'a Usage>,
    /// The workload's raw wait status.
    pub status: Option<i32>,
    pub timed_out: bool,
    pub output_capped: &'a [&'static str],
    /// The repo's layer was found full or at its cap, or the run was stopped past it.
    pub disk_hit: bool,
}

/// The limits a run had beside its plan: the cgroup's and the supervisor's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub memory_max: u64,
    pub pids_max: u64,
    pub timeout: std::time::Duration,
    pub output_cap: u64,
}

fn refusal(sub: &str, what: String, rule: &str, fix: String, key: &str, value: String) -> Refusal {
    Refusal {
        kind: Kind::Resource,
        sub: sub.into(),
        what,
        rule: rule.into(),
        fix,
        patch: Some(Patch::Limit {
            key: key.into(),
            value,
        }),
        count: 1,
    }
}

/// The repo's layer reached its cap (`[limits] disk`), found during the run or by the way
/// back after it.
pub fn disk_full(cap: u64) -> Refusal {
    let v = Size(cap.saturating_mul(2));
    refusal(
        "disk",
        format!("disk {} (the repo's layer)", Size(cap)),
        "[limits] disk",
        format!("[limits] disk = \"{v}\""),
        "disk",
        v.to_string(),
    )
}

/// The limits the run ran into. `rlimits` are the plan's, `disk` the repo layer's cap, `seen`
/// the stderr heuristic's finds (an EMFILE or EFBIG text counts here).
pub fn refusals(
    f: &Ran,
    l: &Limits,
    rlimits: &crate::layers::rlimits::Limits,
    disk: Option<u64>,
    seen: &[PathSeen],
) -> Vec<Refusal> {
    let mut out = Vec::new();
    let usage = f.usage.cloned().unwrap_or_default();
    if usage.oom_kills > 0 {
        let v = Size(l.memory_max.saturating_mul(2));
        let peak = usage
            .peak_memory_bytes
            .map(|p| format!(", peak {}", Size(p)))
            .unwrap_or_default();
        out.push(Refusal {
            count: usage.oom_kills,
            ..refusal(
                "memory",
                format!("memory {}{peak}", Size(l.memory_max)),
                "[limits] memory (the kernel killed the largest process)",
                format!("--memory {v} (or [limits] memory = \"{v}\")"),
                "memory",
                v.to_string(),
            )
        });
    }
    if usage.pids_max_hits > 0 {
        let v = l.pids_max.saturating_mul(2);
        out.push(Refusal {
            count: usage.pids_max_hits,
            ..refusal(
                "pids",
                format!("pids {} (forks refused)", l.pids_max),
                "[limits] pids",
                format!("--pids {v} (or [limits] pids = {v})"),
                "pids",
                v.to_string(),
            )
        });
    }
    for stream in f.output_capped {
        let v = Size(l.output_cap.saturating_mul(2));
        out.push(refusal(
            "output",
            format!(
                "output {} ({stream}; the rest was dropped)",
                Size(l.output_cap)
            ),
            "[limits] output",
            format!("[limits] output = \"{v}\""),
            "output",
            v.to_string(),
        ));
    }
    let budget_hit = f.disk_hit;
    if let (true, Some(cap)) = (budget_hit, disk) {
        out.push(disk_full(cap));
    }
    if f.timed_out {
        let v = Duration(l.timeout.saturating_mul(2));
        out.push(refusal(
            "timeout",
            format!("timeout {}", Duration(l.timeout)),
            "[limits] timeout",
            format!("--timeout {v} (or [limits] timeout = \"{v}\")"),
            "timeout",
            v.to_string(),
        ));
    }
    let xfsz = f
        .status
        .is_some_and(|s| libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGXFSZ);
    let efbig: u64 = seen
        .iter()
        .filter(|p| p.errno == Some(libc::EFBIG))
        .map(|p| p.count)
        .sum();
    // On a disk-budgeted layer EFBIG is the disk cap's, said above.
    if (xfsz || efbig > 0) && !(rlimits.disk_budget && budget_hit) {
        let v = Size(rlimits.fsize.saturating_mul(2));
        out.push(Refusal {
            count: efbig.max(1),
            ..refusal(
                "fsize",
                format!("fsize {} (a file written past it)", Size(rlimits.fsize)),
                "[limits] fsize",
                format!("[limits] fsize = \"{v}\""),
                "fsize",
                v.to_string(),
            )
        });
    }
    let emfile: u64 = seen
        .iter()
        .filter(|p| p.errno == Some(libc::EMFILE))
        .map(|p| p.count)
        .sum();
    if emfile > 0 {
        let v = rlimits.nofile.saturating_mul(2);
        out.push(Refusal {
            count: emfile,
            ..refusal(
                "nofile",
                format!("nofile {} (Too many open files)", rlimits.nofile),
                "[limits] nofile",
                format!("[limits] nofile = {v}"),
                "nofile",
                v.to_string(),
            )
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_with_a_value_that_would_do() {
        let usage = Usage {
            oom_kills: 1,
            pids_max_hits: 3,
            peak_memory_bytes: Some(64 << 20),
            ..Usage::default()
        };
        let f = Ran {
            usage: Some(&usage),
            timed_out: true,
            output_capped: &["stdout"],
            status: Some(libc::SIGXFSZ),
            disk_hit: false,
        };
        let l = Limits {
            memory_max: 64 << 20,
            pids_max: 10,
            timeout: std::time::Duration::from_secs(5),
            output_cap: 1 << 20,
        };
        let rl = crate::layers::rlimits::Limits {
            nofile: 1024,
            fsize: 1 << 30,
            disk_budget: false,
        };
        let seen = [PathSeen {
            path: "".into(),
            access: crate::denials::Access::Read,
            errno: Some(libc::EMFILE),
            count: 2,
        }];
        let r = refusals(&f, &l, &rl, None, &seen);
        let subs: Vec<&str> = r.iter().map(|r| r.sub.as_str()).collect();
        assert_eq!(
            subs,
            ["memory", "pids", "output", "timeout", "fsize", "nofile"]
        );
        assert_eq!(
            r[0].line(),
            "refused resource memory: memory 64M, peak 64M: [limits] memory (the kernel killed the largest process); --memory 128M (or [limits] memory = \"128M\")"
        );
        assert_eq!(r[1].count, 3);
        assert_eq!(
            r[3].patch,
            Some(Patch::Limit {
                key: "timeout".into(),
                value: "10s".into()
            })
        );
        assert_eq!(r[5].count, 2);
        assert!(refusals(&Ran::default(), &l, &rl, Some(1 << 20), &[]).is_empty());
    }
}

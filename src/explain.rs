//! `-v`: what the sandbox did, one line each on stderr, in the words of the report. Pure: the
//! lines are built from the plan and the workspace, printed by the caller.

use crate::layers::env::{Dropped, Why};
use crate::layers::mounts::Op;
use crate::plan::Plan;
use crate::report::Network;
use crate::units::Size;
use crate::workspace::Workspace;

/// `repo DIR: WHY`.
pub fn repo_line(ws: &Workspace) -> String {
    format!("repo {}: {}", ws.repo.display(), ws.why())
}

/// The first line of `-v`: the layers in force and what is degraded, in the words of the
/// report's `sandbox` (`scripts/bench` prints the same from a report). `cgroup`: the version
/// of the cgroup the run has, `None` for none; `abi`: the kernel's landlock ABI.
pub fn layers_line(plan: &Plan, abi: u8, cgroup: Option<u8>) -> String {
    let namespaces = crate::report::namespaces_of(plan);
    let landlock = match &plan.landlock {
        Some(_) if abi == 0 => "landlock none".to_string(),
        Some(spec) => {
            let missing = crate::layers::landlock::missing_at(abi, spec);
            if missing.is_empty() {
                format!("landlock ABI {abi} full")
            } else {
                format!("landlock ABI {abi} partial (no {})", missing.join(", no "))
            }
        }
        None => "landlock none".to_string(),
    };
    let degraded = if plan.degraded.is_empty() {
        "none".to_string()
    } else {
        plan.degraded.join(", ")
    };
    format!(
        "layers: namespaces {}; repo {}; {landlock}; cgroup {}; seccomp {}; degraded: {degraded}",
        if namespaces.is_empty() {
            "none".to_string()
        } else {
            namespaces.join(",")
        },
        match plan.repo_mode {
            crate::profile::RepoMode::Overlay => "overlay",
            crate::profile::RepoMode::Rw => "rw",
            crate::profile::RepoMode::Ro => "ro",
        },
        cgroup.map_or("none".to_string(), |v| format!("v{v}")),
        if plan.seccomp { "allowlist" } else { "none" },
    )
}

/// The lines of one planned run: uid, mounts, network, env. `abi`: the kernel's landlock ABI.
pub fn plan_lines(plan: &Plan, abi: u8) -> Vec<String> {
    let mut out = vec![format!(
        "uid {} gid {}: {}",
        plan.ids.uid, plan.ids.gid, plan.ids_why
    )];
    if !plan.namespaces {
        out.push(
            "mounts: none (no namespaces: the host's filesystem, confined by landlock)".into(),
        );
    }
    out.extend(plan.mounts.iter().map(mount_line));
    out.push(network_line(&Network::of(plan, Some(abi))));
    out.extend(env_lines(&plan.env_dropped));
    for (name, hosts) in &plan.secrets {
        out.push(format!(
            "secret {name}: a placeholder inside; the proxy puts the value into requests to {}",
            hosts.join(", ")
        ));
    }
    if !plan.ca_certs.is_empty() || !plan.secrets.is_empty() {
        let mut from: Vec<String> = plan
            .ca_certs
            .iter()
            .map(|s| format!("{} ({})", s.path.display(), s.from))
            .collect();
        if !plan.secrets.is_empty() {
            from.push("the run's CA".into());
        }
        out.push(format!(
            "trust bundle: the system roots and {}",
            from.join(", ")
        ));
    }
    out.extend(
        plan.file_commands
            .as_ref()
            .map(crate::changes::actions::plan_line),
    );
    out
}

fn mount_line(op: &Op) -> String {
    let rw = |ro: bool| if ro { "ro" } else { "rw" };
    match op {
        Op::Bind {
            src,
            dst,
            ro,
            optional,
        } => format!(
            "bind {} -> {} {}{}",
            src.display(),
            dst.display(),
            rw(*ro),
            if *optional {
                " (skipped if out of the user's reach)"
            } else {
                ""
            }
        ),
        Op::Symlink { target, dst } => {
            format!("symlink {} -> {} ro", dst.display(), target.display())
        }
        Op::Overlay {
            lower,
            dst,
            size,
            kept: false,
            ..
        } => format!(
            "bind {} -> {} copy-on-write (writes vanish; at most {})",
            lower.display(),
            dst.display(),
            Size(*size)
        ),
        Op::Overlay {
            lower,
            dst,
            size,
            kept: true,
            ..
        } => format!(
            "bind {} -> {} rw through a copy-on-write layer (at most {} added; copied back at the end)",
            lower.display(),
            dst.display(),
            Size(*size)
        ),
        Op::RepoRo { repo, rel, .. } => {
            let p = repo.join(rel);
            format!("bind {} -> {} ro (protected)", p.display(), p.display())
        }
        Op::GitView { dir, size, .. } => format!(
            "git view {}: git's work files rw (at most {}), its configuration ro",
            dir.display(),
            Size(*size)
        ),
        Op::Tmpfs { dst, size, .. } => {
            format!(
                "tmpfs -> {} rw (private, at most {})",
                dst.display(),
                Size(*size)
            )
        }
        Op::Proc { dst } => format!("proc -> {} (the sandbox's own processes)", dst.display()),
        Op::Dev { dst, pts, .. } => format!(
            "dev -> {} (null, zero, full, random, urandom, tty{})",
            dst.display(),
            if *pts { ", pts" } else { "" }
        ),
    }
}

/// `network none: ...; tcp connect: ...; tcp bind: ...`.
pub fn network_line(n: &Network) -> String {
    // By its name in the report, so that a new mode needs no change here.
    let name = serde_json::to_value(n.mode)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let mode = match name.as_str() {
        "none" => "none (its own network namespace: loopback only)".to_string(),
        "host" => "host (the host's network)".to_string(),
        other => other.to_string(),
    };
    let ports = |p: &Option<Vec<u16>>| match p {
        None => "any port".to_string(),
        Some(v) if v.is_empty() => "no port".to_string(),
        Some(v) => v.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
    };
    format!(
        "network {mode}; tcp connect: {}; tcp bind: {}; listen: {}",
        ports(&n.tcp_connect),
        ports(&n.tcp_bind),
        if n.listen { "allowed" } else { "refused" }
    )
}

/// One line per reason: `env removed as secret-looking: A, B`.
pub fn env_lines(dropped: &[Dropped]) -> Vec<String> {
    [Why::Secret, Why::LoadsCode, Why::HeldBack, Why::NotKept]
        .into_iter()
        .filter_map(|why| {
            let names: Vec<&str> = dropped
                .iter()
                .filter(|d| d.why == why)
                .map(|d| d.name.as_str())
                .collect();
            (!names.is_empty()).then(|| format!("env {}: {}", why.words(), names.join(", ")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_name_each_reason_once_and_never_values() {
        let d = |name: &str, why| Dropped {
            name: name.into(),
            why,
        };
        let lines = env_lines(&[
            d("GITHUB_TOKEN", Why::Secret),
            d("HTTPS_PROXY", Why::NotKept),
            d("JAVA_HOME", Why::NotKept),
        ]);
        assert_eq!(
            lines,
            [
                "env removed as secret-looking: GITHUB_TOKEN",
                "env dropped, not on the keep list: HTTPS_PROXY, JAVA_HOME"
            ]
        );
        assert!(env_lines(&[]).is_empty());
    }
}

//! Refusals: everything the sandbox refused the command, of every kind, each with the rule that
//! refused it and what would allow it (or why nothing will). One list per command, in the
//! report (`results[].denials`), on stderr at the end of a failed run, and in `-v` as they
//! happen; `sandbox-run learn` turns their [`Patch`]es into a profile.
//!
//! The sources are the gate's verdict, the proxy's and the name service's logs (network), the
//! cgroup's and the supervisor's counts (resource), the seccomp filter's refused calls, which
//! reach the supervisor by user notification (syscall), and for the filesystem, the paths the
//! command looked up ([`PathSeen`]: from its stderr, or every lookup with `--observe`),
//! judged against the plan's view and landlock rules.

use std::path::{Path, PathBuf};

pub mod fs;
pub mod network;
pub mod resource;
pub mod stderr;

pub mod gate;

pub use crate::refusal::{Access, Kind, Patch, PathSeen, Refusal, Refusals};

/// Where a command's refusals come from, beside its plan (the outcome's fields: this module
/// may not name the outcome, which holds refusals).
pub struct Sources<'a> {
    /// The seccomp filter's refused calls, already named.
    pub refused_calls: &'a [Refusal],
    /// Paths the command looked up (`--observe`) or failed on (its stderr).
    pub paths_seen: &'a [PathSeen],
    pub connections: &'a [crate::net::proxy::Connection],
    pub dns_refused: &'a [crate::net::dns::Refused],
    pub ran: resource::Ran<'a>,
    pub limits: resource::Limits,
}

/// Every refusal of one command, deduplicated: the syscall ones, the filesystem ones (each
/// path judged by [`fs::classify`], the host looked at through `host`), network, resource.
pub fn collect(
    plan: &crate::plan::Plan,
    s: &Sources,
    homes: &[PathBuf],
    host: &dyn Fn(&Path) -> Option<fs::HostEntry>,
) -> Vec<Refusal> {
    let mut all = Refusals::default();
    for r in s.refused_calls {
        all.add(r.clone());
    }
    let view = view(plan, homes);
    // What the command's own stderr named first (it failed on it), then what `--observe`
    // saw looked up (a probe the command may have coped with): the first lines on stderr are
    // the likeliest causes.
    let named = s.paths_seen.iter().filter(|p| p.errno.is_some());
    let looked_up = s.paths_seen.iter().filter(|p| p.errno.is_none());
    for p in named.chain(looked_up) {
        if let Some(r) = fs::classify(&view, p, host) {
            all.add(r);
        }
    }
    for r in network::refusals(plan.net, s.connections, s.dns_refused) {
        all.add(r);
    }
    let disk = crate::layers::overlay::disk_size(&plan.mounts);
    for r in resource::refusals(&s.ran, &s.limits, &plan.rlimits, disk, s.paths_seen) {
        all.add(r);
    }
    all.into_vec()
}

/// The homes a run's paths are judged against: the caller's (`$HOME`) and the sandbox's,
/// with every home on the host ([`crate::toolchain::homes`]).
pub fn homes(plan: &crate::plan::Plan) -> Vec<PathBuf> {
    let caller = std::env::var_os("HOME").map(PathBuf::from);
    let given: Vec<&Path> = caller
        .as_deref()
        .into_iter()
        .chain([plan.home.as_path()])
        .collect();
    crate::toolchain::homes(&given)
}

/// What the command saw of the filesystem, for [`fs::classify`]: the plan's mounts and
/// landlock rules.
pub fn view<'a>(plan: &'a crate::plan::Plan, homes: &'a [PathBuf]) -> fs::View<'a> {
    fs::View {
        namespaces: plan.namespaces,
        host_netns: crate::plan::port_rules_apply(plan.namespaces, plan.net),
        mounts: &plan.mounts,
        landlock: plan.landlock.as_ref(),
        homes,
        repo: &plan.repo,
    }
}

/// The lines said on stderr for `list`: each [`Refusal::line`] with the `sandbox-run: `
/// prefix, at most `max` of them, then one line for the rest.
pub fn stderr_lines(list: &[Refusal], max: usize) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .take(max)
        .map(|r| format!("sandbox-run: {}", r.line()))
        .collect();
    if list.len() > max {
        out.push(format!(
            "sandbox-run: ... and {} more refusals (see the report)",
            list.len() - max
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(what: &str) -> Refusal {
        Refusal {
            kind: Kind::Filesystem,
            sub: "hidden".into(),
            what: what.into(),
            rule: "not in the sandbox's view".into(),
            fix: "[filesystem] extra_ro = [\"/x\"]".into(),
            patch: Some(Patch::ExtraRo("/x".into())),
            count: 1,
        }
    }

    #[test]
    fn the_same_refusal_is_counted_not_repeated() {
        let mut all = Refusals::default();
        assert!(all.add(r("/x (read)")));
        assert!(!all.add(r("/x (read)")));
        assert!(all.add(r("/y (read)")));
        assert_eq!(all.as_slice().len(), 2);
        assert_eq!(all.as_slice()[0].count, 2);
        assert_eq!(
            all.as_slice()[0].line(),
            "refused filesystem hidden: /x (read) (2x): not in the sandbox's view; [filesystem] extra_ro = [\"/x\"]"
        );
    }

    #[test]
    fn ten_lines_then_the_rest_counted() {
        let list: Vec<Refusal> = (0..13).map(|i| r(&format!("/p{i} (read)"))).collect();
        let lines = stderr_lines(&list, 10);
        assert_eq!(lines.len(), 11);
        assert!(lines[0].starts_with("sandbox-run: refused filesystem hidden: /p0 (read)"));
        assert_eq!(
            lines[10],
            "sandbox-run: ... and 3 more refusals (see the report)"
        );
        assert_eq!(stderr_lines(&list[..2], 10).len(), 2);
    }

    #[test]
    fn a_patch_serializes_as_set_and_value() {
        let j = serde_json::to_string(&Patch::ExtraRo("/etc/foo".into())).unwrap();
        assert_eq!(j, r#"{"set":"extra_ro","value":"/etc/foo"}"#);
        let j = serde_json::to_string(&Patch::Limit {
            key: "memory".into(),
            value: "4G".into(),
        })
        .unwrap();
        assert_eq!(
            j,
            r#"{"set":"limit","value":{"key":"memory","value":"4G"}}"#
        );
    }
}

//! `-v`: the judge the supervisor says refusals with as they happen
//! ([`crate::supervisor::live`]): the very classifiers the report's list is made with
//! ([`crate::denials`]), against the run's plan and the host, so that a line said during the
//! run is the report's line, less the count.

use crate::denials::{fs, network, resource};
use crate::supervisor::{Judge, Seen};

/// The judge of a run of `plan` with the supervisor's `limits`.
pub(super) fn judge(plan: &crate::plan::Plan, limits: resource::Limits) -> Judge {
    let plan = plan.clone();
    // The homes as the report's judgement sees them: the caller's and the sandbox's.
    let caller_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let given: Vec<&std::path::Path> = caller_home
        .as_deref()
        .into_iter()
        .chain([plan.home.as_path()])
        .collect();
    let homes = crate::toolchain::homes(&given);
    let rlimits = plan.rlimits;
    // One limit: what the end's judgement says of a run that hit only it.
    let limit = move |ran: &resource::Ran, seen: &[crate::refusal::PathSeen]| {
        resource::refusals(ran, &limits, &rlimits, None, seen)
            .into_iter()
            .next()
    };
    let ran = resource::Ran::default();
    Box::new(move |seen| match seen {
        Seen::Path(p) => {
            let view = fs::View {
                namespaces: plan.namespaces,
                mounts: &plan.mounts,
                landlock: plan.landlock.as_ref(),
                homes: &homes,
                repo: &plan.repo,
            };
            // A path, or `Too many open files` (said as the end says it). `File too large`
            // waits for the end: on a repo layer with a disk cap it is the cap's.
            fs::classify(&view, p, &fs::host_entry).or_else(|| {
                let emfile = p.errno == Some(libc::EMFILE);
                emfile
                    .then(|| limit(&ran, std::slice::from_ref(p)))
                    .flatten()
            })
        }
        Seen::Output(stream) => limit(
            &resource::Ran {
                output_capped: &[stream],
                ..Default::default()
            },
            &[],
        ),
        Seen::Timeout => limit(
            &resource::Ran {
                timed_out: true,
                ..Default::default()
            },
            &[],
        ),
        Seen::Net(crate::net::Denied::Host { host, port, reason }) => {
            let c = crate::net::proxy::Connection {
                host: host.to_string(),
                port,
                allowed: false,
                reason: reason.to_string(),
                count: 1,
                bytes_up: 0,
                bytes_down: 0,
            };
            network::refusals(plan.net, &[c], &[]).pop()
        }
        Seen::Net(crate::net::Denied::Name(name)) => {
            let r = crate::net::dns::Refused {
                name: name.to_string(),
                count: 1,
            };
            network::refusals(plan.net, &[], &[r]).pop()
        }
    })
}

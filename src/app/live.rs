//! `-v`: the judge the supervisor says refusals with as they happen
//! ([`crate::supervisor::live`]): the very classifiers the report's list is made with
//! ([`crate::denials`]), against the run's plan and the host, so that a line said during the
//! run is the report's line, less the count.

use crate::denials::{fs, network};
use crate::supervisor::{Judge, Seen};

/// The judge of a run of `plan`.
pub(super) fn judge(plan: &crate::plan::Plan) -> Judge {
    let plan = plan.clone();
    // The homes as the report's judgement sees them: the caller's and the sandbox's.
    let caller_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let given: Vec<&std::path::Path> = caller_home
        .as_deref()
        .into_iter()
        .chain([plan.home.as_path()])
        .collect();
    let homes = crate::toolchain::homes(&given);
    Box::new(move |seen| match seen {
        Seen::Path(p) => {
            let view = fs::View {
                namespaces: plan.namespaces,
                mounts: &plan.mounts,
                landlock: plan.landlock.as_ref(),
                homes: &homes,
                repo: &plan.repo,
            };
            fs::classify(&view, p, &fs::host_entry)
        }
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

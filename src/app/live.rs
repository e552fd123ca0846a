//! `-v`: the judge the supervisor says refusals with as they happen
//! ([`crate::supervisor::live`]): the very classifiers the report's list is made with
//! ([`crate::denials`]), against the run's plan and the host, so that a line said during the
//! run is the report's line, less the count.

use crate::denials::{fs, network, resource};
use crate::supervisor::{Judge, Seen};

/// The judge of a run of `plan` with the supervisor's `limits`.
pub(super) fn judge(plan: &crate::plan::Plan, limits: resource::Limits) -> Judge {
    let plan = plan.clone();
    let homes = crate::denials::homes(&plan);
    let rlimits = plan.rlimits;
    // One limit: what the end's judgement says of a run that hit only it.
    let limit = move |ran: &resource::Ran, seen: &[crate::refusal::PathSeen]| {
        resource::refusals(ran, &limits, &rlimits, None, seen)
            .into_iter()
            .next()
    };
    let ran = resource::Ran::default();
    let host = Host::start();
    Box::new(move |seen| match seen {
        Seen::Path(p) => {
            let view = fs::View {
                // An abstract name is judged at the end only: during the run it may be the
                // sandbox's own listener, which landlock lets it reach.
                host_netns: false,
                ..crate::denials::view(&plan, &homes)
            };
            // A path, or `Too many open files` (said as the end says it). `File too large`
            // waits for the end: on a repo layer with a disk cap it is the cap's.
            fs::classify(&view, p, &|path| host.entry(path)).or_else(|| {
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

/// The host's side of a path, looked at by a thread of its own: the supervisor's loop (and
/// with it the timeout) never waits on a host mount that hangs (a stalled FUSE or network
/// filesystem the command names). A lookup that has not answered in [`Host::WAIT`] says
/// nothing live, and from then on none is asked: what is not said live is said at the end.
struct Host {
    ask: std::sync::Mutex<std::sync::mpsc::SyncSender<std::path::PathBuf>>,
    answer: std::sync::Mutex<std::sync::mpsc::Receiver<Option<fs::HostEntry>>>,
    stuck: std::sync::atomic::AtomicBool,
}

impl Host {
    const WAIT: std::time::Duration = std::time::Duration::from_millis(200);

    fn start() -> Host {
        Host::with(fs::host_entry)
    }

    fn with(look: fn(&std::path::Path) -> Option<fs::HostEntry>) -> Host {
        let (ask, asked) = std::sync::mpsc::sync_channel::<std::path::PathBuf>(1);
        let (tell, answer) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("live-host".into())
            .spawn(move || {
                for path in asked {
                    if tell.send(look(&path)).is_err() {
                        break;
                    }
                }
            });
        Host {
            ask: std::sync::Mutex::new(ask),
            answer: std::sync::Mutex::new(answer),
            // no thread: nothing is judged live, all of it at the end
            stuck: std::sync::atomic::AtomicBool::new(spawned.is_err()),
        }
    }

    fn entry(&self, path: &std::path::Path) -> Option<fs::HostEntry> {
        use std::sync::atomic::Ordering;
        if self.stuck.load(Ordering::Relaxed) {
            return None;
        }
        let (Ok(ask), Ok(answer)) = (self.ask.lock(), self.answer.lock()) else {
            return None;
        };
        if ask.try_send(path.to_path_buf()).is_err() {
            self.stuck.store(true, Ordering::Relaxed);
            return None;
        }
        match answer.recv_timeout(Self::WAIT) {
            Ok(e) => e,
            Err(_) => {
                self.stuck.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn here(_: &Path) -> Option<fs::HostEntry> {
        Some(fs::HostEntry {
            plain: true,
            world_readable: true,
        })
    }

    fn hangs(_: &Path) -> Option<fs::HostEntry> {
        std::thread::sleep(std::time::Duration::from_secs(3600));
        here(Path::new("/"))
    }

    #[test]
    fn a_lookup_that_hangs_stops_live_judging_instead_of_the_loop() {
        let h = Host::with(here);
        assert!(h.entry(Path::new("/etc/x")).is_some());
        assert!(h.entry(Path::new("/etc/y")).is_some(), "asked again");
        let h = Host::with(hangs);
        assert_eq!(h.entry(Path::new("/mnt/hung/x")), None);
        // stuck: the next lookups answer at once, unasked
        assert_eq!(h.entry(Path::new("/etc/x")), None);
        assert!(h.stuck.load(std::sync::atomic::Ordering::Relaxed));
    }
}

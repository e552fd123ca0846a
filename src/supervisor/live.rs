//! `-v`: refusals said as they happen. What the run sees that may be a refusal (a path the
//! command's stderr names or `--observe` saw looked up, a host the proxy refused, a name the
//! name service refused) is handed to a judge the app layer gives (the same one the report's
//! list is made with, so the line is the report's line); each distinct refusal is said once,
//! when first seen, and the runner does not say it again at the end.
//!
//! Bounded: at most [`SAID_MAX`] distinct refusals are remembered; past that nothing more is
//! said live (one line says so) and the rest come at the end, as without `-v`.

use crate::refusal::{Kind, PathSeen, Refusal};
use std::collections::HashSet;
use std::sync::Mutex;

/// Distinct refusals said live before it stops.
pub const SAID_MAX: usize = 10_000;

/// What was seen, for the judge.
#[derive(Debug, Clone, Copy)]
pub enum Seen<'a> {
    Path(&'a PathSeen),
    Net(crate::net::Denied<'a>),
    /// The command's `stdout` or `stderr` passed the output cap.
    Output(&'static str),
    /// The run's timeout was reached.
    Timeout,
}

/// The app layer's judge: the refusal `seen` is, if it is one (with a count of 1).
pub type Judge = Box<dyn Fn(Seen) -> Option<Refusal> + Send + Sync>;

/// The refusals said so far, keyed as [`crate::refusal::Refusals`] counts them.
type Key = (Kind, String, String);

pub struct Live {
    judge: Judge,
    said: Mutex<SaidSet>,
}

/// A line to say, and the refusal it says.
#[derive(Debug, PartialEq, Eq)]
pub struct Said {
    key: Option<Key>,
    pub line: String,
}

#[derive(Default)]
struct SaidSet {
    keys: HashSet<Key>,
    /// [`SAID_MAX`] reached: nothing more is said live.
    full: bool,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Live {
    pub fn new(judge: Judge) -> Live {
        Live {
            judge,
            said: Mutex::new(SaidSet::default()),
        }
    }

    /// The line to say now for `seen` (with its newline): a refusal not said yet. Past
    /// [`SAID_MAX`], once, the line that says the rest come at the end. A line that could not
    /// be said goes back ([`Live::lost`]).
    pub fn see(&self, seen: Seen) -> Option<Said> {
        let r = (self.judge)(seen)?;
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if said.full {
            return None;
        }
        let key = (r.kind, r.sub.clone(), r.what.clone());
        if said.keys.contains(&key) {
            return None;
        }
        if said.keys.len() >= SAID_MAX {
            said.full = true;
            return Some(Said {
                key: None,
                line: format!(
                    "sandbox-run: -v: {SAID_MAX} refusals said; the others are said at the end\n"
                ),
            });
        }
        said.keys.insert(key.clone());
        // the first time: no count, whatever the judge was given
        let line = Refusal { count: 1, ..r }.line();
        Some(Said {
            key: Some(key),
            line: format!("sandbox-run: {line}\n"),
        })
    }

    /// `s` could not be said (the caller's stderr had no room): it is said at the end.
    pub fn lost(&self, s: &Said) {
        if let Some(key) = &s.key {
            let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
            said.keys.remove(key);
        }
    }

    /// [`Live::see`], said through `say` (whether the line was taken).
    pub fn say(&self, seen: Seen, say: impl FnOnce(&str) -> bool) {
        if let Some(s) = self.see(seen) {
            if !say(&s.line) {
                self.lost(&s);
            }
        }
    }

    /// Whether `r` was said live (then it is not said again at the end).
    pub fn said(&self, r: &Refusal) -> bool {
        let said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        said.keys.contains(&(r.kind, r.sub.clone(), r.what.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge() -> Judge {
        Box::new(|seen| match seen {
            Seen::Path(p) => Some(Refusal {
                kind: Kind::Filesystem,
                sub: "hidden".into(),
                what: format!("{} (read)", p.path.display()),
                rule: "not in the sandbox's view".into(),
                fix: "F".into(),
                patch: None,
                count: p.count,
            }),
            _ => None,
        })
    }

    fn path(p: &str) -> PathSeen {
        PathSeen {
            path: p.into(),
            access: crate::refusal::Access::Read,
            errno: None,
            count: 3,
        }
    }

    #[test]
    fn each_refusal_is_said_once_without_a_count() {
        let live = Live::new(judge());
        let a = path("/a");
        assert_eq!(
            live.see(Seen::Path(&a)).unwrap().line,
            "sandbox-run: refused filesystem hidden: /a (read): not in the sandbox's view; F\n"
        );
        assert_eq!(live.see(Seen::Path(&a)), None);
        let r = judge()(Seen::Path(&a)).unwrap();
        assert!(live.said(&r));
        let b = path("/b");
        assert!(!live.said(&judge()(Seen::Path(&b)).unwrap()));
        // a line the caller's stderr had no room for: said at the end, and live again
        live.say(Seen::Path(&b), |_| false);
        assert!(!live.said(&judge()(Seen::Path(&b)).unwrap()));
        let mut got = None;
        live.say(Seen::Path(&b), |l| {
            got = Some(l.to_string());
            true
        });
        assert!(got.is_some_and(|l| l.contains("/b (read)")));
        assert!(live.said(&judge()(Seen::Path(&b)).unwrap()));
    }

    #[test]
    fn past_the_bound_it_says_so_once_then_nothing() {
        let live = Live::new(judge());
        for i in 0..SAID_MAX {
            assert!(live.see(Seen::Path(&path(&format!("/p{i}")))).is_some());
        }
        let last = live.see(Seen::Path(&path("/over"))).unwrap().line;
        assert!(last.contains("the others are said at the end"), "{last}");
        assert_eq!(live.see(Seen::Path(&path("/over2"))), None);
        assert!(!live.said(&judge()(Seen::Path(&path("/over"))).unwrap()));
    }
}

//! A delegated cgroup from `systemd --user`, asked for over D-Bus, as podman and runc's
//! systemd driver do: when this process may not write its own cgroup (pure cgroup v2, nothing
//! delegated to this uid) and systemd is the user's manager, sandbox-run asks it for a
//! transient scope with `Delegate=yes` holding this process, waits for the start job, and
//! goes on as in any delegated subtree ([`Host::detect`] again). What
//! `systemd-run --user --scope -p Delegate=yes sandbox-run ...` does, without the user typing
//! it.
//!
//! The call: `StartTransientUnit("sandbox-run-<pid>-<n>.scope", "fail", [PIDs=[own pid],
//! Delegate=true, Description, CollectMode="inactive-or-failed"], [])` on
//! `org.freedesktop.systemd1` at `/org/freedesktop/systemd1`, after `AddMatch` and
//! `Subscribe` so that the `JobRemoved` signal of the returned job reaches us (it may come
//! before the reply). The job's result must be `done`.
//!
//! Where: the user bus first (`$DBUS_SESSION_BUS_ADDRESS`'s `unix:path=`, else
//! `$XDG_RUNTIME_DIR/bus`, else `/run/user/<uid>/bus`), then the manager's own socket
//! (`$XDG_RUNTIME_DIR/systemd/private`, a direct connection, as `systemctl --user` uses when
//! there is no user bus). A socket is used only when it is this uid's: a socket someone else
//! planted could otherwise answer "done" and keep sandbox-run in a place it does not control
//! (it would then fail the ownership checks of [`Host::detect`] anyway).
//!
//! The scope goes away with the run: it holds only sandbox-run (and, below it, the leaves it
//! removes), so when sandbox-run exits it is empty and systemd stops it and removes its
//! cgroup; `CollectMode=inactive-or-failed` unloads it even when it ends failed.
//!
//! Asked at most once per process, before anything forks: systemd moves the whole process,
//! its threads included, but not children already started elsewhere.

use super::*;
use crate::dbus::{self, Connection, Message, Type, Value};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the whole exchange may take (connect, authenticate, the call, the job).
const TIMEOUT: Duration = Duration::from_secs(5);

const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// The outcome of the one request per process (`None`: not asked yet).
static ASKED: Mutex<Option<Result<String, String>>> = Mutex::new(None);

/// A place to ask: a socket, and whether a message bus is behind it (else the manager itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Socket {
    pub(super) path: PathBuf,
    pub(super) bus: bool,
}

/// Where to ask, best first, from the environment's `DBUS_SESSION_BUS_ADDRESS` and
/// `XDG_RUNTIME_DIR` (relative runtime dirs ignored) for `uid`. Not checked yet.
pub(super) fn sockets(
    bus_address: Option<&str>,
    runtime_dir: Option<&str>,
    uid: u32,
) -> Vec<Socket> {
    let runtime = runtime_dir
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(format!("/run/user/{uid}")));
    let mut out = Vec::new();
    if let Some(path) = bus_address.and_then(dbus::unix_path) {
        out.push(Socket { path, bus: true });
    }
    for (path, bus) in [
        (runtime.join("bus"), true),
        (runtime.join("systemd/private"), false),
    ] {
        if !out.iter().any(|s| s.path == path) {
            out.push(Socket { path, bus });
        }
    }
    out
}

/// Move this process into a new delegated scope of `systemd --user`. Returns the scope's
/// name, or why not (every place tried, one line). Asked once per process: later calls
/// return the first outcome.
pub fn join_delegated_scope() -> Result<String, String> {
    let mut asked = ASKED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = &*asked {
        return r.clone();
    }
    let r = ask();
    *asked = Some(r.clone());
    r
}

fn ask() -> Result<String, String> {
    let uid = euid();
    let deadline = Instant::now() + TIMEOUT;
    let mut why = Vec::new();
    for s in usable_sockets(uid, &mut why) {
        match start_scope(&s, uid, deadline) {
            // A manager started the scope: no other is asked, whatever the check finds.
            Ok(unit) => {
                return in_unit(&unit).map(|()| unit).map_err(|e| {
                    why.push(e);
                    why.join("; ")
                })
            }
            Err(e) => why.push(format!("{}: {e}", s.path.display())),
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Err(why.join("; "))
}

/// Whether `systemd --user` answers at one of the places [`join_delegated_scope`] asks,
/// without asking it for anything (for `doctor` and tests, which must not move): the socket
/// that answered, or why none did.
pub fn user_manager_answers() -> Result<PathBuf, String> {
    let uid = euid();
    let deadline = Instant::now() + TIMEOUT;
    let mut why = Vec::new();
    for s in usable_sockets(uid, &mut why) {
        let answer = |s: &Socket| -> Result<(), dbus::Error> {
            let mut c = Connection::open(&s.path, uid, deadline)?;
            let call = if s.bus {
                c.hello()?;
                dbus::bus_call("GetNameOwner", vec![Value::Str(SYSTEMD.into())])
            } else {
                Message::call(
                    None,
                    SYSTEMD_PATH,
                    "org.freedesktop.DBus.Peer",
                    "Ping",
                    vec![],
                )
            };
            c.call(&call, &mut |_| {}).map(drop)
        };
        match answer(&s) {
            Ok(()) => return Ok(s.path),
            Err(e) => why.push(format!("{}: {e}", s.path.display())),
        }
    }
    Err(why.join("; "))
}

/// The places to ask, from this process's environment, that are sockets `uid` owns; why each
/// other one is not goes to `why`.
fn usable_sockets(uid: u32, why: &mut Vec<String>) -> Vec<Socket> {
    let env = |k: &str| std::env::var(k).ok();
    sockets(
        env("DBUS_SESSION_BUS_ADDRESS").as_deref(),
        env("XDG_RUNTIME_DIR").as_deref(),
        uid,
    )
    .into_iter()
    .filter(|s| owned_socket(&s.path, uid).map_err(|e| why.push(e)).is_ok())
    .collect()
}

/// `path` is a unix socket owned by `uid`.
fn owned_socket(path: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => Err(format!("{}: not a socket", path.display())),
        Ok(m) if m.uid() != uid => Err(format!(
            "{}: owned by uid {}, not {uid}",
            path.display(),
            m.uid()
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{}: {}", path.display(), strerror(errno_of(&e)))),
    }
}

/// The `JobRemoved` signal's `(job, unit, result)`, when `m` is one from the manager.
pub(super) fn job_removed(m: &Message) -> Option<(String, String, String)> {
    if m.kind != dbus::Kind::Signal
        || m.interface.as_deref() != Some(MANAGER)
        || m.member.as_deref() != Some("JobRemoved")
    {
        return None;
    }
    match m.body.as_slice() {
        [Value::U32(_), Value::ObjectPath(job), Value::Str(unit), Value::Str(result)] => {
            Some((job.clone(), unit.clone(), result.clone()))
        }
        _ => None,
    }
}

/// The `StartTransientUnit` call for scope `unit` holding `pid`.
pub(super) fn start_call(unit: &str, pid: u32, bus: bool) -> Message {
    let sv = Type::Struct(vec![Type::Str, Type::Variant]);
    let prop =
        |k: &str, v: Value| Value::Struct(vec![Value::Str(k.into()), Value::Variant(Box::new(v))]);
    let mut m = Message::call(
        bus.then_some(SYSTEMD),
        SYSTEMD_PATH,
        MANAGER,
        "StartTransientUnit",
        vec![
            Value::Str(unit.into()),
            Value::Str("fail".into()),
            Value::Array(
                sv.clone(),
                vec![
                    prop("PIDs", Value::Array(Type::U32, vec![Value::U32(pid)])),
                    prop("Delegate", Value::Bool(true)),
                    prop(
                        "Description",
                        Value::Str(format!(
                            "sandbox-run {pid}: the delegated cgroup of its sandboxes"
                        )),
                    ),
                    prop("CollectMode", Value::Str("inactive-or-failed".into())),
                ],
            ),
            Value::Array(
                Type::Struct(vec![Type::Str, Type::Array(Box::new(sv))]),
                vec![],
            ),
        ],
    );
    // Never have the bus start a manager just for this.
    m.flags |= dbus::NO_AUTO_START;
    m
}

fn systemd_call(member: &str, bus: bool) -> Message {
    let mut m = Message::call(
        bus.then_some(SYSTEMD),
        SYSTEMD_PATH,
        MANAGER,
        member,
        vec![],
    );
    m.flags |= dbus::NO_AUTO_START;
    m
}

/// Ask the manager behind `s` for the scope; wait for its start job. Returns the unit.
pub(super) fn start_scope(s: &Socket, uid: u32, deadline: Instant) -> Result<String, dbus::Error> {
    let mut c = Connection::open(&s.path, uid, deadline)?;
    // The signals that arrive before the reply that names the job.
    let mut seen: Vec<(String, String, String)> = Vec::new();
    if s.bus {
        c.hello()?;
        c.add_match(&format!(
            "type='signal',sender='{SYSTEMD}',path='{SYSTEMD_PATH}',interface='{MANAGER}',member='JobRemoved'"
        ))?;
        // The manager sends its signals on a bus only while someone subscribed (on a direct
        // connection always).
        c.call(&systemd_call("Subscribe", true), &mut |m| {
            seen.extend(job_removed(&m))
        })?;
    }
    let pid = std::process::id();
    let mut last = None;
    for _ in 0..3 {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let unit = format!("{PREFIX}-{pid}-{n}.scope");
        let job = match c.call(&start_call(&unit, pid, s.bus), &mut |m| {
            seen.extend(job_removed(&m))
        }) {
            Ok(body) => match body.first() {
                Some(Value::ObjectPath(p)) => p.clone(),
                _ => {
                    return Err(dbus::Error::Protocol(dbus::WireError(
                        "StartTransientUnit answered without a job".into(),
                    )))
                }
            },
            // A unit of that name is left from a dead run with our pid: take the next name.
            Err(dbus::Error::Remote { name, message })
                if name == "org.freedesktop.systemd1.UnitExists" =>
            {
                last = Some(dbus::Error::Remote { name, message });
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut result = seen
            .iter()
            .find(|(j, ..)| *j == job)
            .map(|(.., r)| r.clone());
        while result.is_none() {
            if let Some((j, _, r)) = job_removed(&c.receive()?) {
                if j == job {
                    result = Some(r);
                }
            }
        }
        let result = result.unwrap_or_default();
        if result != "done" {
            return Err(dbus::Error::Remote {
                name: "JobRemoved".into(),
                message: format!("the start job of {unit} ended '{result}'"),
            });
        }
        return Ok(unit);
    }
    Err(last.expect("three UnitExists errors"))
}

/// This process's cgroup v2 path ends in `unit` now.
fn in_unit(unit: &str) -> Result<(), String> {
    let text = read_text(Path::new("/proc/self/cgroup")).map_err(|e| e.to_string())?;
    let own = parse_proc_cgroup(&text);
    let path = own
        .iter()
        .find(|m| m.id == 0 && m.controllers.is_empty())
        .map(|m| m.path.clone())
        .unwrap_or_default();
    if path.rsplit('/').next() == Some(unit) {
        Ok(())
    } else {
        Err(format!(
            "systemd --user started {unit}, but this process is in {path:?}"
        ))
    }
}

impl Host {
    /// [`Host::detect`], and when what is missing is only a cgroup delegated to this user
    /// (pure cgroup v2; not root) and `systemd --user` answers, first a delegated scope from it
    /// ([`join_delegated_scope`]), then detect again. `notes` receives what was asked and
    /// the answer (for `-v`). Without systemd, a user bus or on any D-Bus error: the error of
    /// the first detection, unchanged.
    pub fn detect_or_delegate(notes: &mut Vec<String>) -> Result<Host, Error> {
        let first = Host::detect();
        match &first {
            Err(e) if e.remedy() == Remedy::DelegateV2 && euid() != 0 => {}
            _ => return first,
        }
        match join_delegated_scope() {
            Ok(unit) => {
                notes.push(format!(
                    "cgroup: systemd --user moved sandbox-run into the delegated scope {unit}"
                ));
                Host::detect()
            }
            Err(why) => {
                notes.push(format!(
                    "cgroup: no delegated scope from systemd --user over D-Bus: {why}"
                ));
                first
            }
        }
    }
}

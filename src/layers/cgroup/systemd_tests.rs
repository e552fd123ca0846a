//! The scope request against a stand-in for `systemd --user` on a real `dbus-daemon`: the
//! calls, their arguments and the wait for the job are what systemd expects; the move itself
//! needs a real user manager (the VM matrix's systemd variant).

use super::systemd::*;
use crate::dbus::{bus_call, Connection, Kind, Message, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[test]
fn places_to_ask_best_first() {
    let s = sockets(
        Some("unix:path=/run/user/7/bus,guid=1"),
        Some("/run/user/7"),
        7,
    );
    let want = [
        ("/run/user/7/bus", true),
        ("/run/user/7/systemd/private", false),
    ];
    let got: Vec<(&Path, bool)> = s.iter().map(|s| (s.path.as_path(), s.bus)).collect();
    let want: Vec<(&Path, bool)> = want.iter().map(|(p, b)| (Path::new(*p), *b)).collect();
    assert_eq!(got, want);
    // another bus first; no runtime dir (or a relative one): /run/user/<uid>
    let s = sockets(Some("unix:path=/tmp/b"), Some("rel"), 9);
    let got: Vec<&Path> = s.iter().map(|s| s.path.as_path()).collect();
    assert_eq!(
        got,
        [
            Path::new("/tmp/b"),
            Path::new("/run/user/9/bus"),
            Path::new("/run/user/9/systemd/private")
        ]
    );
    assert_eq!(sockets(Some("tcp:host=x"), None, 9).len(), 2);
}

struct Daemon(std::process::Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn daemon() -> Option<(Daemon, PathBuf)> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sbx-dbus-unit-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("bus");
    let conf = dir.join("bus.conf");
    std::fs::write(
        &conf,
        format!(
            "<busconfig><type>session</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>\
             <policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/>\
             <allow eavesdrop=\"true\"/><allow own=\"*\"/></policy></busconfig>",
            socket.display()
        ),
    )
    .unwrap();
    let log = dir.join("dbus-daemon.stderr");
    let mut child = match Command::new("dbus-daemon")
        .arg(format!("--config-file={}", conf.display()))
        .args(["--nofork", "--print-address"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIP: dbus-daemon is not installed ({e})");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        Err(e) => panic!("starting dbus-daemon: {e}"),
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.starts_with("unix:path=") {
        let _ = child.kill();
        let status = child.wait();
        panic!(
            "dbus-daemon did not start: it printed {line:?}, exit {status:?}, stderr:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    Some((Daemon(child, dir), socket))
}

/// What the stand-in saw.
#[derive(Debug, Default)]
struct Seen {
    subscribed: bool,
    units: Vec<String>,
    signature: String,
    properties: Vec<(String, Value)>,
    flags: u8,
}

/// A stand-in for the manager: owns org.freedesktop.systemd1, answers Subscribe, refuses the
/// first StartTransientUnit with UnitExists, and for the second sends JobRemoved with
/// `result` *before* the reply (systemd may do that too).
fn stand_in(socket: &Path, result: &'static str) -> std::thread::JoinHandle<Seen> {
    let mut c = Connection::open(socket, uid(), Instant::now() + Duration::from_secs(20)).unwrap();
    c.hello().unwrap();
    let owner = c
        .call(
            &bus_call(
                "RequestName",
                vec![Value::Str("org.freedesktop.systemd1".into()), Value::U32(0)],
            ),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(owner, vec![Value::U32(1)]);
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        let reply = |c: &mut Connection, call: &Message, body: Vec<Value>| {
            let mut m = Message::call(None, "/", "x.y", "x", body);
            m.kind = Kind::MethodReturn;
            (m.path, m.interface, m.member) = (None, None, None);
            m.reply_serial = Some(call.serial);
            m.destination = call.sender.clone();
            c.send(&m).unwrap();
        };
        loop {
            let call = c.receive().unwrap();
            if call.kind != Kind::MethodCall {
                continue;
            }
            assert_eq!(call.path.as_deref(), Some("/org/freedesktop/systemd1"));
            assert_eq!(
                call.interface.as_deref(),
                Some("org.freedesktop.systemd1.Manager")
            );
            match call.member.as_deref() {
                Some("Subscribe") => {
                    seen.subscribed = true;
                    reply(&mut c, &call, vec![]);
                }
                Some("StartTransientUnit") => {
                    seen.signature = call.signature();
                    seen.flags = call.flags;
                    let Some(Value::Str(unit)) = call.body.first() else {
                        panic!("{call:?}");
                    };
                    seen.units.push(unit.clone());
                    if seen.units.len() == 1 {
                        let mut e = Message::call(None, "/", "x.y", "x", vec![]);
                        e.kind = Kind::Error;
                        (e.path, e.interface, e.member) = (None, None, None);
                        e.error_name = Some("org.freedesktop.systemd1.UnitExists".into());
                        e.body = vec![Value::Str(format!("Unit {unit} was already loaded"))];
                        e.reply_serial = Some(call.serial);
                        e.destination = call.sender.clone();
                        c.send(&e).unwrap();
                        continue;
                    }
                    assert_eq!(call.body[1], Value::Str("fail".into()));
                    if let Value::Array(_, props) = &call.body[2] {
                        for p in props {
                            if let Value::Struct(kv) = p {
                                if let [Value::Str(k), Value::Variant(v)] = kv.as_slice() {
                                    seen.properties.push((k.clone(), (**v).clone()));
                                }
                            }
                        }
                    }
                    let job = "/org/freedesktop/systemd1/job/42";
                    let mut s = Message::call(
                        None,
                        "/org/freedesktop/systemd1",
                        "org.freedesktop.systemd1.Manager",
                        "JobRemoved",
                        vec![
                            Value::U32(42),
                            Value::ObjectPath(job.into()),
                            Value::Str(unit.clone()),
                            Value::Str(result.into()),
                        ],
                    );
                    s.kind = Kind::Signal;
                    c.send(&s).unwrap();
                    reply(&mut c, &call, vec![Value::ObjectPath(job.into())]);
                    return seen;
                }
                other => panic!("unexpected call {other:?}"),
            }
        }
    })
}

#[test]
fn the_scope_request_is_what_systemd_expects() {
    let Some((_d, socket)) = daemon() else {
        return;
    };
    let fake = stand_in(&socket, "done");
    let place = Socket {
        path: socket.clone(),
        bus: true,
    };
    let unit = start_scope(&place, uid(), Instant::now() + Duration::from_secs(10)).unwrap();
    let seen = fake.join().unwrap();
    assert!(seen.subscribed);
    assert_eq!(seen.signature, "ssa(sv)a(sa(sv))");
    assert_eq!(
        seen.flags & crate::dbus::NO_AUTO_START,
        crate::dbus::NO_AUTO_START
    );
    // The first name was taken: the next one.
    let pid = std::process::id();
    assert_eq!(seen.units.len(), 2);
    for u in &seen.units {
        assert!(
            u.starts_with(&format!("sandbox-run-{pid}-")) && u.ends_with(".scope"),
            "{u}"
        );
    }
    assert_ne!(seen.units[0], seen.units[1]);
    assert_eq!(unit, seen.units[1]);
    let prop = |k: &str| {
        seen.properties
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        prop("PIDs"),
        Some(Value::Array(crate::dbus::Type::U32, vec![Value::U32(pid)]))
    );
    assert_eq!(prop("Delegate"), Some(Value::Bool(true)));
    assert_eq!(
        prop("CollectMode"),
        Some(Value::Str("inactive-or-failed".into()))
    );
    assert!(matches!(prop("Description"), Some(Value::Str(_))));
}

#[test]
fn a_start_job_that_did_not_finish_done_is_a_failure() {
    let Some((_d, socket)) = daemon() else {
        return;
    };
    let fake = stand_in(&socket, "failed");
    let place = Socket {
        path: socket,
        bus: true,
    };
    let err = start_scope(&place, uid(), Instant::now() + Duration::from_secs(10)).unwrap_err();
    fake.join().unwrap();
    assert!(err.to_string().contains("ended 'failed'"), "{err}");
}

#[test]
fn nobody_on_the_bus_is_an_error_not_a_wait() {
    let Some((_d, socket)) = daemon() else {
        return;
    };
    let place = Socket {
        path: socket,
        bus: true,
    };
    let t0 = Instant::now();
    let err = start_scope(&place, uid(), t0 + Duration::from_secs(10)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5));
    // NO_AUTO_START: the bus says there is no such name instead of starting one.
    assert!(
        err.to_string().contains("org.freedesktop.DBus.Error."),
        "{err}"
    );
}

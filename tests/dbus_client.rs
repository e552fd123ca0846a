//! The D-Bus client against a real `dbus-daemon` (a private bus in a temp dir): what it sends
//! must be accepted by the reference implementation, and what the daemon sends back (replies,
//! errors, signals it forwards with its own header fields) must be read right. Skipped when
//! `dbus-daemon` is not installed.

mod common;

use common::Fixture;
use sandbox_run::dbus::{bus_call, Connection, Error, Kind, Message, Type, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private message bus; killed when dropped.
struct Bus {
    child: Child,
    socket: PathBuf,
    /// The socket's directory (see [`socket_dir`]).
    run: PathBuf,
    _dir: Fixture,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.run);
    }
}

/// A fresh private (0700) directory for the bus socket, under `$TMPDIR` or `/tmp`: not in the
/// fixture, whose path grows with the checkout's (a socket's path must fit `sun_path`, 108
/// bytes, or dbus-daemon refuses it: "Socket name too long").
fn socket_dir() -> PathBuf {
    let short = |d: PathBuf| (d.as_os_str().len() <= 40).then_some(d);
    let base = short(std::env::temp_dir()).unwrap_or_else(|| PathBuf::from("/tmp"));
    nix::unistd::mkdtemp(&base.join("sbx-dbus-XXXXXX"))
        .unwrap_or_else(|e| panic!("mkdtemp in {}: {e}", base.display()))
}

fn bus(name: &str) -> Option<Bus> {
    let dir = Fixture::new(name);
    let run = socket_dir();
    let socket = run.join("bus");
    let config = dir.write(
        "bus.conf",
        &format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
            socket.display()
        ),
    );
    // its stderr to a file, shown if it does not start (a pipe nobody reads could fill up)
    let log = dir.path("dbus-daemon.stderr");
    let child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            common::skip_tool(&format!(
                "dbus-daemon is not installed ({e}; Debian: apt-get install dbus-daemon)"
            ));
            let _ = std::fs::remove_dir_all(&run);
            return None;
        }
        Err(e) => panic!("starting dbus-daemon: {e}"),
    };
    // The address line means it listens.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.starts_with(&format!("unix:path={}", socket.display())) {
        let _ = child.kill();
        let status = child.wait();
        let _ = std::fs::remove_dir_all(&run);
        panic!(
            "dbus-daemon did not listen on {}: it printed {line:?}, exit {status:?}, stderr:\n{}",
            socket.display(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    Some(Bus {
        child,
        socket,
        run,
        _dir: dir,
    })
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn open(path: &Path, secs: u64) -> Connection {
    let deadline = Instant::now() + Duration::from_secs(secs);
    Connection::open(path, euid(), deadline).unwrap()
}

fn no_signals(_: Message) {}

#[test]
fn hello_add_match_and_calls_on_the_bus_itself() {
    let Some(bus) = bus("dbus-calls") else {
        return;
    };
    let mut c = open(&bus.socket, 10);
    let name = c.hello().unwrap();
    assert!(name.starts_with(":1."), "{name}");
    c.add_match("type='signal',interface='org.example.T',member='Ping'")
        .unwrap();
    let body = c
        .call(
            &bus_call(
                "GetNameOwner",
                vec![Value::Str("org.freedesktop.DBus".into())],
            ),
            &mut no_signals,
        )
        .unwrap();
    assert_eq!(body, vec![Value::Str("org.freedesktop.DBus".into())]);
    // ListNames: an "as" that holds our own unique name.
    let body = c
        .call(&bus_call("ListNames", vec![]), &mut no_signals)
        .unwrap();
    let [Value::Array(Type::Str, names)] = body.as_slice() else {
        panic!("{body:?}");
    };
    assert!(names.contains(&Value::Str(name.clone())), "{names:?}");
    assert!(names.contains(&Value::Str("org.freedesktop.DBus".into())));
    // An error reply: its name and message.
    let err = c
        .call(
            &bus_call(
                "GetNameOwner",
                vec![Value::Str("org.example.Nobody".into())],
            ),
            &mut no_signals,
        )
        .unwrap_err();
    match &err {
        Error::Remote { name, message } => {
            assert_eq!(name, "org.freedesktop.DBus.Error.NameHasNoOwner");
            assert!(message.contains("org.example.Nobody"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    // A call the daemon refuses for its arguments' signature.
    let err = c
        .call(
            &bus_call("GetNameOwner", vec![Value::U32(1)]),
            &mut no_signals,
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { name, .. } if name == "org.freedesktop.DBus.Error.InvalidArgs"),
        "{err:?}"
    );
    // A struct/array/variant body the daemon must parse: AddMatch with a rule it rejects
    // comes back as an error, and the connection still works after it.
    assert!(c.add_match("type='nonsense'").is_err());
    let body = c.call(&bus_call("GetId", vec![]), &mut no_signals).unwrap();
    assert!(
        matches!(body.as_slice(), [Value::Str(id)] if id.len() == 32),
        "{body:?}"
    );
}

#[test]
fn a_signal_routed_by_a_match_rule_arrives_with_its_body() {
    let Some(bus) = bus("dbus-signal") else {
        return;
    };
    let mut listener = open(&bus.socket, 10);
    listener.hello().unwrap();
    listener
        .add_match("type='signal',interface='org.example.Manager',member='JobRemoved'")
        .unwrap();
    let mut emitter = open(&bus.socket, 10);
    let emitter_name = emitter.hello().unwrap();
    // A signal the rule does not match, then one it does, shaped as systemd's JobRemoved.
    let signal = |member: &str| {
        let mut m = Message::call(
            None,
            "/org/example/m",
            "org.example.Manager",
            member,
            vec![
                Value::U32(7),
                Value::ObjectPath("/org/example/m/job/7".into()),
                Value::Str("x.scope".into()),
                Value::Str("done".into()),
            ],
        );
        m.kind = Kind::Signal;
        m
    };
    emitter.send(&signal("UnitNew")).unwrap();
    emitter.send(&signal("JobRemoved")).unwrap();
    // The first message after Hello's reply may be the bus's NameAcquired; the unmatched
    // signal never comes.
    let got = loop {
        let m = listener.receive().unwrap();
        if m.kind == Kind::Signal && m.interface.as_deref() == Some("org.example.Manager") {
            break m;
        }
        assert_eq!(m.member.as_deref(), Some("NameAcquired"), "{m:?}");
    };
    assert_eq!(got.member.as_deref(), Some("JobRemoved"));
    assert_eq!(got.sender.as_deref(), Some(emitter_name.as_str()));
    assert_eq!(got.signature(), "uoss");
    assert_eq!(got.body, signal("JobRemoved").body);
}

#[test]
fn a_peer_that_never_answers_costs_the_deadline_and_no_more() {
    let Some(bus) = bus("dbus-timeout") else {
        return;
    };
    let mut silent = open(&bus.socket, 20);
    silent.hello().unwrap();
    let body = silent
        .call(
            &bus_call(
                "RequestName",
                vec![Value::Str("org.example.Silent".into()), Value::U32(0)],
            ),
            &mut no_signals,
        )
        .unwrap();
    assert_eq!(body, vec![Value::U32(1)]); // primary owner
    let t0 = Instant::now();
    let mut c = Connection::open(&bus.socket, euid(), t0 + Duration::from_millis(1500)).unwrap();
    c.hello().unwrap();
    let call = Message::call(
        Some("org.example.Silent"),
        "/",
        "org.example.Silent",
        "Wait",
        vec![],
    );
    let err = c.call(&call, &mut no_signals).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn the_bus_refuses_a_uid_that_is_not_ours() {
    let Some(bus) = bus("dbus-auth") else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = match Connection::open(&bus.socket, euid() + 1, deadline) {
        Err(e) => e,
        Ok(_) => panic!("authenticated as another uid"),
    };
    assert!(
        matches!(&err, Error::Auth(line) if line.starts_with("REJECTED")),
        "{err:?}"
    );
    // Nothing listening: the connect step fails at once.
    let err = match Connection::open(&bus.socket.with_file_name("none"), euid(), deadline) {
        Err(e) => e,
        Ok(_) => panic!("connected to nothing"),
    };
    assert!(err.to_string().starts_with("connect: "), "{err}");
}

//! The wire format against bytes laid out by hand from the D-Bus specification's marshaling
//! rules (alignment from the start of the message, array lengths without the padding before
//! the first element, variants as signature + value, header fields as `a(yv)`).

use super::conn::{external_id, unix_path};
use super::wire::*;

fn le(n: u32) -> [u8; 4] {
    n.to_le_bytes()
}

/// `s` as marshalled at an aligned offset: length, bytes, NUL.
fn string(s: &str) -> Vec<u8> {
    let mut v = le(s.len() as u32).to_vec();
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v
}

fn pad_to(v: &mut Vec<u8>, n: usize) {
    assert!(v.len() <= n, "layout error: at {} > {n}", v.len());
    v.resize(n, 0);
}

#[test]
fn hello_is_the_128_bytes_every_client_sends() {
    let m = Message::call(
        Some("org.freedesktop.DBus"),
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "Hello",
        vec![],
    );
    let mut x = vec![b'l', 1, 0, 1];
    x.extend(le(0)); // body length
    x.extend(le(1)); // serial
    x.extend(le(109)); // header fields: 125 - 16 bytes
                       // field 1 (path) at 16: code, variant signature "o", then the path at 20
    x.extend([1, 1, b'o', 0]);
    x.extend(string("/org/freedesktop/DBus")); // 20..46
    pad_to(&mut x, 48);
    x.extend([2, 1, b's', 0]); // interface
    x.extend(string("org.freedesktop.DBus")); // 52..77
    pad_to(&mut x, 80);
    x.extend([3, 1, b's', 0]); // member
    x.extend(string("Hello")); // 84..94
    pad_to(&mut x, 96);
    x.extend([6, 1, b's', 0]); // destination
    x.extend(string("org.freedesktop.DBus")); // 100..125
    pad_to(&mut x, 128); // the header ends at an 8-byte boundary
    assert_eq!(m.encode(1).unwrap(), x);
    let back = Message::decode(&x).unwrap();
    assert_eq!(back.serial, 1);
    assert_eq!(back.member.as_deref(), Some("Hello"));
    assert_eq!(back.destination.as_deref(), Some("org.freedesktop.DBus"));
    assert!(back.body.is_empty());
}

fn start_transient_unit_body() -> Vec<Value> {
    let sv = Type::Struct(vec![Type::Str, Type::Variant]);
    let aux = Type::Struct(vec![Type::Str, Type::Array(Box::new(sv.clone()))]);
    vec![
        Value::Str("a.scope".into()),
        Value::Str("fail".into()),
        Value::Array(
            sv,
            vec![
                Value::Struct(vec![
                    Value::Str("PIDs".into()),
                    Value::Variant(Box::new(Value::Array(Type::U32, vec![Value::U32(42)]))),
                ]),
                Value::Struct(vec![
                    Value::Str("Delegate".into()),
                    Value::Variant(Box::new(Value::Bool(true))),
                ]),
            ],
        ),
        Value::Array(aux, vec![]),
    ]
}

#[test]
fn start_transient_unit_body_is_laid_out_as_the_spec_says() {
    let body = start_transient_unit_body();
    let sig: String = body.iter().map(|v| v.type_of().signature()).collect();
    assert_eq!(sig, "ssa(sv)a(sa(sv))");
    let mut w = Writer::default();
    for v in &body {
        w.value(v).unwrap();
    }
    let mut x = string("a.scope"); // 0..12
    x.extend(string("fail")); // 12..21
    pad_to(&mut x, 24);
    x.extend(le(44)); // a(sv): 76 - 32 bytes of elements
    pad_to(&mut x, 32); // structs align to 8, the length does not count this
    x.extend(string("PIDs")); // 32..41
    x.extend([2, b'a', b'u', 0]); // variant signature "au", 41..45
    pad_to(&mut x, 48);
    x.extend(le(4)); // au: one u32
    x.extend(le(42)); // 52..56
    x.extend(string("Delegate")); // 56..69
    x.extend([1, b'b', 0]); // 69..72
    x.extend(le(1)); // true, 72..76
    x.extend(le(0)); // a(sa(sv)): empty, 76..80
    pad_to(&mut x, 80); // the padding to the element's alignment is there even when empty
    assert_eq!(w.buf, x);
    // and back
    let mut r = Reader::new(&x, 0, false);
    let types = Type::parse("ssa(sv)a(sa(sv))").unwrap();
    let back: Vec<Value> = types.iter().map(|t| r.value(t).unwrap()).collect();
    assert_eq!(back, body);
    assert_eq!(r.pos(), 80);
}

#[test]
fn an_empty_array_still_pads_to_its_element_alignment() {
    let mut w = Writer::default();
    w.value(&Value::Byte(7)).unwrap();
    w.value(&Value::Array(
        Type::Struct(vec![Type::Str, Type::Variant]),
        vec![],
    ))
    .unwrap();
    assert_eq!(w.buf, [7, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn a_big_endian_reply_with_an_object_path_is_read() {
    // What a big-endian peer sends back for a call with serial 3: "o" "/a/b".
    let mut x = vec![b'B', 2, 0, 1];
    x.extend(9u32.to_be_bytes()); // body
    x.extend(7u32.to_be_bytes()); // serial
    x.extend(15u32.to_be_bytes()); // fields, 16..31
    x.extend([5, 1, b'u', 0]);
    x.extend(3u32.to_be_bytes()); // reply serial
    x.extend([8, 1, b'g', 0, 1, b'o', 0]); // signature "o"
    pad_to(&mut x, 32);
    x.extend(4u32.to_be_bytes());
    x.extend(b"/a/b\0");
    assert_eq!(Message::total_len(x[..16].try_into().unwrap()), Ok(41));
    let m = Message::decode(&x).unwrap();
    assert_eq!(m.kind, Kind::MethodReturn);
    assert_eq!(m.serial, 7);
    assert_eq!(m.reply_serial, Some(3));
    assert_eq!(m.body, vec![Value::ObjectPath("/a/b".into())]);
}

#[test]
fn a_job_removed_signal_goes_there_and_back() {
    let mut m = Message::call(
        None,
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "JobRemoved",
        vec![
            Value::U32(17),
            Value::ObjectPath("/org/freedesktop/systemd1/job/17".into()),
            Value::Str("sandbox-run-1-0.scope".into()),
            Value::Str("done".into()),
        ],
    );
    m.kind = Kind::Signal;
    m.sender = Some(":1.5".into());
    let bytes = m.encode(9).unwrap();
    let back = Message::decode(&bytes).unwrap();
    assert_eq!(back.signature(), "uoss");
    assert_eq!(back, Message { serial: 9, ..m });
}

#[test]
fn signatures_parse_and_print_back() {
    for s in [
        "ssa(sv)a(sa(sv))",
        "uoss",
        "a{sv}",
        "a{oa{sa{sv}}}",
        "(yv)",
        "ah",
        "",
    ] {
        let ts = Type::parse(s).unwrap();
        assert_eq!(signature_of(&ts), s);
    }
    assert_eq!(Type::parse("ssa(sv)a(sa(sv))").unwrap().len(), 4);
    for s in ["a", "(", "()", "(s", "a{vs}", "a{s}", "{sv}", "z", "a{sss}"] {
        assert!(Type::parse(s).is_err(), "{s:?} accepted");
    }
    let deep = format!("{}y", "a".repeat(33));
    assert!(Type::parse(&deep).is_err());
    assert!(Type::parse(&format!("{}y", "a".repeat(32))).is_ok());
    let wide = format!("{}y{}", "(".repeat(33), ")".repeat(33));
    assert!(Type::parse(&wide).is_err());
    assert!(Type::parse(&"y".repeat(256)).is_err());
}

#[test]
fn bad_bytes_are_refused_not_trusted() {
    let good = Message::call(Some("x.y"), "/", "x.y", "M", vec![Value::Str("hi".into())])
        .encode(1)
        .unwrap();
    assert!(Message::decode(&good).is_ok());
    // truncated anywhere
    for n in 0..good.len() {
        assert!(Message::decode(&good[..n]).is_err(), "accepted {n} bytes");
    }
    // an unknown byte order, a future protocol version, serial 0
    for (at, byte) in [(0, b'x'), (3, 2)] {
        let mut b = good.clone();
        b[at] = byte;
        assert!(Message::decode(&b).is_err());
    }
    let mut b = good.clone();
    b[8..12].copy_from_slice(&le(0));
    assert!(Message::decode(&b).is_err());
    // a header announcing more than this client accepts
    let mut head = [0u8; 16];
    head[..4].copy_from_slice(&[b'l', 2, 0, 1]);
    head[4..8].copy_from_slice(&le(MAX_MESSAGE as u32));
    assert!(Message::total_len(&head).is_err());
    head[4..8].copy_from_slice(&le(0));
    head[12..16].copy_from_slice(&le(u32::MAX));
    assert!(Message::total_len(&head).is_err());
    // a string without its NUL, a bool that is neither 0 nor 1, non-zero padding
    let mut r = Reader::new(b"\x02\0\0\0hix", 0, false);
    assert!(r.value(&Type::Str).is_err());
    let mut r = Reader::new(b"\x02\0\0\0", 0, false);
    assert!(r.value(&Type::Bool).is_err());
    let mut r = Reader::new(b"\x01\x01\0\0\x05\0\0\0", 0, false);
    r.value(&Type::Byte).unwrap();
    assert!(r.value(&Type::U32).is_err());
    // an array whose length runs past the end, or splits an element
    let mut r = Reader::new(b"\xff\0\0\0\x01\0\0\0", 0, false);
    assert!(r.value(&Type::Array(Box::new(Type::U32))).is_err());
    let mut r = Reader::new(b"\x06\0\0\0\x01\0\0\0\x02\0\0\0", 0, false);
    assert!(r.value(&Type::Array(Box::new(Type::U32))).is_err());
    // an object path that is not one
    let mut r = Reader::new(b"\x03\0\0\0a/b\0", 0, false);
    assert!(r.value(&Type::ObjectPath).is_err());
    // a variant that holds two types
    let mut r = Reader::new(b"\x02yy\0\x01\x02", 0, false);
    assert!(r.value(&Type::Variant).is_err());
    // variants nested without end stop at the depth limit
    let mut deep = Vec::new();
    for _ in 0..200 {
        deep.extend(b"\x01v\0");
    }
    let mut r = Reader::new(&deep, 0, false);
    assert!(r.value(&Type::Variant).is_err());
}

#[test]
fn the_writer_refuses_what_the_wire_cannot_carry() {
    let mut w = Writer::default();
    assert!(w.value(&Value::Str("a\0b".into())).is_err());
    assert!(w.value(&Value::ObjectPath("/a//b".into())).is_err());
    assert!(w.value(&Value::ObjectPath("/a/".into())).is_err());
    assert!(w
        .value(&Value::Array(Type::U32, vec![Value::Str("x".into())]))
        .is_err());
    assert!(w.value(&Value::Struct(vec![])).is_err());
    assert!(Message::call(None, "/", "a.b", "M", vec![])
        .encode(0)
        .is_err());
    let huge = Value::Str("x".repeat(MAX_MESSAGE));
    assert!(Message::call(None, "/", "a.b", "M", vec![huge])
        .encode(1)
        .is_err());
}

#[test]
fn object_paths() {
    for p in ["/", "/a", "/org/freedesktop/systemd1/job/42", "/a_b/C9"] {
        assert!(valid_object_path(p), "{p}");
    }
    for p in ["", "a", "//", "/a/", "/a-b", "/a.b", "/a//b"] {
        assert!(!valid_object_path(p), "{p}");
    }
}

#[test]
fn bus_addresses_and_the_external_id() {
    assert_eq!(external_id(1000), "31303030");
    assert_eq!(external_id(0), "30");
    assert_eq!(
        unix_path("unix:path=/run/user/1000/bus"),
        Some("/run/user/1000/bus".into())
    );
    assert_eq!(
        unix_path("unix:abstract=/tmp/x,guid=00;unix:guid=ab,path=/tmp/a%20b%2cc"),
        Some("/tmp/a b,c".into())
    );
    assert_eq!(unix_path("tcp:host=localhost,port=1"), None);
    assert_eq!(unix_path("unix:abstract=/tmp/x"), None);
    assert_eq!(unix_path("unix:path="), None);
    assert_eq!(unix_path("unix:path=/a%2"), None);
    assert_eq!(unix_path(""), None);
}

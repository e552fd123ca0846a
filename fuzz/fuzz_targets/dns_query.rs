//! The DNS query reader of the sandbox's refusing name service (`net::dns::parse_query`):
//! never panics; the name it records is printable ASCII in lowercase (it is printed on the
//! caller's terminal and written in the report), and the refusal built from a query is one
//! question long, a response, NXDOMAIN, that repeats the question byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::net::dns::{parse_query, refusal, RCODE};

fuzz_target!(|data: &[u8]| {
    let Some(q) = parse_query(data) else {
        return;
    };
    assert!(q.end <= data.len() && q.end >= 12 + 1 + 4);
    assert!(q
        .name
        .bytes()
        .all(|c| c.is_ascii_graphic() && !c.is_ascii_uppercase()));
    let answer = refusal(&q, data);
    assert_eq!(answer.len(), q.end);
    assert_eq!(answer[..2], data[..2]);
    assert_eq!(answer[2] & 0x80, 0x80, "QR set");
    assert_eq!(answer[3] & 0x0f, RCODE);
    assert_eq!(answer[4..12], [0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(answer[12..], data[12..q.end]);
    // An answer is not a query: the name service never answers its own answers.
    assert_eq!(parse_query(&answer), None);
});

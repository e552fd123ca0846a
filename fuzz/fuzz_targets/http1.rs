//! The HTTP/1.1 framing inside a terminated TLS connection (`net::tls::http1`): the request
//! head, the Host and target check, and the chunked-body decoder. Never panics; a complete
//! head parses the same with more bytes after it; and the chunked decoder gives the same
//! verdict, consumes the same bytes and hands out the same data whether the body arrives in
//! one read or in two (a read or chunk boundary must not hide a placeholder, nor change where
//! a request ends: request smuggling). The first input byte chooses where the body is cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::net::allow::Host;
use sandbox_run::net::tls::http1::{check_host, parse_head, Chunked};

/// Feed `pieces` to a fresh decoder: bytes consumed, data handed out, done, failed.
fn decode(pieces: &[&[u8]]) -> (usize, Vec<u8>, bool, bool) {
    let mut c = Chunked::default();
    let mut out = Vec::new();
    let mut used = 0;
    for p in pieces {
        match c.advance(p, &mut |d| out.extend_from_slice(d)) {
            Ok(n) => {
                assert!(n <= p.len());
                used += n;
                if c.is_done() {
                    return (used, out, true, false);
                }
                assert_eq!(n, p.len(), "stopped early without being done");
            }
            Err(_) => return (used, out, false, true),
        }
    }
    (used, out, false, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    if let Ok(Some(h)) = parse_head(rest) {
        assert!(h.len <= rest.len());
        assert_eq!(parse_head(&rest[..h.len]), Ok(Some(h.clone())));
        for (host, port) in [
            (Host::Name("api.example.com".into()), 443),
            (Host::parse("127.0.0.1").unwrap(), 8787),
        ] {
            let _ = check_host(&h.target, h.host.as_deref(), &host, port, 443);
        }
    }
    // The body decoder on the same bytes, whole and cut in two.
    let k = usize::from(cut) % (rest.len() + 1);
    let whole = decode(&[rest]);
    let split = decode(&[&rest[..k], &rest[k..]]);
    assert_eq!(
        whole.3, split.3,
        "failed in one read and not in two, or the reverse"
    );
    if !whole.3 {
        assert_eq!(whole, split);
    }
});

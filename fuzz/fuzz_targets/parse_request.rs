//! The request head the sandbox sends the proxy (`parse_request`): never panics, and what it
//! accepts is consistent. A verdict on a complete head does not change when more bytes follow
//! (the proxy parses a growing buffer); the head forwarded upstream is one complete
//! origin-form request, and when the Host check passed it carries exactly one Host header, the
//! one the check approved.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::net::allow::Host;
use sandbox_run::net::host::host_header_matches;
use sandbox_run::net::proxy::parse_request;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(r)) = parse_request(data) else {
        return;
    };
    assert!(r.port > 0);
    assert_eq!(Host::parse(&r.host.to_string()).as_ref(), Some(&r.host));
    assert!(r.head_len <= data.len());
    // The same head with more bytes after it: the same request.
    assert_eq!(parse_request(&data[..r.head_len]), Ok(Some(r.clone())));
    let Some(fwd) = &r.forward else {
        assert_eq!(r.method, "CONNECT");
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 80];
    let mut q = httparse::Request::new(&mut headers);
    assert_eq!(
        q.parse(fwd),
        Ok(httparse::Status::Complete(fwd.len())),
        "forwarded head {:?}",
        String::from_utf8_lossy(fwd)
    );
    assert!(q.path.is_some_and(|p| p.starts_with('/')));
    if r.host_refusal.is_none() {
        let hosts: Vec<_> = q
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("host"))
            .collect();
        assert_eq!(hosts.len(), 1, "{:?}", String::from_utf8_lossy(fwd));
        assert_eq!(
            host_header_matches(hosts[0].value, &r.host, r.port, 80),
            Ok(())
        );
    }
});

//! The `Host` header check (`net::host`), shared by plain HTTP and terminated TLS: never
//! panics; a value it parses matches the host and port it parsed to, in canonical form too;
//! and a value matches a given host only if it parses to that host (or, for a loopback
//! address, to another name of the loopback).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::net::allow::Host;
use sandbox_run::net::host::{check_host_headers, host_header_matches, parse_host_value};

fuzz_target!(|data: &[u8]| {
    let parsed = parse_host_value(data);
    if let Ok((h, p)) = &parsed {
        assert_eq!(host_header_matches(data, h, p.unwrap_or(80), 80), Ok(()));
        let canon = match p {
            Some(p) => format!("{h}:{p}"),
            None => h.to_string(),
        };
        assert_eq!(parse_host_value(canon.as_bytes()), Ok((h.clone(), *p)));
    }
    for (host, port, default) in [
        (Host::Name("example.com".into()), 80, 80),
        (Host::parse("127.0.0.1").unwrap(), 8787, 80),
        (Host::parse("[::1]").unwrap(), 443, 443),
    ] {
        if host_header_matches(data, &host, port, default).is_ok() {
            let (h, p) = parsed.clone().unwrap();
            // A loopback address also goes by localhost and its other loopback forms.
            let loopback = |h: &Host| match h {
                Host::Ip(ip) => ip.is_loopback(),
                Host::Name(n) => n == "localhost",
            };
            let host_is_loopback = matches!(host, Host::Ip(ip) if ip.is_loopback());
            assert!(
                h == host || (host_is_loopback && loopback(&h)),
                "{h} for {host}"
            );
            assert_eq!(p.unwrap_or(default), port);
        }
    }
    // Split in two headers at the first newline: two are always refused.
    if let Some(i) = data.iter().position(|&b| b == b'\n') {
        let two = [&data[..i], &data[i + 1..]];
        let host = Host::Name("example.com".into());
        assert_eq!(
            check_host_headers(two, &host, 80, 80).unwrap_err().status,
            400
        );
    }
});

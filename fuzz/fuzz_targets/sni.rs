//! The TLS ClientHello reader (`net::sni::parse`): never panics, and its verdict on a prefix
//! does not change when more bytes arrive (the proxy parses a growing buffer and acts on the
//! first verdict that is not `Partial`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::net::sni::{parse, Hello};

fuzz_target!(|data: &[u8]| {
    let all = parse(data);
    if let Hello::Sni(Some(name)) = &all {
        assert!(!name.is_empty() && name.is_ascii());
    }
    if let Some((_, prefix)) = data.split_last() {
        let early = parse(prefix);
        if early != Hello::Partial {
            assert_eq!(early, all, "a verdict changed with one more byte");
        }
    }
});

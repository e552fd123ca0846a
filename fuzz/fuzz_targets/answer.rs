//! The answers of a host a secret is listed for, on their way back to the sandbox
//! (`net::proxy::answer`): the HTTP/1.1 answer framing (heads, Content-Length, chunked with
//! extensions and trailers, 1xx, WebSocket frames after a 101) undone before the scan for the
//! secret's value. Never panics; what passes never holds the value; and the same bytes in
//! other reads pass the same (or are cut because a value's first bytes went alone). The first
//! input byte chooses where the reads are cut.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let n = rest.len().max(1);
    let c = usize::from(cut);
    let cuts = [c % n, (c * 7) % n, (c * 31) % n];
    let mut cuts = cuts.to_vec();
    cuts.sort_unstable();
    sandbox_run::net::proxy::fuzz_scan(rest, &cuts);
});

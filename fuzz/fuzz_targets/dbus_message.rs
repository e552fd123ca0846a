//! The D-Bus message decoder (`dbus::wire`), fed what a peer on the bus socket could send:
//! never panics, reads a message only as long as its fixed header says (as the connection
//! does), and what it accepts writes back to bytes that decode to the same bytes again
//! (compared as bytes: a double may be NaN). The input's bytes as a signature must parse
//! and print back the same, or be refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_run::dbus::wire::{signature_of, Message, Type, MAX_MESSAGE};

fuzz_target!(|data: &[u8]| {
    if let Ok(sig) = std::str::from_utf8(data) {
        if let Ok(types) = Type::parse(sig) {
            assert_eq!(signature_of(&types), sig, "a signature did not print back");
        }
    }
    // As the connection reads: the fixed header says how long the message is.
    if let Some(head) = data.first_chunk::<16>() {
        if let Ok(total) = Message::total_len(head) {
            assert!((16..=MAX_MESSAGE).contains(&total));
            if data.len() >= total {
                let _ = Message::decode(&data[..total]);
            }
        }
    }
    let Ok(m) = Message::decode(data) else {
        return;
    };
    assert!(data.len() <= MAX_MESSAGE);
    let Ok(bytes) = m.encode(m.serial) else {
        return;
    };
    let again = Message::decode(&bytes).expect("what was written from a decoded message reads");
    let bytes_again = again.encode(again.serial).expect("and writes again");
    assert_eq!(bytes, bytes_again, "a message changed going there and back");
});

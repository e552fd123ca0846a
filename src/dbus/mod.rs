//! A small D-Bus client: enough to ask a message bus or a peer for one method call and read
//! the signals that follow (sandbox-run asks `systemd --user` for a delegated cgroup scope with
//! it, see `layers::cgroup::systemd`).
//!
//! Why not the field's crate (zbus): it brings an async runtime and dozens of crates into a
//! static binary that makes a single call per run; this client is synchronous, about 1,100 lines
//! with no dependency beyond std, libc and nix, and its wire format is checked against the
//! real `dbus-daemon` in `tests/dbus_client.rs`.
//!
//! [`wire`] is the format (types, values, messages to and from bytes), [`conn`] one
//! connection over a unix socket (authentication, sending, receiving, calls), against a
//! deadline. Imports nothing else of the crate.

pub mod conn;
#[cfg(test)]
mod tests;
pub mod wire;

pub use conn::{bus_call, unix_path, Connection, Error};
pub use wire::{Kind, Message, Type, Value, WireError, NO_AUTO_START};

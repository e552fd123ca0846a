//! sandbox-run: a deny-by-default policy gate in front of a kernel-confined child.

pub mod policy;

//! TLS termination for the hosts a secret is injected into (parent side only): the run's CA
//! ([`ca`]).

pub mod ca;
pub mod roots;

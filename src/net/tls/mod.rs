//! TLS termination for the hosts a secret is injected into (parent side only): the run's CA
//! ([`ca`]), the roots the upstream is checked against ([`roots`]), and the HTTP/1.1 framing
//! of the requests inside ([`http1`]).

pub mod ca;
pub mod http1;
pub mod roots;

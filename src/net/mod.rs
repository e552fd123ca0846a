//! Network egress of `--net filtered`: the allow-list ([`allow`]), the TLS server name of a
//! tunnel ([`sni`]) and the proxy that enforces them ([`proxy`]). Parent side only: nothing
//! here runs inside the sandbox.

pub mod allow;
pub mod dns;
pub mod proxy;
pub mod secret;
pub mod sni;
pub mod tls;

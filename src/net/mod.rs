//! Network egress of `--net filtered`: the allow-list ([`allow`]), the TLS server name of a
//! tunnel ([`sni`]) and the proxy that enforces them ([`proxy`]), which also relays the
//! listed loopback ports; and the name service of `none` and `filtered` ([`dns`]). Parent
//! side only: nothing here runs inside the sandbox.

pub mod allow;
pub mod dns;
pub mod proxy;
pub mod secret;
pub mod sni;
pub mod tls;
pub mod vault;

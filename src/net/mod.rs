//! Network egress of `--net filtered`: the allow-list ([`allow`]), the TLS server name of a
//! tunnel ([`sni`]), the rule a request's `Host` header follows ([`host`]) and the proxy that
//! enforces them ([`proxy`]), which also relays the listed loopback ports; and the name
//! service of `none` and `filtered` ([`dns`]). Parent side only: nothing here runs inside the
//! sandbox.

pub mod allow;
pub mod dns;
pub mod host;
pub mod proxy;
pub mod secret;
pub mod sni;
pub mod tls;
pub mod vault;

/// What the network refused, told as it happens (for `-v`): a host the proxy refused, with its
/// reason, or a name the name service refused.
#[derive(Debug, Clone, Copy)]
pub enum Denied<'a> {
    Host {
        host: &'a str,
        port: u16,
        reason: &'a str,
    },
    Name(&'a str),
}

/// Told each refusal of the proxy or the name service, from their threads; it must not wait
/// (the connection or the answer waits for it).
#[derive(Clone)]
pub struct OnDenied(pub std::sync::Arc<dyn Fn(Denied) + Send + Sync>);

impl std::fmt::Debug for OnDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDenied")
    }
}

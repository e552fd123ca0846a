//! Where the secrets' placeholders may go, for the proxy as a whole: the per-secret counts of
//! the report, the refusals (`secret_misdirected`), and plain HTTP, which carries a secret only
//! to a loopback address listed for it.

use super::answer::Cut;
use super::{lock, Shared};
use crate::net::allow::Host;
use std::sync::atomic::Ordering;

/// A plain-HTTP request head (absolute form): a placeholder in it is refused, unless the
/// target is a loopback address listed for that secret (the bytes never leave the host),
/// where the value is put in its place. The error is the body of a 403.
pub(super) fn plain_secrets(
    shared: &Shared,
    host: &Host,
    port: u16,
    head: &mut Vec<u8>,
) -> Result<(), String> {
    let secrets = &shared.config.secrets;
    let Some((first, _)) = secrets.find(head) else {
        return Ok(());
    };
    let loopback = matches!(host, Host::Ip(ip) if ip.is_loopback());
    let refused = |i: usize| {
        let name = shared.misdirect(i, host, port);
        format!(
            "sandbox-run: network: refused a request to {host}:{port}\n\
             rule: it carries the placeholder of secret {name}, which goes only to its listed \
             hosts, and over plain HTTP only to a loopback address\n"
        )
    };
    if !loopback {
        return Err(refused(first));
    }
    match secrets.inject(host, port, head) {
        Ok((out, counts)) => {
            shared.injected(&counts);
            *head = out;
            Ok(())
        }
        Err(i) => Err(refused(i)),
    }
}

impl Shared {
    /// An answer of `host:port` that cannot reach the client: one line on stderr, and a
    /// refused entry in the connection log (the report's `network` entries).
    pub(super) fn cut_answer(&self, host: &Host, port: u16, cut: &Cut) {
        let why = match cut {
            Cut::Value(i) => {
                let name = self
                    .config
                    .secrets
                    .list
                    .get(*i)
                    .map_or("", |s| s.name.as_str());
                format!("its answer carried the value of secret {name}")
            }
            Cut::Unscanned(why) => why.clone(),
        };
        self.record(host, port, false, &format!("answer cut: {why}"));
        self.note(&format!(
            "sandbox-run: network: cut a connection to {host}:{port}: {why}"
        ));
    }

    /// One line on stderr, when the proxy prints.
    pub(super) fn note(&self, line: &str) {
        if self.config.warn {
            crate::sink::line(line);
        }
    }

    /// Placeholders replaced, per secret.
    pub(super) fn injected(&self, counts: &[(usize, u64)]) {
        for &(i, n) in counts {
            if let Some(c) = self.injections.get(i) {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Record a misdirected placeholder of secret `i` (one stderr line per secret and
    /// host); its name.
    pub(super) fn misdirect(&self, i: usize, host: &Host, port: u16) -> String {
        let name = self
            .config
            .secrets
            .list
            .get(i)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        let first = {
            let mut m = lock(&self.misdirected);
            let mut key = (name.clone(), host.to_string(), port);
            if m.len() >= super::MAX_LOG && !m.contains_key(&key) {
                key.1 = super::OVERFLOW.to_string();
            }
            let n = m.entry(key).or_insert(0);
            *n += 1;
            *n == 1
        };
        if first {
            self.note(&format!(
                "sandbox-run: network: refused a request to {host}:{port} carrying the \
                 placeholder of secret {name} (it goes only to its listed hosts)"
            ));
        }
        name
    }
}

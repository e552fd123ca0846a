//! Secrets that never enter the sandbox (`--secret NAME=HOST`): inside, NAME holds a
//! placeholder; the proxy puts the real value in place of it in the request line and headers
//! of requests to the hosts listed for that secret, and refuses the placeholder anywhere else.
//! The values live only in the supervisor (see [`Secret::value`]).

use super::allow::{AllowList, Host};
use serde::Serialize;

/// One secret: its name, where it may go, what stands in for it inside.
pub struct Secret {
    pub name: String,
    /// The hosts it is injected for, written as `--allow-host` patterns.
    pub hosts: AllowList,
    /// The patterns as given, for the report.
    pub host_text: Vec<String>,
    /// What the sandbox sees instead of the value: the same length, the same known prefix.
    pub placeholder: Vec<u8>,
    /// The real value: memory that no process forked later inherits (see the vault).
    value: &'static [u8],
}

impl Secret {
    /// `value` must stay where no fork inherits it (`MADV_WIPEONFORK` memory).
    pub fn new(
        name: String,
        host_text: Vec<String>,
        placeholder: Vec<u8>,
        value: &'static [u8],
    ) -> Result<Secret, String> {
        let hosts = AllowList::parse(&host_text).map_err(|e| format!("--secret {name}: {e}"))?;
        Ok(Secret {
            name,
            hosts,
            host_text,
            placeholder,
            value,
        })
    }

    /// Whether the secret goes to `host:port`.
    pub fn listed_for(&self, host: &Host, port: u16) -> bool {
        self.hosts.find(host, port).is_some()
    }

    pub fn value(&self) -> &[u8] {
        self.value
    }
}

/// A request head with the placeholders replaced, and how many per secret (by index).
pub type Injected = (Vec<u8>, Vec<(usize, u64)>);

/// Every secret of a run.
#[derive(Default)]
pub struct Secrets {
    pub list: Vec<Secret>,
}

/// Names only: a value or placeholder is never printed.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|s| &s.name))
            .finish()
    }
}

/// The report's line for a secret: where it went and how often, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretUse {
    pub name: String,
    /// The hosts it is injected for, as given.
    pub hosts: Vec<String>,
    /// Placeholders replaced by the value, in every request.
    pub injections: u64,
}

/// The report's `secret_misdirected` entry: a placeholder sent where its secret does not go
/// (another host, a URL of a plain-HTTP request, a body), refused with 403.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Misdirected {
    pub secret: String,
    pub host: String,
    pub port: u16,
    pub count: u64,
}

impl Secrets {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether any secret is injected into `host:port`: its connections are terminated.
    pub fn injects(&self, host: &Host, port: u16) -> bool {
        self.list.iter().any(|s| s.listed_for(host, port))
    }

    /// The first secret whose placeholder occurs in `bytes`, with its index.
    pub fn find(&self, bytes: &[u8]) -> Option<(usize, &Secret)> {
        self.list
            .iter()
            .enumerate()
            .find(|(_, s)| contains(bytes, &s.placeholder))
    }

    /// The longest placeholder: how many bytes a scan of a stream must keep from one chunk
    /// to the next (less one).
    pub fn longest(&self) -> usize {
        self.list
            .iter()
            .map(|s| s.placeholder.len())
            .max()
            .unwrap_or(0)
    }

    /// `head` with each placeholder of a secret listed for `host:port` replaced by its value,
    /// and how many were replaced per secret (by index). A placeholder of a secret not listed
    /// for `host:port` is an error naming that secret (by index).
    pub fn inject(&self, host: &Host, port: u16, head: &[u8]) -> Result<Injected, usize> {
        let mut out = head.to_vec();
        let mut counts = Vec::new();
        for (i, s) in self.list.iter().enumerate() {
            if !contains(&out, &s.placeholder) {
                continue;
            }
            if !s.listed_for(host, port) {
                return Err(i);
            }
            let (replaced, n) = replace(&out, &s.placeholder, s.value);
            out = replaced;
            counts.push((i, n));
        }
        Ok((out, counts))
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::with_capacity(hay.len());
    let mut n = 0;
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
            n += 1;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        let s = |name: &str, host: &str, ph: &str, v: &'static str| {
            Secret::new(name.into(), vec![host.into()], ph.into(), v.as_bytes()).unwrap()
        };
        Secrets {
            list: vec![
                s("A", "api.a.com", "sk-a-PLACEHOLDER1", "sk-a-realvalue001"),
                s("B", "b.com:8443", "ghp_PLACEHOLDER22", "ghp_realvalue0022"),
            ],
        }
    }

    #[test]
    fn injects_only_where_listed() {
        let s = secrets();
        let a = Host::Name("api.a.com".into());
        let b = Host::Name("b.com".into());
        assert!(s.injects(&a, 443) && !s.injects(&a, 8443) && s.injects(&b, 8443));
        let head = b"GET /v1?k=sk-a-PLACEHOLDER1 HTTP/1.1\r\nx-api-key: sk-a-PLACEHOLDER1\r\n\r\n";
        let (out, counts) = s.inject(&a, 443, head).unwrap();
        assert_eq!(
            out,
            b"GET /v1?k=sk-a-realvalue001 HTTP/1.1\r\nx-api-key: sk-a-realvalue001\r\n\r\n"
        );
        assert_eq!(counts, vec![(0, 2)]);
        assert_eq!(s.inject(&b, 8443, head), Err(0));
        assert_eq!(
            s.inject(&b, 8443, b"GET / HTTP/1.1\r\n\r\n").unwrap().1,
            vec![]
        );
        assert_eq!(s.find(b"xx ghp_PLACEHOLDER22").map(|(i, _)| i), Some(1));
        assert_eq!(s.longest(), 17);
    }
}

//! The sandbox's trust bundle: the CAs a program inside trusts for TLS.
//!
//! When a run has any CA beyond the host's roots (`--ca-certs`; the caller's own bundle,
//! named by `SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` or
//! `PIP_CERT`, as on a host behind a TLS-intercepting proxy; the run's own CA when it has
//! secrets to inject), two files are made in a run dir of sandbox-run's own
//! ([`crate::state::RunDir`]) before the sandbox starts, and bound read-only inside:
//! - the full bundle: the host's system roots, then every extra CA. `SSL_CERT_FILE`,
//!   `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`, `GIT_SSL_CAINFO` and `PIP_CERT` name it (OpenSSL
//!   clients take it instead of the system roots, so it must hold them too);
//! - the extra CAs only: `NODE_EXTRA_CA_CERTS` names it (Node adds it to its own roots; a whole
//!   bundle there would cost every Node start tens of milliseconds).
//!
//! The run's CA exists only after the sandbox's processes were forked (its key must never be
//! in their memory): the supervisor appends it to both files ([`Bundle::add`]) once it has
//! started the proxy, and pid 1 waits for its word before it starts the workload.
//!
//! Only certificates are taken from the files (a private key in one is left out), and those
//! already among the system roots are not repeated.

use crate::layers::ns::Ids;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The caller's variables that name a CA bundle to honour, in this order.
pub const CALLER_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
];

/// The largest bundle read.
const MAX_FILE: u64 = 8 << 20;

/// One file whose CAs joined the bundle: the report's `sandbox.ca_certs` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub path: PathBuf,
    /// `--ca-certs`, a caller's variable (`SSL_CERT_FILE`...), or `run` for the run's CA.
    pub from: String,
}

/// The files that join the bundle: `--ca-certs` (checked: a bad one is an error) and, when
/// `caller_bundles`, the caller's variables (checked the same way; one that fails is left out
/// with a `-v` line: the caller did not ask for it). A file that is the host's system bundle
/// itself is left out (its roots are in the bundle already), as is a second mention of a file.
pub fn sources(
    ca_flag: Option<&Path>,
    caller: &[(String, String)],
    caller_bundles: bool,
    repo: &Path,
    euid: u32,
) -> Result<Vec<Source>, String> {
    let system = crate::net::tls::roots::system_bundle_path().and_then(|p| p.canonicalize().ok());
    let mut out: Vec<Source> = Vec::new();
    let push = |path: PathBuf, from: &str, out: &mut Vec<Source>| {
        if system.as_ref() == Some(&path) {
            tracing::info!(
                "ca-certs: {from} {} is the system's bundle, whose roots are in the sandbox's bundle already",
                path.display()
            );
        } else if !out.iter().any(|s| s.path == path) {
            out.push(Source {
                path,
                from: from.to_string(),
            });
        }
    };
    if let Some(p) = ca_flag {
        let real = crate::layers::env::ca_bundle(p, repo, euid)?;
        push(real, "--ca-certs", &mut out);
    }
    if caller_bundles {
        for var in CALLER_VARS {
            let Some((_, v)) = caller.iter().find(|(k, _)| k == var) else {
                continue;
            };
            if v.is_empty() {
                continue;
            }
            match crate::layers::env::ca_bundle(Path::new(v), repo, euid) {
                Ok(real) => push(real, var, &mut out),
                Err(e) => tracing::info!(
                    "ca-certs: the caller's {var} is left out of the sandbox's bundle: {}",
                    e.split_once(": ").map_or(e.as_str(), |(_, why)| why)
                ),
            }
        }
    }
    Ok(out)
}

/// The two files of a run's bundle, in a run dir of its own.
pub struct Bundle {
    _run: crate::state::RunDir,
    /// System roots and the extra CAs.
    pub full: PathBuf,
    /// The extra CAs only.
    pub extra: PathBuf,
    /// The extra file has (or will have) a certificate: `NODE_EXTRA_CA_CERTS` names it.
    pub has_extra: bool,
    /// Both files, open for appending the run's CA.
    files: Mutex<Vec<std::fs::File>>,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("full", &self.full)
            .field("extra", &self.extra)
            .finish()
    }
}

impl Bundle {
    /// Append `pem` (the run's CA) to both files.
    pub fn add(&self, pem: &str) -> Result<(), String> {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        for (f, p) in files.iter_mut().zip([&self.full, &self.extra]) {
            f.write_all(pem.as_bytes())
                .and_then(|()| f.flush())
                .map_err(|e| format!("adding the run's CA to {}: {e}", p.display()))?;
        }
        Ok(())
    }
}

/// The bundle for `sources` (and, with `run_ca`, room for the run's CA), made for the
/// sandbox's user `ids`; `None` when nothing beyond the system roots would be in it.
pub fn make(ids: Ids, sources: &[Source], run_ca: bool) -> Result<Option<Bundle>, String> {
    if sources.is_empty() && !run_ca {
        return Ok(None);
    }
    let system_path = crate::net::tls::roots::system_bundle_path();
    let system = match &system_path {
        Some(p) => read(p)?,
        None => String::new(),
    };
    let known: HashSet<String> = certificates(&system).map(normalized).collect();
    let mut seen = HashSet::new();
    let mut extra = String::new();
    for s in sources {
        let text = read(&s.path)?;
        let mut any = false;
        for c in certificates(&text) {
            any = true;
            let key = normalized(c);
            if !known.contains(&key) && seen.insert(key) {
                extra.push_str(c);
                extra.push('\n');
            }
        }
        if !any {
            tracing::info!(
                "ca-certs: {} ({}) holds no PEM certificate",
                s.path.display(),
                s.from
            );
        }
    }
    if extra.is_empty() && !run_ca {
        return Ok(None);
    }
    let run = crate::state::RunDir::make(ids, "trust", "CA bundle")?;
    let full_path = run.path().join("ca-bundle.pem");
    let extra_path = run.path().join("ca-extra.pem");
    let mut full = create(&full_path)?;
    let mut body = system;
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&extra);
    full.write_all(body.as_bytes())
        .map_err(|e| format!("CA bundle {}: {e}", full_path.display()))?;
    let mut ex = create(&extra_path)?;
    ex.write_all(extra.as_bytes())
        .map_err(|e| format!("CA bundle {}: {e}", extra_path.display()))?;
    Ok(Some(Bundle {
        _run: run,
        full: full_path,
        extra: extra_path,
        has_extra: !extra.is_empty() || run_ca,
        files: Mutex::new(vec![full, ex]),
    }))
}

/// A new file of the bundle: never through a link, readable by the sandbox's user.
fn create(p: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| format!("CA bundle {}: {e}", p.display()))
}

/// A bundle's text (a file outside the repo, checked by [`sources`], or the system's).
fn read(p: &Path) -> Result<String, String> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut text))
        .map_err(|e| format!("CA bundle {}: {e}", p.display()))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!(
            "CA bundle {}: larger than {MAX_FILE} bytes",
            p.display()
        ));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// Each `BEGIN CERTIFICATE` ... `END CERTIFICATE` block of a PEM text, markers included.
pub fn certificates(text: &str) -> impl Iterator<Item = &str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut rest = text;
    std::iter::from_fn(move || {
        let at = rest.find(BEGIN)?;
        let len = rest[at..].find(END)? + END.len();
        let block = &rest[at..at + len];
        rest = &rest[at + len..];
        Some(block)
    })
}

fn normalized(block: &str) -> String {
    block.split_whitespace().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_certificate_blocks_are_taken() {
        let text = "junk\n-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
            -----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n\
            -----BEGIN CERTIFICATE-----\r\nBBB\r\n-----END CERTIFICATE-----";
        let got: Vec<String> = certificates(text).map(normalized).collect();
        assert_eq!(
            got,
            [
                "-----BEGINCERTIFICATE-----AAA-----ENDCERTIFICATE-----",
                "-----BEGINCERTIFICATE-----BBB-----ENDCERTIFICATE-----"
            ]
        );
        assert_eq!(certificates("-----BEGIN CERTIFICATE-----\nA").count(), 0);
    }
}

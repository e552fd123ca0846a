//! The host's own trust roots.

use std::path::PathBuf;

/// The host's system CA bundle (PEM): the first of the usual places that is a file (Debian
/// and Ubuntu, Fedora and RHEL, openSUSE, Alpine and Arch, the extracted p11-kit bundle).
pub fn system_bundle_path() -> Option<PathBuf> {
    [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/ca-bundle.pem",
        "/etc/ssl/cert.pem",
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

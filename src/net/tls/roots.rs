//! The roots a terminated connection's upstream certificate is checked against: the host's
//! own system bundle plus the run's extra bundles (`--ca-certs`, the caller's bundle). Read
//! once per run, only when the run has secrets.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where distributions keep the system's CA bundle (Debian and Ubuntu, Fedora and RHEL,
/// openSUSE, Alpine and Arch, the RHEL extracted form): the first that exists is the host's.
const SYSTEM_BUNDLES: [&str; 5] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
];

/// Largest bundle read (the Debian one is about 220 KiB).
const MAX_BUNDLE: u64 = 16 << 20;

/// The host's system CA bundle: the first of the usual places that exists.
pub fn system_bundle_path() -> Option<&'static Path> {
    SYSTEM_BUNDLES.iter().map(Path::new).find(|p| p.is_file())
}

/// The system bundle (when the host has one) plus every bundle of `extra`. Errors name the
/// file; a host without a system bundle and without `extra` has no roots, which is an error
/// too (no upstream could be verified).
pub fn load(extra: &[PathBuf]) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let system = system_bundle_path();
    for path in system
        .iter()
        .map(|p| p.to_path_buf())
        .chain(extra.iter().cloned())
    {
        let pem = read(&path)?;
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert
                .map_err(|e| format!("reading the CA certificates of {}: {e}", path.display()))?;
            // One certificate the verifier cannot use (an old or odd one in a system
            // bundle) does not make the rest useless.
            if store.add(cert).is_ok() {
                n += 1;
            }
        }
        if n == 0 && Some(path.as_path()) != system {
            return Err(format!(
                "{} holds no usable PEM CA certificate",
                path.display()
            ));
        }
    }
    if store.is_empty() {
        return Err(format!(
            "no CA certificates to check the servers of the hosts a secret is listed for: \
             none of {} exists and no --ca-certs was given",
            SYSTEM_BUNDLES.join(", ")
        ));
    }
    Ok(store)
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    let fail = |e: std::io::Error| format!("reading {}: {e}", path.display());
    let f = std::fs::File::open(path).map_err(fail)?;
    let mut buf = Vec::new();
    f.take(MAX_BUNDLE + 1).read_to_end(&mut buf).map_err(fail)?;
    if buf.len() as u64 > MAX_BUNDLE {
        return Err(format!(
            "reading {}: larger than {} MiB, not a CA bundle",
            path.display(),
            MAX_BUNDLE >> 20
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_and_extra_roots() {
        let dir = std::env::temp_dir().join(format!("roots-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = crate::net::tls::ca::RunCa::new().unwrap();
        let good = dir.join("good.pem");
        std::fs::write(&good, ca.pem()).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let base = load(&[]).map(|s| s.len()).unwrap_or(0);
        assert_eq!(load(std::slice::from_ref(&good)).unwrap().len(), base + 1);
        let e = load(std::slice::from_ref(&empty)).unwrap_err();
        assert!(e.contains("empty.pem holds no usable"), "{e}");
        let e = load(&[dir.join("missing.pem")]).unwrap_err();
        assert!(
            e.starts_with("reading ") && e.contains("missing.pem"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The certificate authority of one run: made by the supervisor when the run has secrets to
//! inject, after the sandbox's processes were forked (so no copy of its key is in their
//! memory), and gone with the supervisor. The sandbox trusts it through its CA bundle; it
//! signs one certificate per host whose connections the proxy terminates, and nothing else.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Hosts whose certificates a run keeps; past that, certificates are made again per
/// connection (a hostile command inventing names cannot grow the supervisor's memory; it
/// reaches only hosts a secret is listed for anyway).
const MAX_CACHED: usize = 64;

/// A run's CA and the leaf certificates it signed so far.
pub struct RunCa {
    /// The CA certificate, PEM: what the sandbox's bundle adds.
    pem: String,
    issuer: Issuer<'static, KeyPair>,
    /// One key for every leaf of the run (signing a certificate is cheap, making a key less).
    leaf_key: Arc<dyn rustls::sign::SigningKey>,
    leaf_public: KeyPair,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl RunCa {
    /// A new CA (ECDSA P-256), valid from a day ago (clocks differ) for as long as any run.
    pub fn new() -> Result<RunCa, String> {
        let fail = |what: &str, e: rcgen::Error| format!("making the run's CA: {what}: {e}");
        let key = KeyPair::generate().map_err(|e| fail("key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "sandbox-run per-run CA");
        dn.push(DnType::OrganizationName, "sandbox-run");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params);
        let cert = params
            .self_signed(&key)
            .map_err(|e| fail("certificate", e))?;
        let leaf_public = KeyPair::generate().map_err(|e| fail("leaf key", e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_public.serialize_der()));
        let leaf_key = rustls::crypto::ring::sign::any_ecdsa_type(&der)
            .map_err(|e| format!("making the run's CA: leaf key: {e}"))?;
        Ok(RunCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            leaf_key,
            leaf_public,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate in PEM, for the sandbox's trust bundle.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The certificate and key to present to the sandbox for `host` (a name, or an IP
    /// address as text).
    pub fn leaf(&self, host: &str) -> Result<Arc<CertifiedKey>, String> {
        let host = host.to_ascii_lowercase();
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = leaves.get(&host) {
            return Ok(c.clone());
        }
        let mut params = CertificateParams::new(vec![host.clone()])
            .map_err(|e| format!("a certificate for {host}: {e}"))?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, host.as_str());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        set_validity(&mut params);
        let cert = params
            .signed_by(&self.leaf_public, &self.issuer)
            .map_err(|e| format!("a certificate for {host}: {e}"))?;
        let c = Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            self.leaf_key.clone(),
        ));
        if leaves.len() < MAX_CACHED {
            leaves.insert(host, c.clone());
        }
        Ok(c)
    }
}

/// From two days before today to thirty days after: a run lasts far less, and a clock inside
/// that differs by a day still accepts it.
fn set_validity(params: &mut CertificateParams) {
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| (d.as_secs() / 86_400) as i64)
        .unwrap_or(0);
    let (y, m, d) = civil(today - 2);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil(today + 30);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_454), (2026, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
    }

    /// The leaf verifies against the CA for its host, as a client inside would check it.
    #[test]
    fn leaves_chain_to_the_run_ca() {
        let ca = RunCa::new().unwrap();
        assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let mut roots = rustls::RootCertStore::empty();
        let der = pem_der(ca.pem());
        roots.add(CertificateDer::from(der)).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        for host in ["api.example.com", "127.0.0.1"] {
            let leaf = ca.leaf(host).unwrap();
            let name = rustls::pki_types::ServerName::try_from(host).unwrap();
            verifier
                .verify_server_cert(
                    &leaf.cert[0],
                    &[],
                    &name,
                    &[],
                    rustls::pki_types::UnixTime::now(),
                )
                .unwrap();
            let other = rustls::pki_types::ServerName::try_from("other.example.com").unwrap();
            assert!(verifier
                .verify_server_cert(
                    &leaf.cert[0],
                    &[],
                    &other,
                    &[],
                    rustls::pki_types::UnixTime::now()
                )
                .is_err());
        }
        assert!(Arc::ptr_eq(
            &ca.leaf("API.example.com").unwrap(),
            &ca.leaf("api.example.com").unwrap()
        ));
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }
}

//! The caller's CA bundle is honoured: on a host behind a TLS-intercepting proxy the caller's
//! `SSL_CERT_FILE` (or `PIP_CERT`, ...) names a bundle of the system roots and the proxy's CA,
//! and pip inside the sandbox must trust that CA without `--ca-certs`.
//!
//! The test plays that host: a TLS server on 127.0.0.1 whose certificate a test CA signed
//! (the intercepting proxy), serving a PEP 503 simple index with one tiny wheel; pip inside
//! downloads it through the sandbox's proxy (`--allow-host 127.0.0.1:PORT`). Without the
//! caller's variable the same download fails on the certificate (the negative control).

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const PYTHON: &str = "/usr/bin/python3";
const WHEEL: &str = "tinypkg-0.1-py3-none-any.whl";

/// A test CA (PEM) and a server certificate for 127.0.0.1 it signed (DER, key DER).
fn test_ca() -> (String, Vec<u8>, Vec<u8>) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "sandbox-run test intercepting proxy CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    (ca_pem, cert.der().to_vec(), key.serialize_der())
}

/// A wheel of one module, made by python3's zipfile.
fn make_wheel(dir: &Path) -> Vec<u8> {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "tinypkg/__init__.py": b"X = 1\n",
    "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandbox-run-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for n, d in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    record += f"{n},sha256={h},{len(d)}\n"
record += "tinypkg-0.1.dist-info/RECORD,,\n"
files["tinypkg-0.1.dist-info/RECORD"] = record.encode()
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
"#;
    let out = dir.join(WHEEL);
    let st = std::process::Command::new(PYTHON)
        .arg("-c")
        .arg(script)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read(&out).unwrap()
}

/// Serve the index over TLS on 127.0.0.1 (any port): `/simple/tinypkg/` and the wheel.
fn serve(cert: Vec<u8>, key: Vec<u8>, wheel: Vec<u8>) -> u16 {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let wheel = Arc::new(wheel);
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let (config, wheel) = (config.clone(), wheel.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, s);
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or("");
                let (status, ctype, body): (&str, &str, Vec<u8>) = match path {
                    "/simple/tinypkg/" => (
                        "200 OK",
                        "text/html",
                        format!("<!DOCTYPE html><html><body><a href=\"/files/{WHEEL}\">{WHEEL}</a></body></html>\n").into_bytes(),
                    ),
                    p if p == format!("/files/{WHEEL}") => {
                        ("200 OK", "application/octet-stream", wheel.to_vec())
                    }
                    _ => ("404 Not Found", "text/plain", b"not here\n".to_vec()),
                };
                let _ = write!(
                    tls,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(&body);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    port
}

fn system_bundle() -> Option<PathBuf> {
    [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// pip inside, through the sandbox's proxy (`--proxy`: a URL on 127.0.0.1 would otherwise go
/// to the sandbox's own loopback), with the caller's variables `caller`.
fn pip_download(f: &Fixture, port: u16, caller: &[(&str, &Path)], report: &Path) -> Run {
    let repo = f.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let p = f.profile(
        &Spec::default()
            .no_probe()
            .net("filtered")
            .path(Path::new(PYTHON)),
    );
    let allow = format!("127.0.0.1:{port}");
    let index = format!("https://127.0.0.1:{port}/simple/");
    let proxy = "http://127.0.0.1:3128";
    let argv = [
        PYTHON,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        "15",
        "--proxy",
        proxy,
        "--index-url",
        &index,
        "-d",
        "/tmp/dl",
        "tinypkg",
    ];
    let mut c = sandbox_command(
        &p,
        &repo,
        &["--allow-host", &allow, "--report", report.to_str().unwrap()],
        &argv,
    );
    for v in [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "PIP_INDEX_URL",
        "PIP_CONFIG_FILE",
    ] {
        c.env_remove(v);
    }
    c.env("PATH", "/usr/bin:/bin");
    for (k, v) in caller {
        c.env(k, v);
    }
    run_command(c, Duration::from_secs(120))
}

#[test]
fn pip_trusts_the_callers_intercepting_ca_without_ca_certs() {
    if !sandbox_works() {
        return;
    }
    let pip = std::process::Command::new(PYTHON)
        .args(["-m", "pip", "--version"])
        .output();
    if !pip.is_ok_and(|o| o.status.success()) {
        return skip_tool("no pip for /usr/bin/python3");
    }
    let Some(system) = system_bundle() else {
        return skip_tool("no system CA bundle");
    };
    let f = Fixture::new("ca-caller");
    let (ca_pem, cert, key) = test_ca();
    let wheel = make_wheel(&f.dir);
    let port = serve(cert, key, wheel);
    // The caller's bundle, as on a host behind an intercepting proxy: the system's roots
    // and the proxy's CA.
    let mut text = std::fs::read_to_string(&system).unwrap();
    text.push_str(&ca_pem);
    let bundle = f.write("host-bundle.pem", &text);
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = f.path("report.json");

    for var in ["SSL_CERT_FILE", "PIP_CERT"] {
        let r = pip_download(&f, port, &[(var, &bundle)], &report);
        assert_eq!(r.code, Some(0), "{var}: {}", r.all());
        assert!(
            r.all().contains("Saved") || r.all().contains("Successfully downloaded"),
            "{}",
            r.all()
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        schema::assert_valid_report(&v);
        assert_eq!(
            v["sandbox"]["ca_certs"],
            serde_json::json!([{"path": bundle, "from": var}]),
            "{var}"
        );
    }

    // The negative control: without the caller's variable, the certificate is refused.
    let r = pip_download(&f, port, &[], &report);
    assert_ne!(r.code, Some(0), "{}", r.all());
    assert!(
        r.all()
            .to_ascii_lowercase()
            .contains("certificate verify failed"),
        "{}",
        r.all()
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["ca_certs"], serde_json::json!([]));

    // A caller's bundle another user can write is left out (not an error: the caller did not
    // ask for it).
    let loose = f.write("loose-bundle.pem", &text);
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = pip_download(&f, port, &[("SSL_CERT_FILE", &loose)], &report);
    assert_ne!(r.code, Some(0), "{}", r.all());
    assert!(
        r.all()
            .to_ascii_lowercase()
            .contains("certificate verify failed"),
        "{}",
        r.all()
    );
}

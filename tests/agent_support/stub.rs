//! A test CA, and a TLS stub of each vendor's API on the host's 127.0.0.1 that records every
//! request and streams its reply in two parts, with a hook between them.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "websocket.rs"]
mod websocket;

/// A CA made for one test, and a certificate it signed for `127.0.0.1` and `localhost`.
pub struct TestCa {
    /// The CA certificate, PEM, in a file (what `--ca-certs` and the CLIs are given).
    pub pem: PathBuf,
    server: Arc<rustls::ServerConfig>,
}

impl TestCa {
    pub fn new(dir: &Path) -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "sandbox-run agent test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
        let pem = dir.join("test-ca.pem");
        std::fs::write(&pem, ca_cert.pem()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf_cert.der().clone(), ca_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        TestCa {
            pem,
            server: Arc::new(server),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The stub APIs

/// Which vendor's API a stub plays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Api {
    /// Anthropic's Messages API (`POST /v1/messages`, server-sent events).
    Anthropic,
    /// OpenAI's Responses API (`POST /v1/responses`, server-sent events).
    OpenAi,
    /// The Gemini API (`:streamGenerateContent?alt=sse`, and `:generateContent`).
    Gemini,
}

/// The streamed reply: two deltas, sent apart.
pub const DELTA1: &str = "STREAMED-FIRST-4c2a ";
pub const DELTA2: &str = "STREAMED-LAST-9b7e";

/// One request a stub received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Whether the reply was streamed (two deltas, with the hook between them).
    pub streamed: bool,
}

impl Request {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Every string of the JSON body, depth first.
    pub fn strings(&self) -> Vec<String> {
        fn walk(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                Value::Object(o) => o.values().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.json(), &mut out);
        out
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Called between the two deltas of a streamed reply (the stream is held meanwhile).
pub type Hook = Box<dyn FnMut(&Request) + Send>;

/// A TLS stub of one API on the host's 127.0.0.1 (an ephemeral port), its certificate signed
/// by a test CA. Every request is recorded; a streaming request gets its reply as
/// server-sent events in separate chunks, with the hook run after the first delta.
pub struct Stub {
    pub port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl Stub {
    pub fn start(api: Api, ca: &TestCa) -> Stub {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind the stub API on 127.0.0.1");
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
        let (s, h, config) = (seen.clone(), hook.clone(), ca.server.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, h, config) = (s.clone(), h.clone(), config.clone());
                std::thread::spawn(move || {
                    let _ = serve(api, conn, config, &s, &h);
                });
            }
        });
        Stub { port, seen, hook }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    /// Run `hook` in the middle of the next streamed reply.
    pub fn on_stream(&self, hook: Hook) {
        *self.hook.lock().unwrap() = Some(hook);
    }
}

fn read_request(r: &mut impl BufRead) -> std::io::Result<Request> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let path = words.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    let (mut len, mut chunked) = (0usize, false);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((&h, ""));
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        match k.as_str() {
            "content-length" => len = v.parse().unwrap_or(0),
            "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
        headers.push((k, v));
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        streamed: false,
    })
}

/// One event of a streamed reply: its name (none for Gemini) and data.
pub(crate) type Event = (Option<&'static str>, Value);

/// An event as server-sent events write it.
fn sse((name, data): &Event) -> String {
    match name {
        Some(n) => format!("event: {n}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// The events of a streamed reply: those before the hook, and those after.
pub(crate) fn events(api: Api, req: &Value) -> (Vec<Event>, Vec<Event>) {
    let ev = |name: Option<&'static str>, data: Value| (name, data);
    match api {
        Api::Anthropic => {
            let model = req["model"].as_str().unwrap_or("claude-stub");
            let d = |t: &str| {
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": t}})
            };
            (
                vec![
                    ev(
                        Some("message_start"),
                        json!({"type": "message_start", "message": {"id": "msg_stub",
                           "type": "message", "role": "assistant", "model": model,
                           "content": [], "stop_reason": null, "stop_sequence": null,
                           "usage": {"input_tokens": 10, "output_tokens": 1}}}),
                    ),
                    ev(
                        Some("content_block_start"),
                        json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}}),
                    ),
                    ev(Some("content_block_delta"), d(DELTA1)),
                ],
                vec![
                    ev(Some("content_block_delta"), d(DELTA2)),
                    ev(
                        Some("content_block_stop"),
                        json!({"type": "content_block_stop", "index": 0}),
                    ),
                    ev(
                        Some("message_delta"),
                        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                           "stop_sequence": null}, "usage": {"output_tokens": 5}}),
                    ),
                    ev(Some("message_stop"), json!({"type": "message_stop"})),
                ],
            )
        }
        Api::OpenAi => {
            let r = json!({"id": "resp_stub", "object": "response", "created_at": 0,
                           "status": "in_progress", "model": "gpt-stub", "output": []});
            let text = format!("{DELTA1}{DELTA2}");
            let item = json!({"id": "msg_stub", "type": "message", "role": "assistant",
                "status": "completed", "content": [{"type": "output_text", "text": text,
                "annotations": []}]});
            let d = |t: &str| {
                json!({"type": "response.output_text.delta", "item_id": "msg_stub",
                       "output_index": 0, "content_index": 0, "delta": t})
            };
            let mut done = r.clone();
            done["status"] = json!("completed");
            done["output"] = json!([item]);
            done["usage"] = json!({"input_tokens": 10, "input_tokens_details":
                {"cached_tokens": 0}, "output_tokens": 5, "output_tokens_details":
                {"reasoning_tokens": 0}, "total_tokens": 15});
            (
                vec![
                    ev(
                        Some("response.created"),
                        json!({"type": "response.created", "response": r}),
                    ),
                    ev(
                        Some("response.output_item.added"),
                        json!({"type": "response.output_item.added", "output_index": 0,
                           "item": {"id": "msg_stub", "type": "message", "role": "assistant",
                           "status": "in_progress", "content": []}}),
                    ),
                    ev(Some("response.output_text.delta"), d(DELTA1)),
                ],
                vec![
                    ev(Some("response.output_text.delta"), d(DELTA2)),
                    ev(
                        Some("response.output_item.done"),
                        json!({"type": "response.output_item.done", "output_index": 0,
                           "item": item}),
                    ),
                    ev(
                        Some("response.completed"),
                        json!({"type": "response.completed", "response": done}),
                    ),
                ],
            )
        }
        Api::Gemini => {
            let c = |t: &str, last: bool| {
                let mut v = json!({"candidates": [{"content": {"parts": [{"text": t}],
                    "role": "model"}, "index": 0}]});
                if last {
                    v["candidates"][0]["finishReason"] = json!("STOP");
                    v["usageMetadata"] = json!({"promptTokenCount": 10,
                        "candidatesTokenCount": 5, "totalTokenCount": 15});
                }
                v
            };
            (
                vec![ev(None, c(DELTA1, false))],
                vec![ev(None, c(DELTA2, true))],
            )
        }
    }
}

/// The answer to a request that does not stream (Gemini CLI's routing classifier, token
/// counts): JSON, or `None` for a 404.
fn plain_answer(api: Api, path: &str) -> Option<Value> {
    match api {
        Api::Anthropic if path.starts_with("/v1/messages/count_tokens") => {
            Some(json!({"input_tokens": 10}))
        }
        Api::Anthropic if path.starts_with("/v1/messages") => Some(json!({"id": "msg_stub",
            "type": "message", "role": "assistant", "model": "claude-stub",
            "content": [{"type": "text", "text": format!("{DELTA1}{DELTA2}")}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}})),
        Api::Gemini if path.contains(":generateContent") => Some(json!({"candidates": [{
            "content": {"parts": [{"text": "{\"reasoning\": \"stub\", \"complexity_score\": 1}"}],
            "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
            "totalTokenCount": 2}})),
        _ => None,
    }
}

fn wants_stream(api: Api, path: &str, body: &Value) -> bool {
    match api {
        Api::Anthropic => {
            path.starts_with("/v1/messages")
                && !path.starts_with("/v1/messages/count_tokens")
                && body["stream"] == Value::Bool(true)
        }
        Api::OpenAi => path.ends_with("/responses") && body["stream"] != Value::Bool(false),
        Api::Gemini => path.contains(":streamGenerateContent"),
    }
}

fn serve(
    api: Api,
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    seen: &Mutex<Vec<Request>>,
    hook: &Mutex<Option<Hook>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let tls = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut r = BufReader::new(rustls::StreamOwned::new(tls, conn));
    let mut req = read_request(&mut r)?;
    if api == Api::OpenAi
        && req
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
    {
        return websocket::serve(&mut r, req, seen, hook);
    }
    let body = req.json();
    let stream = wants_stream(api, &req.path, &body);
    req.streamed = stream;
    seen.lock().unwrap().push(req.clone());
    let w = r.get_mut();
    if !stream {
        let (status, b) = match plain_answer(api, &req.path) {
            Some(v) => ("200 OK", v.to_string()),
            None => (
                "404 Not Found",
                json!({"error": {"type": "not_found_error", "message": "stub", "code": 404}})
                    .to_string(),
            ),
        };
        write!(
            w,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        )?;
    } else {
        let (first, rest) = events(api, &body);
        write!(
            w,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )?;
        let chunk = |w: &mut rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
                     s: &str|
         -> std::io::Result<()> {
            write!(w, "{:x}\r\n{s}\r\n", s.len())?;
            w.flush()
        };
        for e in &first {
            chunk(w, &sse(e))?;
        }
        // the stream is held here: the hook sees the first delta arrive, or not
        if let Some(h) = hook.lock().unwrap().as_mut() {
            h(&req);
        }
        for e in &rest {
            chunk(w, &sse(e))?;
        }
        write!(w, "0\r\n\r\n")?;
    }
    w.conn.send_close_notify();
    w.flush()
}

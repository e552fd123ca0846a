//! What the agent CLI tests share: the CLIs from the npm registry (installed once per
//! version, outside any sandbox), a test CA and a TLS stub of each vendor's API on the host's
//! 127.0.0.1 that streams its reply, the recipes of docs/agents.md read as written, and a scan
//! of a sandbox's processes (environment and memory) for a value.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;

mod websocket;

// ---------------------------------------------------------------------------------------------
// The CLIs

/// One CLI of the npm registry: its package and the program it installs.
pub struct Cli {
    pub pkg: &'static str,
    pub bin: &'static str,
}

pub const CLAUDE: Cli = Cli {
    pkg: "@anthropic-ai/claude-code",
    bin: "claude",
};
pub const CODEX: Cli = Cli {
    pkg: "@openai/codex",
    bin: "codex",
};
pub const GEMINI: Cli = Cli {
    pkg: "@google/gemini-cli",
    bin: "gemini",
};

/// Where installs are kept between runs: `target/.../tmp/agent-cli/` (a CI cache keeps the
/// target directory, so a version is downloaded once), with npm's own download cache beside.
fn cli_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-cli")
}

/// The skip (or, when `SANDBOX_RUN_TEST_REQUIRE` names `agent-cli`, the failure) of a test
/// that has no CLI to run.
pub fn skip_cli(why: &str) {
    skip("agent-cli", why);
}

/// The current version of `cli` on the registry npm is configured for, asked by npm itself;
/// `None` when that registry is unreachable.
fn current_version(cli: &Cli) -> Result<String, String> {
    // asked once per package and test process
    static ASKED: Mutex<Vec<(&str, Result<String, String>)>> = Mutex::new(Vec::new());
    let mut asked = ASKED.lock().unwrap();
    if let Some((_, r)) = asked.iter().find(|(p, _)| *p == cli.pkg) {
        return r.clone();
    }
    let r = ask_version(cli);
    asked.push((cli.pkg, r.clone()));
    r
}

fn ask_version(cli: &Cli) -> Result<String, String> {
    let mut c = Command::new("npm");
    c.args([
        "view",
        cli.pkg,
        "version",
        "--fetch-retries=1",
        "--fetch-retry-mintimeout=1000",
        "--fetch-retry-maxtimeout=5000",
    ]);
    let r = run_command(c, Duration::from_secs(120));
    let v = r.stdout.trim().to_string();
    if r.code == Some(0) && !v.is_empty() && !v.contains(char::is_whitespace) {
        return Ok(v);
    }
    Err(r
        .all()
        .lines()
        .find(|l| l.contains("ERR") || l.contains("error"))
        .unwrap_or("no error line")
        .trim()
        .to_string())
}

/// The `node_modules/.bin` of the current version of `cli` (installed once per version with
/// `npm install --prefix`, into a fresh directory moved in place: never half an install).
/// When the registry is unreachable, the newest install already kept; with none, one skip
/// line and `None`. A failed install from a reachable registry fails the test.
pub fn install(cli: &Cli) -> Option<PathBuf> {
    let cache = cli_cache();
    let short = cli.pkg.rsplit('/').next().unwrap();
    let kept = |v: &str| cache.join(format!("{short}-{v}")).join("node_modules/.bin");
    if which("npm").is_none() {
        skip_cli("npm is not installed: no agent CLI to run");
        return None;
    }
    let version = match current_version(cli) {
        Ok(v) => v,
        Err(e) => {
            // offline: the newest kept install, if any
            let mut have: Vec<PathBuf> = std::fs::read_dir(&cache)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy().to_string();
                    n.strip_prefix(&format!("{short}-"))
                        .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                        && !n.contains(".tmp")
                        && p.join("node_modules/.bin").join(cli.bin).exists()
                })
                .collect();
            have.sort();
            if let Some(p) = have.pop() {
                eprintln!("npm's registry is unreachable ({e}): using {}", p.display());
                return Some(p.join("node_modules/.bin"));
            }
            skip_cli(&format!(
                "npm's registry is unreachable ({e}): {} cannot be installed",
                cli.pkg
            ));
            return None;
        }
    };
    let bin = kept(&version);
    if bin.join(cli.bin).exists() {
        return Some(bin);
    }
    let dir = bin.parent().unwrap().parent().unwrap().to_path_buf();
    let tmp = dir.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut c = Command::new("npm");
    c.args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&tmp)
        .arg(format!("{}@{version}", cli.pkg))
        .env("npm_config_cache", cache.join(".npm-cache"));
    let r = run_command(c, Duration::from_secs(900));
    assert_eq!(r.code, Some(0), "npm install {}@{version}: {r}", cli.pkg);
    if std::fs::rename(&tmp, &dir).is_err() {
        // another test put it there first
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(
        bin.join(cli.bin).exists(),
        "no {} in {}",
        cli.bin,
        bin.display()
    );
    Some(bin)
}

// ---------------------------------------------------------------------------------------------
// A test CA and the stub's certificate

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

// ---------------------------------------------------------------------------------------------
// The recipes of docs/agents.md

/// The first `sh` block of docs/agents.md's section `## {section}` that holds `marker`, as
/// the user would paste it.
pub fn recipe(section: &str, marker: &str) -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md"))
        .unwrap();
    let start = doc
        .find(&format!("\n## {section}\n"))
        .unwrap_or_else(|| panic!("docs/agents.md has no section {section:?}"));
    let body = &doc[start + 1..];
    let body = &body[..body[3..].find("\n## ").map_or(body.len(), |e| e + 3)];
    body.split("```sh\n")
        .skip(1)
        .map(|b| &b[..b.find("```").unwrap()])
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("docs/agents.md, {section}: no sh block with {marker:?}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The processes of a sandbox, and a scan of their environment and memory

/// The pid namespace of a process (the target of `/proc/PID/ns/pid`).
pub fn pid_ns(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn parent(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // after the command's name in parentheses: state, then ppid
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn descendants(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// The processes of the sandbox started under `root` (a process outside it, e.g. the
/// sandbox-run the test started): every process of the run's pid namespace (the first
/// descendant in another namespace than the test's is its pid 1), and pid 1's parent, the
/// launcher's stage 2. The supervisor, which holds the real values by design, is not one.
pub fn sandbox_pids(root: i32) -> Vec<i32> {
    let ours = pid_ns(std::process::id() as i32);
    let all = descendants(root);
    let Some(init) = all.iter().copied().find(|p| {
        let ns = pid_ns(*p);
        ns.is_some() && ns != ours
    }) else {
        return vec![];
    };
    let ns = pid_ns(init);
    let mut pids: Vec<i32> = all.into_iter().filter(|p| pid_ns(*p) == ns).collect();
    if let Some(stage2) = parent(init) {
        pids.push(stage2);
    }
    pids
}

/// Where `needle` occurs in one process: its environment, its command line, and every
/// readable region of its memory (as bytes, and as UTF-16, the other form of a JavaScript
/// string). Regions it cannot read are counted in `unreadable`.
#[derive(Debug, Default)]
pub struct Scan {
    pub hits: Vec<String>,
    pub bytes_read: u64,
    pub unreadable: usize,
}

/// Does `hay` hold `needle`? (glibc's memmem: gigabytes of memory are scanned, and the
/// tests are built without optimisations.)
fn find(hay: &[u8], needle: &[u8]) -> bool {
    // SAFETY: both pointers and lengths come from live slices; memmem only reads them.
    !needle.is_empty()
        && !unsafe {
            libc::memmem(
                hay.as_ptr().cast(),
                hay.len(),
                needle.as_ptr().cast(),
                needle.len(),
            )
        }
        .is_null()
}

pub fn scan_process(pid: i32, needle: &str) -> Scan {
    use std::os::unix::fs::FileExt;
    let mut s = Scan::default();
    let forms: Vec<Vec<u8>> = vec![
        needle.as_bytes().to_vec(),
        needle
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect(),
    ];
    for f in ["environ", "cmdline"] {
        match std::fs::read(format!("/proc/{pid}/{f}")) {
            Ok(b) if forms.iter().any(|n| find(&b, n)) => s.hits.push(format!("{pid}: {f}")),
            Ok(_) => {}
            Err(_) => s.unreadable += 1,
        }
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        s.unreadable += 1;
        return s;
    };
    let overlap = forms[1].len();
    let mut buf = vec![0u8; 4 << 20];
    for m in maps.lines() {
        let mut w = m.split_whitespace();
        let (Some(range), Some(perms)) = (w.next(), w.next()) else {
            continue;
        };
        if !perms.starts_with('r') || m.ends_with("[vvar]") || m.ends_with("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut at = a;
        while at < b {
            let n = ((b - at) as usize).min(buf.len());
            match mem.read_at(&mut buf[..n], at) {
                Ok(0) | Err(_) => {
                    s.unreadable += 1;
                    break;
                }
                Ok(got) => {
                    s.bytes_read += got as u64;
                    if forms.iter().any(|f| find(&buf[..got], f)) {
                        s.hits.push(format!("{pid}: memory {m}"));
                        break;
                    }
                    // the next read overlaps this one by a needle's length
                    at += if got > overlap && at + (got as u64) < b {
                        (got - overlap) as u64
                    } else {
                        got as u64
                    };
                }
            }
        }
    }
    s
}

/// The name and command line of a process, for messages.
pub fn describe(pid: i32) -> String {
    let c = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let c = String::from_utf8_lossy(&c).replace('\0', " ");
    format!("{pid} ({})", c.chars().take(120).collect::<String>().trim())
}

/// The value of `name` in a process's environment.
pub fn environ_value(pid: i32, name: &str) -> Option<String> {
    let e = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    e.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{name}=")).map(|v| v.to_string())
    })
}

/// Every regular file under `dir` (no links followed) whose bytes hold `needle`.
pub fn files_with(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file()
                && std::fs::read(e.path()).is_ok_and(|b| find(&b, needle.as_bytes()))
            {
                hits.push(e.path());
            }
        }
    }
    hits
}

//! Agent CLI round trip: a real agent CLI from the npm registry (Claude
//! Code, its current version) runs under the `adapter` profile against a stub of its API on
//! the host's 127.0.0.1, reached through the allow-list proxy (`--allow-host 127.0.0.1:PORT`),
//! and does one turn that writes a file in the repo. Checked: the multi-line prompt with
//! backticks arrives whole (`[gate] free_text`), the key passed with `--pass-env` arrives and is
//! in no `/proc/*/cmdline` while the CLI runs, the file is in the repo after the run (the
//! copy-back of the read-write repo), and a second run with `--home persist` resumes the first
//! run's session from the CLI's own files in the kept home (and a `--home tmp` run does not).
//!
//! The CLI, its current version, is installed once with `npm install --prefix` into
//! `target/.../tmp/agent-cli/` (agent_support), from whatever registry npm is configured for;
//! when that registry is unreachable the test is skipped with one line. The key here comes in
//! by `--pass-env` over plain HTTP: tests/agent_secrets.rs runs docs/agents.md's recipes, with
//! the key kept outside.

mod agent_support;
mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The key the test passes: a value that appears nowhere else.
const KEY: &str = "sk-ant-sbx-e2e-roundtrip-5d1f0c9a";
/// The first prompt: several lines, a tab, backticks, `$(`, `|` and `&&` (argv, one word).
const PROMPT: &str = "Create the file `agent-wrote.txt` in the repo.\n\tIt holds one line: `echo $(whoami) | tee out && true`\nmarker ROUNDTRIP-FIRST-7c1e";
const FIRST_MARKER: &str = "ROUNDTRIP-FIRST-7c1e";
const SECOND_MARKER: &str = "ROUNDTRIP-SECOND-91b2";
const WRITTEN: &str = "written by the agent through the stub API\n";

/// One request the stub received.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    api_key: Option<String>,
    body: Value,
    /// `/proc/PID/cmdline` lines holding the key, read while this request was served.
    key_in_cmdline: Vec<String>,
    /// Whether, at that moment, a command line held the first prompt's marker (the CLI's
    /// own, inside the sandbox: the scan sees the sandbox's processes).
    cli_in_cmdline: bool,
}

/// A stub of the Claude Messages API on the host's 127.0.0.1 (an ephemeral port): a
/// conversation without a tool result gets a streamed `tool_use` of the Write tool for
/// `file`; one with a tool result gets a short text answer. Every request is recorded, and
/// while serving it the stub looks for the key in every process's command line.
struct Stub {
    port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl Stub {
    fn start(file: PathBuf) -> Stub {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind the stub API on 127.0.0.1");
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (s, file) = (s.clone(), file.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &s, &file);
                });
            }
        });
        Stub { port, seen }
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    fn clear(&self) {
        self.seen.lock().unwrap().clear();
    }
}

/// Every string in a JSON value, depth first.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The strings of a request's `messages` (the conversation, not the system prompt).
fn conversation(r: &Request) -> Vec<String> {
    let mut out = Vec::new();
    strings(&r.body["messages"], &mut out);
    out
}

fn has_tool_result(v: &Value) -> bool {
    v["messages"].as_array().is_some_and(|m| {
        m.iter().any(|msg| {
            msg["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        })
    })
}

/// The command lines of every process this user can see that hold `needle`.
fn cmdlines_with(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return hits;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                hits.push(format!("{pid}: {c}"));
            }
        }
    }
    hits
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<Request>>, file: &Path) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut r = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut len, mut chunked, mut api_key) = (0usize, false, None);
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
            "x-api-key" => api_key = Some(v),
            _ => {}
        }
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
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push(Request {
        path: path.clone(),
        api_key,
        body: body.clone(),
        key_in_cmdline: cmdlines_with(KEY),
        cli_in_cmdline: !cmdlines_with(FIRST_MARKER).is_empty(),
    });
    let mut w = conn;
    if path.starts_with("/v1/messages/count_tokens") {
        return respond_json(&mut w, &json!({"input_tokens": 10}));
    }
    if !path.starts_with("/v1/messages") {
        let e = json!({"type": "error", "error": {"type": "not_found_error", "message": "stub"}});
        let b = e.to_string();
        return write!(
            w,
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        );
    }
    let wants_tool = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "Write"))
        && !has_tool_result(&body);
    let model = body["model"].as_str().unwrap_or("claude-stub").to_string();
    let block = if wants_tool {
        json!({"type": "tool_use", "id": "toolu_stub_1", "name": "Write",
               "input": {"file_path": file.display().to_string(), "content": WRITTEN}})
    } else {
        json!({"type": "text", "text": "Done: the file is written."})
    };
    let stop = if wants_tool { "tool_use" } else { "end_turn" };
    if body["stream"] != Value::Bool(true) {
        return respond_json(
            &mut w,
            &json!({"id": "msg_stub", "type": "message", "role": "assistant", "model": model,
                    "content": [block], "stop_reason": stop, "stop_sequence": null,
                    "usage": {"input_tokens": 10, "output_tokens": 5}}),
        );
    }
    let start = if wants_tool {
        json!({"type": "tool_use", "id": "toolu_stub_1", "name": "Write", "input": {}})
    } else {
        json!({"type": "text", "text": ""})
    };
    let delta = if wants_tool {
        json!({"type": "input_json_delta", "partial_json": block["input"].to_string()})
    } else {
        json!({"type": "text_delta", "text": block["text"]})
    };
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_stub", "type": "message",
               "role": "assistant", "model": model, "content": [], "stop_reason": null,
               "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ];
    let mut sse = String::new();
    for e in &events {
        sse.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sse}",
        sse.len()
    )
}

fn respond_json(w: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let b = v.to_string();
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
        b.len()
    )
}

/// The `node_modules/.bin` of the current Claude Code (agent_support: installed once per
/// version; a skip line when npm's registry is unreachable and no install is kept), or the
/// directory `SANDBOX_RUN_TEST_CLAUDE` names.
fn claude_bin() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SANDBOX_RUN_TEST_CLAUDE") {
        return Some(PathBuf::from(d));
    }
    agent_support::install(&agent_support::CLAUDE)
}

#[test]
fn claude_code_round_trip_under_adapter() {
    if !sandbox_works() {
        return;
    }
    let Some(bin) = claude_bin() else {
        return;
    };
    let f = Fixture::new("agent-claude");
    let repo = f.git_repo("repo");
    let file = repo.join("agent-wrote.txt");
    let stub = Stub::start(file.clone());
    let p = f.profile(&Spec::extends("adapter").no_probe());
    let allow = format!("127.0.0.1:{}", stub.port);
    let base = format!("http://127.0.0.1:{}", stub.port);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // NO_PROXY inside covers 127.0.0.1 (the sandbox's own loopback): Claude Code's own
    // settings clear it, so its requests to the host's 127.0.0.1 go through the proxy.
    let settings = r#"{"env":{"NO_PROXY":"","no_proxy":""}}"#;
    let run = |home: &str, profile: &Path, extra: &[&str], prompt: &str| {
        let mut argv = vec![
            "claude",
            "-p",
            "--dangerously-skip-permissions",
            "--settings",
            settings,
        ];
        argv.extend_from_slice(extra);
        argv.push(prompt);
        let mut c = sandbox_command(
            profile,
            &repo,
            &[
                "--allow-host",
                &allow,
                "--pass-env",
                "ANTHROPIC_API_KEY",
                "--env",
                &format!("ANTHROPIC_BASE_URL={base}"),
                "--env",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
                "--home",
                home,
                "--timeout",
                "150s",
            ],
            &argv,
        );
        c.env("PATH", &path)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("XDG_STATE_HOME", f.path("state"));
        run_command(c, Duration::from_secs(180))
    };

    // the key scan itself finds a key that is on a command line
    let mut decoy = Command::new("sh")
        .args(["-c", "sleep 20", KEY])
        .spawn()
        .unwrap();
    // (poll: between fork and exec the child still has the test's own command line)
    let mut found = Vec::new();
    for _ in 0..500 {
        found = cmdlines_with(KEY);
        if !found.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert!(!found.is_empty(), "the /proc/*/cmdline scan misses a key");

    // the first run: one turn that writes a file
    let r = run("persist", &p, &[], PROMPT);
    r.assert_code(0);
    let reqs = stub.requests();
    let turns: Vec<&Request> = reqs
        .iter()
        .filter(|q| conversation(q).iter().any(|s| s.contains(FIRST_MARKER)))
        .collect();
    assert!(
        !turns.is_empty(),
        "the stub never saw the prompt: {reqs:#?}\n{r}"
    );
    // the prompt, newlines, tab, backticks and all, as one piece of the conversation
    assert!(
        conversation(turns[0]).iter().any(|s| s.contains(PROMPT)),
        "the prompt did not arrive whole: {:?}",
        conversation(turns[0])
    );
    // the key arrived, by --pass-env, and was on no command line while the CLI ran
    for q in &reqs {
        assert_eq!(q.api_key.as_deref(), Some(KEY), "{}: {q:?}", q.path);
        assert!(
            q.key_in_cmdline.is_empty(),
            "the key is on a command line: {:?}",
            q.key_in_cmdline
        );
    }
    assert!(
        turns.iter().all(|q| q.cli_in_cmdline),
        "the scan did not see the CLI's own command line while it ran"
    );
    assert!(
        turns.iter().any(|q| has_tool_result(&q.body)),
        "the Write tool's result never came back to the API: {r}"
    );
    // the file, in the repo on the host once the run is over (the read-write repo is a
    // copy-on-write layer copied back at the end)
    assert_eq!(
        std::fs::read_to_string(&file).unwrap_or_default(),
        WRITTEN,
        "{r}"
    );
    let kept = {
        let mut c = Command::new(BIN);
        c.arg("home")
            .arg(&p)
            .env("XDG_STATE_HOME", f.path("state"))
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
        let h = run_command(c, LIMIT);
        h.assert_code(0);
        PathBuf::from(h.stdout.trim())
    };
    assert!(
        kept.join(".claude/projects").is_dir(),
        "no session files in the kept home {}",
        kept.display()
    );

    // the second run resumes the first run's session from the kept home: the first prompt
    // is in its conversation
    stub.clear();
    let r = run("persist", &p, &["--continue"], SECOND_MARKER);
    r.assert_code(0);
    let reqs = stub.requests();
    let second: Vec<&Request> = reqs
        .iter()
        .filter(|q| conversation(q).iter().any(|s| s.contains(SECOND_MARKER)))
        .collect();
    assert!(
        !second.is_empty(),
        "the stub never saw the second prompt: {r}"
    );
    assert!(
        second
            .iter()
            .any(|q| conversation(q).iter().any(|s| s.contains(FIRST_MARKER))),
        "the second run did not see the first run's session: {:?}",
        conversation(second[0])
    );

    // control: with a tmp home there is nothing to continue
    stub.clear();
    let r = run("tmp", &p, &["--continue"], SECOND_MARKER);
    let reqs = stub.requests();
    assert!(
        reqs.iter()
            .all(|q| !conversation(q).iter().any(|s| s.contains(FIRST_MARKER))),
        "a tmp home resumed the kept session: {r}"
    );

    // control: the same prompt under a profile without free-text programs is refused by the
    // gate (exit 126), and nothing reaches the API
    stub.clear();
    let strict = f.write(
        "strict.toml",
        &format!(
            "extends = {:?}\n[gate]\nfree_text = []\n",
            p.display().to_string()
        ),
    );
    let r = run("tmp", &strict, &[], PROMPT);
    r.assert_code(126);
    assert!(stub.requests().is_empty(), "{r}");
}

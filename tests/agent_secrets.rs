//! The agent CLIs of today, from the npm registry, run as docs/agents.md says, with their key
//! kept outside the sandbox (`--secret`), against a TLS stub of their vendor's API on the
//! host's 127.0.0.1 whose certificate a test CA signed (`--ca-certs`).
//!
//! Each test runs a recipe of docs/agents.md for one CLI (the block of its section for an
//! endpoint on the host's loopback, port 8787; for Codex also the block for api.openai.com,
//! moved to the stub) as a user would paste it into `sh`, with the stub's port, the test CA
//! and a multi-line prompt put in. Checked:
//! - the stub receives the real key, and the prompt whole; the CLI prints the reply, which the
//!   stub streams in two parts (server-sent events; WebSocket frames for Codex's built-in
//!   provider);
//! - the reply streams: the stub holds its second part until the first one is in the memory
//!   of the CLI inside (nothing on the way buffers it);
//! - meanwhile, at the end of the call, the real key is in no environment, command line or
//!   readable memory (`/proc/PID/mem`) of any process of the sandbox (every process of its pid
//!   namespace, and the launcher's stage 2 above it), nor in a file of its home, /tmp,
//!   /dev/shm or /var/tmp seen through `/proc/PID/root`; while the placeholder the CLI holds
//!   instead is found by the same memory scan (the scan works);
//! - after the run, the key is in no file of the kept home or the repo, nor in anything
//!   sandbox-run or the CLI printed; the report names the secret, its host and the
//!   placeholders replaced, never the value.
//!
//! The CLIs connect straight to `127.0.0.1` (NO_PROXY inside covers it): these runs also
//! check that a listed host loopback port appears on the sandbox's own loopback; Claude Code
//! runs once more through the proxy (CONNECT). The controls pass the key in (`--pass-env`),
//! and the scan must find it: Claude Code, and Codex reaching a listed loopback port.
//!
//! Where sandbox-run lacks `--secret` or the loopback ports, the same recipe runs the CLI
//! outside the sandbox (its `--env` settings applied, the test CA trusted as the sandbox would
//! trust its bundle), which still checks the recipe's settings against the CLI's current
//! version, and the sandbox part is skipped with one line. The CLIs are installed once per
//! version (agent_support).

mod agent_support;
mod common;

use agent_support::*;
use common::*;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The prompt: several lines, a tab, backticks, `$(`, `|` and `&&`.
const PROMPT: &str = "Answer in one line.\n\tThe text may hold `backticks`, $(not run) | and && too.\nmarker PROMPT-MULTI-5e3d";

/// What the recipe's `sandbox-run` is: the binary, with a report for the test.
const INSIDE: &str = r#"#!/bin/sh
if [ "$1" = home ]; then exec "$SBX_BIN" "$@"; fi
exec "$SBX_BIN" --report "$SBX_REPORT" "$@"
"#;

/// What the recipe's `sandbox-run` is, when sandbox-run has no `--secret` yet: the CLI run
/// outside, with the recipe's `--env` settings, in the kept home of the profile.
const OUTSIDE: &str = r#"#!/bin/sh
set -e
if [ "$1" = home ]; then exec "$SBX_BIN" "$@"; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --env) export "$2"; shift 2 ;;
    --profile|--home|--secret|--allow-host|--ca-certs|--pass-env|--timeout|--repo|--net) shift 2 ;;
    *) echo "outside: unknown option $1" >&2; exit 125 ;;
  esac
done
HOME="$("$SBX_BIN" home adapter)"
mkdir -p "$HOME"
# as the sandbox's uid 1000 would: Claude Code refuses to skip its prompts as root otherwise
export HOME IS_SANDBOX=1
exec "$@"
"#;

/// What this sandbox-run lacks for a recipe, from `run --help`: `--secret`, or (for a CLI
/// that connects straight to `127.0.0.1`) listed loopback ports on the sandbox's loopback.
fn missing(secret: bool, direct: bool) -> Option<&'static str> {
    let o = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if secret && !help.contains("--secret") {
        Some("sandbox-run has no --secret")
    } else if direct && !help.contains("sandbox's own loopback") {
        Some("sandbox-run does not put listed loopback ports on the sandbox's own loopback")
    } else {
        None
    }
}

/// A key of the shape of the vendor's, unique to this run: a value found nowhere else.
fn real_key(prefix: &str, len: usize) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut k = format!("{prefix}REALKEY{:x}{t:x}", std::process::id());
    while k.len() < len {
        k.push_str("Xq7");
    }
    k.truncate(len);
    k
}

/// What the scan in the middle of the stream found.
#[derive(Debug, Default)]
struct Seen {
    /// The first of the CLI's processes and its value of the secret's name (the placeholder).
    cli: Option<(i32, String)>,
    /// How long until the first part of the reply was in the CLI's memory.
    first_part_after: Option<Duration>,
    /// The processes scanned.
    pids: Vec<String>,
    bytes_read: u64,
    key_hits: Vec<String>,
    placeholder_hits: Vec<String>,
    /// Whether the CLI's home was readable from outside (`/proc/PID/root`): the file scan
    /// sees the sandbox's files.
    files_seen: bool,
    /// Why the scan could not be made (not root, no processes found).
    not_scanned: Option<String>,
}

/// Scan the sandbox started under `root` while the stub holds the stream.
fn scan_sandbox(root: i32, name: &str, key: &str) -> Seen {
    let mut seen = Seen::default();
    let pids = sandbox_pids(root);
    seen.pids = pids.iter().map(|p| describe(*p)).collect();
    // the CLI's processes: a launcher (Codex's node script, Gemini CLI's relaunch) and the
    // program that talks to the API all have the variable
    let clis: Vec<(i32, String)> = pids
        .iter()
        .filter_map(|p| environ_value(*p, name).map(|v| (*p, v)))
        .collect();
    let Some(cli) = clis.first().cloned() else {
        // as root every process is readable; another user may be kept out of the sandbox's
        // (its user namespace, or Yama's ptrace scope)
        let why = format!("no process of the sandbox has {name}: {:?}", seen.pids);
        assert!(!is_root(), "{why}");
        seen.not_scanned = Some(why);
        return seen;
    };
    // the first part of the reply reaches the CLI before the rest is sent
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if clis
            .iter()
            .any(|(p, _)| !scan_process(*p, DELTA1).hits.is_empty())
        {
            seen.first_part_after = Some(t.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for p in &pids {
        let s = scan_process(*p, key);
        seen.bytes_read += s.bytes_read;
        seen.key_hits.extend(s.hits);
    }
    // the files it could write, seen from inside while it runs: its home and the tmpfs
    // directories (gone with the run)
    let home = environ_value(cli.0, "HOME").unwrap_or_else(|| "/nonexistent".into());
    seen.files_seen = std::fs::read_dir(format!("/proc/{}/root{home}", cli.0)).is_ok();
    for dir in [home.as_str(), "/tmp", "/dev/shm", "/var/tmp"] {
        let inside = PathBuf::from(format!("/proc/{}/root{dir}", cli.0));
        seen.key_hits.extend(
            files_with(&inside, key)
                .into_iter()
                .map(|f| format!("file {}", f.display())),
        );
    }
    for (p, v) in &clis {
        let hits = scan_process(*p, v).hits;
        seen.placeholder_hits
            .extend(hits.into_iter().filter(|h| h.contains("memory")));
    }
    seen.cli = Some(cli);
    seen
}

struct Case {
    cli: Cli,
    api: Api,
    /// The section of docs/agents.md.
    section: &'static str,
    /// The secret's name, and the stand-in for its value in the recipe.
    name: &'static str,
    doc_value: &'static str,
    key: String,
    /// The request header that carries the key, and the text before it there.
    header: &'static str,
    header_prefix: &'static str,
    /// What runs (the key, the stub's port for 8787 and the test CA for the recipe's CA file
    /// put in),
    /// and a name for it.
    source: Source,
    tag: &'static str,
    /// The CLI connects straight to the listed port on the sandbox's loopback (NO_PROXY),
    /// not through the proxy.
    direct: bool,
    /// The control: the command line passes the key in, and the scan must find it.
    key_inside: bool,
    /// The reply comes over a WebSocket (the request that streamed was an upgrade).
    websocket: bool,
}

enum Source {
    /// The block of docs/agents.md's section that holds this text, as a user would adapt it.
    Doc(&'static str, fn(&str) -> String),
    /// A command line of the test's own.
    Own(&'static str),
}

/// A recipe as written.
fn as_written(block: &str) -> String {
    block.to_string()
}

fn run_recipe(case: Case) {
    if !sandbox_works() {
        return;
    }
    let Some(bin) = install(&case.cli) else {
        return;
    };
    // the recipes' CLIs connect straight to 127.0.0.1 (NO_PROXY inside covers it)
    let missing = missing(!case.key_inside, case.direct);
    let sandboxed = missing.is_none();
    let f = Fixture::new(&format!("agent-secret-{}-{}", case.cli.bin, case.tag));
    let repo = f.git_repo("repo");
    let ca = TestCa::new(&f.dir);
    let stub = Stub::start(case.api, &ca);
    let key = case.key.clone();
    let block = match case.source {
        Source::Own(c) => c.to_string(),
        Source::Doc(marker, adapt) => adapt(&recipe(case.section, marker)),
    };
    let doc_assign = format!("{}={} ", case.name, case.doc_value);
    assert!(
        block.contains(&doc_assign),
        "the recipe of {} sets no {doc_assign:?}:\n{block}",
        case.section
    );
    // (the key last: its digits are not a port)
    let script = block
        .replace("8787", &stub.port.to_string())
        .replace("~/.config/gateway/ca.pem", &ca.pem.display().to_string())
        .replace("gateway-ca.pem", &ca.pem.display().to_string())
        .replace(&doc_assign, &format!("{}={key} ", case.name));

    // the recipe's `sandbox-run`: the binary, or the CLI run outside
    let wrap = f.path("bin");
    std::fs::create_dir_all(&wrap).unwrap();
    let w = f.write("bin/sandbox-run", if sandboxed { INSIDE } else { OUTSIDE });
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
    let report = f.path("report.json");
    let mut c = Command::new("sh");
    c.args(["-ec", &script])
        .current_dir(&repo)
        .env(
            "PATH",
            format!(
                "{}:{}:{}",
                wrap.display(),
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("PROMPT", PROMPT)
        .env("SBX_BIN", BIN)
        .env("SBX_REPORT", &report)
        .env("XDG_STATE_HOME", f.path("state"))
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        c.env_remove(v);
    }
    if !sandboxed {
        // outside, the test CA stands for the bundle the sandbox's variables name
        c.env("NODE_EXTRA_CA_CERTS", &ca.pem)
            .env("SSL_CERT_FILE", &ca.pem);
    }

    let root = Arc::new(AtomicI32::new(0));
    let seen: Arc<Mutex<Option<Seen>>> = Arc::new(Mutex::new(None));
    if sandboxed {
        let (root, seen, name, key) = (root.clone(), seen.clone(), case.name, key.clone());
        stub.on_stream(Box::new(move |q| {
            let mut s = seen.lock().unwrap();
            // the turn (not Codex's prewarm, a response.create with no input)
            if s.is_none() && q.strings().iter().any(|s| s.contains(PROMPT)) {
                *s = Some(scan_sandbox(root.load(Ordering::SeqCst), name, &key));
            }
        }));
    }
    let cmd = format!("sh -ec <the {} recipe>", case.section);
    let mut child = c.spawn().unwrap();
    root.store(child.id() as i32, Ordering::SeqCst);
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + slack_secs(400);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out: {cmd}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let r = Run::from_output(
        cmd,
        std::process::Output {
            status,
            stdout: t_out.join().unwrap(),
            stderr: t_err.join().unwrap(),
        },
    );
    let where_ = if sandboxed { "inside" } else { "outside" };
    r.assert_code(0);

    // the reply, both parts, printed by the CLI
    assert!(
        r.stdout.contains(&format!("{DELTA1}{DELTA2}")),
        "{} {where_}: the streamed reply is not in its output: {r}",
        case.cli.bin
    );
    // the stub: a streamed request with the prompt whole and the real key
    let reqs = stub.requests();
    let turn = reqs
        .iter()
        .find(|q| q.streamed && q.strings().iter().any(|s| s.contains(PROMPT)))
        .unwrap_or_else(|| {
            panic!("no streaming request with the prompt whole reached the stub: {reqs:#?}\n{r}")
        });
    assert_eq!(
        turn.header("upgrade").is_some(),
        case.websocket,
        "{} {}: {:?}",
        turn.method,
        turn.path,
        turn.headers
    );
    for q in &reqs {
        assert_eq!(
            q.header(case.header),
            Some(format!("{}{key}", case.header_prefix).as_str()),
            "{} {}: {:?}",
            q.method,
            q.path,
            q.headers
        );
    }
    assert!(
        !r.all().contains(&key),
        "the key is in what was printed: {r}"
    );
    if !sandboxed {
        skip(
            "secret",
            &format!(
                "{}: the {} recipe ({}) ran outside the sandbox only",
                missing.unwrap(),
                case.section,
                case.tag
            ),
        );
        return;
    }

    // inside: the stream, and the scan made while the stub held it
    let seen = seen
        .lock()
        .unwrap()
        .take()
        .expect("the stub never streamed");
    if let Some(why) = &seen.not_scanned {
        skip("secret", &format!("no scan of the sandbox's memory: {why}"));
    } else {
        let (cli_pid, placeholder) = seen.cli.clone().unwrap();
        assert!(
            seen.first_part_after.is_some(),
            "the reply's first part never reached {} (pid {cli_pid} and the others with {}) \
             while the stub held the rest: something on the way buffers the stream",
            case.cli.bin,
            case.name
        );
        if case.key_inside {
            // the key was passed in: the scan finds it, in the CLI's environment and memory
            assert_eq!(placeholder, key);
            assert!(
                seen.key_hits.iter().any(|h| h.contains("environ"))
                    && seen.key_hits.iter().any(|h| h.contains("memory")),
                "the scan missed a key that is inside: {:?}",
                seen.key_hits
            );
        } else {
            assert_ne!(placeholder, key);
            assert_eq!(placeholder.len(), key.len(), "{placeholder:?}");
            assert!(
                seen.key_hits.is_empty(),
                "the real key is inside the sandbox: {:#?}\nprocesses: {:#?}",
                seen.key_hits,
                seen.pids
            );
            assert!(
                !seen.placeholder_hits.is_empty(),
                "the scan did not find the placeholder in the memory of {}: it proves \
                 nothing ({} bytes read)",
                describe(cli_pid),
                seen.bytes_read
            );
        }
        assert!(seen.pids.len() >= 3, "{:?}", seen.pids);
        assert!(
            seen.files_seen,
            "the sandbox's files were not readable from outside"
        );
        eprintln!(
            "{}: scanned {:?}, {} MiB; first part streamed after {:?}",
            case.cli.bin,
            seen.pids,
            seen.bytes_read >> 20,
            seen.first_part_after.unwrap()
        );
    }
    // the report: the secret by name, its host, the placeholders replaced; never the value
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains(&key), "the report shows the key");
    let rep: serde_json::Value = serde_json::from_str(&text).unwrap();
    let secrets = rep["sandbox"]["secrets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if case.key_inside {
        assert!(secrets.is_empty(), "{secrets:?}");
        return;
    }
    let e = secrets
        .iter()
        .find(|e| e["name"] == case.name)
        .unwrap_or_else(|| panic!("no secrets entry for {}: {secrets:?}", case.name));
    assert!(
        e["injections"].as_u64().unwrap_or(0) >= 1,
        "no injection counted: {e}"
    );
    assert_eq!(
        e["hosts"],
        serde_json::json!([format!("127.0.0.1:{}", stub.port)]),
        "{e}"
    );
    // nothing the sandbox could write holds the key: the kept home, the repo
    let mut h = Command::new(BIN);
    h.args(["home", "adapter"])
        .env("XDG_STATE_HOME", f.path("state"))
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
    let h = run_command(h, LIMIT);
    h.assert_code(0);
    let home = PathBuf::from(h.stdout.trim());
    assert!(home.is_dir(), "{}", home.display());
    for d in [home.as_path(), repo.as_path(), Path::new(&f.path("state"))] {
        let hits = files_with(d, &key);
        assert!(hits.is_empty(), "the key is in {hits:?}");
    }
}

#[test]
fn claude_code_recipe_with_its_key_outside() {
    run_recipe(Case {
        cli: CLAUDE,
        api: Api::Anthropic,
        section: "Claude Code",
        name: "ANTHROPIC_API_KEY",
        doc_value: "sk-ant-...",
        key: real_key("sk-ant-api03-", 108),
        header: "x-api-key",
        header_prefix: "",
        source: Source::Doc("127.0.0.1:8787", as_written),
        tag: "recipe",
        direct: true,
        key_inside: false,
        websocket: false,
    });
}

/// The control of the scan: the same CLI given its key the old way (`--pass-env`, through
/// the proxy's tunnel, no TLS termination): the scan finds the key in its environment and
/// memory, and the stream is seen arriving.
#[test]
fn claude_code_key_passed_in_is_found_by_the_scan() {
    run_recipe(Case {
        cli: CLAUDE,
        api: Api::Anthropic,
        section: "Claude Code",
        name: "ANTHROPIC_API_KEY",
        doc_value: "sk-ant-...",
        key: real_key("sk-ant-api03-", 108),
        header: "x-api-key",
        header_prefix: "",
        source: Source::Own(CONTROL),
        tag: "control",
        direct: false,
        key_inside: true,
        websocket: false,
    });
}

/// Codex reaches a listed port of the host's loopback although it connects straight to
/// `127.0.0.1` (NO_PROXY): the port appears on the sandbox's own loopback. Its key is passed
/// in here (nothing to terminate: TLS goes end to end to the stub), so this is also the
/// control of the scan for a native CLI started by a Node launcher.
#[test]
fn codex_reaches_a_listed_loopback_port() {
    run_recipe(Case {
        cli: CODEX,
        api: Api::OpenAi,
        section: "Codex",
        name: "OPENAI_API_KEY",
        doc_value: "sk-proj-...",
        key: real_key("sk-proj-", 164),
        header: "authorization",
        header_prefix: "Bearer ",
        source: Source::Own(CODEX_LOOPBACK),
        tag: "loopback",
        direct: true,
        key_inside: true,
        websocket: false,
    });
}

const CODEX_LOOPBACK: &str = r#"OPENAI_API_KEY=sk-proj-... sandbox-run --profile adapter \
  --pass-env OPENAI_API_KEY --allow-host 127.0.0.1:8787 --ca-certs gateway-ca.pem -- \
  codex exec --sandbox danger-full-access \
  -c features.plugins=false -c analytics.enabled=false \
  -c model_provider=gateway \
  -c 'model_providers.gateway={name="gateway",base_url="https://127.0.0.1:8787/v1",env_key="OPENAI_API_KEY"}' \
  "$PROMPT"
"#;

/// Claude Code through the proxy (CONNECT to the listed port, terminated there) rather than
/// straight to the port on the sandbox's loopback: the same checks as the recipe's.
#[test]
fn claude_code_through_the_proxy_with_its_key_outside() {
    run_recipe(Case {
        cli: CLAUDE,
        api: Api::Anthropic,
        section: "Claude Code",
        name: "ANTHROPIC_API_KEY",
        doc_value: "sk-ant-...",
        key: real_key("sk-ant-api03-", 108),
        header: "x-api-key",
        header_prefix: "",
        source: Source::Own(THROUGH_THE_PROXY),
        tag: "connect",
        direct: false,
        key_inside: false,
        websocket: false,
    });
}

/// The recipe, with NO_PROXY cleared by Claude Code's own settings.
const THROUGH_THE_PROXY: &str = r#"ANTHROPIC_API_KEY=sk-ant-... sandbox-run --profile adapter \
  --secret ANTHROPIC_API_KEY=127.0.0.1:8787 \
  --ca-certs gateway-ca.pem \
  --env ANTHROPIC_BASE_URL=https://127.0.0.1:8787 \
  --env CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -- \
  claude -p --dangerously-skip-permissions \
  --settings '{"env":{"NO_PROXY":"","no_proxy":""}}' "$PROMPT"
"#;

/// Codex's built-in OpenAI provider (what `api.openai.com` gets: docs/agents.md's first Codex
/// block), pointed at the stub by `openai_base_url`. It takes its key from `CODEX_API_KEY`
/// (`OPENAI_API_KEY` alone sends none), and opens a WebSocket to `/v1/responses` first, whose
/// upgrade request carries the key, and the reply comes in frames: the terminating proxy
/// injects into the upgrade and passes the frames through as they come.
#[test]
fn codex_websocket_with_its_key_outside() {
    run_recipe(Case {
        cli: CODEX,
        api: Api::OpenAi,
        section: "Codex",
        name: "CODEX_API_KEY",
        doc_value: "\"$OPENAI_API_KEY\"",
        key: real_key("sk-proj-", 164),
        header: "authorization",
        header_prefix: "Bearer ",
        source: Source::Doc("CODEX_API_KEY=api.openai.com", to_the_stub),
        tag: "websocket",
        direct: true,
        key_inside: false,
        websocket: true,
    });
}

/// The recipe for api.openai.com, moved to the stub: the secret listed for its address, the
/// test CA, and the built-in provider's `openai_base_url`.
fn to_the_stub(block: &str) -> String {
    block
        .replace(
            "=api.openai.com",
            "=127.0.0.1:8787 --ca-certs gateway-ca.pem",
        )
        .replace(
            "\"$PROMPT\"",
            "-c openai_base_url=https://127.0.0.1:8787/v1 \"$PROMPT\"",
        )
}

/// The control's command line: NO_PROXY cleared by Claude Code's own settings, so that its
/// requests go through the proxy's tunnel to the host's loopback, whatever sandbox-run does
/// with a listed loopback port.
const CONTROL: &str = r#"ANTHROPIC_API_KEY=sk-ant-... sandbox-run --profile adapter \
  --pass-env ANTHROPIC_API_KEY --allow-host 127.0.0.1:8787 --ca-certs gateway-ca.pem \
  --env ANTHROPIC_BASE_URL=https://127.0.0.1:8787 \
  --env CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -- \
  claude -p --dangerously-skip-permissions \
  --settings '{"env":{"NO_PROXY":"","no_proxy":""}}' "$PROMPT"
"#;

#[test]
fn codex_recipe_with_its_key_outside() {
    run_recipe(Case {
        cli: CODEX,
        api: Api::OpenAi,
        section: "Codex",
        name: "OPENAI_API_KEY",
        doc_value: "sk-proj-...",
        key: real_key("sk-proj-", 164),
        header: "authorization",
        header_prefix: "Bearer ",
        source: Source::Doc("127.0.0.1:8787", as_written),
        tag: "recipe",
        direct: true,
        key_inside: false,
        websocket: false,
    });
}

#[test]
fn gemini_cli_recipe_with_its_key_outside() {
    run_recipe(Case {
        cli: GEMINI,
        api: Api::Gemini,
        section: "Gemini CLI",
        name: "GEMINI_API_KEY",
        doc_value: "AIza...",
        key: real_key("AIza", 39),
        header: "x-goog-api-key",
        header_prefix: "",
        source: Source::Doc("127.0.0.1:8787", as_written),
        tag: "recipe",
        direct: true,
        key_inside: false,
        websocket: false,
    });
}

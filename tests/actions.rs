//! A simulated GitHub Actions runner: what the runner does for a step with
//! `shell: sandbox-run --profile github-actions -- bash -e {0}`. The step script goes in
//! `$RUNNER_TEMP`, beside the file-command files (`GITHUB_OUTPUT`, `GITHUB_ENV`,
//! `GITHUB_PATH`, `GITHUB_STEP_SUMMARY`); the `GITHUB_*`, `RUNNER_*` and `ACTIONS_*`
//! variables are set as the runner sets them (tokens included); the shell line runs from the
//! workspace. Then the test reads the file commands as the runner would, and applies them to
//! later steps as the runner does (its parser, its `NODE_OPTIONS` block, `GITHUB_PATH` in
//! front of PATH), sandboxed steps and unsandboxed ones (a `shell: bash` step, a node action).

mod common;
#[path = "support/schema.rs"]
mod schema;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Runner {
    /// Kept for its Drop (the fixture's directory goes with it).
    _f: Fixture,
    workspace: PathBuf,
    temp: PathBuf,
    tools: PathBuf,
    state: PathBuf,
}

impl Runner {
    fn new(name: &str) -> Runner {
        let f = Fixture::new(name);
        let workspace = f.path("work/repo/repo");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("README.md"), "the checked-out repo\n").unwrap();
        // what actions/checkout leaves: a git dir, so the workspace is the git top level
        for d in [".git/objects", ".git/refs/heads"] {
            std::fs::create_dir_all(workspace.join(d)).unwrap();
        }
        std::fs::write(workspace.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(workspace.join(".git/config"), GIT_CONFIG).unwrap();
        let temp = f.path("runner/_temp");
        std::fs::create_dir_all(temp.join("_runner_file_commands")).unwrap();
        // the event that started the workflow, which later JavaScript actions trust
        std::fs::create_dir_all(temp.join("_github_workflow")).unwrap();
        std::fs::write(temp.join("_github_workflow/event.json"), EVENT).unwrap();
        let tools = f.path("runner/_tool");
        f.write(
            "runner/_tool/node/20.0.0/x64/tool.txt",
            "from the tool cache\n",
        );
        let state = f.path("state");
        for d in [&f.dir, &f.path("runner"), &temp, &tools] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Runner {
            _f: f,
            workspace,
            temp,
            tools,
            state,
        }
    }

    fn file_command(&self, name: &str) -> PathBuf {
        self.temp.join("_runner_file_commands").join(name)
    }

    /// Run one step as the runner does: the script written to `$RUNNER_TEMP/<id>.sh`, then
    /// `sandbox-run --profile github-actions -- bash -e <script>` from the workspace.
    fn step(&self, n: u32, script: &str) -> Run {
        self.step_with(n, "bash", None, script)
    }

    /// [`Runner::step`] with the shell line's program `shell`, and `prepend` in front of PATH
    /// (what the runner does with the lines earlier steps wrote to `GITHUB_PATH`).
    fn step_with(&self, n: u32, shell: &str, prepend: Option<&Path>, script: &str) -> Run {
        self.step_full(n, &[], shell, prepend, script)
    }

    /// [`Runner::step_with`] with more sandbox-run options (`--allow-host HOST`).
    fn step_full(
        &self,
        n: u32,
        opts: &[&str],
        shell: &str,
        prepend: Option<&Path>,
        script: &str,
    ) -> Run {
        let job = Job {
            prepend: prepend.iter().map(|p| p.display().to_string()).collect(),
            ..Job::default()
        };
        self.step_in(n, opts, shell, &job, script)
    }

    /// The event file (`GITHUB_EVENT_PATH`).
    fn event(&self) -> PathBuf {
        self.temp.join("_github_workflow/event.json")
    }

    /// A step as the runner runs it in `job`: the job's variables (the workflow's `env:`, what
    /// earlier steps set through `GITHUB_ENV`) set, its `GITHUB_PATH` entries in front of PATH.
    fn step_in(&self, n: u32, opts: &[&str], shell: &str, job: &Job, script: &str) -> Run {
        self.step_as(n, "github-actions", opts, shell, job, script)
    }

    /// [`Runner::step_in`] with the shell line's `--profile` given.
    fn step_as(
        &self,
        n: u32,
        profile: &str,
        opts: &[&str],
        shell: &str,
        job: &Job,
        script: &str,
    ) -> Run {
        let id = format!("step-{n}-4b5e9c1a");
        let path = self.temp.join(format!("{id}.sh"));
        std::fs::write(&path, script).unwrap();
        let files = [
            ("GITHUB_OUTPUT", format!("set_output_{id}")),
            ("GITHUB_ENV", format!("set_env_{id}")),
            ("GITHUB_PATH", format!("add_path_{id}")),
            ("GITHUB_STATE", format!("save_state_{id}")),
            ("GITHUB_STEP_SUMMARY", format!("step_summary_{id}")),
        ];
        let mut c = Command::new(BIN);
        c.args(["--profile", profile])
            .args(opts)
            .args(["--", shell, "-e"])
            .arg(&path)
            .current_dir(&self.workspace)
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e")
            .env("XDG_STATE_HOME", &self.state)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &self.workspace)
            .env("GITHUB_REPOSITORY", "octo/repo")
            .env("GITHUB_RUN_ID", "1234")
            .env("GITHUB_RUN_ATTEMPT", "1")
            .env("GITHUB_JOB", "test")
            .env("GITHUB_TOKEN", "ghs_sbx-e2e-secret-value-7f3a")
            .env("ACTIONS_RUNTIME_TOKEN", "sbx-e2e-secret-value-7f3a")
            .env(
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                "sbx-e2e-secret-value-7f3a",
            )
            .env("ACTIONS_CACHE_URL", "https://cache.invalid/")
            .env("ACTIONS_RUNTIME_URL", "https://runtime.invalid/")
            .env("ACTIONS_RESULTS_URL", "https://results.invalid/")
            .env("GITHUB_EVENT_PATH", self.event())
            .env("RUNNER_OS", "Linux")
            .env("RUNNER_TEMP", &self.temp)
            .env("RUNNER_TOOL_CACHE", &self.tools)
            .stdin(std::process::Stdio::null());
        for (k, v) in &job.env {
            c.env(k, v);
        }
        c.env("PATH", job.path());
        for (k, file) in &files {
            let p = self.file_command(file);
            std::fs::write(&p, "").unwrap();
            c.env(k, &p);
        }
        run_command(c, LIMIT)
    }

    /// After step `n`: the runner reads its file commands and applies them to `job`, as
    /// actions/runner does (`FileCommandManager.cs`): `GITHUB_PATH` lines (`ReadAllLines`:
    /// ending at `\r\n`, `\n` or `\r`; empty ones skipped) go in front of PATH, latest first;
    /// `GITHUB_ENV` entries (`EnvFileKeyValuePairs`) become the job's variables, but
    /// `NODE_OPTIONS`; outputs are kept. A malformed entry fails the step after the entries
    /// before it were applied.
    fn apply(&self, n: u32, job: &mut Job) {
        let id = format!("step-{n}-4b5e9c1a");
        let read = |prefix: &str| {
            std::fs::read_to_string(self.file_command(&format!("{prefix}{id}"))).unwrap()
        };
        for line in read_all_lines(&read("add_path_")) {
            if line.is_empty() {
                continue;
            }
            job.prepend.retain(|x| *x != line);
            job.prepend.push(line);
        }
        let (pairs, error) = runner_pairs(&read("set_env_"));
        for (k, v) in pairs {
            if k.eq_ignore_ascii_case("NODE_OPTIONS") {
                continue;
            }
            job.env.retain(|(n, _)| *n != k);
            job.env.push((k, v));
        }
        job.failed.extend(error);
        for prefix in ["set_output_", "save_state_"] {
            let (pairs, error) = runner_pairs(&read(prefix));
            job.outputs.extend(pairs);
            job.failed.extend(error);
        }
    }

    /// A step the runner runs itself, unsandboxed, in `job`: `shell: bash` of a composite
    /// action (`bash` looked up in the job's PATH, as the runner does), or a node action
    /// (the runner's own node, by absolute path).
    fn host_step(&self, job: &Job, program: &str, args: &[&str]) -> Run {
        let mut c = Command::new(program);
        c.args(args)
            .current_dir(&self.workspace)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &self.workspace)
            .env("GITHUB_EVENT_PATH", self.event())
            .env("RUNNER_TEMP", &self.temp)
            .stdin(std::process::Stdio::null());
        for (k, v) in &job.env {
            c.env(k, v);
        }
        c.env("PATH", job.path());
        run_command(c, LIMIT)
    }
}

/// What the simulated runner keeps across the steps of a job.
#[derive(Debug, Default)]
struct Job {
    /// Variables: the workflow's `env:`, then what steps set through `GITHUB_ENV`.
    env: Vec<(String, String)>,
    /// `GITHUB_PATH` entries, in the order added (the last one comes first in PATH).
    prepend: Vec<String>,
    /// Outputs and state the steps set.
    outputs: Vec<(String, String)>,
    /// Why steps failed in the runner (a malformed file command).
    failed: Vec<String>,
}

impl Job {
    /// PATH for a step: the `GITHUB_PATH` entries, latest first, then the runner's own.
    fn path(&self) -> String {
        let own = std::env::var("PATH").unwrap_or_default();
        let mut parts: Vec<&str> = self.prepend.iter().rev().map(String::as_str).collect();
        parts.push(&own);
        parts.join(":")
    }
}

/// The event file as the runner wrote it.
const EVENT: &str = "{\"action\":\"opened\",\"number\":7}\n";

/// .NET's `File.ReadAllLines`: lines end at `\r\n`, `\n` or `\r`; no line after a final end.
fn read_all_lines(text: &str) -> Vec<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    let mut open = false;
    while let Some(ch) = chars.next() {
        open = true;
        match ch {
            '\r' | '\n' => {
                if ch == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut cur));
                open = false;
            }
            _ => cur.push(ch),
        }
    }
    if open {
        lines.push(cur);
    }
    lines
}

/// The runner's `EnvFileKeyValuePairs` on Linux, statement by statement: the pairs up to the
/// first error, and the error.
fn runner_pairs(text: &str) -> (Vec<(String, String)>, Option<String>) {
    fn read_line<'a>(text: &'a str, index: &mut usize) -> (Option<&'a str>, Option<&'static str>) {
        if *index >= text.len() {
            return (None, None);
        }
        let original = *index;
        match text[original..].find('\n') {
            None => {
                *index = text.len();
                (Some(&text[original..]), None)
            }
            Some(lf) => {
                *index = original + lf + 1;
                (Some(&text[original..original + lf]), Some("\n"))
            }
        }
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut index = 0;
    let (mut line, _) = read_line(text, &mut index);
    while let Some(l) = line {
        if !l.is_empty() {
            let equals = l.find('=');
            let heredoc = l.find("<<");
            if equals.is_some() && (heredoc.is_none() || equals < heredoc) {
                let (k, v) = l.split_once('=').unwrap();
                out.push((k.to_string(), v.to_string()));
            } else if heredoc.is_some() && (equals.is_none() || heredoc < equals) {
                let (key, delimiter) = l.split_once("<<").unwrap();
                if key.is_empty() || delimiter.is_empty() {
                    return (out, Some(format!("Invalid format '{l}'")));
                }
                let start = index;
                let mut end = index;
                let (mut temp, mut newline) = read_line(text, &mut index);
                while temp != Some(delimiter) {
                    if temp.is_none() {
                        return (
                            out,
                            Some(format!("Matching delimiter not found '{delimiter}'")),
                        );
                    }
                    let Some(nl) = newline else {
                        return (out, Some("EOF marker missing new line".into()));
                    };
                    end = index - nl.len();
                    (temp, newline) = read_line(text, &mut index);
                }
                let value = if end > start { &text[start..end] } else { "" };
                out.push((key.to_string(), value.to_string()));
            } else {
                return (out, Some(format!("Invalid format '{l}'")));
            }
        }
        line = read_line(text, &mut index).0;
    }
    (out, None)
}

/// Is `GITHUB_PATH` passed by this build (the secret-looking test matches whole words)?
fn github_path_passes() -> bool {
    sandbox_run::layers::env::refusal("GITHUB_PATH").is_none()
}

#[test]
fn a_step_runs_as_the_runner_runs_it_and_its_file_commands_are_read_back() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-step");
    let step1 = r####"
echo "greeting=hello from the step" >> "$GITHUB_OUTPUT"
echo "STEP_VAR=one" >> "$GITHUB_ENV"
echo "### summary" >> "$GITHUB_STEP_SUMMARY"
if [ -n "${GITHUB_PATH:-}" ]; then echo "/opt/step-tool/bin" >> "$GITHUB_PATH"; fi
echo "workspace=$GITHUB_WORKSPACE repo=$GITHUB_REPOSITORY run=$GITHUB_RUN_ID os=$RUNNER_OS actions=$GITHUB_ACTIONS"
echo "token=${GITHUB_TOKEN:-none} runtime=${ACTIONS_RUNTIME_TOKEN:-none} idtoken=${ACTIONS_ID_TOKEN_REQUEST_TOKEN:-none} cache=${ACTIONS_CACHE_URL:-none}"
cat "$RUNNER_TOOL_CACHE/node/20.0.0/x64/tool.txt"
if touch "$RUNNER_TOOL_CACHE/planted" 2>/dev/null; then echo "TOOL CACHE WRITABLE"; fi
echo made > "$RUNNER_TEMP/made-by-step"
echo built > build-output.txt
# the package managers' caches, at their default places in the kept home
mkdir -p ~/.npm/_cacache ~/.cache/pip ~/.cargo/registry
echo npm > ~/.npm/_cacache/marker; echo pip > ~/.cache/pip/marker; echo cargo > ~/.cargo/registry/marker
"####;
    // the workflow hands STEP_VAR and the tool's directory to its unsandboxed steps
    let job = Job {
        env: vec![
            ("SANDBOX_RUN_EXPORT_ENV".into(), "STEP_VAR".into()),
            (
                "SANDBOX_RUN_EXPORT_PATH".into(),
                "/opt/step-tool/bin".into(),
            ),
        ],
        ..Job::default()
    };
    let out = r.step_in(1, &[], "bash", &job, step1);
    out.assert_code(0);
    assert!(
        out.stdout.contains(&format!(
            "workspace={} repo=octo/repo run=1234 os=Linux actions=true",
            r.workspace.display()
        )),
        "{out}"
    );
    assert!(
        out.stdout
            .contains("token=none runtime=none idtoken=none cache=none"),
        "{out}"
    );
    assert!(!out.all().contains("sbx-e2e-secret-value"), "{out}");
    assert!(out.stdout.contains("from the tool cache"), "{out}");
    assert!(!out.stdout.contains("TOOL CACHE WRITABLE"), "{out}");
    assert!(!r.tools.join("planted").exists());
    // what the runner reads back after the step
    let read = |name: &str| std::fs::read_to_string(r.file_command(name)).unwrap();
    assert_eq!(
        read("set_output_step-1-4b5e9c1a"),
        "greeting=hello from the step\n"
    );
    assert_eq!(read("set_env_step-1-4b5e9c1a"), "STEP_VAR=one\n");
    assert_eq!(read("step_summary_step-1-4b5e9c1a"), "### summary\n");
    if github_path_passes() {
        assert_eq!(read("add_path_step-1-4b5e9c1a"), "/opt/step-tool/bin\n");
    } else {
        skip_tool("GITHUB_PATH still refused as secret-looking by this build");
    }
    assert_eq!(
        std::fs::read_to_string(r.temp.join("made-by-step")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.workspace.join("build-output.txt")).unwrap(),
        "built\n"
    );

    // the next step sees the caches the last one left, in a directory sandbox-run keeps
    // (never the runner user's own ~/.npm or ~/.cache)
    let out = r.step(
        2,
        "cat ~/.npm/_cacache/marker ~/.cache/pip/marker ~/.cargo/registry/marker",
    );
    out.assert_code(0);
    assert_eq!(out.stdout, "npm\npip\ncargo\n", "{out}");
    let kept = r.state.join("sandbox-run/home/github-actions");
    assert!(kept.join(".npm/_cacache/marker").exists());
    if let Some(home) = std::env::var_os("HOME") {
        let real = Path::new(&home).join(".npm/_cacache/marker");
        assert!(!real.exists() || kept.join(".npm") == Path::new(&home).join(".npm"));
    }
}

/// A step that fails makes the job fail: the exit code comes back as is.
#[test]
fn a_failing_step_fails() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-fail");
    let out = r.step(1, "echo before\nfalse\necho after\n");
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stdout.contains("before") && !out.stdout.contains("after"),
        "{out}"
    );
}

/// The registry's host, as npm's own configuration names it, when it is reachable from here.
fn npm_registry_host() -> Option<String> {
    let out = Command::new(which("npm")?)
        .args(["config", "get", "registry"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let registry = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let host = registry
        .strip_prefix("https://")?
        .split(['/', ':'])
        .next()
        .filter(|h| !h.is_empty())?
        .to_string();
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 443))
        .ok()?
        .next()?;
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)).ok()?;
    Some(host)
}

/// The issue's step: `npm ci` through `--allow-host` for the configured registry, then
/// `npm test`, in a workspace whose lockfile was made outside. The installed package reaches
/// the workspace (the copy-back) and the test uses it. Control: with another host on the
/// allow-list instead, the install is refused by the proxy, with its stderr line.
#[test]
fn a_step_installs_with_npm_ci_through_the_allow_list_then_tests() {
    if !sandbox_works() {
        return;
    }
    let Some(host) = npm_registry_host() else {
        skip_tool("npm or its registry is not reachable from this host");
        return;
    };
    let r = Runner::new("actions-npm");
    let ws = &r.workspace;
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"app","version":"1.0.0","private":true,"scripts":{"test":"node test.js"},"dependencies":{"ms":"2.1.3"}}"#,
    )
    .unwrap();
    std::fs::write(
        ws.join("test.js"),
        "const ms = require('ms');\nif (ms('2 days') !== 172800000) process.exit(1);\nconsole.log('ms ok');\n",
    )
    .unwrap();
    // the lockfile, as the repo would carry it (made outside, with the network)
    let mut lock = Command::new("npm");
    lock.args([
        "install",
        "--package-lock-only",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
    ])
    .current_dir(ws);
    run_command(lock, LIMIT).assert_code(0);
    let script = "npm ci --ignore-scripts --no-audit --no-fund --fetch-retries=0\nnpm test\n";

    let other = ["--allow-host", "registry.example.invalid"];
    let denied = r.step_full(1, &other, "bash", None, script);
    assert_ne!(denied.code, Some(0), "{denied}");
    assert!(
        denied
            .stderr
            .contains(&format!("sandbox-run: network: denied CONNECT {host}:443")),
        "{denied}"
    );
    assert!(!ws.join("node_modules/ms").exists());

    let out = r.step_full(2, &["--allow-host", &host], "bash", None, script);
    out.assert_code(0);
    assert!(out.stdout.contains("ms ok"), "{out}");
    assert!(ws.join("node_modules/ms/package.json").exists(), "{out}");
}

/// A Python virtualenv and a Java program work in a step (each when the host has it).
#[test]
fn a_step_with_a_virtualenv_and_java() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-langs");
    let venv = Command::new("python3")
        .args(["-m", "venv", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if venv {
        let out = r.step(
            1,
            "python3 -m venv .venv\n.venv/bin/python -c 'import sys; print(\"venv\", sys.prefix != sys.base_prefix)'\n",
        );
        out.assert_code(0);
        assert!(out.stdout.contains("venv True"), "{out}");
    } else {
        skip_tool("python3 -m venv is not available");
    }
    // Under qemu's TCG (scripts/vm-test sets the slowdown) the JVM's JIT has crashed in
    // emulated code (SIGSEGV in compiled String.startsWith); tests/frictions.rs runs java
    // there, this heavier javac step runs on real CPUs.
    let emulated = std::env::var("SANDBOX_RUN_TEST_SLOWDOWN").is_ok_and(|v| v != "1");
    if emulated {
        skip_tool("javac and java under emulation (SANDBOX_RUN_TEST_SLOWDOWN)");
    } else if which("javac").is_some() && which("java").is_some() {
        let out = r.step(
            2,
            "mkdir -p j && printf 'public class Hi { public static void main(String[] a) { System.out.println(\"java ok\"); } }' > j/Hi.java\njavac -d j j/Hi.java\njava -cp j Hi\n",
        );
        out.assert_code(0);
        assert!(out.stdout.contains("java ok"), "{out}");
    } else {
        skip_tool("no JDK (javac and java)");
    }
}

/// A step can put a directory in front of the next steps' PATH (`GITHUB_PATH`), so a bare
/// `bash` on the next shell line may be a program the step planted (in `$RUNNER_TEMP`,
/// which it may write). With the recommended line (`-- /usr/bin/bash -e {0}`, allowed by the
/// profile's `gate.paths`) the next step's shell is the system's. Control: with a bare
/// `bash` the planted one runs (inside the sandbox: still confined).
#[test]
fn a_shell_planted_on_the_path_is_not_the_next_steps_shell_by_absolute_path() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-planted");
    let plant = "mkdir -p \"$RUNNER_TEMP/evil\"\nprintf '#!/usr/bin/bash\\necho PLANTED-SHELL-RAN\\n' > \"$RUNNER_TEMP/evil/bash\"\nchmod +x \"$RUNNER_TEMP/evil/bash\"\n";
    r.step(1, plant).assert_code(0);
    let evil = r.temp.join("evil");
    assert!(evil.join("bash").exists());
    let out = r.step_with(2, "/usr/bin/bash", Some(&evil), "echo real shell\n");
    out.assert_code(0);
    assert!(out.stdout.contains("real shell"), "{out}");
    assert!(!out.stdout.contains("PLANTED"), "{out}");
    let out = r.step_with(3, "bash", Some(&evil), "echo real shell\n");
    assert!(out.stdout.contains("PLANTED-SHELL-RAN"), "control: {out}");
}

/// The attack on the way back: a hostile step writes, through the file commands, what would
/// run on the host in later unsandboxed steps (`BASH_ENV`, `LD_PRELOAD` of a library it
/// compiled, `PATH`, the runner's own `GITHUB_EVENT_PATH`, a directory of `$RUNNER_TEMP`
/// holding a `git`, a `bash` and a `node` in `GITHUB_PATH`, a multi-line value whose
/// delimiter line ends it for the runner but not for a filter that trims, so that a second
/// `NAME=` line follows), writes the runner's own files directly, and rewrites the event file.
/// Then the runner applies the file commands as it does and runs a `shell: bash` step and a
/// node action on the host: nothing of the attack runs. Control: a harmless variable, a PATH
/// entry outside anything the step could write, an output and the multi-line value's real
/// content reach the next steps, sandboxed or not, and so does the workflow's own `env:`.
#[test]
fn file_commands_carry_nothing_that_runs_on_the_host() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-way-back");
    // a tool the runner's PATH may gain: outside everything the step could write
    let tools = r._f.path("tools/bin");
    std::fs::create_dir_all(&tools).unwrap();
    let hello = tools.join("hello-tool");
    std::fs::write(&hello, "#!/bin/sh\necho HELLO-TOOL-RAN\n").unwrap();
    std::fs::set_permissions(&hello, std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in [r._f.path("tools"), tools.clone()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut job = Job::default();
    job.env.push(("NODE_ENV".into(), "production".into()));
    job.env
        .push(("TOOLS_BIN".into(), tools.to_string_lossy().into_owned()));
    // what the workflow hands to its unsandboxed steps: two harmless names, and names that
    // never pass even when listed; the tools' directory, and one a step can write
    let evil_bin = r.temp.join("evil/bin");
    job.env.push((
        "SANDBOX_RUN_EXPORT_ENV".into(),
        "FOO,ML,BASH_ENV,LD_PRELOAD,PATH,GITHUB_EVENT_PATH".into(),
    ));
    job.env.push((
        "SANDBOX_RUN_EXPORT_PATH".into(),
        format!("{},{}", tools.display(), evil_bin.display()),
    ));
    let attack = r####"
echo "node_env=${NODE_ENV:-unset} runtime=${ACTIONS_RUNTIME_URL:-none} results=${ACTIONS_RESULTS_URL:-none}"
evil="$RUNNER_TEMP/evil"
mkdir -p "$evil/bin"
for p in git bash node; do
  printf '#!/bin/sh\necho PWNED-%s >&2\ntouch "$RUNNER_TEMP/pwned-%s"\n' "$p" "$p" > "$evil/bin/$p"
  chmod +x "$evil/bin/$p"
done
printf 'echo PWNED-BASH-ENV >&2\ntouch "$RUNNER_TEMP/pwned-bash-env"\n' > "$evil/env.sh"
cat > "$evil/p.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void pwn(void) {
  const char *t = getenv("RUNNER_TEMP");
  char p[4096];
  if (t) { snprintf(p, sizeof p, "%s/pwned-preload", t); FILE *f = fopen(p, "w"); if (f) fclose(f); }
  fputs("PWNED-PRELOAD\n", stderr);
}
C
if cc -shared -fPIC -o "$evil/p.so" "$evil/p.c"; then echo "compiled"; fi
{
  echo "FOO=bar"
  echo "BASH_ENV=$evil/env.sh"
  echo "LD_PRELOAD=$evil/p.so"
  echo "PATH=$evil/bin:/usr/bin:/bin"
  echo "GITHUB_EVENT_PATH=$evil/event.json"
  echo "NODE_OPTIONS=--require=$evil/r.js"
  printf 'ML<<EOF \nx\nEOF \nBASH_ENV=%s\nML2<<EOF\nEOF\n' "$evil/env.sh"
} >> "$GITHUB_ENV"
echo "$evil/bin" >> "$GITHUB_PATH"
echo "/usr/bin:$evil/bin" >> "$GITHUB_PATH"
echo "$TOOLS_BIN" >> "$GITHUB_PATH"
echo "result=ok" >> "$GITHUB_OUTPUT"
echo "saved=1" >> "$GITHUB_STATE"
echo "### way back" >> "$GITHUB_STEP_SUMMARY"
# the runner's own files, and the event file
for f in "$RUNNER_TEMP"/_runner_file_commands/*; do
  if echo "BASH_ENV=$evil/env.sh" >> "$f"; then echo "WROTE $f"; fi
done
if echo '{"action":"pwned"}' > "$GITHUB_EVENT_PATH"; then echo "EVENT WRITTEN"; fi
if rm -f "$GITHUB_EVENT_PATH"; then echo "EVENT REMOVED"; fi
if mv "$RUNNER_TEMP/_github_workflow" "$evil/moved"; then echo "EVENT DIR MOVED"; fi
if mkdir -p "$evil/w" && echo '{"action":"pwned"}' > "$evil/w/event.json" && rm -rf "$RUNNER_TEMP/_github_workflow" && mv "$evil/w" "$RUNNER_TEMP/_github_workflow"; then echo "EVENT DIR REPLACED"; fi
true
"####;
    let report = r._f.path("report-1.json");
    let opts = ["--report", report.to_str().unwrap()];
    let out = r.step_in(1, &opts, "bash", &job, attack);
    out.assert_code(0);
    if !out.stdout.contains("compiled") {
        skip_tool("cc could not build the LD_PRELOAD library inside: LD_PRELOAD names a bare path");
    }
    // the runner applies the file commands, as it does, and runs later steps on the host:
    // nothing of the attack runs there
    r.apply(1, &mut job);

    // a composite action's `shell: bash` step, unsandboxed
    let script = r._f.write(
        "host-step.sh",
        "echo \"foo=$FOO ml=$ML node_env=$NODE_ENV\"\nhello-tool\ngit --version >/dev/null\necho host-bash-done\n",
    );
    let bash = r.host_step(
        &job,
        "bash",
        &[
            "--noprofile",
            "--norc",
            "-eo",
            "pipefail",
            script.to_str().unwrap(),
        ],
    );
    assert!(!bash.all().contains("PWNED"), "{bash}");
    assert!(!bash.all().contains("ld.so"), "{bash}");
    // a node action (the runner's own node, by path) reading the event, running git by PATH
    if let Some(node) = which("node") {
        let js = "const fs = require('fs');\
                  const ev = JSON.parse(fs.readFileSync(process.env.GITHUB_EVENT_PATH));\
                  console.log('event ' + ev.action + ' foo ' + process.env.FOO);\
                  require('child_process').execFileSync('git', ['--version'], { stdio: 'ignore' });\
                  console.log('node-done');";
        let node = r.host_step(&job, node.to_str().unwrap(), &["-e", js]);
        assert!(!node.all().contains("PWNED"), "{node}");
        assert!(!node.all().contains("ld.so"), "{node}");
        node.assert_code(0);
        assert!(
            node.stdout.contains("event opened foo bar\nnode-done"),
            "{node}"
        );
    } else {
        skip_tool("node is not installed: the node action's half of the attack");
    }
    for mark in ["git", "bash", "node", "bash-env", "preload"] {
        assert!(
            !r.temp.join(format!("pwned-{mark}")).exists(),
            "pwned-{mark} exists: the attack ran on the host"
        );
    }
    assert_eq!(
        std::fs::read_to_string(r.event()).unwrap(),
        EVENT,
        "the event file was rewritten"
    );
    // control: what is harmless reached the host steps
    bash.assert_code(0);
    assert!(
        bash.stdout
            .contains("foo=bar ml=x node_env=production\nHELLO-TOOL-RAN\nhost-bash-done"),
        "{bash}"
    );
    assert!(job.failed.is_empty(), "{:?}", job.failed);
    let var = |job: &Job, k: &str| job.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(var(&job, "FOO").as_deref(), Some("bar"));
    assert_eq!(var(&job, "ML").as_deref(), Some("x"));
    for k in ["BASH_ENV", "LD_PRELOAD", "PATH", "GITHUB_EVENT_PATH"] {
        assert_eq!(var(&job, k), None, "{k}: {job:?}");
    }
    assert_eq!(job.prepend, [tools.to_string_lossy().into_owned()]);
    assert!(
        job.outputs.contains(&("result".into(), "ok".into())),
        "{job:?}"
    );
    assert_eq!(
        std::fs::read_to_string(r.file_command("step_summary_step-1-4b5e9c1a")).unwrap(),
        "### way back\n"
    );

    // what the step saw and was refused
    // the workflow's env: passes, the runner's service addresses do not
    assert!(
        out.stdout
            .contains("node_env=production runtime=none results=none"),
        "{out}"
    );
    for bad in [
        "WROTE",
        "EVENT WRITTEN",
        "EVENT REMOVED",
        "EVENT DIR MOVED",
        "EVENT DIR REPLACED",
    ] {
        assert!(!out.stdout.contains(bad), "{bad}: {out}");
    }
    assert_eq!(std::fs::read_to_string(r.event()).unwrap(), EVENT);
    // each refusal named on stderr
    for line in [
        "GITHUB_ENV: \"BASH_ENV\" kept for later sandboxed steps only, never handed to unsandboxed steps",
        "GITHUB_ENV: \"LD_PRELOAD\" kept for later sandboxed steps only, never handed to unsandboxed steps",
        "GITHUB_ENV: \"PATH\" kept for later sandboxed steps only, never handed to unsandboxed steps",
        "GITHUB_ENV: \"GITHUB_EVENT_PATH\" kept for later sandboxed steps only, never handed to unsandboxed steps",
        "GITHUB_PATH: ",
    ] {
        assert!(out.stderr.contains(line), "{line}: {out}");
    }
    // and in the report
    let rep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    schema::assert_valid_report(&rep);
    let fc = &rep["results"][0]["file_commands"];
    let refused: Vec<(String, String, String)> = fc["refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no file_commands in the report: {rep:#}"))
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("file"), s("name"), s("reason"))
        })
        .collect();
    let evil = r.temp.join("evil");
    let has = |file: &str, name: &str, reason: &str| {
        refused
            .iter()
            .any(|(f, n, why)| f == file && n == name && why == reason)
    };
    for (file, name, reason) in [
        ("GITHUB_ENV", "BASH_ENV".to_string(), "loads_code"),
        ("GITHUB_ENV", "LD_PRELOAD".into(), "loads_code"),
        ("GITHUB_ENV", "NODE_OPTIONS".into(), "loads_code"),
        ("GITHUB_ENV", "PATH".into(), "path"),
        ("GITHUB_ENV", "GITHUB_EVENT_PATH".into(), "runner_name"),
        (
            "GITHUB_PATH",
            evil.join("bin").display().to_string(),
            "writable_dir",
        ),
        (
            "GITHUB_PATH",
            format!("/usr/bin:{}", evil.join("bin").display()),
            "not_listed",
        ),
    ] {
        assert!(has(file, &name, reason), "{file} {name} {reason}: {fc:#}");
    }
    // the smuggled line is refused as an entry of its own (the runner reads it as one)
    let bash_env = refused
        .iter()
        .filter(|(f, n, _)| f == "GITHUB_ENV" && n == "BASH_ENV")
        .count();
    assert_eq!(bash_env, 2, "{fc:#}");
    let dropped = &rep["sandbox"]["env_dropped"];
    let why = |n: &str| {
        dropped
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == n)
            .map(|d| d["why"].as_str().unwrap().to_string())
    };
    assert_eq!(
        why("ACTIONS_RUNTIME_URL").as_deref(),
        Some("held_back"),
        "{dropped}"
    );
    assert_eq!(
        why("ACTIONS_RUNTIME_TOKEN").as_deref(),
        Some("secret"),
        "{dropped}"
    );
    assert_eq!(why("NODE_ENV"), None, "{dropped}");

    // the next sandboxed step sees what passed: GITHUB_ENV's variable, the workflow's env:
    let out = r.step_in(
        2,
        &[],
        "/usr/bin/bash",
        &job,
        "echo \"foo=${FOO:-unset} ml=${ML:-unset} node_env=${NODE_ENV:-unset}\"\n",
    );
    out.assert_code(0);
    assert!(
        out.stdout.contains("foo=bar ml=x node_env=production"),
        "{out}"
    );
}

/// The private copies are the step's: it may replace them with a link to a host file the
/// runner's user can read (whose lines would then become the next steps' variables), a FIFO
/// (a read that never ends) or a directory. Each is refused, named on stderr, without being
/// followed or blocking; the runner's files stay empty. Control: the one left a plain file
/// passes.
#[test]
fn a_private_copy_replaced_by_a_link_or_a_fifo_is_refused() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-copies");
    let secret =
        r._f.write("host-secret.env", "STOLEN=sbx-e2e-secret-value-7f3a\n");
    let job = Job {
        env: vec![(
            "HOST_ENV_FILE".into(),
            secret.to_string_lossy().into_owned(),
        )],
        ..Job::default()
    };
    let script = r#"
rm -f "$GITHUB_ENV" && ln -s "$HOST_ENV_FILE" "$GITHUB_ENV"
rm -f "$GITHUB_OUTPUT" && mkfifo "$GITHUB_OUTPUT"
rm -f "$GITHUB_STATE" && mkdir "$GITHUB_STATE"
echo "/usr/bin" >> "$GITHUB_PATH"
echo linked
"#;
    let mut job = job;
    job.env
        .push(("SANDBOX_RUN_EXPORT_PATH".into(), "/usr/bin".into()));
    let out = r.step_in(1, &[], "bash", &job, script);
    out.assert_code(0);
    assert!(out.stdout.contains("linked"), "{out}");
    for file in ["GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STATE"] {
        assert!(
            out.stderr.contains(&format!(
                "{file}: not passed to the runner: the file is not a regular file any more"
            )),
            "{file}: {out}"
        );
    }
    let read = |name: &str| std::fs::read_to_string(r.file_command(name)).unwrap();
    assert_eq!(read("set_env_step-1-4b5e9c1a"), "");
    assert_eq!(read("set_output_step-1-4b5e9c1a"), "");
    assert_eq!(read("save_state_step-1-4b5e9c1a"), "");
    assert_eq!(read("add_path_step-1-4b5e9c1a"), "/usr/bin\n");
}

fn executable(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn var<'a>(job: &'a Job, k: &str) -> Option<&'a str> {
    job.env
        .iter()
        .rev()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
}

/// A step chooses the next step's sandbox: it leaves a `github-actions.toml` in
/// `$RUNNER_TEMP` (its own 0755 directory, which strict modes accept) that binds the runner
/// user's `~/.config/git` read-write, and names it in `GITHUB_ENV` as
/// `SANDBOX_RUN_PROFILE_PATH`. Step 2, with the shell line unchanged, would plant
/// `core.fsmonitor` there, and the post step's host `git status` would run it. Now the name
/// never reaches the runner (the next workload sees it, sandbox-run does not), and under
/// `GITHUB_ACTIONS=true` a profile directory or file where a step can write is refused
/// whoever named it: in `SANDBOX_RUN_PROFILE_PATH`, by `--profile PATH`, by `extends`, in
/// the repo. Control: a caller outside Actions who names that directory gets the planted
/// profile, the plant lands, and `git status` runs it.
#[test]
fn a_step_cannot_choose_the_next_steps_profile() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-profile");
    let home = r._f.path("runner-home");
    std::fs::create_dir_all(home.join(".config/git")).unwrap();
    std::fs::write(home.join(".config/git/config"), "").unwrap();
    for d in [&home, &home.join(".config"), &home.join(".config/git")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let git_config = home.join(".config/git/config");
    let log = r.temp.join("pwned.log");
    let mut job = Job::default();
    job.env
        .push(("REAL_HOME".into(), home.to_string_lossy().into_owned()));
    let plant = r####"
p="$RUNNER_TEMP/x"
mkdir -p "$p" && chmod 755 "$p"
cat > "$p/github-actions.toml" <<TOML
extends = "github-actions"
[filesystem]
extra_rw = ["\$RUNNER_TEMP", "$REAL_HOME/.config/git"]
TOML
chmod 644 "$p/github-actions.toml"
printf '#!/bin/sh\necho fsmonitor >> "%s/pwned.log"\n' "$RUNNER_TEMP" > "$p/fsm.sh"
chmod 755 "$p/fsm.sh"
echo "SANDBOX_RUN_PROFILE_PATH=$p" >> "$GITHUB_ENV"
"####;
    let planted = r.step_in(1, &[], "bash", &job, plant);
    planted.assert_code(0);
    r.apply(1, &mut job);
    let x = r.temp.join("x");
    let use_it = r#"
echo "profile_path=${SANDBOX_RUN_PROFILE_PATH:-unset}"
if printf '[core]\n\tfsmonitor = %s\n' "$RUNNER_TEMP/x/fsm.sh" >> "$REAL_HOME/.config/git/config" 2>/dev/null; then echo PLANTED-GIT-CONFIG; fi
"#;
    let out = r.step_in(2, &[], "bash", &job, use_it);
    out.assert_code(0);
    assert!(!out.stdout.contains("PLANTED"), "{out}");
    // kept for the next workload, as the runner would have set it; not for sandbox-run
    assert!(
        out.stdout
            .contains(&format!("profile_path={}", x.display())),
        "{out}"
    );
    r.apply(2, &mut job);
    // the post step: git status on the host, as the runner's user
    let mut host = Job::default();
    host.env
        .push(("HOME".into(), home.to_string_lossy().into_owned()));
    let status = r.host_step(&host, "git", &["status", "--porcelain"]);
    status.assert_code(0);
    assert!(
        !std::fs::read_to_string(&git_config)
            .unwrap()
            .contains("fsmonitor"),
        "planted in ~/.config/git"
    );
    assert!(
        !log.exists(),
        "the host's git status ran the step's fsmonitor"
    );
    // the name was kept back, and the step's stderr says so
    assert_eq!(var(&job, "SANDBOX_RUN_PROFILE_PATH"), None, "{job:?}");
    assert!(
        planted.stderr.contains("GITHUB_ENV: \"SANDBOX_RUN_PROFILE_PATH\" kept for later sandboxed steps only, never handed to unsandboxed steps"),
        "{planted}"
    );

    // whoever names it, under Actions a profile where a step can write is refused
    let named = Job {
        env: vec![
            ("REAL_HOME".into(), home.to_string_lossy().into_owned()),
            (
                "SANDBOX_RUN_PROFILE_PATH".into(),
                x.to_string_lossy().into_owned(),
            ),
        ],
        ..Job::default()
    };
    let out = r.step_in(3, &[], "bash", &named, use_it);
    out.assert_code(125);
    assert!(
        out.stderr.contains(&format!(
            "the profile directory {} lies in $RUNNER_TEMP",
            x.display()
        )) && out.stderr.contains("which a sandboxed step can write"),
        "{out}"
    );
    let by_path = x.join("github-actions.toml");
    let out = r.step_as(4, by_path.to_str().unwrap(), &[], "bash", &job, use_it);
    out.assert_code(125);
    assert!(
        out.stderr.contains(&format!(
            "the profile file {} lies in $RUNNER_TEMP",
            by_path.display()
        )),
        "{out}"
    );
    // extends, from a profile in a place no step can write
    let trusted = r._f.path("trusted");
    std::fs::create_dir_all(&trusted).unwrap();
    std::fs::set_permissions(&trusted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = r._f.write(
        "trusted/p.toml",
        &format!("extends = {:?}\n", by_path.display().to_string()),
    );
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = r.step_as(5, parent.to_str().unwrap(), &[], "bash", &job, use_it);
    out.assert_code(125);
    assert!(
        out.stderr.contains(&format!(
            "the profile file {} lies in $RUNNER_TEMP",
            by_path.display()
        )),
        "{out}"
    );
    // a profile the repo carries
    let in_repo = r.workspace.join(".github/sandbox/p.toml");
    std::fs::create_dir_all(in_repo.parent().unwrap()).unwrap();
    std::fs::write(&in_repo, "extends = \"github-actions\"\n").unwrap();
    let out = r.step_as(6, in_repo.to_str().unwrap(), &[], "bash", &job, use_it);
    out.assert_code(125);
    assert!(out.stderr.contains("lies in $GITHUB_WORKSPACE"), "{out}");
    assert!(!out.all().contains("PLANTED"), "{out}");
    assert!(!std::fs::read_to_string(&git_config)
        .unwrap()
        .contains("fsmonitor"));

    // control: a caller outside Actions who chose that directory gets the planted profile,
    // the plant lands, and the host's git status runs it
    let mut outside = named;
    outside.env.push(("GITHUB_ACTIONS".into(), "false".into()));
    let out = r.step_in(7, &[], "bash", &outside, use_it);
    out.assert_code(0);
    assert!(out.stdout.contains("PLANTED-GIT-CONFIG"), "control: {out}");
    r.host_step(&host, "git", &["status", "--porcelain"]);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap_or_default(),
        "fsmonitor\n",
        "control: git status did not run the planted fsmonitor"
    );
}

/// Names nobody listed: a step writes, to `GITHUB_ENV`, names that later host programs read
/// as code (`TAR_OPTIONS` for tar, `GNUMAKEFLAGS` (a rule the goal depends on) and `RM` for
/// make) and names only this
/// workflow's scripts know (`POST_BUILD_HOOK`, `MY_CC`), tries to widen the workflow's list
/// (`SANDBOX_RUN_EXPORT_ENV`) and to move sandbox-run's own configuration (`HOME`,
/// `XDG_CONFIG_HOME`), and writes the same names again in the next step, after its own
/// list "widened". None reaches the runner: the host's tar, make and the job's own script
/// run nothing of it. Controls: the listed `VERSION` and the listed tools directory reach the
/// unsandboxed step; an unlisted variable and an unlisted `GITHUB_PATH` entry reach the next
/// sandboxed step, in the runner's order; the same host programs given the step's values
/// directly run every payload.
#[test]
fn names_nobody_listed_never_reach_unsandboxed_steps() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-unlisted");
    let tools = r._f.path("tools/bin");
    executable(
        &tools.join("hello-tool"),
        "#!/bin/sh\necho HELLO-TOOL-RAN\n",
    );
    for d in [r._f.path("tools"), tools.clone()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let log = r.temp.join("pwned.log");
    let evil = r.temp.join("evil");
    let mut job = Job::default();
    let listed = "VERSION,LD_PRELOAD,SANDBOX_RUN_EXPORT_ENV,HOME,XDG_CONFIG_HOME,RUNNER_TEMP";
    job.env
        .push(("SANDBOX_RUN_EXPORT_ENV".into(), listed.into()));
    job.env.push((
        "SANDBOX_RUN_EXPORT_PATH".into(),
        tools.to_string_lossy().into_owned(),
    ));
    job.env
        .push(("TOOLS_BIN".into(), tools.to_string_lossy().into_owned()));
    let step1 = r####"
evil="$RUNNER_TEMP/evil"; mkdir -p "$evil"
for n in tar make rm hook cc; do
  printf '#!/bin/sh\necho %s >> "%s/pwned.log"\n' "$n" "$RUNNER_TEMP" > "$evil/pwn-$n.sh"
  chmod 755 "$evil/pwn-$n.sh"
done
{
  echo "VERSION=1.2.3"
  echo "TAR_OPTIONS=--checkpoint=1 --checkpoint-action=exec=$evil/pwn-tar.sh"
  echo "GNUMAKEFLAGS=--eval=all:pwn --eval=pwn:;@$evil/pwn-make.sh"
  echo "RM=$evil/pwn-rm.sh"
  echo "POST_BUILD_HOOK=$evil/pwn-hook.sh"
  echo "MY_CC=$evil/pwn-cc.sh"
  echo "SANDBOX_RUN_EXPORT_ENV=TAR_OPTIONS,GNUMAKEFLAGS,RM,POST_BUILD_HOOK,MY_CC,UNLISTED_VALUE"
  echo "HOME=$evil"
  echo "XDG_CONFIG_HOME=$evil"
  echo "UNLISTED_VALUE=kept-value"
} >> "$GITHUB_ENV"
echo "$TOOLS_BIN" >> "$GITHUB_PATH"
echo "/opt/kept-for-sandbox/bin" >> "$GITHUB_PATH"
"####;
    let first = r.step_in(1, &[], "bash", &job, step1);
    first.assert_code(0);
    r.apply(1, &mut job);
    // the next sandboxed step gets what was kept, as the runner would have set it
    let step2 = r####"
echo "unlisted=${UNLISTED_VALUE:-unset} tar=${TAR_OPTIONS:+set} version=${VERSION:-unset}"
echo "path=$PATH"
echo "TAR_OPTIONS=$TAR_OPTIONS" >> "$GITHUB_ENV"
echo "GNUMAKEFLAGS=$GNUMAKEFLAGS" >> "$GITHUB_ENV"
"####;
    let second = r.step_in(2, &[], "bash", &job, step2);
    let out = &second;
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("unlisted=kept-value tar=set version=1.2.3"),
        "{out}"
    );
    assert!(
        out.stdout.contains(&format!(
            "path=/opt/kept-for-sandbox/bin:{}:",
            tools.display()
        )),
        "{out}"
    );
    r.apply(2, &mut job);

    // the unsandboxed steps: the host's tar, make and the job's own script
    let build = r._f.path("build");
    r._f.write(
        "build/Makefile",
        "all:\n\t@echo made\nclean:\n\t$(RM) junk\n",
    );
    let script = r._f.write(
        "host-step.sh",
        "echo \"version=$VERSION\"\n${POST_BUILD_HOOK:-true}\n${MY_CC:-true} --version >/dev/null\nhello-tool || true\necho host-done\n",
    );
    let tarball = r._f.path("out.tar");
    let host_steps = |job: &Job| {
        let tar = r.host_step(job, "tar", &["-cf", tarball.to_str().unwrap(), "README.md"]);
        let make = r.host_step(
            job,
            "make",
            &["-C", build.to_str().unwrap(), "all", "clean"],
        );
        let bash = r.host_step(
            job,
            "bash",
            &["--noprofile", "--norc", "-e", script.to_str().unwrap()],
        );
        (tar, make, bash)
    };
    let (tar, make, bash) = host_steps(&job);
    tar.assert_code(0);
    make.assert_code(0);
    bash.assert_code(0);
    assert!(
        !log.exists(),
        "ran on the host: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(
        bash.stdout
            .contains("version=1.2.3\nHELLO-TOOL-RAN\nhost-done"),
        "{bash}"
    );
    // what the runner got, and the lines that said what was kept back
    assert_eq!(var(&job, "TAR_OPTIONS"), None, "{job:?}");
    assert_eq!(var(&job, "GNUMAKEFLAGS"), None, "{job:?}");
    assert!(
        second
            .stderr
            .contains("GITHUB_ENV: \"TAR_OPTIONS\" kept for later sandboxed steps only"),
        "{second}"
    );
    for name in [
        "TAR_OPTIONS",
        "GNUMAKEFLAGS",
        "RM",
        "POST_BUILD_HOOK",
        "MY_CC",
        "UNLISTED_VALUE",
    ] {
        let line = format!("GITHUB_ENV: \"{name}\" kept for later sandboxed steps only; to hand it to unsandboxed steps, list it in the workflow's env: SANDBOX_RUN_EXPORT_ENV");
        assert!(first.stderr.contains(&line), "{line}: {first}");
    }
    assert!(
        first.stderr.contains("GITHUB_PATH: \"/opt/kept-for-sandbox/bin\" kept for later sandboxed steps only; to hand it to unsandboxed steps, list it in the workflow's env: SANDBOX_RUN_EXPORT_PATH"),
        "{first}"
    );
    assert_eq!(var(&job, "VERSION"), Some("1.2.3"), "{job:?}");
    assert_eq!(var(&job, "SANDBOX_RUN_EXPORT_ENV"), Some(listed), "{job:?}");
    for k in [
        "TAR_OPTIONS",
        "GNUMAKEFLAGS",
        "RM",
        "POST_BUILD_HOOK",
        "MY_CC",
        "UNLISTED_VALUE",
        "HOME",
        "XDG_CONFIG_HOME",
    ] {
        assert_eq!(var(&job, k), None, "{k}: {job:?}");
    }
    assert_eq!(job.prepend, [tools.to_string_lossy().into_owned()]);

    // control: the step's values, had they reached the runner, run every payload
    let e = |n: &str| {
        evil.join(format!("pwn-{n}.sh"))
            .to_string_lossy()
            .into_owned()
    };
    let given = Job {
        env: vec![
            (
                "TAR_OPTIONS".into(),
                format!("--checkpoint=1 --checkpoint-action=exec={}", e("tar")),
            ),
            (
                "GNUMAKEFLAGS".into(),
                format!("--eval=all:pwn --eval=pwn:;@{}", e("make")),
            ),
            ("RM".into(), e("rm")),
            ("POST_BUILD_HOOK".into(), e("hook")),
            ("MY_CC".into(), e("cc")),
        ],
        ..Job::default()
    };
    host_steps(&given);
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    for n in ["tar", "make", "rm", "hook", "cc"] {
        assert!(
            ran.lines().any(|l| l == n),
            "control: {n} did not run: {ran:?}"
        );
    }
}

/// A kept `GITHUB_PATH` entry is the next workload's, never sandbox-run's: step 1 puts a
/// directory of `$RUNNER_TEMP` holding a `bash` into `GITHUB_PATH` (kept: not listed, and a
/// directory the step could write). Step 2's shell line names a bare `bash`, which the gate
/// resolves with sandbox-run's own PATH (the runner's): the system's bash runs the script,
/// whose PATH has the kept entry first, as the runner would have given it. Control: the
/// planted `bash` is there and runs when the script itself calls it (inside the sandbox).
#[test]
fn a_kept_path_entry_never_chooses_the_next_steps_shell() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-kept-path");
    let mut job = Job::default();
    let plant = "mkdir -p \"$RUNNER_TEMP/evil\"\nprintf '#!/usr/bin/bash\\necho PLANTED-SHELL-RAN\\n' > \"$RUNNER_TEMP/evil/bash\"\nchmod +x \"$RUNNER_TEMP/evil/bash\"\necho \"$RUNNER_TEMP/evil\" >> \"$GITHUB_PATH\"\n";
    r.step_in(1, &[], "bash", &job, plant).assert_code(0);
    r.apply(1, &mut job);
    assert!(job.prepend.is_empty(), "{job:?}");
    let evil = r.temp.join("evil");
    let out = r.step_in(
        2,
        &[],
        "bash",
        &job,
        "echo \"real shell, path=$PATH\"\nbash -c true\n",
    );
    out.assert_code(0);
    assert!(
        out.stdout
            .starts_with(&format!("real shell, path={}:", evil.display())),
        "{out}"
    );
    // control: the planted one is the workload's own `bash`, inside the sandbox
    assert!(out.stdout.contains("PLANTED-SHELL-RAN"), "control: {out}");
    assert_eq!(out.stdout.matches("PLANTED-SHELL-RAN").count(), 1, "{out}");
}

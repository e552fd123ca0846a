//! Prompts are data: the arguments of a `[gate] free_text` program reach
//! it byte for byte (a multi-line markdown prompt with backticks, `$(`, `|`, `&&`, tabs and
//! CRs), and `--stdin FILE|-` feeds the workload's stdin through a pipe, never from a
//! terminal; without it stdin stays /dev/null.

mod common;

use common::*;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

const PROMPT: &str = "# Task\n\nFix the failing test in `src/lib.rs`:\n\n```sh\nnpm test -- --grep \"a|b\" && echo $(date)\n```\n\n\tIndented; CR\r\nThen `cargo test` | tee log > out; done. 'quotes' \\ backslash";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A validate-based test profile whose `[gate] free_text` names the probe (when `free`).
fn profile(f: &Fixture, free: bool) -> std::path::PathBuf {
    let mut t: toml::Table = toml::from_str(&Spec::default().to_toml()).unwrap();
    if free {
        let gate = t.get_mut("gate").unwrap().as_table_mut().unwrap();
        gate.insert(
            "free_text".into(),
            toml::Value::Array(vec![probe().to_str().unwrap().into()]),
        );
    }
    let p = f.path(&format!("prompts-{free}.toml"));
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

/// The prompt arrives intact in the probe's argv under a free-text profile; the same command
/// is refused (126) under a profile whose free_text does not name it.
#[test]
fn a_multi_line_prompt_reaches_argv_intact() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("prompt-argv");
    let repo = f.repo("repo");
    let free = profile(&f, true);
    let r = run_probe(&free, &repo, &[], &["args", "-p", PROMPT, "&&", "x"]);
    r.assert_ok();
    assert_eq!(
        r.lines,
        [hex(b"-p"), hex(PROMPT.as_bytes()), hex(b"&&"), hex(b"x")],
        "{r}"
    );
    // control: without free_text, the gate refuses it
    let plain = profile(&f, false);
    let r = run_probe(&plain, &repo, &[], &["args", "-p", PROMPT]);
    assert_eq!(r.code(), Some(126), "{r}");
    assert!(r.run.stderr.contains("control-character"), "{r}");
    // ESC stays refused, free text or not
    let r = run_probe(&free, &repo, &[], &["args", "-p", "hide\u{1b}[8mme"]);
    assert_eq!(r.code(), Some(126), "{r}");
    assert!(r.run.stderr.contains("control-character"), "{r}");
}

/// `--stdin FILE`: the file's bytes, exactly (no byte of the plan before them), even past a
/// pipe's buffer and with NULs; the report says `pipe`. Without it, /dev/null.
#[test]
fn stdin_from_a_file() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("prompt-stdin-file");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mut data: Vec<u8> = PROMPT.as_bytes().to_vec();
    data.extend((0..200_000u32).map(|i| (i % 251) as u8));
    let file = f.path("input.bin");
    std::fs::write(&file, &data).unwrap();
    let report = f.path("report.json");
    let r = run_probe(
        &p,
        &repo,
        &[
            "--stdin",
            file.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
        &["stdin-hex"],
    );
    assert_eq!(r.assert_ok(), format!("bytes={}", data.len()), "{r}");
    assert!(
        r.lines.first() == Some(&hex(&data)),
        "stdin content differs"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["stdin"], "pipe");
    // default: /dev/null
    let r = run_probe(
        &p,
        &repo,
        &["--report", report.to_str().unwrap()],
        &["stdin"],
    );
    assert_eq!(r.outcome, Outcome::Nothing("eof bytes=0".into()), "{r}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["sandbox"]["stdin"], "null");
    // a file in the repo is read where it is, never through a link planted there (an
    // earlier run could make prompt.md a link to a private key)
    std::fs::write(repo.join("prompt.md"), PROMPT).unwrap();
    let r = run_probe(&p, &repo, &["--stdin", "prompt.md"], &["stdin-hex"]);
    assert_eq!(r.lines.first(), Some(&hex(PROMPT.as_bytes())), "{r}");
    let private = f.write("private.key", "PRIVATE-KEY-sbx-e2e-66a1\n");
    std::fs::remove_file(repo.join("prompt.md")).unwrap();
    std::os::unix::fs::symlink(&private, repo.join("prompt.md")).unwrap();
    std::os::unix::fs::symlink(&f.dir, repo.join("out")).unwrap();
    for given in ["prompt.md", "out/private.key"] {
        let r = run_probe(&p, &repo, &["--stdin", given], &["stdin-hex"]);
        assert_eq!(r.code(), Some(125), "{given}: {r}");
        assert!(
            r.run.stderr.contains("link inside the repo"),
            "{given}: {r}"
        );
        assert_eq!(r.outcome, Outcome::Missing, "{r}");
    }
    // control: the same file named outside the repo is read
    let r = run_probe(
        &p,
        &repo,
        &["--stdin", private.to_str().unwrap()],
        &["stdin-hex"],
    );
    assert_eq!(
        r.lines.first(),
        Some(&hex(b"PRIVATE-KEY-sbx-e2e-66a1\n")),
        "{r}"
    );
    // a directory is refused with one line
    let r = run_probe(&p, &repo, &["--stdin", f.dir.to_str().unwrap()], &["stdin"]);
    assert_eq!(r.code(), Some(125), "{r}");
}

/// `--stdin -` from a pipe: what the caller writes reaches the workload.
#[test]
fn stdin_from_the_callers_pipe() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("prompt-stdin-pipe");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mut c = sandbox_command(
        &p,
        &repo,
        &["--stdin", "-"],
        &[probe().to_str().unwrap(), "stdin-hex"],
    );
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_retrying(&mut c).unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        input.write_all(PROMPT.as_bytes()).unwrap();
        // closed here: the workload sees the end
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let run = Run::from_output("sandbox-run --stdin - ...".into(), out);
    let r = ProbeRun::parse("stdin-hex", run);
    r.assert_ok();
    assert_eq!(r.lines.first(), Some(&hex(PROMPT.as_bytes())), "{r}");
}

/// `--stdin -` when sandbox-run's stdin is a terminal, or `--stdin` naming a terminal, is
/// refused with one line: the command never reads the user's terminal.
#[test]
fn stdin_from_a_terminal_is_refused() {
    let f = Fixture::new("prompt-stdin-tty");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the given ints; the name and settings are null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just returned by openpty and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let name = std::fs::read_link(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        slave.as_raw_fd()
    }))
    .unwrap();
    let slave2 = slave.try_clone().unwrap();
    let r = run_probe_with(&p, &repo, &["--stdin", "-"], &["stdin"], |c| {
        c.stdin(Stdio::from(slave));
    });
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("terminal"), "{r}");
    assert_eq!(r.run.stderr.trim_end().lines().count(), 1, "{r}");
    assert_eq!(r.outcome, Outcome::Missing, "{r}");
    // the terminal named as FILE
    let r = run_probe(&p, &repo, &["--stdin", name.to_str().unwrap()], &["stdin"]);
    assert_eq!(r.code(), Some(125), "{r}");
    assert!(r.run.stderr.contains("terminal"), "{r}");
    drop((master, slave2));
}

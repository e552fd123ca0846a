//! The agent CLIs from the npm registry: the current version of each, installed once per
//! version outside any sandbox, and kept.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::*;

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
    // The tests of one binary run in threads of one process: one install at a time, or two
    // would share the temporary directory (named by the pid) and undo each other.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
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

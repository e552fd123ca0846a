//! The Node workflow runner of `examples/workflow-runner/` against this build's binary: runs
//! its own tests (`node --test examples/workflow-runner/test/`) so that `scripts/test` runs
//! them, as root and rootless. Skips, with a line, where node is not installed.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// node from /usr/bin, else the first on PATH.
fn node() -> Option<PathBuf> {
    let usr = Path::new("/usr/bin/node");
    if usr.is_file() {
        return Some(usr.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("node"))
            .find(|p| p.is_file())
    })
}

#[test]
fn the_node_workflow_runner_passes_its_own_tests() {
    let Some(node) = node() else {
        common::skip_tool("node is not installed: examples/workflow-runner's tests were not run");
        return;
    };
    if !common::sandbox_works() {
        return;
    }
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workflow-runner/test/");
    let mut c = Command::new(node);
    c.arg("--test")
        .arg(&tests)
        .env("SANDBOX_RUN_BIN", common::BIN)
        .env("SANDBOX_RUN_TEST_TMP", common::test_base())
        // not the caller's node flags, and not a parent test runner's protocol
        .env_remove("NODE_OPTIONS")
        .env_remove("NODE_TEST_CONTEXT");
    let run = common::run_command(c, Duration::from_secs(180));
    for line in run.stdout.lines().filter(|l| l.contains("# SKIP")) {
        common::skip_tool(&format!("workflow-runner: {}", line.trim()));
    }
    assert_eq!(run.code, Some(0), "node --test failed:\n{run}");
    // each test ran (a file that fails to load shows up as one failed test, not as none)
    assert!(run.stdout.contains("\n# pass "), "{run}");
    assert!(run.stdout.contains("\n# fail 0"), "{run}");
}

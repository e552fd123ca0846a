//! What the agent CLI tests share: the CLIs from the npm registry (installed once per
//! version, outside any sandbox), a test CA and a TLS stub of each vendor's API on the host's
//! 127.0.0.1 that streams its reply, the recipes of docs/agents.md read as written, and a scan
//! of a sandbox's processes (environment and memory) for a value.
#![allow(dead_code)]

mod install;
mod scan;
mod stub;

// (each test file uses some of them)
#[allow(unused_imports)]
pub use {install::*, scan::*, stub::*};

use std::path::Path;

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

//! A run with a report, read for its refusals (`results[0].denials`) and their lines on
//! stderr: the end-of-run line (`sandbox-run: refused KIND SUB: WHAT (Nx): RULE; FIX`) and
//! the `-v` line (the same, said when first seen, with or without the count). Shared by the
//! refusal suites (`#[path = "support/refusals.rs"] mod refusals;` beside `mod common;` and
//! `mod schema;`).
#![allow(dead_code)] // each suite uses its part

use super::common::{run_command, Run, LIMIT};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

pub struct Out {
    pub run: Run,
    pub report: Value,
}

impl Out {
    /// Runs `c`, whose `--report` is `report`, and reads the report (valid by the schema).
    pub fn of(c: Command, report: &Path) -> Out {
        let r = run_command(c, LIMIT);
        let parsed = std::fs::read_to_string(report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| panic!("no report:\n{r}"));
        super::schema::assert_valid_report(&parsed);
        Out {
            run: r,
            report: parsed,
        }
    }

    pub fn denials(&self) -> Vec<Value> {
        self.report["results"][0]["denials"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The one denial of `kind`/`sub` (and `what`, when given), or a failure that shows the run.
    pub fn one(&self, kind: &str, sub: &str, what: Option<&str>) -> Value {
        let found: Vec<Value> = self
            .denials()
            .into_iter()
            .filter(|d| d["kind"] == kind && d["sub"] == sub)
            .filter(|d| what.is_none_or(|w| d["what"] == w))
            .collect();
        assert_eq!(found.len(), 1, "one {kind} {sub} {what:?} denial:\n{self}");
        found[0].clone()
    }

    /// The one denial of `kind`/`sub`.
    pub fn denial(&self, kind: &str, sub: &str) -> Value {
        self.one(kind, sub, None)
    }

    pub fn none_of(&self, kind: &str) {
        assert!(
            self.denials().iter().all(|d| d["kind"] != kind),
            "no {kind} denial:\n{self}"
        );
    }

    /// The stderr lines of refusals.
    pub fn refused_lines(&self) -> Vec<&str> {
        self.run
            .stderr
            .lines()
            .filter(|l| l.starts_with("sandbox-run: refused "))
            .collect()
    }

    /// The denial's end-of-run line is on stderr, once.
    pub fn says(&self, d: &Value) {
        let line = format!(
            "{}{}: {}; {}",
            head(d),
            match d["count"].as_u64().unwrap() {
                1 => String::new(),
                n => format!(" ({n}x)"),
            },
            d["rule"].as_str().unwrap(),
            d["fix"].as_str().unwrap()
        );
        let n = self.refused_lines().iter().filter(|l| **l == line).count();
        assert_eq!(n, 1, "{line:?} once on stderr:\n{self}");
    }

    /// A `-v` run said the denial once: its head, then its count or its rule, ending in its
    /// fix.
    pub fn says_v(&self, d: &Value) {
        let head = head(d);
        let fix = d["fix"].as_str().unwrap();
        let lines: Vec<&str> = self.run.stderr.lines().collect();
        let at = self.said_at(&head);
        assert_eq!(at.len(), 1, "{head:?} once on stderr with -v:\n{self}");
        assert!(
            lines[at[0]].ends_with(fix),
            "{head:?} ends with {fix:?}:\n{self}"
        );
    }

    /// Where on stderr (line numbers) a refusal line starting with `head` is.
    pub fn said_at(&self, head: &str) -> Vec<usize> {
        said_at(&self.run.stderr, head)
    }
}

/// `sandbox-run: refused KIND SUB: WHAT` of a denial of the report.
pub fn head(d: &Value) -> String {
    format!(
        "sandbox-run: refused {} {}: {}",
        d["kind"].as_str().unwrap(),
        d["sub"].as_str().unwrap(),
        d["what"].as_str().unwrap()
    )
}

/// The line numbers of `text` that are the refusal line `head` (followed by its count or its
/// rule).
pub fn said_at(text: &str, head: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            l.strip_prefix(head)
                .is_some_and(|r| r.starts_with(": ") || r.starts_with(" ("))
        })
        .map(|(i, _)| i)
        .collect()
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\ndenials: {:#}",
            self.run, self.report["results"][0]["denials"]
        )
    }
}

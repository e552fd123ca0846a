//! The internal "why not" value that every rule returns, turned into a [`Verdict`] by the gate.
//!
//! [`Verdict`]: super::Verdict

use super::text::{escape, needs_escape};
use super::Outcome;

/// A failed rule: outcome (denied or not found), stable rule name, offending word and a
/// sentence explaining it (without the `denied by rule ...:` prefix, added by [`Deny::reason`]).
#[derive(Debug, Clone)]
pub(crate) struct Deny {
    pub outcome: Outcome,
    pub rule: &'static str,
    pub word: Option<String>,
    pub detail: String,
}

impl Deny {
    /// A policy denial (exit code 126).
    pub fn denied(rule: &'static str, word: Option<&str>, detail: impl Into<String>) -> Deny {
        Deny {
            outcome: Outcome::Denied,
            rule,
            word: word.map(str::to_owned),
            detail: detail.into(),
        }
    }

    /// The program could not be found (exit code 127).
    pub fn not_found(word: &str, detail: impl Into<String>) -> Deny {
        Deny {
            outcome: Outcome::NotFound,
            rule: "program-not-found",
            word: Some(word.to_owned()),
            detail: detail.into(),
        }
    }

    /// One sentence naming the rule and the problem; control characters are escaped.
    pub fn reason(&self) -> String {
        let sentence = match self.outcome {
            Outcome::NotFound => format!("not found (rule {}): {}", self.rule, self.detail),
            Outcome::Denied | Outcome::Allowed => {
                format!("denied by rule {}: {}", self.rule, self.detail)
            }
        };
        // `detail` quotes words through `text::quote`; clean again in case a detail was built
        // from unescaped text (e.g. an OS error).
        clean_sentence(&sentence)
    }
}

/// Escapes control, bidi and zero-width characters (quotes and backslashes stay as they are).
pub(crate) fn clean_sentence(s: &str) -> String {
    if s.chars().any(needs_escape) {
        s.chars()
            .map(|c| {
                if needs_escape(c) {
                    escape(c)
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        s.to_owned()
    }
}

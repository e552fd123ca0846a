//! The policy gate: decides, before anything runs, whether a command may run at all.
//!
//! It replaces a string check of the form "starts with `node `/`npm `/`npx `, no `;&|><` outside
//! quotes, no `$(`, no `node -e`" (seed 000), which can be bypassed in many ways: `node -r`,
//! `NODE_OPTIONS=...`, `npm --node-options`, `npx -c`, a `node` planted in the repo and found
//! through PATH, newlines, look-alike names ... The gate is:
//!
//! * **deny by default**: a program must be on the profile's list, node options must be on a
//!   known-safe list, wrapper options must be known;
//! * **about files, not names**: the program is resolved through PATH like `execvp` and must
//!   not come from the repo or a world-writable place;
//! * **recursive**: `npx X`, `npm exec X`, `env X`, `timeout 5 X` ... check X like a command;
//! * **pure and unprivileged**: it reads the filesystem only to resolve programs, never runs
//!   anything, never expands anything, and never panics.
//!
//! Rules are applied in this order; the first that fails is reported:
//!
//! 1. size (`too-long`) and emptiness (`empty-command`);
//! 2. argv form: UTF-8 (`invalid-utf8`); `--command` form: control characters in the raw
//!    string, then POSIX word splitting (`unterminated-quote`);
//! 3. every word: `control-character`, `command-substitution`; then `shell-operator` (argv:
//!    operator words; command: unquoted `;&|<>()`), and in the command form `shell-expansion`
//!    (`$VAR`, `~`, globs, braces) and `shell-syntax` (`#` comments). Exception, argv form
//!    only: the arguments of a program named in `free_text` (an agent CLI, whose arguments
//!    are prompts) are free text: newline, tab, CR, backticks, `$(` and operator words are
//!    allowed there, since no shell ever parses them; other control characters (ESC, DEL,
//!    C1...) are still refused (`control-character`);
//! 4. the command, recursively for nested commands: `env-assignment`, allow-list
//!    (`not-allowed`, `wrapped-not-allowed`), resolution (`program-not-found`,
//!    `program-in-repo`, `program-world-writable`), then the program's argument rules
//!    (`node-eval`, `node-option`, `node-stdin`, `npm-option`, `npm-subcommand`, `npx-call`,
//!    `npx-option`, `wrapper-option`, `wrapped-missing`, `too-deep`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

mod deny;
mod engine;
mod node;
mod npm;
mod npm_options;
mod resolve;
pub mod split;
mod text;
mod wrappers;

use deny::Deny;
use engine::{Engine, Slot};
use split::split_command;
use text::clean;

pub use engine::MAX_DEPTH;
pub use resolve::search_path;
pub use text::{MAX_COMMAND_BYTES, MAX_WORD_BYTES};

/// Every rule name a [`Verdict`] can carry.
pub const RULE_NAMES: &[&str] = &[
    "allowed",
    "too-long",
    "empty-command",
    "invalid-utf8",
    "control-character",
    "unterminated-quote",
    "command-substitution",
    "shell-operator",
    "shell-expansion",
    "shell-syntax",
    "env-assignment",
    "not-allowed",
    "wrapped-not-allowed",
    "wrapped-missing",
    "program-not-found",
    "program-in-repo",
    "program-world-writable",
    "node-eval",
    "node-option",
    "node-stdin",
    "npm-option",
    "npm-subcommand",
    "npx-call",
    "npx-option",
    "wrapper-option",
    "too-deep",
];

/// What a profile allows. Everything not listed is denied.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Rules {
    /// Program names allowed as argv[0] (bare names like "node", resolved through PATH).
    pub programs: Vec<String>,
    /// Programs/package bins allowed as the TARGET of a wrapper (npx X, npm exec X, npm x X,
    /// env X, nice X, timeout N X, xargs X).
    pub wrapped: Vec<String>,
    /// Exact absolute program paths allowed even if inside the repo or a world-writable dir.
    pub paths: Vec<PathBuf>,
    /// When true, argv[0] may be a path to a file inside the repo (e.g. "./build.sh",
    /// "scripts/test.sh") -- the `ci` profile.
    pub repo_scripts: bool,
    /// npm subcommands allowed (e.g. test, t, run, run-script, ci, exec, x ...). "exec"/"x"
    /// trigger recursive checks.
    pub npm_subcommands: Vec<String>,
    /// Extra node options allowed beyond the built-in safe list (e.g. "-e" for a benchmark
    /// profile that allows eval).
    pub node_options: Vec<String>,
    /// Programs whose arguments are free text (prompts): argv[0] exactly as written, a bare
    /// name or an absolute path; never node/npm/npx, a shell or a wrapper (their arguments
    /// are code or commands). In the argv form their arguments may hold newlines, tabs, CRs,
    /// backticks, `$(` and operator words; every other rule still applies.
    #[serde(default)]
    pub free_text: Vec<String>,
}

/// Can `entry` be in `free_text`? A bare name or an absolute path of a program without
/// argument rules: node, npm, npx, shells and wrappers read code or commands in theirs.
pub fn free_text_entry(entry: &str) -> Result<(), String> {
    if entry.is_empty() || (entry.contains('/') && !entry.starts_with('/')) {
        return Err("must be a bare program name or an absolute path".into());
    }
    match engine::kind_of(entry) {
        engine::Kind::Plain => Ok(()),
        _ => Err(
            "is node, npm, npx, a shell or a wrapper, whose arguments are code or commands".into(),
        ),
    }
}

/// Where the command would run.
pub struct Context<'a> {
    /// Canonical absolute repo root.
    pub repo: &'a Path,
    /// Working directory the command will run in (absolute; used for relative PATH entries
    /// and ./x).
    pub cwd: &'a Path,
    /// The PATH the sandbox will use (colon separated).
    pub path: &'a OsStr,
}

/// The command to judge: an argv (`-- PROGRAM ARGS...`) or a command string (`--command`).
pub enum Input<'a> {
    Argv(&'a [OsString]),
    Command(&'a str),
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Denied,
    NotFound,
}

/// The gate's answer, with enough detail for a message and a report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub outcome: Outcome,
    /// Stable rule name (kebab-case, one of [`RULE_NAMES`]); "allowed" when allowed.
    pub rule: String,
    /// The offending word, verbatim (it may contain control characters: escape it before
    /// printing). None when allowed or when no single word is at fault.
    pub word: Option<String>,
    /// The resolved canonical program path of argv[0] when resolution happened.
    pub program: Option<PathBuf>,
    /// One human sentence explaining the verdict; control characters are escaped.
    pub reason: String,
    /// The argv that would be executed (after splitting), when splitting succeeded; words as
    /// given. Empty for `too-long`, `invalid-utf8`, `control-character` in the command form
    /// and `unterminated-quote`.
    pub argv: Vec<String>,
}

impl Verdict {
    /// True when the command may run.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// Shell-convention exit code: 0 allowed, 126 denied, 127 not found.
    pub fn exit_code(&self) -> i32 {
        match self.outcome {
            Outcome::Allowed => 0,
            Outcome::Denied => 126,
            Outcome::NotFound => 127,
        }
    }
}

/// Judges `input` under `rules` in `ctx`. Never panics, never runs anything.
pub fn gate(input: &Input, rules: &Rules, ctx: &Context) -> Verdict {
    let argv = match prepare(input, rules) {
        Ok(argv) => argv,
        Err((deny, argv)) => return denied(deny, argv, None),
    };
    let mut engine = Engine::new(rules, ctx.repo, ctx.path);
    match engine.check(&argv, Slot::Top, ctx.cwd, 0) {
        Ok(()) => allowed(argv, engine.program),
        Err(deny) => denied(deny, argv, engine.program),
    }
}

/// The path to hand to `execve` for an allowed verdict: argv[0] found again like the gate
/// found it (`cwd`-relative for a word with `/`, else through `path`), not canonicalized, so
/// the program sees the name it expects (e.g. `/usr/bin/npm`). Returns `None` unless the
/// verdict is allowed and the path still resolves to the very file the gate checked
/// (`verdict.program`); on `None` the caller must not run anything.
pub fn found_path(verdict: &Verdict, path: &OsStr, cwd: &Path) -> Option<PathBuf> {
    if !verdict.allowed() {
        return None;
    }
    let first = verdict.argv.first()?;
    let found = if first.contains('/') {
        resolve::absolute(cwd, Path::new(first))
    } else {
        search_path(first, path, cwd)?
    };
    let canonical = std::fs::canonicalize(&found).ok()?;
    (Some(&canonical) == verdict.program.as_ref()).then_some(found)
}

/// A lexical failure and the argv known at that point.
type Stop = (Deny, Vec<String>);

/// Rules 1-5: size, encoding, splitting and the per-word lexical checks. Returns the argv.
fn prepare(input: &Input, rules: &Rules) -> Result<Vec<String>, Stop> {
    match input {
        Input::Argv(args) => prepare_argv(args, rules),
        Input::Command(command) => prepare_command(command),
    }
}

fn too_long(detail: String) -> Stop {
    (Deny::denied("too-long", None, detail), Vec::new())
}

fn empty_command() -> Stop {
    (
        Deny::denied("empty-command", None, "there is no command to run"),
        Vec::new(),
    )
}

fn check_sizes(total: usize, lengths: impl Iterator<Item = usize>) -> Result<(), Stop> {
    if total > MAX_COMMAND_BYTES {
        return Err(too_long(format!(
            "the command is {total} bytes; at most {MAX_COMMAND_BYTES} are accepted"
        )));
    }
    for (i, len) in lengths.enumerate() {
        if len > MAX_WORD_BYTES {
            return Err(too_long(format!(
                "word {i} is {len} bytes; at most {MAX_WORD_BYTES} are accepted (MAX_ARG_STRLEN)"
            )));
        }
    }
    Ok(())
}

fn prepare_argv(args: &[OsString], rules: &Rules) -> Result<Vec<String>, Stop> {
    let total = args.iter().map(|a| a.len() + 1).sum();
    check_sizes(total, args.iter().map(|a| a.len()))?;
    if args.is_empty() {
        return Err(empty_command());
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in args {
        match arg.to_str() {
            Some(s) => argv.push(s.to_owned()),
            None => {
                let lossy = arg.to_string_lossy();
                let deny = Deny::denied(
                    "invalid-utf8",
                    Some(&lossy),
                    format!("{} is not valid UTF-8", text::quote(&lossy)),
                );
                return Err((deny, Vec::new()));
            }
        }
    }
    // The arguments of a free-text program: no shell ever parses them (we exec argv), so only
    // the control characters that are not text stay refused.
    let free = rules.free_text.contains(&argv[0]) && free_text_entry(&argv[0]).is_ok();
    let checked = if free { &argv[..1] } else { &argv[..] };
    let lexical = text::check_control(checked.iter().map(String::as_str))
        .and_then(|()| text::check_substitution(checked.iter().map(String::as_str)))
        .and_then(|()| text::check_operator_words(checked.iter().map(String::as_str)))
        .and_then(|()| match free {
            true => text::check_free_text(argv[1..].iter().map(String::as_str)),
            false => Ok(()),
        });
    match lexical {
        Ok(()) => Ok(argv),
        Err(deny) => Err((deny, argv)),
    }
}

fn prepare_command(command: &str) -> Result<Vec<String>, Stop> {
    check_sizes(command.len(), std::iter::once(0))?;
    if let Some((pos, c)) = command.char_indices().find(|(_, c)| text::is_control(*c)) {
        return Err((
            text::control_deny(token_around(command, pos), c),
            Vec::new(),
        ));
    }
    let words = split_command(command).map_err(|e| {
        let deny = Deny::denied(
            "unterminated-quote",
            None,
            format!("the command cannot be split into words: {e}"),
        );
        (deny, Vec::new())
    })?;
    check_sizes(0, words.iter().map(|w| w.as_str().len()))?;
    if words.is_empty() {
        return Err(empty_command());
    }
    let argv: Vec<String> = words.iter().map(|w| w.as_str().to_owned()).collect();
    let lexical = text::check_substitution(argv.iter().map(String::as_str))
        .and_then(|()| text::check_unquoted_operators(&words))
        .and_then(|()| text::check_expansions(&words))
        .and_then(|()| text::check_comments(&words));
    match lexical {
        Ok(()) => Ok(argv),
        Err(deny) => Err((deny, argv)),
    }
}

/// The space-separated chunk of `s` around byte `pos` (for naming the word with a control
/// character before the string is split).
fn token_around(s: &str, pos: usize) -> &str {
    let start = s[..pos].rfind(' ').map_or(0, |i| i + 1);
    let end = s[pos..].find(' ').map_or(s.len(), |i| pos + i);
    &s[start..end]
}

fn allowed(argv: Vec<String>, program: Option<PathBuf>) -> Verdict {
    let name = argv.first().map_or(String::new(), |w| clean(w, 80));
    let reason = match &program {
        Some(p) => format!("allowed: {name} runs {}", clean(&p.to_string_lossy(), 200)),
        None => format!("allowed: {name}"),
    };
    Verdict {
        outcome: Outcome::Allowed,
        rule: "allowed".to_owned(),
        word: None,
        program,
        reason,
        argv,
    }
}

fn denied(deny: Deny, argv: Vec<String>, program: Option<PathBuf>) -> Verdict {
    Verdict {
        reason: deny.reason(),
        outcome: deny.outcome,
        rule: deny.rule.to_owned(),
        word: deny.word,
        program,
        argv,
    }
}

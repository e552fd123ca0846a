//! Argument rules for `node` (and `nodejs`).
//!
//! Node can run code that is not in a file the caller named: `-e/-p` take code on the command
//! line, `-r/--import/--loader` preload modules, `--env-file` can set `NODE_OPTIONS`, `-` and a
//! missing script read code from stdin, `--inspect` opens a debugger port. Options before the
//! script are therefore deny-by-default: only a built-in list of options known to be harmless
//! passes, plus whatever the profile adds in `rules.node_options`. Everything after the script
//! belongs to the script (`node test.js -e x` passes `-e` to test.js).

use super::deny::Deny;
use super::text::quote;

/// Options that make node run code from somewhere other than the script file (or expose a
/// debugger). Matched on the normalized long name (`_` -> `-`), also with `=value`.
const EVAL_LONG: &[&str] = &[
    "eval",
    "print",
    "interactive",
    "require",
    "import",
    "loader",
    "experimental-loader",
    "experimental-policy",
    "openssl-config",
    "snapshot-blob",
    "build-snapshot",
    "build-snapshot-config",
];

/// Name prefixes with the same problem: `--env-file*` (may set NODE_OPTIONS), `--inspect*` and
/// `--debug*` (debugger: code injection over a port).
const EVAL_PREFIXES: &[&str] = &["env-file", "inspect", "debug"];

/// Single letters that evaluate or preload code: `-e`, `-p`, `-i`, `-r`.
const EVAL_SHORT: &[char] = &['e', 'p', 'i', 'r'];

/// Harmless boolean options.
const SAFE_FLAGS: &[&str] = &[
    "--test",
    "--test-only",
    "--test-force-exit",
    "--experimental-test-coverage",
    "--watch",
    "--enable-source-maps",
    "--trace-warnings",
    "--trace-deprecation",
    "--trace-uncaught",
    "--throw-deprecation",
    "--pending-deprecation",
    "--no-warnings",
    "--no-deprecation",
    "--expose-gc",
    "--preserve-symlinks",
    "--preserve-symlinks-main",
    "--abort-on-uncaught-exception",
    "--experimental-vm-modules",
    "--experimental-strip-types",
    "--frozen-intrinsics",
    "--disallow-code-generation-from-strings",
    "--zero-fill-buffers",
    "--no-experimental-fetch",
    "-c",
    "--check",
    "-v",
    "--version",
    "-h",
    "--help",
    "--v8-options",
];

/// Harmless options that take a value, as `--opt=value` or as the next word.
const SAFE_VALUE_OPTIONS: &[&str] = &[
    "--test-name-pattern",
    "--test-skip-pattern",
    "--test-concurrency",
    "--test-timeout",
    "--test-reporter-destination",
    "--input-type",
    "--title",
    "--unhandled-rejections",
    "--disable-warning",
    "-C",
    "--conditions",
    "--experimental-default-type",
    "--test-shard",
];

/// Built-in test reporters. Any other `--test-reporter` value is a module path or package
/// name, which node would load and run.
const SAFE_REPORTERS: &[&str] = &["spec", "tap", "dot", "junit", "lcov"];

/// V8 and node options that are harmless but only accepted in the `--opt=value` form (the
/// value could otherwise be mistaken for the script).
const SAFE_EQ_ONLY: &[&str] = &[
    "--max-old-space-size",
    "--max-semi-space-size",
    "--stack-size",
    "--stack-trace-limit",
    "--test-coverage-include",
    "--test-coverage-exclude",
];

/// Options after which node needs no script: it runs tests, prints and exits, or runs a
/// package.json script.
const NO_SCRIPT_NEEDED: &[&str] = &[
    "--test",
    "--version",
    "-v",
    "--help",
    "-h",
    "--v8-options",
    "--run",
];

/// Node options that take their value from the next word when written without `=`. Used for
/// options a profile allows through `rules.node_options`, so the value is never mistaken for
/// the script.
const NODE_VALUE_OPTIONS: &[&str] = &[
    "-e",
    "--eval",
    "-p",
    "--print",
    "-r",
    "--require",
    "--import",
    "--loader",
    "--experimental-loader",
    "-C",
    "--conditions",
    "--env-file",
    "--env-file-if-exists",
    "--input-type",
    "--title",
    "--run",
    "--watch-path",
    "--redirect-warnings",
    "--report-dir",
    "--report-directory",
    "--report-filename",
    "--report-signal",
    "--diagnostic-dir",
    "--cpu-prof-dir",
    "--cpu-prof-name",
    "--cpu-prof-interval",
    "--heap-prof-dir",
    "--heap-prof-name",
    "--heap-prof-interval",
    "--heapsnapshot-signal",
    "--heapsnapshot-near-heap-limit",
    "--icu-data-dir",
    "--inspect-port",
    "--debug-port",
    "--inspect-publish-uid",
    "--openssl-config",
    "--experimental-policy",
    "--policy-integrity",
    "--secure-heap",
    "--secure-heap-min",
    "--snapshot-blob",
    "--tls-cipher-list",
    "--tls-keylog",
    "--trace-event-categories",
    "--trace-event-file-pattern",
    "--use-largepages",
    "--v8-pool-size",
    "--max-http-header-size",
    "--dns-result-order",
    "--disable-proto",
    "--allow-fs-read",
    "--allow-fs-write",
    "--experimental-sea-config",
    "--build-snapshot-config",
    "--experimental-config-file",
    "--localstorage-file",
    "--trace-require-module",
    "--unhandled-rejections",
    "--disable-warning",
    "--experimental-default-type",
    "--test-name-pattern",
    "--test-skip-pattern",
    "--test-concurrency",
    "--test-timeout",
    "--test-reporter",
    "--test-reporter-destination",
    "--test-shard",
];

/// Options that put inline code on the command line (allowed only through `node_options`).
const INLINE_CODE: &[&str] = &["-e", "--eval", "-p", "--print"];

/// One option word split into its normalized name and its `=value`, if any.
/// Node accepts `_` for `-` in option names (`--inspect_brk`), so names are normalized.
struct NodeOpt<'w> {
    name: String,
    value: Option<&'w str>,
}

fn parse(word: &str) -> NodeOpt<'_> {
    let (name, value) = match word.split_once('=') {
        Some((n, v)) if word.starts_with("--") || n.len() == 2 => (n, Some(v)),
        _ => (word, None),
    };
    let name = if let Some(long) = name.strip_prefix("--") {
        format!("--{}", long.replace('_', "-"))
    } else {
        name.to_owned()
    };
    NodeOpt { name, value }
}

/// What the scanner learned from one option.
enum Step {
    /// The option is fine; skip this many following words (its value).
    Skip(usize),
    /// Inline code (`-e` allowed by the profile): no script is needed; skip `n` words.
    Code(usize),
}

/// Checks a node command line `words` (`words[0]` is node itself).
pub(crate) fn check(words: &[String], extra: &[String]) -> Result<(), Deny> {
    let mut runs_without_script = false;
    let mut i = 1;
    while let Some(word) = words.get(i) {
        if word == "--" {
            return match words.get(i + 1) {
                Some(_) => Ok(()),
                None => no_script(runs_without_script),
            };
        }
        if !word.starts_with('-') {
            return Ok(()); // the script; the rest are its arguments
        }
        let opt = parse(word);
        let step = match allowed_extra(word, &opt, extra) {
            Some(step) => step,
            None => {
                deny_eval(word, &opt)?;
                builtin(word, &opt, words.get(i + 1))?
            }
        };
        if NO_SCRIPT_NEEDED.contains(&opt.name.as_str()) {
            runs_without_script = true;
        }
        i += 1 + match step {
            Step::Skip(n) => n,
            Step::Code(n) => {
                runs_without_script = true;
                n
            }
        };
    }
    no_script(runs_without_script)
}

/// A word the profile allows through `rules.node_options`, matched exactly or as
/// `--name=value` for a listed `--name` (names normalized on both sides).
fn allowed_extra(word: &str, opt: &NodeOpt, extra: &[String]) -> Option<Step> {
    let listed = extra.iter().any(|e| {
        e == word || (opt.value.is_some() && e.starts_with("--") && parse(e).name == opt.name)
    });
    if !listed {
        return None;
    }
    let takes_next = opt.value.is_none() && NODE_VALUE_OPTIONS.contains(&opt.name.as_str());
    let skip = usize::from(takes_next);
    Some(if INLINE_CODE.contains(&opt.name.as_str()) {
        Step::Code(skip)
    } else {
        Step::Skip(skip)
    })
}

/// Rule `node-eval`: options that run code not named as the script.
fn deny_eval(word: &str, opt: &NodeOpt) -> Result<(), Deny> {
    let why = if word == "-" {
        Some("reads the program from stdin")
    } else if let Some(long) = opt.name.strip_prefix("--") {
        if EVAL_LONG.contains(&long) || EVAL_PREFIXES.iter().any(|p| long.starts_with(p)) {
            Some(eval_why(long))
        } else {
            None
        }
    } else {
        opt.name
            .chars()
            .skip(1)
            .find(|c| EVAL_SHORT.contains(c))
            .map(short_why)
    };
    match why {
        Some(why) => Err(Deny::denied(
            "node-eval",
            Some(word),
            format!("node option {} {why}", quote(word)),
        )),
        None => Ok(()),
    }
}

fn short_why(c: char) -> &'static str {
    match c {
        'e' | 'p' => "evaluates code given on the command line",
        'i' => "starts a REPL that reads code from stdin",
        _ => "loads and runs a module before the script",
    }
}

fn eval_why(long: &str) -> &'static str {
    match long {
        "eval" | "print" => "evaluates code given on the command line",
        "interactive" => "starts a REPL that reads code from stdin",
        "require" | "import" | "loader" | "experimental-loader" => {
            "loads and runs a module before the script"
        }
        l if l.starts_with("env-file") => "loads environment variables (e.g. NODE_OPTIONS)",
        l if l.starts_with("inspect") || l.starts_with("debug") => {
            "opens a debugger that can run arbitrary code"
        }
        _ => "loads code or configuration from a file",
    }
}

/// The built-in allow-list. Returns how many following words the option consumes.
fn builtin(word: &str, opt: &NodeOpt, next: Option<&String>) -> Result<Step, Deny> {
    let name = opt.name.as_str();
    if name == "--test-reporter" {
        let value = opt.value.or(next.map(String::as_str));
        return match value {
            Some(v) if SAFE_REPORTERS.contains(&v) => {
                Ok(Step::Skip(usize::from(opt.value.is_none())))
            }
            _ => Err(node_option(
                word,
                "only the built-in reporters spec, tap, dot, junit and lcov are allowed (a \
                 reporter path or package would load code)",
            )),
        };
    }
    if opt.value.is_none() && SAFE_FLAGS.contains(&name) {
        return Ok(Step::Skip(0));
    }
    if SAFE_VALUE_OPTIONS.contains(&name) {
        return Ok(Step::Skip(usize::from(
            opt.value.is_none() && next.is_some(),
        )));
    }
    if opt.value.is_some() && SAFE_EQ_ONLY.contains(&name) {
        return Ok(Step::Skip(0));
    }
    let why = if SAFE_EQ_ONLY.contains(&name) {
        "is only accepted as --option=value"
    } else {
        "is not on the list of node options known to be safe (deny by default)"
    };
    Err(node_option(word, why))
}

fn node_option(word: &str, why: &str) -> Deny {
    Deny::denied(
        "node-option",
        Some(word),
        format!("node option {} {why}", quote(word)),
    )
}

/// Rule `node-stdin`: without a script node reads the program from stdin (or starts a REPL).
fn no_script(runs_without_script: bool) -> Result<(), Deny> {
    if runs_without_script {
        Ok(())
    } else {
        Err(Deny::denied(
            "node-stdin",
            None,
            "node without a script file reads the program from stdin (or starts a REPL); name \
             the script to run",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(line: &str, extra: &[&str]) -> &'static str {
        let words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        match check(&words, &extra) {
            Ok(()) => "allowed",
            Err(d) => d.rule,
        }
    }

    #[test]
    fn node_rules() {
        assert_eq!(rule("node t.js", &[]), "allowed");
        assert_eq!(rule("node t.js -e x", &[]), "allowed");
        assert_eq!(rule("node -e x", &[]), "node-eval");
        assert_eq!(rule("node -pe x", &[]), "node-eval");
        assert_eq!(rule("node --eval=x", &[]), "node-eval");
        assert_eq!(rule("node --inspect_brk t.js", &[]), "node-eval");
        assert_eq!(
            rule("node --env-file-if-exists=.env t.js", &[]),
            "node-eval"
        );
        assert_eq!(rule("node -", &[]), "node-eval");
        assert_eq!(rule("node", &[]), "node-stdin");
        assert_eq!(rule("node --", &[]), "node-stdin");
        assert_eq!(rule("node -- t.js", &[]), "allowed");
        assert_eq!(rule("node --test", &[]), "allowed");
        assert_eq!(rule("node --title -e t.js", &[]), "allowed");
        assert_eq!(rule("node --title", &[]), "node-stdin");
        assert_eq!(rule("node --max_old_space_size=10 t.js", &[]), "allowed");
        assert_eq!(
            rule("node --max-old-space-size 10 t.js", &[]),
            "node-option"
        );
        assert_eq!(
            rule("node --test-reporter ./r.js --test", &[]),
            "node-option"
        );
        assert_eq!(rule("node --test-reporter tap --test", &[]), "allowed");
        assert_eq!(rule("node --bogus t.js", &[]), "node-option");
        assert_eq!(rule("node -cv t.js", &[]), "node-option");
        assert_eq!(rule("node --test=1", &[]), "node-option");
        assert_eq!(rule("node -e 1", &["-e"]), "allowed");
        assert_eq!(rule("node -e 1 -r x", &["-e"]), "node-eval");
        assert_eq!(rule("node --eval=1", &["--eval"]), "allowed");
        assert_eq!(rule("node --run test", &["--run"]), "allowed");
        assert_eq!(
            rule(
                "node --experimental-loader x t.js",
                &["--experimental-loader"]
            ),
            "allowed"
        );
    }
}

//! Argument rules for programs that run another program (`env node t.js`, `timeout 60 npm
//! test`, `xargs eslint`, ...).
//!
//! A wrapper is only as safe as what it runs, so its own options are parsed the way GNU
//! getopt does (options stop at the first operand, `--` ends them, long options may be
//! abbreviated, short options cluster), unknown options are denied, and the target is checked
//! like a top-level command against `rules.wrapped`.

use std::path::{Path, PathBuf};

use super::deny::Deny;
use super::resolve::absolute;
use super::text::quote;

/// Does an option take a value?
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arg {
    No,
    /// Attached (`-n5`, `--max-args=5`) or the next word (`-n 5`, `--max-args 5`).
    Required,
    /// Only attached to a long option (`--default-signal=TERM`).
    Optional,
}

/// What accepting an option means for the gate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    Accept,
    /// Changes the working directory of the target (`env -C DIR`).
    Chdir,
    /// Denied with rule `wrapper-option` and this explanation.
    Deny(&'static str),
}

struct Opt {
    short: Option<char>,
    long: Option<&'static str>,
    arg: Arg,
    effect: Effect,
}

const fn opt(short: Option<char>, long: Option<&'static str>, arg: Arg) -> Opt {
    Opt {
        short,
        long,
        arg,
        effect: Effect::Accept,
    }
}

const fn deny(short: Option<char>, long: Option<&'static str>, arg: Arg, why: &'static str) -> Opt {
    Opt {
        short,
        long,
        arg,
        effect: Effect::Deny(why),
    }
}

/// Words between a wrapper's options and its target.
#[derive(Clone, Copy)]
enum Operand {
    /// timeout's DURATION: `10`, `1.5`, `90s`, `5m`.
    Duration,
    /// chrt's PRIORITY.
    Number,
    /// taskset's MASK or CPU list.
    CpuMask,
}

/// How one wrapper reads its command line.
pub(crate) struct WrapperSpec {
    pub name: &'static str,
    options: &'static [Opt],
    operands: &'static [Operand],
    /// nice's historical `-N` / `-+N` / `--N` adjustment.
    numeric_option: bool,
    /// env's `-` alone means `-i`.
    dash_is_option: bool,
    /// xargs appends words read at run time, which the gate cannot see; its target must be a
    /// program whose arguments are not checked (no node/npm/npx/wrapper/shell).
    target_must_be_plain: bool,
    /// Coverage runners (c8, nyc) spawn their command through the PATH npm/npx give them
    /// (with `node_modules/.bin`), so the target is checked by name like an npx target instead
    /// of being resolved here.
    target_is_named: bool,
}

const SPLIT_STRING: &str = "splits a string into more words, hiding the command from the gate";
const OTHER_PROCESS: &str = "acts on another process instead of running a command";

const ENV_OPTS: &[Opt] = &[
    opt(Some('i'), Some("ignore-environment"), Arg::No),
    opt(Some('0'), Some("null"), Arg::No),
    opt(Some('v'), Some("debug"), Arg::No),
    opt(Some('u'), Some("unset"), Arg::Required),
    Opt {
        short: Some('C'),
        long: Some("chdir"),
        arg: Arg::Required,
        effect: Effect::Chdir,
    },
    deny(Some('S'), Some("split-string"), Arg::Required, SPLIT_STRING),
    opt(None, Some("default-signal"), Arg::Optional),
    opt(None, Some("ignore-signal"), Arg::Optional),
    opt(None, Some("block-signal"), Arg::Optional),
    opt(None, Some("list-signal-handling"), Arg::No),
];

const NICE_OPTS: &[Opt] = &[opt(Some('n'), Some("adjustment"), Arg::Required)];

const TIMEOUT_OPTS: &[Opt] = &[
    opt(Some('s'), Some("signal"), Arg::Required),
    opt(Some('k'), Some("kill-after"), Arg::Required),
    opt(Some('v'), Some("verbose"), Arg::No),
    opt(Some('p'), Some("preserve-status"), Arg::No),
    opt(Some('f'), Some("foreground"), Arg::No),
];

const XARGS_OPTS: &[Opt] = &[
    opt(Some('0'), Some("null"), Arg::No),
    opt(Some('r'), Some("no-run-if-empty"), Arg::No),
    opt(Some('n'), Some("max-args"), Arg::Required),
    opt(Some('L'), Some("max-lines"), Arg::Required),
    opt(Some('P'), Some("max-procs"), Arg::Required),
    opt(Some('d'), Some("delimiter"), Arg::Required),
    opt(Some('I'), None, Arg::Required),
    opt(Some('t'), Some("verbose"), Arg::No),
    opt(Some('x'), Some("exit"), Arg::No),
    opt(Some('s'), Some("max-chars"), Arg::Required),
    opt(Some('a'), Some("arg-file"), Arg::Required),
    opt(Some('E'), None, Arg::Required),
    opt(None, Some("process-slot-var"), Arg::Required),
];

const STDBUF_OPTS: &[Opt] = &[
    opt(Some('i'), Some("input"), Arg::Required),
    opt(Some('o'), Some("output"), Arg::Required),
    opt(Some('e'), Some("error"), Arg::Required),
];

const SETSID_OPTS: &[Opt] = &[
    opt(Some('c'), Some("ctty"), Arg::No),
    opt(Some('f'), Some("fork"), Arg::No),
    opt(Some('w'), Some("wait"), Arg::No),
];

const IONICE_OPTS: &[Opt] = &[
    opt(Some('c'), Some("class"), Arg::Required),
    opt(Some('n'), Some("classdata"), Arg::Required),
    opt(Some('t'), Some("ignore"), Arg::No),
    deny(Some('p'), Some("pid"), Arg::Required, OTHER_PROCESS),
    deny(Some('P'), Some("pgid"), Arg::Required, OTHER_PROCESS),
    deny(Some('u'), Some("uid"), Arg::Required, OTHER_PROCESS),
];

const CHRT_OPTS: &[Opt] = &[
    opt(Some('b'), Some("batch"), Arg::No),
    opt(Some('d'), Some("deadline"), Arg::No),
    opt(Some('f'), Some("fifo"), Arg::No),
    opt(Some('i'), Some("idle"), Arg::No),
    opt(Some('o'), Some("other"), Arg::No),
    opt(Some('r'), Some("rr"), Arg::No),
    opt(Some('R'), Some("reset-on-fork"), Arg::No),
    opt(Some('v'), Some("verbose"), Arg::No),
    deny(Some('p'), Some("pid"), Arg::No, OTHER_PROCESS),
    deny(Some('a'), Some("all-tasks"), Arg::No, OTHER_PROCESS),
];

const TASKSET_OPTS: &[Opt] = &[
    opt(Some('c'), Some("cpu-list"), Arg::No),
    deny(Some('p'), Some("pid"), Arg::No, OTHER_PROCESS),
    deny(Some('a'), Some("all-tasks"), Arg::No, OTHER_PROCESS),
];

const TIME_OPTS: &[Opt] = &[
    opt(Some('p'), Some("portability"), Arg::No),
    opt(Some('v'), Some("verbose"), Arg::No),
    opt(Some('q'), Some("quiet"), Arg::No),
    opt(Some('a'), Some("append"), Arg::No),
    opt(Some('f'), Some("format"), Arg::Required),
    opt(Some('o'), Some("output"), Arg::Required),
];

const PRELOAD: &str = "preloads a module into the command (like node --require)";

/// c8's options (yargs). Unknown ones are denied: their arity decides which word is the
/// command.
const C8_OPTS: &[Opt] = &[
    opt(Some('r'), Some("reporter"), Arg::Required),
    opt(Some('o'), Some("reports-dir"), Arg::Required),
    opt(None, Some("report-dir"), Arg::Required),
    opt(Some('x'), Some("exclude"), Arg::Required),
    opt(Some('n'), Some("include"), Arg::Required),
    opt(Some('e'), Some("extension"), Arg::Required),
    opt(None, Some("src"), Arg::Required),
    opt(None, Some("temp-directory"), Arg::Required),
    opt(None, Some("branches"), Arg::Required),
    opt(None, Some("functions"), Arg::Required),
    opt(None, Some("lines"), Arg::Required),
    opt(None, Some("statements"), Arg::Required),
    opt(None, Some("watermarks"), Arg::Required),
    opt(Some('c'), Some("config"), Arg::Required),
    opt(Some('a'), Some("exclude-after-remap"), Arg::No),
    opt(None, Some("all"), Arg::No),
    opt(None, Some("100"), Arg::No),
    opt(None, Some("check-coverage"), Arg::No),
    opt(None, Some("per-file"), Arg::No),
    opt(None, Some("clean"), Arg::No),
    opt(None, Some("no-clean"), Arg::No),
    opt(None, Some("skip-full"), Arg::No),
    opt(None, Some("omit-relative"), Arg::No),
    opt(None, Some("exclude-node-modules"), Arg::No),
    opt(None, Some("merge-async"), Arg::No),
];

/// nyc's options (yargs), a conservative subset.
const NYC_OPTS: &[Opt] = &[
    opt(Some('r'), Some("reporter"), Arg::Required),
    opt(None, Some("report-dir"), Arg::Required),
    opt(Some('t'), Some("temp-dir"), Arg::Required),
    opt(Some('x'), Some("exclude"), Arg::Required),
    opt(Some('n'), Some("include"), Arg::Required),
    opt(Some('e'), Some("extension"), Arg::Required),
    opt(None, Some("branches"), Arg::Required),
    opt(None, Some("functions"), Arg::Required),
    opt(None, Some("lines"), Arg::Required),
    opt(None, Some("statements"), Arg::Required),
    opt(Some('a'), Some("all"), Arg::No),
    opt(None, Some("check-coverage"), Arg::No),
    opt(None, Some("per-file"), Arg::No),
    opt(Some('s'), Some("silent"), Arg::No),
    opt(None, Some("clean"), Arg::No),
    opt(None, Some("cache"), Arg::No),
    opt(None, Some("skip-full"), Arg::No),
    opt(None, Some("skip-empty"), Arg::No),
    deny(Some('i'), Some("require"), Arg::Required, PRELOAD),
];

const fn spec(name: &'static str, options: &'static [Opt]) -> WrapperSpec {
    WrapperSpec {
        name,
        options,
        operands: &[],
        numeric_option: false,
        dash_is_option: false,
        target_must_be_plain: false,
        target_is_named: false,
    }
}

/// Every wrapper the gate understands, by program name.
const WRAPPERS: &[WrapperSpec] = &[
    WrapperSpec {
        dash_is_option: true,
        ..spec("env", ENV_OPTS)
    },
    WrapperSpec {
        numeric_option: true,
        ..spec("nice", NICE_OPTS)
    },
    WrapperSpec {
        operands: &[Operand::Duration],
        ..spec("timeout", TIMEOUT_OPTS)
    },
    WrapperSpec {
        target_must_be_plain: true,
        ..spec("xargs", XARGS_OPTS)
    },
    spec("nohup", &[]),
    spec("stdbuf", STDBUF_OPTS),
    spec("setsid", SETSID_OPTS),
    spec("ionice", IONICE_OPTS),
    WrapperSpec {
        operands: &[Operand::Number],
        ..spec("chrt", CHRT_OPTS)
    },
    WrapperSpec {
        operands: &[Operand::CpuMask],
        ..spec("taskset", TASKSET_OPTS)
    },
    spec("time", TIME_OPTS),
    WrapperSpec {
        target_is_named: true,
        ..spec("c8", C8_OPTS)
    },
    WrapperSpec {
        target_is_named: true,
        ..spec("nyc", NYC_OPTS)
    },
];

/// The wrapper spec for a program basename, if it is a wrapper.
pub(crate) fn lookup(name: &str) -> Option<&'static WrapperSpec> {
    WRAPPERS.iter().find(|w| w.name == name)
}

/// Where a wrapper's target starts and what it needs.
pub(crate) struct Target {
    pub index: usize,
    /// Working directory of the target (changed by `env -C`).
    pub cwd: PathBuf,
    pub must_be_plain: bool,
    /// Check the target by name only (see `WrapperSpec::target_is_named`).
    pub named: bool,
}

fn wrapper_option(spec: &WrapperSpec, word: &str, why: &str) -> Deny {
    Deny::denied(
        "wrapper-option",
        Some(word),
        format!("{} option {} {why}", spec.name, quote(word)),
    )
}

impl WrapperSpec {
    /// Parses `words` (`words[0]` is the wrapper) up to the target.
    pub(crate) fn parse(&self, words: &[String], cwd: &Path) -> Result<Target, Deny> {
        let mut cwd = cwd.to_path_buf();
        let mut i = 1;
        while let Some(word) = words.get(i) {
            if word == "--" {
                i += 1;
                break;
            }
            let is_option = word.starts_with('-') && (word.len() > 1 || self.dash_is_option);
            if !is_option {
                break;
            }
            let bare = word == "-" || (self.numeric_option && is_numeric_option(word));
            i += if bare {
                1
            } else if let Some(long) = word.strip_prefix("--") {
                self.parse_long(word, long, words.get(i + 1), &mut cwd)?
            } else {
                self.parse_short(word, words.get(i + 1), &mut cwd)?
            };
        }
        for operand in self.operands {
            match words.get(i) {
                Some(word) if operand.accepts(word) => i += 1,
                Some(word) => {
                    return Err(wrapper_option(self, word, operand.expected()));
                }
                None => break,
            }
        }
        if i >= words.len() {
            return Err(Deny::denied(
                "wrapped-missing",
                None,
                format!(
                    "{} without a command to run is not allowed; name the command",
                    self.name
                ),
            ));
        }
        Ok(Target {
            index: i,
            cwd,
            must_be_plain: self.target_must_be_plain,
            named: self.target_is_named,
        })
    }

    /// `--name`, `--name=value`, `--name value` and unique abbreviations. Returns the number
    /// of words consumed.
    fn parse_long(
        &self,
        word: &str,
        long: &str,
        next: Option<&String>,
        cwd: &mut PathBuf,
    ) -> Result<usize, Deny> {
        let (name, inline) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        let exact = self.options.iter().find(|o| o.long == Some(name));
        let found = match exact {
            Some(o) => o,
            None => {
                let mut hits = self
                    .options
                    .iter()
                    .filter(|o| !name.is_empty() && o.long.is_some_and(|l| l.starts_with(name)));
                match (hits.next(), hits.next()) {
                    (Some(o), None) => o,
                    (Some(_), Some(_)) => return Err(wrapper_option(self, word, "is ambiguous")),
                    _ => {
                        return Err(wrapper_option(
                            self,
                            word,
                            "is not allowed (deny by default)",
                        ))
                    }
                }
            }
        };
        let (value, used) = match (found.arg, inline) {
            (Arg::No, Some(_)) => return Err(wrapper_option(self, word, "does not take a value")),
            (Arg::No, None) | (Arg::Optional, None) => (None, 1),
            (_, Some(v)) => (Some(v), 1),
            (Arg::Required, None) => match next {
                Some(v) => (Some(v.as_str()), 2),
                None => return Err(wrapper_option(self, word, "needs a value")),
            },
        };
        self.apply(found, word, value, cwd)?;
        Ok(used)
    }

    /// A cluster of short options (`-i0`, `-uNAME`, `-n 5`). Returns the number of words
    /// consumed.
    fn parse_short(
        &self,
        word: &str,
        next: Option<&String>,
        cwd: &mut PathBuf,
    ) -> Result<usize, Deny> {
        let cluster = &word[1..];
        for (pos, c) in cluster.char_indices() {
            let Some(found) = self.options.iter().find(|o| o.short == Some(c)) else {
                return Err(wrapper_option(
                    self,
                    word,
                    &format!(
                        "has the unknown option '{}' (deny by default)",
                        c.escape_debug()
                    ),
                ));
            };
            if found.arg == Arg::No {
                self.apply(found, word, None, cwd)?;
                continue;
            }
            let rest = &cluster[pos + c.len_utf8()..];
            return if !rest.is_empty() {
                self.apply(found, word, Some(rest), cwd).map(|()| 1)
            } else {
                match next {
                    Some(v) => self.apply(found, word, Some(v), cwd).map(|()| 2),
                    None => Err(wrapper_option(self, word, "needs a value")),
                }
            };
        }
        Ok(1)
    }

    fn apply(
        &self,
        opt: &Opt,
        word: &str,
        value: Option<&str>,
        cwd: &mut PathBuf,
    ) -> Result<(), Deny> {
        match opt.effect {
            Effect::Accept => Ok(()),
            Effect::Deny(why) => Err(wrapper_option(self, word, why)),
            Effect::Chdir => {
                if let Some(dir) = value {
                    *cwd = absolute(cwd, Path::new(dir));
                }
                Ok(())
            }
        }
    }
}

/// nice's `-5`, `-+5`, `--5`.
fn is_numeric_option(word: &str) -> bool {
    let digits = word[1..].strip_prefix(['+', '-']).unwrap_or(&word[1..]);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

impl Operand {
    fn accepts(self, word: &str) -> bool {
        match self {
            Operand::Duration => {
                let number = word.strip_suffix(['s', 'm', 'h', 'd']).unwrap_or(word);
                let mut parts = number.splitn(2, '.');
                let whole = parts.next().unwrap_or("");
                let frac = parts.next().unwrap_or("");
                (!whole.is_empty() || !frac.is_empty())
                    && whole.bytes().all(|b| b.is_ascii_digit())
                    && frac.bytes().all(|b| b.is_ascii_digit())
            }
            Operand::Number => !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()),
            Operand::CpuMask => {
                !word.is_empty()
                    && word
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() || matches!(b, b'x' | b',' | b'-' | b':'))
            }
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Operand::Duration => "is not a duration (expected e.g. 90, 90s, 5m)",
            Operand::Number => "is not a priority number",
            Operand::CpuMask => "is not a CPU mask or list",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(line: &str) -> Result<usize, &'static str> {
        let words: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let name = words[0].clone();
        let spec = lookup(&name).expect("a wrapper");
        spec.parse(&words, Path::new("/w"))
            .map(|t| t.index)
            .map_err(|d| d.rule)
    }

    #[test]
    fn wrappers() {
        assert_eq!(target("env node"), Ok(1));
        assert_eq!(target("env -i -u X node"), Ok(4));
        assert_eq!(target("env -iuX node"), Ok(2));
        assert_eq!(target("env - node"), Ok(2));
        assert_eq!(target("env --ignore-e node"), Ok(2));
        assert_eq!(target("env --ign node"), Err("wrapper-option"));
        assert_eq!(target("env -S x"), Err("wrapper-option"));
        assert_eq!(target("env -iS x"), Err("wrapper-option"));
        assert_eq!(target("env --split=x node"), Err("wrapper-option"));
        assert_eq!(target("env --bogus node"), Err("wrapper-option"));
        assert_eq!(target("env"), Err("wrapped-missing"));
        assert_eq!(target("env -- node"), Ok(2));
        assert_eq!(target("nice -10 node"), Ok(2));
        assert_eq!(target("nice -n 10 node"), Ok(3));
        assert_eq!(target("nice --adjustment=1 node"), Ok(2));
        assert_eq!(target("timeout 10 node"), Ok(2));
        assert_eq!(target("timeout -s KILL 1.5m node"), Ok(4));
        assert_eq!(target("timeout node t.js"), Err("wrapper-option"));
        assert_eq!(target("timeout 10"), Err("wrapped-missing"));
        assert_eq!(target("xargs -0 -n1 eslint"), Ok(3));
        assert_eq!(target("xargs -i eslint"), Err("wrapper-option"));
        assert_eq!(target("taskset -p 1 2"), Err("wrapper-option"));
        assert_eq!(target("taskset -c 0-3 node"), Ok(3));
        assert_eq!(target("chrt -f 10 node"), Ok(3));
        assert_eq!(target("nohup node"), Ok(1));
        assert_eq!(target("nohup --help"), Err("wrapper-option"));
        assert_eq!(target("c8 --reporter text -x test node t.js"), Ok(5));
        assert_eq!(target("c8 --reporter=lcov mocha"), Ok(2));
        assert_eq!(target("c8 --bogus node"), Err("wrapper-option"));
        assert_eq!(target("nyc --require x mocha"), Err("wrapper-option"));
    }

    #[test]
    fn env_chdir_changes_target_cwd() {
        let words: Vec<String> = ["env", "-C", "sub", "node"].map(String::from).to_vec();
        let t = lookup("env")
            .expect("env")
            .parse(&words, Path::new("/w"))
            .expect("ok");
        assert_eq!(t.cwd, Path::new("/w/sub"));
    }
}

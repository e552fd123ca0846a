//! The recursive part of the gate: a command in some position (top level, wrapper target,
//! npx target) is checked for an environment assignment, against the right allow-list,
//! resolved to a file whose location is safe, and then handed to its program's argument
//! rules, which may recurse into a nested command.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::deny::Deny;
use super::resolve::{absolute, link_path, resolve_lenient, search_path, Locator};
use super::text::{is_env_assignment, quote, quote_path};
use super::{node, npm, wrappers, Rules};

/// Nested commands deeper than this are refused (`npx npm exec npx ...`).
pub const MAX_DEPTH: usize = 8;

/// Where a command sits, which decides its allow-list and how it is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// argv[0]: `rules.programs`, resolved through PATH.
    Top,
    /// Target of env/nice/timeout/...: `rules.wrapped`, resolved through PATH.
    Wrapped,
    /// Target of npx / npm exec (and of c8/nyc): a package bin on `rules.wrapped`; it is found
    /// at run time in `node_modules/.bin` (or the registry), so it is not resolved here.
    Package,
}

/// Which argument rules apply, chosen by the basename of the word as typed.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Node,
    Npm,
    Npx,
    Wrapper(&'static wrappers::WrapperSpec),
    Shell,
    /// No argument rules (git, make, eslint ...): the kernel sandbox is the protection.
    Plain,
}

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "busybox",
];

/// The rule set for a program word (`./x/node` and `/usr/bin/node` are node too).
pub(crate) fn kind_of(word: &str) -> Kind {
    let base = word.rsplit('/').next().unwrap_or(word);
    match base {
        "node" | "nodejs" => Kind::Node,
        "npm" | "npm-cli.js" => Kind::Npm,
        "npx" | "npx-cli.js" => Kind::Npx,
        b if SHELLS.contains(&b) => Kind::Shell,
        b => wrappers::lookup(b).map_or(Kind::Plain, Kind::Wrapper),
    }
}

/// State of one gate call.
pub(crate) struct Engine<'a> {
    pub rules: &'a Rules,
    pub path: &'a OsStr,
    pub locator: Locator,
    /// Canonical path of argv[0] once resolved.
    pub program: Option<PathBuf>,
}

impl<'a> Engine<'a> {
    pub fn new(rules: &'a Rules, repo: &Path, path: &'a OsStr) -> Engine<'a> {
        Engine {
            rules,
            path,
            locator: Locator::new(repo, &rules.paths),
            program: None,
        }
    }

    /// Checks the command `words` sitting in `slot`, run from `cwd`, nested `depth` deep.
    pub fn check(
        &mut self,
        words: &[String],
        slot: Slot,
        cwd: &Path,
        depth: usize,
    ) -> Result<(), Deny> {
        if depth > MAX_DEPTH {
            return Err(Deny::denied(
                "too-deep",
                words.first().map(String::as_str),
                format!("commands nested more than {MAX_DEPTH} levels deep are not allowed"),
            ));
        }
        let Some(first) = words.first() else {
            return Err(Deny::denied(
                "wrapped-missing",
                None,
                "the wrapper has no command to run",
            ));
        };
        if first.is_empty() {
            return Err(Deny::denied(
                "empty-command",
                None,
                "the program name is empty",
            ));
        }
        if is_env_assignment(first) {
            return Err(env_assignment(first));
        }
        let rules_name = match slot {
            Slot::Top | Slot::Wrapped => {
                let program = self.resolve(first, slot, cwd)?;
                if slot == Slot::Top {
                    self.program = Some(program);
                }
                first.clone()
            }
            Slot::Package => self.package_target(first, cwd)?,
        };
        self.check_arguments(kind_of(&rules_name), words, cwd, depth)
    }

    /// Applies the argument rules of `kind`.
    fn check_arguments(
        &mut self,
        kind: Kind,
        words: &[String],
        cwd: &Path,
        depth: usize,
    ) -> Result<(), Deny> {
        match kind {
            Kind::Node => node::check(words, &self.rules.node_options),
            Kind::Npm => npm::check_npm(self, words, cwd, depth),
            Kind::Npx => npm::check_npx(self, words, cwd, depth),
            Kind::Wrapper(spec) => {
                let target = spec.parse(words, cwd)?;
                let rest = &words[target.index..];
                if target.must_be_plain {
                    self.require_plain(spec.name, rest)?;
                }
                let slot = if target.named {
                    Slot::Package
                } else {
                    Slot::Wrapped
                };
                self.check(rest, slot, &target.cwd, depth + 1)
            }
            Kind::Shell | Kind::Plain => Ok(()),
        }
    }

    /// xargs appends words the gate cannot see, so it may only run programs without argument
    /// rules.
    fn require_plain(&self, wrapper: &str, rest: &[String]) -> Result<(), Deny> {
        let target = rest.first().map_or("", String::as_str);
        match kind_of(target) {
            Kind::Plain => Ok(()),
            _ => Err(Deny::denied(
                "wrapped-not-allowed",
                Some(target),
                format!(
                    "{wrapper} appends arguments the gate cannot see, so it may not run {}, whose \
                     arguments must be checked",
                    quote(target)
                ),
            )),
        }
    }

    /// Rules 7 and 8: allow-list, PATH resolution and location checks. Returns the canonical
    /// program path.
    fn resolve(&self, word: &str, slot: Slot, cwd: &Path) -> Result<PathBuf, Deny> {
        if word.contains('/') {
            return self.resolve_path_word(word, slot, cwd);
        }
        let (list, rule, list_name) = match slot {
            Slot::Top => (&self.rules.programs, "not-allowed", "program list"),
            _ => (
                &self.rules.wrapped,
                "wrapped-not-allowed",
                "list of wrapped programs",
            ),
        };
        if !list.iter().any(|p| p == word) {
            let hint = if word.is_ascii() {
                ""
            } else {
                " (it contains non-ASCII characters (look-alike?))"
            };
            return Err(Deny::denied(
                rule,
                Some(word),
                format!("{} is not on this profile's {list_name}{hint}", quote(word)),
            ));
        }
        let Some(found) = search_path(word, self.path, cwd) else {
            return Err(Deny::not_found(
                word,
                format!(
                    "{} is not an executable file in any PATH directory",
                    quote(word)
                ),
            ));
        };
        self.locator.check_found(&found, word)
    }

    /// argv[0] with a `/`: only an exact `rules.paths` entry, or (with `repo_scripts`) an
    /// executable file inside the repo.
    fn resolve_path_word(&self, word: &str, slot: Slot, cwd: &Path) -> Result<PathBuf, Deny> {
        let rule = if slot == Slot::Top {
            "not-allowed"
        } else {
            "wrapped-not-allowed"
        };
        let lexical = absolute(cwd, Path::new(word));
        let canonical = match std::fs::canonicalize(&lexical) {
            Ok(c) => c,
            Err(_)
                if self.rules.repo_scripts
                    && self.locator.in_repo(&resolve_lenient(cwd, Path::new(word))) =>
            {
                return Err(Deny::not_found(
                    word,
                    format!("{} does not exist", quote(word)),
                ))
            }
            Err(_) if self.rules.paths.contains(&lexical) => {
                return Err(Deny::not_found(
                    word,
                    format!("{} does not exist", quote(word)),
                ))
            }
            Err(_) => {
                return Err(Deny::denied(
                    rule,
                    Some(word),
                    format!(
                        "{} is a path that is not on this profile's list of program paths",
                        quote(word)
                    ),
                ))
            }
        };
        if self.locator.is_exempt(&canonical) || self.locator.is_named(&lexical) {
            return self.locator.check_found(&lexical, word);
        }
        // A link in the repo leading out of it (a virtualenv's `bin/python`): with
        // `repo_scripts`, the repo's own program, as a script whose `#!` names the target.
        let link = link_path(&lexical);
        if self.rules.repo_scripts
            && self.locator.in_repo(&link)
            && !self.locator.in_repo(&canonical)
        {
            self.locator.check_repo_link(&link, &canonical, word)?;
            return Ok(canonical);
        }
        if self.locator.in_repo(&canonical) {
            if self.rules.repo_scripts {
                self.locator.check_repo_script(&canonical, word)?;
                return Ok(canonical);
            }
            return Err(Deny::denied(
                "program-in-repo",
                Some(word),
                format!(
                    "{} resolves to {}, inside the repository; this profile does not run the \
                     repository's own programs",
                    quote(word),
                    quote_path(&canonical)
                ),
            ));
        }
        let hint = match canonical.file_name().and_then(|n| n.to_str()) {
            Some(name) if self.rules.programs.iter().any(|p| p == name) => {
                format!(" (use the bare name {})", quote(name))
            }
            _ => String::new(),
        };
        Err(Deny::denied(
            rule,
            Some(word),
            format!(
                "{} is a path that is not on this profile's list of program paths{hint}",
                quote(word)
            ),
        ))
    }

    /// The target of npx / npm exec: a registry package name on `rules.wrapped`, or an exact
    /// `rules.paths` entry. Returns the name whose argument rules apply.
    fn package_target(&self, word: &str, cwd: &Path) -> Result<String, Deny> {
        if let Some(name) = npm::registry_name(word) {
            if self.rules.wrapped.iter().any(|w| w == name) {
                // Rules go by the unscoped name: `@x/node -e` is checked as node, to be safe.
                return Ok(name.rsplit('/').next().unwrap_or(name).to_owned());
            }
            return Err(Deny::denied(
                "wrapped-not-allowed",
                Some(word),
                format!(
                    "{} is not on this profile's list of wrapped programs",
                    quote(name)
                ),
            ));
        }
        let exempt = std::fs::canonicalize(absolute(cwd, Path::new(word)))
            .map(|c| self.locator.is_exempt(&c))
            .unwrap_or(false);
        if exempt {
            return Ok(word.to_owned());
        }
        Err(Deny::denied(
            "wrapped-not-allowed",
            Some(word),
            format!(
                "{} is a path, URL, git or alias spec, not a package name on this profile's \
                 list of wrapped programs",
                quote(word)
            ),
        ))
    }
}

/// Rule `env-assignment`.
pub(crate) fn env_assignment(word: &str) -> Deny {
    let name = word.split('=').next().unwrap_or(word);
    Deny::denied(
        "env-assignment",
        Some(word),
        format!(
            "{} would set the environment variable {} for the command; the environment is \
             chosen by the profile, not the command",
            quote(word),
            quote(name)
        ),
    )
}

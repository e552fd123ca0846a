//! `sandbox-run learn`, the pure part: a learned profile (`extends` BASE, then only `{ add =
//! [...] }` lists and a few values, each with a comment naming the refusal it answers), read
//! back from its own text, and the refusals of a run turned into its entries. A patch the
//! host boundary forbids (a credential file, a whole home, a code-loading variable, a program
//! path the repo chose) is never written, whatever the refusal suggested.

use crate::denials::{Patch, Refusal};
use crate::profile::{NetMode, Profile};
use std::path::{Component, Path, PathBuf};
use toml::Value;

/// The first line of every learned profile: learn rewrites only files that begin with it.
pub const MARKER: &str = "# sandbox-run learned profile";

/// One entry of a learned profile: `[section.key] add = [value]` (a list) or
/// `[section] key = value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub section: String,
    pub key: String,
    pub value: Value,
    pub list: bool,
    /// The refusal it answers (or what asked for it), for the comment.
    pub why: String,
}

/// A learned profile: its base and its entries, in the order learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    pub base: String,
    pub items: Vec<Item>,
}

/// Sections in the order they are written.
const SECTIONS: &[&str] = &["gate", "filesystem", "network", "limits", "env"];

/// What learn may write as a plain value: the limits a resource refusal raises, the network
/// mode, and the sandbox's own pseudo-terminals.
fn scalar_key(section: &str, key: &str) -> bool {
    match section {
        "limits" => LIMITS.contains(&key),
        "network" => key == "mode",
        "filesystem" => key == "dev_pts",
        _ => false,
    }
}

const LIMITS: &[&str] = &[
    "timeout", "memory", "cpus", "pids", "nofile", "fsize", "output", "disk",
];

impl Learned {
    pub fn new(base: &str) -> Learned {
        Learned {
            base: base.to_string(),
            items: Vec::new(),
        }
    }

    /// Reads a learned profile back. Errors: not a learned profile (no marker), or a setting
    /// learn does not write (then a person edited it: learn leaves it to them).
    pub fn parse(text: &str) -> Result<Learned, String> {
        if !text.starts_with(MARKER) {
            return Err(format!(
                "not a learned profile (its first line is not {MARKER:?})"
            ));
        }
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| e.message().replace('\n', " "))?;
        let comments = comments(text);
        let mut out = Learned::new("");
        for (k, v) in &table {
            match (k.as_str(), v) {
                ("extends", Value::String(b)) => out.base = b.clone(),
                (section, Value::Table(body)) if SECTIONS.contains(&section) => {
                    for (key, v) in body {
                        let add = v
                            .as_table()
                            .filter(|t| t.len() == 1)
                            .and_then(|t| t.get("add"))
                            .and_then(Value::as_array);
                        if let Some(list) = add {
                            for value in list {
                                out.items.push(Item {
                                    section: section.into(),
                                    key: key.clone(),
                                    why: comments
                                        .get(&value.to_string())
                                        .cloned()
                                        .unwrap_or_default(),
                                    value: value.clone(),
                                    list: true,
                                });
                            }
                        } else if scalar_key(section, key) && !v.is_table() && !v.is_array() {
                            let shown = format!("{key} = {v}");
                            out.items.push(Item {
                                section: section.into(),
                                key: key.clone(),
                                why: comments.get(&shown).cloned().unwrap_or_default(),
                                value: v.clone(),
                                list: false,
                            });
                        } else {
                            return Err(unknown(&format!("{section}.{key}")));
                        }
                    }
                }
                (other, _) => return Err(unknown(other)),
            }
        }
        if out.base.is_empty() {
            return Err("a learned profile without `extends`".into());
        }
        out.sort();
        Ok(out)
    }

    /// The profile's text: the marker, `extends`, then each section's values and lists.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{MARKER}: written by `sandbox-run learn`, which updates it in place (keep this line).\n\
             # Each entry answers a refusal of a run; delete what you do not want.\n\
             extends = {}\n",
            Value::String(self.base.clone())
        );
        for section in SECTIONS {
            let mine: Vec<&Item> = self
                .items
                .iter()
                .filter(|i| i.section == *section)
                .collect();
            let scalars: Vec<&&Item> = mine.iter().filter(|i| !i.list).collect();
            if !scalars.is_empty() {
                out.push_str(&format!("\n[{section}]\n"));
                for i in scalars {
                    out.push_str(&format!("{} = {}{}\n", i.key, i.value, comment(&i.why)));
                }
            }
            let mut keys: Vec<&str> = mine
                .iter()
                .filter(|i| i.list)
                .map(|i| i.key.as_str())
                .collect();
            keys.dedup();
            let mut seen = Vec::new();
            for key in keys {
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                out.push_str(&format!("\n[{section}.{key}]\nadd = [\n"));
                for i in mine.iter().filter(|i| i.list && i.key == key) {
                    out.push_str(&format!("    {},{}\n", i.value, comment(&i.why)));
                }
                out.push_str("]\n");
            }
        }
        out
    }

    fn has(&self, section: &str, key: &str, value: &Value) -> bool {
        self.items
            .iter()
            .any(|i| i.list && i.section == section && i.key == key && &i.value == value)
    }

    /// Adds `item`: a list entry once, a value in place of the one learned before.
    pub fn put(&mut self, item: Item) {
        if item.list {
            if !self.has(&item.section, &item.key, &item.value) {
                self.items.push(item);
            }
        } else if let Some(old) = self
            .items
            .iter_mut()
            .find(|i| !i.list && i.section == item.section && i.key == item.key)
        {
            *old = item;
        } else {
            self.items.push(item);
        }
        self.sort();
    }

    /// The order they are written in: by section, values before lists, by key, then as learned.
    fn sort(&mut self) {
        let at = |s: &str| {
            SECTIONS
                .iter()
                .position(|x| *x == s)
                .unwrap_or(SECTIONS.len())
        };
        self.items.sort_by(|a, b| {
            (at(&a.section), a.list, &a.key).cmp(&(at(&b.section), b.list, &b.key))
        });
    }
}

fn unknown(key: &str) -> String {
    format!("it holds `{key}`, a setting learn does not write; edit it by hand, or learn into another --out")
}

fn comment(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        // one line: a comment ends at the line's end
        format!(" # {}", why.replace(['\n', '\r'], " "))
    }
}

/// `VALUE, # WHY` and `KEY = VALUE # WHY` lines of a learned profile: VALUE (as TOML writes
/// it) to WHY, so that re-rendering keeps what each entry answers.
fn comments(text: &str) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some((v, why)) = line.split_once(" # ") {
            let v = v.trim().trim_end_matches(',').trim();
            if !v.is_empty() && !v.starts_with('#') {
                out.insert(v.to_string(), why.to_string());
            }
        }
    }
    out
}

/// What learn knows of the host when it judges a patch.
pub struct Boundary {
    /// The repo: nothing in it becomes a program path or a read-write bind.
    pub repo: PathBuf,
    /// Homes whose contents are never bound whole ([`crate::toolchain::homes`]).
    pub homes: Vec<PathBuf>,
    /// sandbox-run's own configuration and state (the profile directories, the learned
    /// profile's directory, the state directory with the kept homes and job state): never
    /// bound, read-write (the command would choose the next run's sandbox) nor read-only (the
    /// kept homes hold credentials).
    pub own: Vec<PathBuf>,
}

/// What became of one refusal.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Written: the line that says what and why.
    Added(String),
    /// The base (or an earlier learn) allows it already.
    Already,
    /// Not written, and why.
    Refused(String),
}

/// Turns one refusal into entries of `learned`, on top of `base` (the profile the run used).
pub fn apply(learned: &mut Learned, r: &Refusal, base: &Profile, b: &Boundary) -> Outcome {
    let refused = crate::visible::text(&r.line());
    let why = format!(
        "refused {} {}: {}",
        r.kind.as_str(),
        r.sub,
        crate::visible::text(&r.what)
    );
    let Some(patch) = &r.patch else {
        return Outcome::Refused(format!("not added: {refused}"));
    };
    if let Err(e) = vet(patch, b) {
        return Outcome::Refused(format!("not added: {why}: never: {e}"));
    }
    let items = items(patch, &why, base);
    let Some(first) = items.first() else {
        return Outcome::Refused(format!("not added: {why}: learn cannot write it"));
    };
    if items
        .iter()
        .all(|i| in_base(i, base) || (i.list && learned.has(&i.section, &i.key, &i.value)))
    {
        return Outcome::Already;
    }
    let line = if first.list {
        format!(
            "added [{}] {} += {}: {why}",
            first.section, first.key, first.value
        )
    } else {
        format!(
            "added [{}] {} = {}: {why}",
            first.section, first.key, first.value
        )
    };
    for i in items {
        if !in_base(&i, base) {
            learned.put(i);
        }
    }
    Outcome::Added(line)
}

/// The entries a patch means (a host also needs the filtered network where there was none).
fn items(patch: &Patch, why: &str, base: &Profile) -> Vec<Item> {
    let list = |section: &str, key: &str, value: Value| Item {
        section: section.into(),
        key: key.into(),
        value,
        list: true,
        why: why.to_string(),
    };
    let s = |v: &str| Value::String(v.to_string());
    let p = |v: &Path| Value::String(v.display().to_string());
    match patch {
        Patch::ExtraRo(x) => vec![list("filesystem", "extra_ro", p(x))],
        Patch::ExtraRw(x) => vec![list("filesystem", "extra_rw", p(x))],
        Patch::Program(x) => vec![list("gate", "programs", s(x))],
        Patch::ProgramPath(x) => vec![list("gate", "paths", p(x))],
        Patch::Wrapped(x) => vec![list("gate", "wrapped", s(x))],
        Patch::NpmSubcommand(x) => vec![list("gate", "npm_subcommands", s(x))],
        Patch::NodeOption(x) => vec![list("gate", "node_options", s(x))],
        Patch::Host(x) => {
            let mut out = vec![list("network", "allow", s(x))];
            if base.network.mode == NetMode::None {
                out.push(Item {
                    list: false,
                    ..list("network", "mode", s("filtered"))
                });
            }
            out
        }
        Patch::TcpBind(x) => vec![list("network", "tcp_bind", Value::Integer((*x).into()))],
        Patch::TcpConnect(x) => vec![list("network", "tcp_connect", Value::Integer((*x).into()))],
        Patch::Limit { key, value } => match limit_value(key, value) {
            Some(v) => vec![Item {
                list: false,
                ..list("limits", key, v)
            }],
            None => Vec::new(),
        },
        Patch::Sys(x) => vec![list("filesystem", "sys", p(x))],
        Patch::DevPts(on) => vec![Item {
            list: false,
            ..list("filesystem", "dev_pts", Value::Boolean(*on))
        }],
        Patch::EnvKeep(x) => vec![list("env", "keep", s(x))],
    }
}

/// A `[limits]` value of the type its key takes.
fn limit_value(key: &str, value: &str) -> Option<Value> {
    match key {
        "pids" | "nofile" => value
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Value::Integer),
        "cpus" => value
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n > 0.0)
            .map(Value::Float),
        "timeout" => value
            .parse::<crate::units::Duration>()
            .ok()
            .map(|_| Value::String(value.into())),
        "memory" | "fsize" | "output" => value
            .parse::<crate::units::Size>()
            .ok()
            .map(|_| Value::String(value.into())),
        "disk" => value
            .parse::<crate::units::Cap>()
            .ok()
            .map(|_| Value::String(value.into())),
        _ => None,
    }
}

/// Does the base profile already say this?
fn in_base(i: &Item, base: &Profile) -> bool {
    let s = i.value.as_str().unwrap_or_default();
    let has = |l: &[String]| l.iter().any(|x| x == s);
    let has_path = |l: &[PathBuf]| l.iter().any(|x| x == Path::new(s));
    let port = |l: &[u16]| {
        i.value
            .as_integer()
            .is_some_and(|n| l.iter().any(|p| i64::from(*p) == n))
    };
    match (i.section.as_str(), i.key.as_str()) {
        ("gate", "programs") => has(&base.gate.programs),
        ("gate", "paths") => has_path(&base.gate.paths),
        ("gate", "wrapped") => has(&base.gate.wrapped),
        ("gate", "npm_subcommands") => has(&base.gate.npm_subcommands),
        ("gate", "node_options") => has(&base.gate.node_options),
        ("filesystem", "extra_ro") => has_path(&base.filesystem.extra_ro),
        ("filesystem", "extra_rw") => has_path(&base.filesystem.extra_rw),
        ("network", "allow") => has(&base.network.allow),
        ("network", "tcp_bind") => port(&base.network.tcp_bind),
        ("network", "tcp_connect") => port(&base.network.tcp_connect),
        ("network", "mode") => s == "filtered" && base.network.mode == NetMode::Filtered,
        ("env", "keep") => has(&base.env.keep),
        ("filesystem", "sys") => has_path(&base.filesystem.sys),
        ("filesystem", "dev_pts") => i.value.as_bool() == Some(base.filesystem.dev_pts),
        _ => false,
    }
}

/// The host boundary, whatever a refusal suggested: no credential file, home or tool root
/// bound; nothing read-write in the system directories or the repo; no program path the
/// repo chose; no code-loading or secret-looking variable kept; only names a profile can hold.
pub fn vet(patch: &Patch, b: &Boundary) -> Result<(), String> {
    let word = |w: &str, what: &str| {
        let ok = !w.is_empty()
            && w.chars()
                .all(|c| !c.is_control() && !c.is_whitespace() && c != '"' && c != '\\');
        if ok {
            Ok(())
        } else {
            Err(format!("{} is not a {what}", crate::visible::text(w)))
        }
    };
    match patch {
        Patch::ExtraRo(p) => bind(p, b, false),
        Patch::ExtraRw(p) => bind(p, b, true),
        Patch::Program(n) => {
            word(n, "bare program name")?;
            if n.contains('/') || n == "." || n == ".." || n.starts_with('-') {
                return Err(format!(
                    "{} is not a bare program name",
                    crate::visible::text(n)
                ));
            }
            Ok(())
        }
        Patch::ProgramPath(p) => {
            plain_path(p)?;
            if p.starts_with(&b.repo) {
                return Err(format!(
                    "{} lies in the repo, which chose it",
                    crate::visible::path(p)
                ));
            }
            Ok(())
        }
        Patch::Wrapped(n) => word(n, "package name"),
        Patch::NpmSubcommand(n) => word(n, "subcommand"),
        Patch::NodeOption(n) => word(n, "node option"),
        Patch::Host(h) => crate::net::allow::AllowList::parse(std::slice::from_ref(h)).map(|_| ()),
        Patch::TcpBind(p) | Patch::TcpConnect(p) if *p == 0 => Err("port 0".into()),
        Patch::TcpBind(_) | Patch::TcpConnect(_) => Ok(()),
        Patch::Limit { key, value } => limit_value(key, value)
            .map(|_| ())
            .ok_or_else(|| format!("[limits] {key} = {value:?} is not a valid value")),
        Patch::Sys(p) => {
            plain_path(p)?;
            if !p.starts_with("/sys") || p.starts_with("/sys/fs/cgroup") {
                return Err(format!(
                    "{} is not a path of /sys a sandbox may see",
                    crate::visible::path(p)
                ));
            }
            Ok(())
        }
        Patch::DevPts(_) => Ok(()),
        Patch::EnvKeep(n) => {
            word(n, "variable name")?;
            match crate::layers::env::refusal(n) {
                Some(crate::layers::env::Refusal::Injection) => {
                    Err(format!("{n} changes what code the command loads"))
                }
                Some(crate::layers::env::Refusal::Secret) => Err(format!(
                    "{n} looks like a secret; hand it on by name with --pass-env if you mean to"
                )),
                None => Ok(()),
            }
        }
    }
}

/// An absolute path without `.`/`..` and without characters a profile line would need to
/// escape.
fn plain_path(p: &Path) -> Result<(), String> {
    let s = p.to_str().unwrap_or("");
    let ok = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !s.is_empty()
        && s.chars().all(|c| !c.is_control() && c != '"' && c != '\\');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a plain absolute path",
            crate::visible::path(p)
        ))
    }
}

/// A bind of `p`: never a credential location, a home, a tool root or a top-level directory
/// ([`crate::toolchain::classify`]); read-write never in the system directories or the repo.
fn bind(p: &Path, b: &Boundary, rw: bool) -> Result<(), String> {
    plain_path(p)?;
    match crate::toolchain::classify(p, &b.homes) {
        crate::toolchain::Class::Bind => {}
        crate::toolchain::Class::ToolRoot => {
            return Err(format!(
                "{} is a tool's root in a home, which mixes the tool with its user's data",
                crate::visible::path(p)
            ))
        }
        crate::toolchain::Class::Refused(why) => return Err(crate::visible::text(&why)),
    }
    // Read-write, the command would choose the next run's sandbox; read-only, it would read
    // the kept homes' credentials and the other profiles.
    if let Some(own) = b.own.iter().find(|o| p.starts_with(o) || o.starts_with(p)) {
        return Err(format!(
            "{} is sandbox-run's own configuration or state ({}), or holds it",
            crate::visible::path(p),
            crate::visible::path(own)
        ));
    }
    if rw {
        if p.starts_with(&b.repo) || b.repo.starts_with(p) {
            return Err(format!(
                "{} is the repo or in it: its writes go through the repo's own mode",
                crate::visible::path(p)
            ));
        }
        writable(p, b)?;
    }
    Ok(())
}

/// Where learn may make a path read-write: the places a build writes outside its repo, named.
/// Anything else the host may run or trust later (its crontabs and spools, a home's dotfiles
/// and `~/bin`, `/usr/local`, `/opt`, `/etc`) stays the user's own decision, by hand.
/// - a cache: `~/.cache/X` of a home, `/var/cache/X`;
/// - scratch and data: `/tmp/X`, `/var/tmp/X`, `/srv/X`, `/mnt/X`, `/media/X`;
/// - a sibling of the repo (a monorepo's other package, a build's output beside it), when the
///   repo's directory is neither `/` nor a home, and the sibling is no dot-entry.
fn writable(p: &Path, b: &Boundary) -> Result<(), String> {
    const PLACES: &[&str] = &["/var/cache", "/tmp", "/var/tmp", "/srv", "/mnt", "/media"];
    // strictly below `dir`, the first component below it no dot-entry
    let below = |dir: &Path| {
        p.strip_prefix(dir).ok().and_then(|rest| {
            let first = rest.components().next()?;
            let dot = first.as_os_str().as_encoded_bytes().starts_with(b".");
            (!dot).then_some(())
        })
    };
    let cache = b.homes.iter().any(|h| below(&h.join(".cache")).is_some());
    let place = PLACES.iter().any(|d| below(Path::new(d)).is_some());
    let sibling = b.repo.parent().is_some_and(|parent| {
        parent != Path::new("/") && !b.homes.iter().any(|h| h == parent) && below(parent).is_some()
    });
    if cache || place || sibling {
        return Ok(());
    }
    Err(format!(
        "{} is not where learn makes paths writable (a cache: ~/.cache/X, /var/cache/X; /tmp/X, /var/tmp/X, /srv/X, /mnt/X, /media/X; a sibling of the repo); if the command must write there, add it to extra_rw by hand",
        crate::visible::path(p)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::denials::Kind;

    fn base() -> Profile {
        crate::profile::Loader { dirs: vec![] }
            .load("validate")
            .unwrap()
    }

    fn boundary() -> Boundary {
        Boundary {
            repo: "/work/repo".into(),
            homes: vec!["/home/u".into(), "/root".into()],
            own: vec!["/srv/conf/sandbox-run/profiles".into()],
        }
    }

    fn refusal(kind: Kind, what: &str, patch: Option<Patch>) -> Refusal {
        Refusal {
            kind,
            sub: "test".into(),
            what: what.into(),
            rule: "a rule".into(),
            fix: "a fix".into(),
            patch,
            count: 1,
        }
    }

    #[test]
    fn a_patch_the_boundary_forbids_is_never_written() {
        let mut l = Learned::new("validate");
        let forbidden = [
            Patch::ExtraRo("/home/u/.ssh".into()),
            Patch::ExtraRo("/home/u/.ssh/id_ed25519".into()),
            Patch::ExtraRo("/home/u".into()),
            Patch::ExtraRo("/home".into()),
            Patch::ExtraRo("/home/u/.cargo".into()),
            Patch::ExtraRo("/home/u/.config/gh".into()),
            Patch::ExtraRo("/etc/../root".into()),
            Patch::ExtraRw("/etc/cron.d".into()),
            Patch::ExtraRw("/usr/local/bin".into()),
            Patch::ExtraRw("/work/repo/.git".into()),
            Patch::ExtraRw("/work".into()),
            Patch::ExtraRw("/srv/conf/sandbox-run/profiles/ci-learned.toml".into()),
            Patch::ExtraRw("/srv/conf".into()),
            Patch::ExtraRo("/srv/conf/sandbox-run/profiles/ci-learned.toml".into()),
            // what the host runs or trusts later: only by hand
            Patch::ExtraRw("/var/spool/cron/crontabs".into()),
            Patch::ExtraRw("/home/u/.bashrc".into()),
            Patch::ExtraRw("/home/u/.local/bin".into()),
            Patch::ExtraRw("/home/u/bin".into()),
            Patch::ExtraRw("/home/u/.cache".into()),
            Patch::ExtraRw("/var/cache".into()),
            Patch::ExtraRw("/tmp/.X11-unix".into()),
            Patch::ExtraRw("/work/.hidden".into()),
            Patch::ExtraRw("/opt/tool".into()),
            Patch::ExtraRw("/var/lib/dpkg".into()),
            Patch::ProgramPath("/work/repo/node_modules/.bin/x".into()),
            Patch::Program("../x".into()),
            Patch::EnvKeep("LD_PRELOAD".into()),
            Patch::EnvKeep("BASH_ENV".into()),
            Patch::EnvKeep("GITHUB_TOKEN".into()),
            Patch::Limit {
                key: "memory".into(),
                value: "lots".into(),
            },
            Patch::Limit {
                key: "uid".into(),
                value: "0".into(),
            },
        ];
        for p in forbidden {
            let r = refusal(Kind::Filesystem, "x", Some(p.clone()));
            match apply(&mut l, &r, &base(), &boundary()) {
                Outcome::Refused(line) => assert!(line.contains("never"), "{p:?}: {line}"),
                other => panic!("{p:?} was {other:?}"),
            }
        }
        assert!(l.items.is_empty(), "{l:?}");
        // positive control: the same kinds, inside the boundary, are written
        for p in [
            Patch::ExtraRo("/opt/tool/share".into()),
            Patch::ExtraRo("/home/u/.local/bin".into()),
            Patch::ExtraRw("/var/cache/ccache".into()),
            Patch::ExtraRw("/home/u/.cache/pre-commit".into()),
            Patch::ExtraRw("/srv/data/out.txt".into()),
            Patch::ExtraRw("/work/sibling/dist".into()),
            Patch::EnvKeep("RUST_BACKTRACE".into()),
            Patch::Limit {
                key: "memory".into(),
                value: "4G".into(),
            },
        ] {
            let r = refusal(Kind::Filesystem, "x", Some(p.clone()));
            assert!(
                matches!(apply(&mut l, &r, &base(), &boundary()), Outcome::Added(_)),
                "{p:?}"
            );
        }
        assert_eq!(l.items.len(), 8);
    }

    #[test]
    fn a_learned_profile_reads_back_as_written_and_loads() {
        let mut l = Learned::new("validate");
        let b = base();
        for p in [
            Patch::Program("cat".into()),
            Patch::Program("cat".into()),
            Patch::Program("node".into()), // validate has it: nothing to add
            Patch::Host("registry.example.org".into()),
            Patch::Limit {
                key: "pids".into(),
                value: "512".into(),
            },
            Patch::Limit {
                key: "pids".into(),
                value: "1024".into(),
            },
        ] {
            apply(&mut l, &refusal(Kind::Gate, "w", Some(p)), &b, &boundary());
        }
        let text = l.render();
        assert!(text.starts_with(MARKER), "{text}");
        let again = Learned::parse(&text).unwrap();
        assert_eq!(again, l, "{text}");
        let f = crate::profile::parse_text(&text, "learned").unwrap();
        let _ = f; // parses as a profile: every key learn writes is a profile key
        let programs: Vec<_> = l.items.iter().filter(|i| i.key == "programs").collect();
        assert_eq!(programs.len(), 1, "{text}");
        assert!(text.contains("pids = 1024"), "{text}");
        assert!(text.contains("mode = \"filtered\""), "{text}");
        // a file someone else wrote, or that holds what learn does not write, is refused
        assert!(Learned::parse("extends = \"ci\"\n").is_err());
        let edited = format!("{text}\n[process]\nuid = 0\n");
        assert!(Learned::parse(&edited).unwrap_err().contains("process"));
    }

    #[test]
    fn what_the_command_named_cannot_write_profile_lines() {
        // the refusal's words are the command's: a newline there must not become a line
        let mut l = Learned::new("validate");
        let what = "x\n[process]\nuid = 0\r\n[filesystem]\nextra_rw = [\"/\"]";
        let r = refusal(Kind::Gate, what, Some(Patch::Program("cat".into())));
        assert!(matches!(
            apply(&mut l, &r, &base(), &boundary()),
            Outcome::Added(_)
        ));
        let text = l.render();
        let t: toml::Table = text.parse().unwrap();
        assert_eq!(t.keys().collect::<Vec<_>>(), ["extends", "gate"], "{text}");
        assert_eq!(Learned::parse(&text).unwrap(), l);
        // nor can a value: a patch with a quote or a newline in it is refused
        for p in [
            Patch::Program("a\"b".into()),
            Patch::ExtraRo("/opt/a\n[process]".into()),
            Patch::NpmSubcommand("x y".into()),
        ] {
            let r = refusal(Kind::Gate, "w", Some(p.clone()));
            assert!(
                matches!(apply(&mut l, &r, &base(), &boundary()), Outcome::Refused(_)),
                "{p:?}"
            );
        }
    }

    #[test]
    fn a_refusal_without_a_patch_is_said_not_added() {
        let mut l = Learned::new("validate");
        let r = refusal(Kind::Gate, "./x.sh", None);
        assert!(matches!(
            apply(&mut l, &r, &base(), &boundary()),
            Outcome::Refused(_)
        ));
        assert!(l.items.is_empty());
    }
}

//! `sandbox-run learn --profile BASE [--out FILE] [run flags] -- CMD`: runs CMD as `run` does,
//! with every path lookup seen, and writes a profile that extends BASE and adds only what the
//! run was refused ([`crate::learn`]). Run again, with `--profile` naming the learned profile
//! or with the same BASE (then it runs under what BASE's learned profile holds), it updates
//! that file in place until the command passes with no refusal. `SANDBOX_RUN_LEARN=1` in
//! sandbox-run's own environment makes `run` a learn (a workflow's audit); under GitHub
//! Actions its section goes first in the step summary ([`super::learn_summary`]).
//!
//! The learned file is read before the run and written after it, outside the repo (which the
//! command can write), never over a file learn did not write, and only after the profile it
//! makes has been loaded and planned like any other.

use super::Fail;
use crate::cli::LearnArgs;
use crate::learn::{self, Boundary, Item, Learned, Outcome};
use crate::profile::{Loader, Source};
use std::io::Read;
use std::path::{Path, PathBuf};

/// `SANDBOX_RUN_LEARN`, read from sandbox-run's own environment (the workflow's `env:`, never
/// a step's `GITHUB_ENV`, which reaches only the command): `1` makes `run` a `learn`.
pub(super) const SWITCH: &str = "SANDBOX_RUN_LEARN";

/// Is the switch on? `1`/`true` on, `0`/`false`/empty/unset off; any other value is refused,
/// so a typo never leaves a job enforcing when it meant to audit, or the other way round.
pub(super) fn switched_on() -> Result<bool, Fail> {
    let v = std::env::var_os(SWITCH).unwrap_or_default();
    match v.to_str() {
        Some("1" | "true") => Ok(true),
        Some("0" | "false" | "") => Ok(false),
        _ => Err(Fail::usage(format!(
            "{SWITCH}={} is neither 1 (learn: name and learn what the command is refused) nor 0 (run); set it to 1 or 0 in the workflow's env:",
            crate::visible::text(&v.to_string_lossy())
        ))),
    }
}

pub(super) fn learn_command(args: LearnArgs, verbose: u8) -> Result<i32, Fail> {
    // Under Actions, learn's section goes in front of the step's own summary.
    let summary_file = step_summary();
    let hold = summary_file
        .as_ref()
        .map(|_| crate::changes::actions::hold_summary());
    let mut said = Said::default();
    let r = learn_in(args, verbose, &mut said);
    if let (Some(file), Some(hold)) = (summary_file, hold) {
        if let (Err(f), true) = (&r, said.ran) {
            said.lines.push(format!("sandbox-run: {}", f.line()));
        }
        // Nothing ran (a usage error, said on stderr): only the step's own summary, if any.
        let md = match said.ran {
            true => super::learn_summary::render(&said.summary()),
            false => String::new(),
        };
        if let Err(e) = hold.release(&file, md.as_bytes()) {
            eprintln!(
                "sandbox-run: learn: GITHUB_STEP_SUMMARY {}: {e}; the summary was not written",
                crate::visible::path(&file)
            );
        }
    }
    r
}

/// The runner's step summary file, named in sandbox-run's own environment.
fn step_summary() -> Option<PathBuf> {
    std::env::var_os("GITHUB_STEP_SUMMARY")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// What learn said, for the step summary.
#[derive(Default)]
struct Said {
    /// Whether the command ran (else there is nothing to say in the summary).
    ran: bool,
    lines: Vec<String>,
    changed: bool,
    out: Option<PathBuf>,
    by_name: String,
    toml: Option<String>,
}

impl Said {
    fn summary(&self) -> super::learn_summary::Summary<'_> {
        super::learn_summary::Summary {
            lines: &self.lines,
            changed: self.changed,
            out: self.out.as_deref(),
            by_name: &self.by_name,
            toml: self.toml.as_deref(),
        }
    }
}

fn learn_in(mut args: LearnArgs, verbose: u8, said: &mut Said) -> Result<i32, Fail> {
    let spec = args.run.target.profile.clone();
    let loader = Loader::from_env();
    let (mut base, chain) = loader.load_chain(&spec).map_err(|e| Fail::usage(e.0))?;
    // The profile the run starts from: a learned one (a second round) is updated in place.
    let leaf = match chain.first() {
        Some((Source::File(p), text)) if text.starts_with(learn::MARKER) => Some(p.clone()),
        _ => None,
    };
    let out = match &args.out {
        Some(o) => absolute(o),
        None => match &leaf {
            Some(p) => p.clone(),
            None => default_out(&spec)?,
        },
    };
    let ws = quiet_workspace(args.run.target.repo.as_deref()).map_err(Fail::usage)?;
    refuse_writable(&out, &ws.repo, &base)?;
    said.out = out.exists().then(|| out.clone());
    // Read before the run: what the command does cannot change what learn starts from.
    let mut learned = match read_learned(&out)? {
        Some(l) => {
            let ours = leaf.as_deref() == Some(out.as_path()) || l.base == base_name(&spec);
            if !ours {
                return Err(Fail::usage(format!(
                    "learn: --out {} was learned from {:?}, not {spec:?}; run with --profile {} to go on with it, or choose another --out",
                    out.display(),
                    l.base,
                    out.display()
                )));
            }
            if leaf.is_none() {
                // An earlier round of the same BASE: run under what it learned, so that the
                // same command line (a workflow's shell line) converges round by round.
                let learned_spec = out.display().to_string();
                base = loader.load(&learned_spec).map_err(|e| Fail::usage(e.0))?;
                refuse_writable(&out, &ws.repo, &base)?;
                eprintln!(
                    "sandbox-run: learn: running under {} (learned from {spec} by an earlier run); it is updated in place",
                    crate::visible::path(&out)
                );
                args.run.target.profile = learned_spec;
            }
            l
        }
        None => Learned::new(&base_name(&spec)),
    };
    let before = learned.clone();
    for (item, why) in asked(&args, &base) {
        learned.put(Item { why, ..item });
    }

    let argv = args.run.target.argv.clone();
    let command = args.run.target.command.clone();
    let (code, denials) = super::run::run_collect(args.run, verbose, true)?;
    said.ran = true;

    let boundary = Boundary {
        repo: ws.repo.clone(),
        homes: crate::toolchain::homes(&home().iter().map(PathBuf::as_path).collect::<Vec<_>>()),
        own: own_places(&out, &loader),
    };
    for r in &denials {
        said.lines.push(format!("sandbox-run: {}", r.line()));
        match learn::apply(&mut learned, r, &base, &boundary) {
            Outcome::Added(line) | Outcome::Refused(line) => {
                eprintln!("sandbox-run: learn: {line}");
                said.lines.push(format!("sandbox-run: learn: {line}"));
            }
            Outcome::Already => {}
        }
    }
    said.by_name = by_name(&out);
    if out.exists() {
        said.toml = Some(learned.render());
    }
    if learned == before {
        let why = if denials.is_empty() {
            "the command ran with no refusal"
        } else {
            "nothing in its refusals may be added"
        };
        let file = if out.exists() {
            format!("{} is unchanged", out.display())
        } else {
            "nothing written".to_string()
        };
        eprintln!("sandbox-run: learn: {why}; {file}");
        return Ok(code);
    }
    let target = crate::cli::Target {
        profile: out.display().to_string(),
        repo: Some(ws.repo.clone()),
        command,
        allow_program: Vec::new(),
        argv,
    };
    let text = learned.render();
    write_checked(&out, &text, &target)?;
    said.changed = true;
    said.out = Some(out.clone());
    said.toml = Some(text);
    let by_name = by_name(&out);
    let n = learned.items.len();
    eprintln!(
        "sandbox-run: learn: wrote {} ({n} {}, extends {}); run with --profile {by_name}",
        out.display(),
        if n == 1 { "entry" } else { "entries" },
        learned.base,
    );
    Ok(code)
}

/// sandbox-run's own configuration and state, as written and resolved: the learned profile's
/// directory, every profile directory, the state directory.
fn own_places(out: &Path, loader: &Loader) -> Vec<PathBuf> {
    let mut own: Vec<PathBuf> = out.parent().map(Path::to_path_buf).into_iter().collect();
    own.extend(loader.dirs.iter().cloned());
    own.extend(Loader::user_dir());
    own.extend(super::resolve::state_dir("learn"));
    let real: Vec<PathBuf> = own
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    own.extend(real);
    own
}

/// How `--profile` names the learned profile: by name in the caller's profile directory, else
/// by its path.
fn by_name(out: &Path) -> String {
    Loader::user_dir()
        .filter(|d| out.parent() == Some(d.as_path()))
        .and_then(|_| out.file_stem()?.to_str().map(str::to_string))
        .unwrap_or_else(|| out.display().to_string())
}

/// The workspace, as the run finds it (which says what it chose: once is enough).
fn quiet_workspace(repo: Option<&Path>) -> Result<crate::workspace::Workspace, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    crate::workspace::Workspace::find(repo, &cwd)
}

/// The caller's home, for the boundary (never bound whole, its credentials never).
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// What the caller asked for on the command line, so the learned profile runs as this run
/// did: `--net`, `--allow-host`, `--allow-program`.
fn asked(args: &LearnArgs, base: &crate::profile::Profile) -> Vec<(Item, String)> {
    use toml::Value;
    let item = |section: &str, key: &str, value: Value, list: bool| Item {
        section: section.into(),
        key: key.into(),
        value,
        list,
        why: String::new(),
    };
    let mut out = Vec::new();
    let r = &args.run;
    let mode = r.net.map(|n| match n {
        crate::cli::NetArg::None => "none",
        crate::cli::NetArg::Filtered => "filtered",
        crate::cli::NetArg::Host => "host",
    });
    if let Some(m) = mode {
        out.push((
            item("network", "mode", Value::String(m.into()), false),
            format!("asked: --net {m}"),
        ));
    }
    for h in &r.allow_host {
        out.push((
            item("network", "allow", Value::String(h.clone()), true),
            format!("asked: --allow-host {}", crate::visible::text(h)),
        ));
    }
    if !r.allow_host.is_empty()
        && mode.is_none()
        && base.network.mode == crate::profile::NetMode::None
    {
        out.push((
            item("network", "mode", Value::String("filtered".into()), false),
            "asked: --allow-host".into(),
        ));
    }
    for p in &r.target.allow_program {
        out.push((
            item("gate", "programs", Value::String(p.clone()), true),
            format!("asked: --allow-program {}", crate::visible::text(p)),
        ));
    }
    out
}

/// How the learned file names its base: a name as given, a path made absolute (the learned
/// file lives elsewhere).
fn base_name(spec: &str) -> String {
    if spec.contains('/') || spec.ends_with(".toml") {
        absolute(Path::new(spec)).display().to_string()
    } else {
        spec.to_string()
    }
}

fn absolute(p: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    crate::hostfs::lexical(&cwd, p)
}

/// `~/.config/sandbox-run/profiles/BASE-learned.toml`: where `--profile BASE-learned` finds it.
fn default_out(spec: &str) -> Result<PathBuf, Fail> {
    let stem = Path::new(spec)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("profile")
        .to_string();
    let dir = Loader::user_dir().ok_or_else(|| {
        Fail::usage("learn: no HOME or XDG_CONFIG_HOME to put the learned profile in; name it with --out FILE")
    })?;
    Ok(dir.join(format!("{stem}-learned.toml")))
}

/// The learned profile must not lie where the command can write: the repo, the profile's
/// read-write binds, sandbox-run's state directory (the kept homes). A profile there would be
/// the command's choice on the next run.
fn refuse_writable(out: &Path, repo: &Path, base: &crate::profile::Profile) -> Result<(), Fail> {
    let real = |p: &Path| {
        p.ancestors()
            .find_map(|a| Some(std::fs::canonicalize(a).ok()?.join(p.strip_prefix(a).ok()?)))
            .unwrap_or_else(|| p.to_path_buf())
    };
    let forms = [out.to_path_buf(), real(out)];
    // The repo, and sandbox-run's state directory (the kept homes, bound read-write by
    // `--home persist`).
    let mut places = vec![(repo.to_path_buf(), "the repo".to_string())];
    if let Some(dir) = super::resolve::state_dir("learn") {
        places.push((
            dir,
            "sandbox-run's state directory (kept homes)".to_string(),
        ));
    }
    for p in &base.filesystem.extra_rw {
        // `$RUNNER_TEMP`: the caller's value, as the run binds it.
        let p = match crate::profile::env_path_name(p) {
            Some(name) => match std::env::var_os(name) {
                Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v),
                _ => continue,
            },
            None if p.is_absolute() => p.clone(),
            None => continue,
        };
        places.push((p, "the profile's filesystem.extra_rw".to_string()));
    }
    for (place, words) in &places {
        let place_real = real(place);
        if forms
            .iter()
            .any(|f| f.starts_with(place) || f.starts_with(&place_real))
        {
            return Err(Fail::usage(format!(
                "learn: --out {} lies in {words} ({}), which the command can write; keep learned profiles outside it (the default is ~/.config/sandbox-run/profiles/BASE-learned.toml)",
                out.display(),
                place.display()
            )));
        }
    }
    Ok(())
}

/// The learned profile at `out`, if there is a file; a file learn did not write is refused.
fn read_learned(out: &Path) -> Result<Option<Learned>, Fail> {
    match std::fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Fail::usage(format!("learn: --out {}: {e}", out.display()))),
        Ok(_) => {}
    }
    let refuse = |why: String| {
        Fail::usage(format!(
            "learn: --out {}: {why}; learn overwrites only profiles it wrote (choose another --out)",
            out.display()
        ))
    };
    let f = crate::strict_modes::open(out).map_err(refuse)?;
    let mut text = String::new();
    f.take(1 << 20)
        .read_to_string(&mut text)
        .map_err(|e| refuse(e.to_string()))?;
    Learned::parse(&text).map(Some).map_err(refuse)
}

/// Writes the learned profile beside `out`, loads it and plans the command under it like any
/// profile, and only then renames it into place: a profile that would not load or plan is
/// never written.
fn write_checked(out: &Path, text: &str, target: &crate::cli::Target) -> Result<(), Fail> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = out.parent().unwrap_or(Path::new("/"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Fail::usage(format!("learn: {}: {e}", dir.display())))?;
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("learned.toml");
    let tmp = dir.join(format!(".{name}.{}.toml", std::process::id()));
    let fail = |what: &str, e: String| {
        let _ = std::fs::remove_file(&tmp);
        Fail::usage(format!("learn: {what}: {e}; nothing written"))
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| Fail::usage(format!("learn: {}: {e}", tmp.display())))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| fail(&tmp.display().to_string(), e.to_string()))?;
    let profile = Loader::from_env()
        .load(&tmp.display().to_string())
        .map_err(|e| fail("the learned profile does not load", e.0))?;
    plan_under(&profile, target).map_err(|e| fail("the learned profile does not plan", e))?;
    std::fs::rename(&tmp, out).map_err(|e| fail(&out.display().to_string(), e.to_string()))
}

/// The command planned under `profile`, as a run would (nothing is started): the profile's
/// binds, network and limits pass the same checks as any other.
fn plan_under(
    profile: &crate::profile::Profile,
    target: &crate::cli::Target,
) -> Result<(), String> {
    let ws = quiet_workspace(target.repo.as_deref())?;
    let v = super::resolve::gate_in(target, profile, &ws);
    if !v.allowed() {
        return Ok(()); // the gate's own refusal: the next round says it
    }
    let path = super::resolve::sandbox_path(profile);
    let Some(found) = crate::policy::found_path(&v, &path, &ws.cwd) else {
        return Ok(());
    };
    let host = crate::plan::Host::probe();
    let plan = crate::plan::build(
        profile,
        &ws,
        &v,
        &found,
        &crate::plan::Overrides::default(),
        &host,
    )?;
    if let Some(s) = &plan.scratch {
        crate::plan::remove_scratch(s);
    }
    Ok(())
}

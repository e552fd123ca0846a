//! `profiles show --resolved`: the resolved profile as TOML, each list entry and each value
//! followed by a comment naming the file of the `extends` chain it came from (or `default`),
//! so that the result of a chain of `{ add = [...] }` lists can be read in one place.
//!
//! An entry comes from the nearest file (leaf first) whose list for that key names it; a
//! value from the nearest file that sets its key. What no file sets is the default.

use super::{Profile, Source};
use toml::{Table, Value};

/// The files of a chain as [`super::Loader::load_chain`] gives them, leaf first.
pub fn render(profile: &Profile, chain: &[(Source, String)]) -> String {
    let files: Vec<(String, Table)> = chain
        .iter()
        .map(|(src, text)| (origin_name(src), text.parse::<Table>().unwrap_or_default()))
        .collect();
    let mut out = format!(
        "# profile {}, resolved: each value with the profile it came from\n# from {}\n",
        profile.name,
        profile.sources.join(" <- ")
    );
    let defaults =
        match Value::try_from(super::ProfileFile::default().resolve(String::new(), vec![])) {
            Ok(Value::Table(t)) => t,
            _ => Table::new(),
        };
    let Ok(Value::Table(all)) = Value::try_from(profile) else {
        out.push_str("# (could not serialize the profile)\n");
        return out;
    };
    // Top-level values first (TOML puts them before any table), then each section.
    for (key, value) in all.iter().filter(|(_, v)| !is_section(v)) {
        line(&mut out, &files, &defaults, None, key, value);
    }
    for (section, body) in all.iter().filter(|(_, v)| is_section(v)) {
        let Value::Table(body) = body else { continue };
        out.push_str(&format!("\n[{section}]\n"));
        for (key, value) in body {
            line(&mut out, &files, &defaults, Some(section), key, value);
        }
    }
    out
}

/// The sections of a profile (`[gate]`, ...); `[secrets]` too, whose values are lists.
fn is_section(v: &Value) -> bool {
    matches!(v, Value::Table(_))
}

/// `ci (built in)`, or the file's path.
fn origin_name(src: &Source) -> String {
    match src {
        Source::Builtin(n) => format!("{n} (built in)"),
        Source::File(p) => p.display().to_string(),
    }
}

fn line(
    out: &mut String,
    files: &[(String, Table)],
    defaults: &Table,
    section: Option<&str>,
    key: &str,
    v: &Value,
) {
    let k = bare_or_quoted(key);
    match v {
        Value::Array(items) if !items.is_empty() => {
            out.push_str(&format!("{k} = [\n"));
            for item in items {
                let from = entry_origin(files, defaults, section, key, item);
                out.push_str(&format!("    {item}, # {from}\n"));
            }
            out.push_str("]\n");
        }
        _ => {
            let from = value_origin(files, section, key);
            out.push_str(&format!("{k} = {v} # {from}\n"));
        }
    }
}

/// What one file says for `section.key`.
fn lookup<'a>(file: &'a Table, section: Option<&str>, key: &str) -> Option<&'a Value> {
    match section {
        Some(s) => file.get(s)?.as_table()?.get(key),
        None => file.get(key),
    }
}

/// The nearest file that sets `section.key`, else `default`.
fn value_origin(files: &[(String, Table)], section: Option<&str>, key: &str) -> String {
    files
        .iter()
        .find(|(_, t)| lookup(t, section, key).is_some())
        .map_or_else(|| "default".to_string(), |(n, _)| n.clone())
}

/// Where a list entry came from: the first file (from the root of the stretch the list was
/// last replaced in, down to the leaf) that names it, or the default when the stretch ends in
/// it. An `add` of an entry already there adds nothing, so it is not the origin.
fn entry_origin(
    files: &[(String, Table)],
    defaults: &Table,
    section: Option<&str>,
    key: &str,
    item: &Value,
) -> String {
    let mut found = None;
    for (name, t) in files {
        match lookup(t, section, key) {
            Some(Value::Array(list)) => {
                if list.contains(item) {
                    found = Some(name.clone());
                }
                return found.unwrap_or_else(|| "default".to_string());
            }
            Some(Value::Table(add))
                if add
                    .get("add")
                    .and_then(Value::as_array)
                    .is_some_and(|l| l.contains(item)) =>
            {
                found = Some(name.clone());
            }
            _ => {}
        }
    }
    let in_default = lookup(defaults, section, key)
        .and_then(Value::as_array)
        .is_some_and(|l| l.contains(item));
    match found {
        Some(name) if !in_default => name,
        _ => "default".to_string(),
    }
}

/// A key as TOML writes it: bare when it can be, else quoted.
fn bare_or_quoted(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

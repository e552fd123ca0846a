//! Profiles that add: every list key of a profile file takes an array (it replaces the
//! parent's list) or a table `{ add = [...] }` (the parent's list, then the added entries not
//! already in it). Checked through `sandbox-run profiles show` (the resolved profile) for every
//! list kind, chains of three, duplicates and errors; `profiles show --resolved` names where
//! each entry came from. Nothing here runs a sandbox.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn show(args: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.arg("profiles")
        .arg("show")
        .args(args)
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-e2e");
    run_command(c, LIMIT)
}

/// The resolved profile of `file`, parsed.
fn resolved(file: &Path) -> toml::Table {
    let r = show(&[file.to_str().unwrap()]);
    r.assert_code(0);
    r.stdout
        .parse()
        .unwrap_or_else(|e| panic!("not TOML: {e}\n{r}"))
}

fn list<'a>(t: &'a toml::Table, section: &str, key: &str) -> Vec<&'a toml::Value> {
    t[section][key]
        .as_array()
        .unwrap_or_else(|| panic!("{section}.{key} is not a list: {t:?}"))
        .iter()
        .collect()
}

/// Every list key, with two entries for the parent and one new one plus a duplicate added.
const LISTS: &[(&str, &str, &str, &str, &str)] = &[
    ("gate", "programs", "\"node\", \"npm\"", "\"jq\"", "\"npm\""),
    (
        "gate",
        "wrapped",
        "\"jest\", \"tsc\"",
        "\"eslint\"",
        "\"jest\"",
    ),
    (
        "gate",
        "paths",
        "\"/usr/bin/a\", \"/usr/bin/b\"",
        "\"/usr/bin/c\"",
        "\"/usr/bin/a\"",
    ),
    (
        "gate",
        "npm_subcommands",
        "\"test\", \"run\"",
        "\"ci\"",
        "\"run\"",
    ),
    (
        "gate",
        "node_options",
        "\"--x\", \"--y\"",
        "\"--z\"",
        "\"--x\"",
    ),
    (
        "gate",
        "free_text",
        "\"claude\", \"codex\"",
        "\"gemini\"",
        "\"claude\"",
    ),
    (
        "filesystem",
        "system_ro",
        "\"/usr\", \"/bin\"",
        "\"/opt\"",
        "\"/usr\"",
    ),
    (
        "filesystem",
        "extra_ro",
        "\"/srv/a\", \"/srv/b\"",
        "\"/srv/c\"",
        "\"/srv/a\"",
    ),
    (
        "filesystem",
        "extra_rw",
        "\"/var/a\", \"/var/b\"",
        "\"/var/c\"",
        "\"/var/b\"",
    ),
    (
        "filesystem",
        "protect",
        "\".git/hooks\", \".git/config\"",
        "\".envrc\"",
        "\".git/hooks\"",
    ),
    (
        "filesystem",
        "sys",
        "\"/sys/a\", \"/sys/b\"",
        "\"/sys/c\"",
        "\"/sys/a\"",
    ),
    (
        "network",
        "allow",
        "\"a.example\", \"b.example\"",
        "\"c.example\"",
        "\"a.example\"",
    ),
    ("network", "tcp_connect", "443, 80", "8080", "443"),
    ("network", "tcp_bind", "3000, 3001", "3002", "3000"),
    ("env", "keep", "\"LANG\", \"TERM\"", "\"CI\"", "\"TERM\""),
    ("env", "drop", "\"A_*\", \"B\"", "\"C\"", "\"B\""),
    (
        "env",
        "pass",
        "\"X_KEY\", \"Y_KEY\"",
        "\"Z_KEY\"",
        "\"X_KEY\"",
    ),
];

fn sections(pick: impl Fn(&(&str, &str, &str, &str, &str)) -> String) -> String {
    let mut out = String::new();
    for section in ["gate", "filesystem", "network", "env"] {
        out.push_str(&format!("[{section}]\n"));
        for l in LISTS.iter().filter(|l| l.0 == section) {
            out.push_str(&format!("{} = {}\n", l.1, pick(l)));
        }
    }
    out
}

#[test]
fn every_list_adds_to_its_parent_in_order_without_duplicates() {
    let f = Fixture::new("profiles-add-every");
    f.write("base.toml", &sections(|l| format!("[{}]", l.2)));
    let child = f.write(
        "child.toml",
        &format!(
            "extends = \"base.toml\"\n{}",
            sections(|l| format!("{{ add = [{}, {}, {}] }}", l.3, l.4, l.3))
        ),
    );
    let t = resolved(&child);
    for (section, key, parent, added, _) in LISTS {
        let want: toml::Value = format!("v = [{parent}, {added}]")
            .parse::<toml::Table>()
            .unwrap()["v"]
            .clone();
        let got: Vec<toml::Value> = list(&t, section, key).into_iter().cloned().collect();
        assert_eq!(
            toml::Value::Array(got),
            want,
            "{section}.{key}: the parent's, then the added ones not already there"
        );
    }
    // control: an array still replaces the parent's list
    let replace = f.write(
        "replace.toml",
        &format!(
            "extends = \"base.toml\"\n{}",
            sections(|l| format!("[{}]", l.3))
        ),
    );
    let t = resolved(&replace);
    for (section, key, _, added, _) in LISTS {
        assert_eq!(
            list(&t, section, key).len(),
            1,
            "{section}.{key} = [{added}]"
        );
    }
}

#[test]
fn chains_of_three_add_up_and_a_replace_in_the_middle_starts_over() {
    let f = Fixture::new("profiles-add-chain");
    let ci = resolved(Path::new("ci"));
    let ci_programs = list(&ci, "gate", "programs").len();
    f.write(
        "a.toml",
        "extends = \"ci\"\n[gate]\nprograms = { add = [\"jq\", \"make\"] }\n",
    );
    let b = f.write(
        "b.toml",
        "extends = \"a.toml\"\n[gate]\nprograms = { add = [\"rg\", \"jq\"] }\n",
    );
    let t = resolved(&b);
    let p = list(&t, "gate", "programs");
    assert_eq!(p.len(), ci_programs + 2, "{p:?}");
    assert_eq!(p[ci_programs].as_str(), Some("jq"));
    assert_eq!(p[ci_programs + 1].as_str(), Some("rg"));
    // the other keys still come from ci
    assert_eq!(t["filesystem"]["repo"].as_str(), Some("rw"));

    f.write("m.toml", "extends = \"ci\"\n[gate]\nprograms = [\"x\"]\n");
    let leaf = f.write(
        "leaf.toml",
        "extends = \"m.toml\"\n[gate]\nprograms = { add = [\"y\"] }\n",
    );
    let t = resolved(&leaf);
    let p: Vec<&str> = list(&t, "gate", "programs")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(p, ["x", "y"]);

    // an add with no parent setting it adds to the default
    let d = f.write("d.toml", "[filesystem]\nsystem_ro = { add = [\"/opt\"] }\n");
    let t = resolved(&d);
    let ro: Vec<&str> = list(&t, "filesystem", "system_ro")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(ro.first(), Some(&"/usr"), "{ro:?}");
    assert_eq!(ro.last(), Some(&"/opt"), "{ro:?}");
}

#[test]
fn errors_name_the_file_the_line_and_the_key() {
    let f = Fixture::new("profiles-add-errors");
    for (name, text, line, words) in [
        (
            "unknown.toml",
            "extends = \"ci\"\n\n[gate]\nprograms = { add = [\"jq\"], remove = [\"sh\"] }\n",
            4,
            &["programs", "unknown field `remove`, expected `add`"][..],
        ),
        (
            "type.toml",
            "[network]\ntcp_bind = { add = [\"http\"] }\n",
            2,
            &["tcp_bind", "expected u16"][..],
        ),
        (
            "notalist.toml",
            "[gate]\nprograms = { add = \"jq\" }\n",
            2,
            &["programs", "expected a sequence"][..],
        ),
        (
            "empty.toml",
            "[env]\n\nkeep = {}\n",
            3,
            &["keep", "missing field `add`"][..],
        ),
        (
            "scalar.toml",
            "[gate]\nwrapped = \"jest\"\n",
            2,
            &[
                "wrapped",
                "an array (replaces the parent's list) or a table { add = [...] }",
            ][..],
        ),
    ] {
        let p = f.write(name, text);
        let r = show(&[p.to_str().unwrap()]);
        r.assert_code(125);
        let prefix = format!("sandbox-run: profile {}:{line}: ", p.display());
        assert!(
            r.stderr.starts_with(&prefix),
            "{name}: want {prefix:?}\n{r}"
        );
        for w in words {
            assert!(r.stderr.contains(w), "{name}: want {w:?}\n{r}");
        }
        assert_eq!(
            r.stderr.trim_end().lines().count(),
            1,
            "{name}: one line\n{r}"
        );
    }
    // a checked entry that came in by an add is checked like any other
    let p = f.write(
        "bad.toml",
        "extends = \"ci\"\n[env]\npass = { add = [\"LD_PRELOAD\"] }\n",
    );
    let r = show(&[p.to_str().unwrap()]);
    r.assert_code(125);
    assert!(
        r.stderr.contains("env.pass") && r.stderr.contains("LD_PRELOAD"),
        "{r}"
    );
}

#[test]
fn show_resolved_names_where_each_entry_came_from() {
    let f = Fixture::new("profiles-add-resolved");
    let a = f.write(
        "a.toml",
        "extends = \"ci\"\n[gate]\nprograms = { add = [\"jq\", \"make\"] }\n[limits]\nmemory = \"4G\"\n",
    );
    let b = f.write(
        "b.toml",
        "extends = \"a.toml\"\n[gate]\nprograms = { add = [\"rg\"] }\n",
    );
    let r = show(&["--resolved", b.to_str().unwrap()]);
    r.assert_code(0);
    let out = &r.stdout;
    let has = |line: &str| {
        assert!(
            out.lines().any(|l| l.trim() == line),
            "no line {line:?} in\n{out}"
        );
    };
    has(&format!("\"jq\", # {}", a.display()));
    has(&format!("\"rg\", # {}", b.display()));
    // already in ci: an add of it adds nothing, so it comes from ci
    has("\"make\", # ci (built in)");
    has("\"sh\", # ci (built in)");
    has(&format!("memory = \"4G\" # {}", a.display()));
    has("repo = \"rw\" # ci (built in)");
    has("home = \"tmp\" # default");
    // what it prints is itself the resolved profile
    let t: toml::Table = out
        .parse()
        .unwrap_or_else(|e| panic!("not TOML: {e}\n{out}"));
    assert_eq!(t, resolved(&b));
    // the plain form is as before: no origins
    let plain = show(&[b.to_str().unwrap()]);
    assert!(!plain.stdout.contains("# ci (built in)"), "{plain}");
    assert!(
        plain
            .stdout
            .starts_with(&format!("# profile {}\n# from ", b.display())),
        "{plain}"
    );
}

//! The review surfaces show the names a sandboxed command chose, never obey them: a real run
//! (`--changes keep`) creates files whose names hold invisible, format, separator, bidi and
//! control characters and invalid UTF-8; `changes show`, `changes diff` and `changes list`
//! print each one escaped (`\u{200b}`, `\xff`), the run's own refused-entry lines too, while
//! ordinary non-ASCII names (`café.txt`, CJK) pass as they are. The control: the report of
//! the same run holds the raw names, so the hostile bytes really reached the review.

mod common;

use common::*;
use std::path::Path;

/// (the name's bytes, how a review shows it)
fn hostile() -> Vec<(Vec<u8>, &'static str)> {
    vec![
        ("zwsp\u{200b}.txt".into(), "zwsp\\u{200b}.txt"),
        ("lsep\u{2028}.txt".into(), "lsep\\u{2028}.txt"),
        ("shy\u{ad}.txt".into(), "shy\\u{ad}.txt"),
        ("bom\u{feff}.txt".into(), "bom\\u{feff}.txt"),
        ("wj\u{2060}.txt".into(), "wj\\u{2060}.txt"),
        ("rlo\u{202e}txt.exe".into(), "rlo\\u{202e}txt.exe"),
        ("bel\u{7}.txt".into(), "bel\\u{7}.txt"),
        ("csi\u{9b}.txt".into(), "csi\\u{9b}.txt"),
        ("esc\u{1b}[2J.txt".into(), "esc\\u{1b}[2J.txt"),
        (b"bad\xff.txt".to_vec(), "bad\\xff.txt"),
        ("back\\u{41}.txt".into(), "back\\\\u{41}.txt"),
        // a Hangul filler (a letter, Lo, drawn as nothing) and a no-break space
        ("filler\u{3164}.txt".into(), "filler\\u{3164}.txt"),
        ("nbsp\u{a0}.txt".into(), "nbsp\\u{a0}.txt"),
    ]
}

/// Names that must pass unescaped.
const PLAIN: &[&str] = &["café.txt", "報告.txt"];

/// What no review line may hold raw.
const HIDDEN: &[char] = &[
    '\u{200b}', '\u{2028}', '\u{ad}', '\u{feff}', '\u{2060}', '\u{202e}', '\u{7}', '\u{9b}',
    '\u{1b}', '\u{3164}', '\u{a0}',
    '\u{fffd}', // what invalid UTF-8 turns into when read lossily
];

/// `bytes` as a bash word: `$'\xHH...'`.
fn bash_word(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("\\x{b:02x}")).collect();
    format!("$'{hex}'")
}

fn changes(f: &Fixture, args: &[&str]) -> Run {
    let mut c = std::process::Command::new(BIN);
    c.arg("changes")
        .args(args)
        .env("XDG_STATE_HOME", f.path("state"))
        .current_dir(&f.dir);
    run_command(c, slack_secs(60))
}

fn assert_nothing_hidden(r: &Run, what: &str) {
    for c in HIDDEN {
        assert!(
            !r.stdout.contains(*c) && !r.stderr.contains(*c),
            "{what} printed {c:?} raw:\n{r}"
        );
    }
}

#[test]
fn review_surfaces_escape_what_hides_and_pass_ordinary_names() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("review-names");
    let repo = f.repo("repo");
    let mut script = String::from("set -e\n");
    for (name, _) in hostile() {
        script.push_str(&format!("echo hostile > {}\n", bash_word(&name)));
    }
    for name in PLAIN {
        script.push_str(&format!("echo plain > {}\n", bash_word(name.as_bytes())));
    }
    // a FIFO never comes back: the run's own stderr names it, refused
    script.push_str(&format!(
        "mkfifo {}\n",
        bash_word("fifo\u{200b}\u{1b}".as_bytes())
    ));
    std::fs::write(repo.join(".sandbox-test.sh"), &script).unwrap();
    let rep = f.path("report.json");
    let p = ci_profile(&f);
    // the command line itself carries a format character (the gate refuses controls there)
    let mut c = sandbox_command(
        &p,
        &repo,
        &["--changes", "keep", "--report", rep.to_str().unwrap()],
        &["bash", ".sandbox-test.sh", "arg\u{200b}\u{2028}"],
    );
    c.env("XDG_STATE_HOME", f.path("state"));
    let run = run_command(c, slack_secs(60));
    let _ = std::fs::remove_file(repo.join(".sandbox-test.sh"));
    run.assert_code(0);
    assert_nothing_hidden(&run, "the run");
    assert!(
        run.stderr.contains("refused fifo\\u{200b}\\u{1b} ("),
        "the refused FIFO is not named escaped:\n{run}"
    );

    // control: the run really made these names, raw, and kept them for review
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let c = &v["results"][0]["repo_changes"];
    assert_eq!(c["applied"], "kept", "{v:#}");
    let paths: Vec<&str> = c["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    for raw in ["zwsp\u{200b}.txt", "rlo\u{202e}txt.exe", "esc\u{1b}[2J.txt"] {
        assert!(paths.contains(&raw), "{raw:?} not in the report: {paths:?}");
    }
    let id = c["changeset"].as_str().unwrap().to_string();

    let show = changes(&f, &["show", &id]);
    show.assert_code(0);
    let diff = changes(&f, &["diff", &id]);
    diff.assert_code(0);
    for (what, r) in [("changes show", &show), ("changes diff", &diff)] {
        assert_nothing_hidden(r, what);
        for (_, shown) in hostile() {
            assert!(r.stdout.contains(shown), "{what} lacks {shown}:\n{r}");
        }
        for plain in PLAIN {
            assert!(r.stdout.contains(plain), "{what} lacks {plain}:\n{r}");
        }
    }
    // the diff: an escaped name is quoted as git quotes one; a plain one is not
    assert!(
        diff.stdout
            .contains("diff --git \"a/zwsp\\u{200b}.txt\" \"b/zwsp\\u{200b}.txt\"\n"),
        "{diff}"
    );
    assert!(
        diff.stdout.contains("diff --git a/café.txt b/café.txt\n"),
        "{diff}"
    );
    let list = changes(&f, &["list"]);
    list.assert_code(0);
    assert_nothing_hidden(&list, "changes list");
    assert!(
        list.stdout.contains("arg\\u{200b}\\u{2028}"),
        "changes list does not show the command escaped:\n{list}"
    );
    changes(&f, &["drop", &id]).assert_code(0);
    assert!(!Path::new(&repo.join("café.txt")).exists());
}

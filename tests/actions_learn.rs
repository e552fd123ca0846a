//! Audit, then enforce, in a simulated GitHub Actions job (the runner of tests/actions.rs, in
//! its small part: the step script in `$RUNNER_TEMP`, the file-command files, the runner's
//! variables, the shell line run from the workspace).
//!
//! Under the workflow's `SANDBOX_RUN_LEARN=1` each step with the unchanged shell line
//! `sandbox-run --profile github-actions -- bash -e {0}` is learned: the refusal is named in
//! the step summary with the learned profile, which lies where no step can write; a rerun
//! of the job converges; then `--profile github-actions-learned` enforces. Attacks: refused
//! names and a step summary made to hide or forge learn's section; a step that writes
//! `SANDBOX_RUN_LEARN` to `GITHUB_ENV` to change the next step's mode; a step that writes
//! to the learned profile so that learn would make it writable.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Runner {
    f: Fixture,
    workspace: PathBuf,
    temp: PathBuf,
    tools: PathBuf,
    state: PathBuf,
    /// The runner user's XDG_CONFIG_HOME: the learned profile goes below it.
    config: PathBuf,
}

/// One step's outcome: the run and what it left in the runner's step summary.
struct Step {
    run: Run,
    summary: String,
    /// The runner's GITHUB_ENV file after the step.
    env_file: String,
}

impl Runner {
    fn new(name: &str) -> Runner {
        let f = Fixture::new(name);
        let workspace = f.path("work/repo/repo");
        for d in [".git/objects", ".git/refs/heads"] {
            std::fs::create_dir_all(workspace.join(d)).unwrap();
        }
        std::fs::write(workspace.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(workspace.join(".git/config"), GIT_CONFIG).unwrap();
        let temp = f.path("runner/_temp");
        std::fs::create_dir_all(temp.join("_runner_file_commands")).unwrap();
        std::fs::create_dir_all(temp.join("_github_workflow")).unwrap();
        std::fs::write(temp.join("_github_workflow/event.json"), "{}\n").unwrap();
        let tools = f.path("runner/_tool");
        std::fs::create_dir_all(&tools).unwrap();
        let config = f.path("runner-home/.config");
        std::fs::create_dir_all(&config).unwrap();
        for d in [&f.dir, &f.path("runner"), &temp, &tools] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Runner {
            workspace,
            temp,
            tools,
            state: f.path("state"),
            config,
            f,
        }
    }

    fn learned(&self) -> PathBuf {
        self.config
            .join("sandbox-run/profiles/github-actions-learned.toml")
    }

    /// A file outside every step's view (the ci profile shows the repo and the system).
    fn hidden(&self, name: &str, text: &str) -> PathBuf {
        let p = self.f.path("outside").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Step `n` as the runner runs it: `sandbox-run --profile PROFILE -- /usr/bin/bash -e
    /// SCRIPT` from the workspace, with the workflow's `env` (the job's variables).
    fn step(&self, n: u32, profile: &str, env: &[(&str, &str)], script: &str) -> Step {
        self.step_args(n, &["--profile", profile], env, script)
    }

    /// [`Runner::step`] with the shell line's words before `--` given (`learn --profile P`).
    fn step_args(&self, n: u32, args: &[&str], env: &[(&str, &str)], script: &str) -> Step {
        let id = format!("step-{n}-{}", std::process::id());
        let path = self.temp.join(format!("{id}.sh"));
        std::fs::write(&path, script).unwrap();
        let mut c = Command::new(BIN);
        c.args(args)
            .args(["--", "/usr/bin/bash", "-e"])
            .arg(&path)
            .current_dir(&self.workspace)
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env_remove("SANDBOX_RUN_LEARN")
            .env("XDG_CONFIG_HOME", &self.config)
            .env("XDG_STATE_HOME", &self.state)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &self.workspace)
            .env("GITHUB_RUN_ID", "4321")
            .env("GITHUB_RUN_ATTEMPT", "1")
            .env("GITHUB_JOB", "audit")
            .env(
                "GITHUB_EVENT_PATH",
                self.temp.join("_github_workflow/event.json"),
            )
            .env("RUNNER_TEMP", &self.temp)
            .env("RUNNER_TOOL_CACHE", &self.tools)
            .stdin(std::process::Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let files = [
            ("GITHUB_OUTPUT", format!("set_output_{id}")),
            ("GITHUB_ENV", format!("set_env_{id}")),
            ("GITHUB_PATH", format!("add_path_{id}")),
            ("GITHUB_STATE", format!("save_state_{id}")),
            ("GITHUB_STEP_SUMMARY", format!("step_summary_{id}")),
        ];
        for (k, file) in &files {
            let p = self.temp.join("_runner_file_commands").join(file);
            std::fs::write(&p, "").unwrap();
            c.env(k, &p);
        }
        let run = run_command(c, LIMIT);
        let read = |prefix: &str| {
            let p = self
                .temp
                .join("_runner_file_commands")
                .join(format!("{prefix}{id}"));
            String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned()
        };
        Step {
            run,
            summary: read("step_summary_"),
            env_file: read("set_env_"),
        }
    }
}

const LEARN: &[(&str, &str)] = &[("SANDBOX_RUN_LEARN", "1")];

/// The markdown outside fenced code blocks, line by line, and whether the text ends outside
/// one: a fence opens with a run of 3 or more backticks (an info string after it) and closes
/// with a line of at least as many backticks alone (up to 3 spaces before), as CommonMark.
fn outside_fences(md: &str) -> (Vec<&str>, bool) {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for line in md.lines() {
        let t = line.trim_end();
        let indent = t.len() - t.trim_start().len();
        let t = t.trim_start();
        let run = t.chars().take_while(|c| *c == '`').count();
        match open {
            Some(n) => {
                if indent <= 3 && run >= n && run == t.len() {
                    open = None;
                }
            }
            None if indent <= 3 && run >= 3 && !t[run..].contains('`') => open = Some(run),
            None => out.push(line),
        }
    }
    (out, open.is_none())
}

/// Learn's section (the summary up to the step's own text) and the step's own text.
fn split<'a>(summary: &'a str, theirs: &str) -> (&'a str, &'a str) {
    let at = summary
        .find(theirs)
        .unwrap_or_else(|| panic!("the step's own summary is there:\n{summary}"));
    summary.split_at(at)
}

#[test]
fn a_job_learned_under_the_switch_converges_with_the_same_shell_line_then_enforces() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-learn-job");
    let data = r.hidden("data/notes.txt", "notes the job needs\n");
    let other = r.hidden("other/secret.txt", "not learned\n");
    let learned = r.learned();
    let first = format!("cat '{}'\n", data.display());
    // a step that writes to the learned profile, so that learn would bind it
    let second = format!(
        "mkdir -p '{dir}' 2>/dev/null || true\nprintf '[process]\\nuid = 0\\n' >> '{p}' 2>/dev/null && echo wrote-profile || echo refused-profile\n",
        dir = learned.parent().unwrap().display(),
        p = learned.display()
    );

    // round 1: step 1 is refused the hidden file; learn names it and writes the profile
    let one = r.step(1, "github-actions", LEARN, &first);
    assert_ne!(
        one.run.code,
        Some(0),
        "hidden under github-actions\n{}",
        one.run
    );
    assert!(
        !one.run.stdout.contains("notes the job needs"),
        "{}",
        one.run
    );
    let added = format!(
        "learn: added [filesystem] extra_ro += \"{}\"",
        data.display()
    );
    assert!(one.run.stderr.contains(&added), "{}", one.run);
    let text = std::fs::read_to_string(&learned).unwrap_or_else(|e| panic!("{e}\n{}", one.run));
    assert!(text.starts_with("# sandbox-run learned profile"), "{text}");
    assert!(text.contains("extends = \"github-actions\""), "{text}");
    // the summary: what was refused, what was added, where, how to enforce, the TOML
    let s = &one.summary;
    assert!(s.starts_with("### sandbox-run learn\n"), "{s}");
    assert!(
        s.contains(&format!(
            "```text\nsandbox-run: refused filesystem hidden: {}",
            data.display()
        )),
        "{s}"
    );
    assert!(s.contains(&format!("sandbox-run: {added}")), "{s}");
    assert!(
        s.contains(&format!("```text\n{}\n```", learned.display())),
        "{s}"
    );
    assert!(
        s.contains("shell: sandbox-run --profile github-actions-learned -- bash -e {0}"),
        "{s}"
    );
    assert!(s.contains(&format!("```toml\n{}", text.trim_end())), "{s}");
    // the learned profile lies where no step can write: step 2 could not, and learn did not
    // bind it from the refusal step 2 earned
    let two = r.step(2, "github-actions", LEARN, &second);
    assert!(two.run.stdout.contains("refused-profile"), "{}", two.run);
    assert!(
        two.run.stderr.contains("never: ")
            && two
                .run
                .stderr
                .contains("is sandbox-run's own configuration or state"),
        "{}",
        two.run
    );
    assert_eq!(
        std::fs::read_to_string(&learned).unwrap(),
        text,
        "{}",
        two.run
    );
    assert!(
        !learned.starts_with(&r.temp)
            && !learned.starts_with(&r.workspace)
            && !learned.starts_with(&r.state),
        "{}",
        learned.display()
    );

    // round 2, the same shell line and switch: it runs under what round 1 learned, and passes
    let one = r.step(11, "github-actions", LEARN, &first);
    one.run.assert_code(0);
    assert_eq!(one.run.stdout, "notes the job needs\n", "{}", one.run);
    assert!(
        one.run
            .stderr
            .contains("sandbox-run: learn: running under ")
            && one
                .run
                .stderr
                .contains("learn: the command ran with no refusal"),
        "{}",
        one.run
    );
    assert_eq!(one.summary.trim_end().lines().count(), 1, "{}", one.summary);
    assert!(one.summary.contains("no refusal"), "{}", one.summary);
    let converged = std::fs::read_to_string(&learned).unwrap();

    // enforce: the switch off, the learned profile on the shell line
    let e = r.step(
        21,
        "github-actions-learned",
        &[],
        &format!("cat '{}'\n", data.display()),
    );
    e.run.assert_code(0);
    assert_eq!(e.run.stdout, "notes the job needs\n", "{}", e.run);
    assert!(!e.run.stderr.contains("learn:"), "{}", e.run);
    assert_eq!(e.summary, "", "no learn section when enforcing");
    // a fresh refusal is still refused, and nothing is learned from it
    let e = r.step(
        22,
        "github-actions-learned",
        &[],
        &format!("cat '{}'\n", other.display()),
    );
    assert_ne!(e.run.code, Some(0), "{}", e.run);
    assert!(!e.run.stdout.contains("not learned"), "{}", e.run);
    assert!(
        e.run.stderr.contains("refused filesystem hidden: "),
        "{}",
        e.run
    );
    assert_eq!(std::fs::read_to_string(&learned).unwrap(), converged);
}

#[test]
fn refused_names_and_the_steps_own_summary_cannot_hide_or_forge_learns_section() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-learn-md");
    // names the step chooses: backtick runs longer than 3, a newline, a comment, HTML, a table
    let plain_hostile = "a``````b<!--c<img src=x onerror=alert(1)>|d|.txt";
    let newline = "e\n```\n<details><!--\n| x |\n.txt";
    let p1 = r.hidden(&format!("data/{plain_hostile}"), "one\n");
    let p2 = r.hidden(&format!("data/{newline}"), "two\n");
    let ok = r.hidden("data/plain.txt", "plain\n");
    let theirs = "the step summary text\n";
    let script = |paths: &[&Path]| {
        let mut s = String::new();
        for p in paths {
            // the path as bash reads it: $'...' with \n
            let q = p
                .display()
                .to_string()
                .replace('\n', "\\n")
                .replace('\'', "\\'");
            s.push_str(&format!("cat $'{q}' || true\n"));
        }
        // the step's own summary opens a fence and a comment and never closes them
        s.push_str(&format!(
            "printf '%s\\n' '{}' '<!--' '``````````````' >> \"$GITHUB_STEP_SUMMARY\"\n",
            theirs.trim_end()
        ));
        s
    };

    // positive control: a plain name renders as expected, three-backtick fences
    let c = r.step(1, "github-actions", LEARN, &script(&[&ok]));
    let (ours, rest) = split(&c.summary, theirs);
    assert!(ours.starts_with("### sandbox-run learn\n"), "{}", c.summary);
    assert!(
        ours.contains(&format!(
            "```text\nsandbox-run: refused filesystem hidden: {}",
            ok.display()
        )),
        "{ours}"
    );
    assert!(
        rest.starts_with(theirs),
        "the step's text follows, as written: {rest}"
    );
    let (_, closed) = outside_fences(ours);
    assert!(closed, "{ours}");

    // the attack
    let s = r.step(2, "github-actions", LEARN, &script(&[&p1, &p2]));
    let (ours, rest) = split(&s.summary, theirs);
    assert!(
        ours.starts_with("### sandbox-run learn\n"),
        "ours first:\n{}",
        s.summary
    );
    assert!(rest.starts_with(theirs), "{rest}");
    let (lines, closed) = outside_fences(ours);
    assert!(
        closed,
        "every fence of ours is closed before the step's text:\n{ours}"
    );
    for l in &lines {
        for bad in ["<!--", "<img", "``````", "|d|", "<details>", "| x |"] {
            assert!(!l.contains(bad), "{bad:?} outside a fence: {l:?}\n{ours}");
        }
    }
    // both names are named, escaped, inside fences; the one a profile can hold was learned,
    // and the TOML block shows it
    assert!(ours.contains(&p1.display().to_string()), "{ours}");
    // a name with a newline is not named by the classifier today; were it named, it would be
    // escaped on one line (the unit test of learn_summary shows that), never as written
    assert!(!ours.contains(newline), "{ours}");
    assert!(ours.contains("```toml\n"), "{ours}");
    let fences: Vec<&str> = ours
        .lines()
        .filter(|l| l.starts_with("```") && l.trim_start_matches('`').len() + 3 < l.len())
        .collect();
    assert!(
        !fences.is_empty(),
        "a fence longer than the name's run of 6:\n{ours}"
    );
    let learned = std::fs::read_to_string(r.learned()).unwrap();
    assert!(learned.contains(plain_hostile), "{learned}");

    // a step summary of the runner's whole 1 MiB: learn's section still comes, whole, and the
    // runner's limit holds (the step's text is left out, and a line says so)
    let fresh = r.hidden("data/fresh.txt", "fresh\n");
    let big = format!(
        "cat '{}' || true\nhead -c 1048576 /dev/zero | tr '\\0' x >> \"$GITHUB_STEP_SUMMARY\"\n",
        fresh.display()
    );
    let b = r.step(3, "github-actions", LEARN, &big);
    assert!(
        b.summary.starts_with("### sandbox-run learn\n"),
        "{}",
        b.run
    );
    assert!(b.summary.len() <= 1 << 20, "{}", b.summary.len());
    assert!(
        b.run
            .stderr
            .contains("the step's own summary not passed to the runner"),
        "{}",
        b.run
    );
    let (_, closed) = outside_fences(&b.summary);
    assert!(closed, "{}", b.summary);
    assert!(!learned.contains("e\n```"), "{learned}");
}

/// The pairs as `Runner::step` takes them.
fn env(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The runner's `GITHUB_ENV` file, as the runner applies it to later steps (`NAME=VALUE` and
/// `NAME<<DELIMITER` entries).
fn runner_env(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.split('\n');
    while let Some(l) = lines.next() {
        if let Some((k, d)) = l.split_once("<<").filter(|(k, _)| !k.contains('=')) {
            let v: Vec<&str> = lines.by_ref().take_while(|x| *x != d).collect();
            out.push((k.to_string(), v.join("\n")));
        } else if let Some((k, v)) = l.split_once('=') {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

/// A step writes `SANDBOX_RUN_LEARN` into `GITHUB_ENV` to change the mode of the job's next
/// steps, in a workflow that (carelessly) lists that name for the runner too. The name never
/// reaches the runner (so never sandbox-run's own environment in the next step); it reaches
/// only the next sandboxed step's command, which shows the attack ran.
#[test]
fn a_step_cannot_switch_learning_on_or_off_for_the_next_steps_through_github_env() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-learn-env");
    let data = r.hidden("data/notes.txt", "notes\n");
    let next = format!(
        "echo \"inside: ${{SANDBOX_RUN_LEARN-unset}}\"\ncat '{}'\n",
        data.display()
    );
    let listed = ("SANDBOX_RUN_EXPORT_ENV", "SANDBOX_RUN_LEARN,VERSION");
    let with = |base: &[(&str, &str)], extra: &[(String, String)]| -> Vec<(String, String)> {
        base.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(extra.iter().cloned())
            .collect()
    };

    // on in the workflow; step 1 turns it off through GITHUB_ENV
    let workflow = with(&[listed, ("SANDBOX_RUN_LEARN", "1")], &[]);
    let one = r.step(
        1,
        "github-actions",
        &env(&workflow),
        "echo SANDBOX_RUN_LEARN=0 >> \"$GITHUB_ENV\"\necho VERSION=7 >> \"$GITHUB_ENV\"\n",
    );
    one.run.assert_code(0);
    let applied = runner_env(&one.env_file);
    // control: the listed name the step wrote does reach the runner
    assert!(
        applied.contains(&("VERSION".into(), "7".into())),
        "{}",
        one.env_file
    );
    assert!(
        !applied.iter().any(|(k, _)| k == "SANDBOX_RUN_LEARN"),
        "never handed to the runner: {}",
        one.env_file
    );
    let two = r.step(
        2,
        "github-actions",
        &env(&with(&[], &[workflow.clone(), applied].concat())),
        &next,
    );
    // the write reached the next sandboxed step's command (the attack ran)...
    assert!(two.run.stdout.contains("inside: 0"), "{}", two.run);
    // ...and the step was still learned
    assert!(
        two.run
            .stderr
            .contains("learn: added [filesystem] extra_ro"),
        "{}",
        two.run
    );
    assert!(
        two.summary.starts_with("### sandbox-run learn"),
        "{}",
        two.summary
    );
    assert!(r.learned().exists());
    std::fs::remove_file(r.learned()).unwrap();

    // off in the workflow; step 3 turns it on through GITHUB_ENV
    let workflow = with(&[listed], &[]);
    let three = r.step(
        3,
        "github-actions",
        &env(&workflow),
        "echo SANDBOX_RUN_LEARN=1 >> \"$GITHUB_ENV\"\n",
    );
    three.run.assert_code(0);
    let applied = runner_env(&three.env_file);
    assert!(
        !applied.iter().any(|(k, _)| k == "SANDBOX_RUN_LEARN"),
        "{}",
        three.env_file
    );
    let four = r.step(
        4,
        "github-actions",
        &env(&[workflow, applied].concat()),
        &next,
    );
    assert!(four.run.stdout.contains("inside: 1"), "{}", four.run);
    assert_ne!(four.run.code, Some(0), "{}", four.run);
    assert!(
        !four.run.stderr.contains("learn:"),
        "not learned:\n{}",
        four.run
    );
    assert_eq!(four.summary, "");
    assert!(!r.learned().exists());

    // a value that is neither on nor off is refused before anything runs
    let bad = r.step(
        5,
        "github-actions",
        &[("SANDBOX_RUN_LEARN", "yes")],
        "echo ran\n",
    );
    bad.run.assert_code(125);
    assert!(!bad.run.stdout.contains("ran"), "{}", bad.run);
    assert!(
        bad.run
            .stderr
            .contains("SANDBOX_RUN_LEARN=yes is neither 1"),
        "{}",
        bad.run
    );
}

/// The shell line may name `learn` itself; its `--out` is refused where a step can write:
/// `$RUNNER_TEMP` (the profile's `extra_rw`, by variable), the workspace, the state directory
/// with the kept homes. Control: the same shell line with the default `--out` learns.
#[test]
fn a_learn_shell_line_never_writes_where_a_step_can() {
    if !sandbox_works() {
        return;
    }
    let r = Runner::new("actions-learn-out");
    let data = r.hidden("data/notes.txt", "notes\n");
    let script = format!("cat '{}'\n", data.display());
    let kept = r.state.join("sandbox-run/home/github-actions/learned.toml");
    let places = [
        r.temp.join("learned.toml"),
        r.workspace.join("learned.toml"),
        kept,
    ];
    for (n, out) in places.iter().enumerate() {
        let o = out.to_str().unwrap();
        let s = r.step_args(
            n as u32 + 1,
            &["learn", "--profile", "github-actions", "--out", o],
            &[],
            &script,
        );
        s.run.assert_code(125);
        assert!(
            s.run.stderr.contains("which the command can write"),
            "{}",
            s.run
        );
        assert!(!out.exists(), "{}", out.display());
        assert!(!s.run.stdout.contains("notes"), "nothing ran\n{}", s.run);
        assert_eq!(s.summary, "", "nothing ran: nothing to summarize");
    }
    let s = r.step_args(9, &["learn", "--profile", "github-actions"], &[], &script);
    assert_ne!(s.run.code, Some(0), "{}", s.run);
    assert!(
        s.run.stderr.contains("learn: added [filesystem] extra_ro"),
        "{}",
        s.run
    );
    assert!(
        s.summary.starts_with("### sandbox-run learn"),
        "{}",
        s.summary
    );
    assert!(r.learned().exists());
}

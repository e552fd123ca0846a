//! The man pages and shell completions `scripts/package-deb` ships, as a user meets them:
//! `examples/gen-docs` writes them from the clap definition; the main page has the sections
//! a reader looks for (EXIT STATUS with the README's exit codes, EXAMPLES, FILES,
//! ENVIRONMENT), and the bash and fish completions offer profile names where a profile goes, the
//! subcommands, and the options of `run` (the default command), driven through each shell.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-run");

/// `examples/gen-docs`, built next to the binary (`cargo build --examples`; scripts/test does).
fn gen_docs() -> PathBuf {
    let p = Path::new(BIN).parent().unwrap().join("examples/gen-docs");
    assert!(
        p.is_file(),
        "{} does not exist: run `cargo build --locked --examples` first (scripts/test does)",
        p.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gen-docs.rs");
    let mtime = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    assert!(
        mtime(&p) >= mtime(&src),
        "{} is older than examples/gen-docs.rs: run `cargo build --locked --examples`",
        p.display()
    );
    p
}

/// The generated files, once per test process.
fn generated() -> &'static Path {
    static OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    OUT.get_or_init(|| {
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let o = Command::new(gen_docs()).arg(&out).output().unwrap();
        assert!(
            o.status.success(),
            "gen-docs: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

#[test]
fn the_man_page_has_exit_status_examples_files_and_environment() {
    let page = std::fs::read_to_string(generated().join("man/sandbox-run.1")).unwrap();
    let sections: Vec<&str> = page.lines().filter(|l| l.starts_with(".SH ")).collect();
    for want in [
        ".SH \"EXIT STATUS\"",
        ".SH EXAMPLES",
        ".SH FILES",
        ".SH ENVIRONMENT",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(sections.contains(&want), "{want} missing: {sections:?}");
    }
    let section = |name: &str| {
        let start = page.find(name).unwrap();
        let rest = &page[start + name.len()..];
        rest[..rest.find("\n.SH ").unwrap_or(rest.len())].to_string()
    };
    // Every code of the README's exit codes table, in the same order.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = &readme[readme.find("### Exit codes").expect("README's exit codes")..];
    let codes: Vec<String> = table
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap().trim().replace('–', "-"))
        .collect();
    assert_eq!(codes, ["0-123", "124", "125", "126", "127", "128+N"]);
    let exit = section(".SH \"EXIT STATUS\"");
    let mut at = 0;
    for code in &codes {
        let term = format!(".TP\n\\fB{}\\fR\n", code.replace('-', "\\-"));
        let i = exit[at..]
            .find(&term)
            .unwrap_or_else(|| panic!("exit code {code} missing or out of order: {exit}"));
        at += i + term.len();
    }
    // The README's first command is the first example.
    assert!(
        section(".SH EXAMPLES").contains(
            "sandbox\\-run \\-\\-profile validate \\-\\-repo examples/hello\\-node \\-\\- npm test"
        ),
        "{page}"
    );
    let files = section(".SH FILES");
    for f in [
        "~/.config/sandbox\\-run/profiles/",
        "/etc/sandbox\\-run/profiles/",
        "~/.local/state/sandbox\\-run/changes/ID/",
    ] {
        assert!(files.contains(f), "{f} missing: {files}");
    }
    let env = section(".SH ENVIRONMENT");
    for v in [
        "SANDBOX_RUN_PROFILE_PATH",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
    ] {
        assert!(env.contains(v), "{v} missing: {env}");
    }
    // `run`'s own page has them too; and where man is installed, the page renders.
    let run = std::fs::read_to_string(generated().join("man/sandbox-run-run.1")).unwrap();
    assert!(run.contains(".SH \"EXIT STATUS\""), "{run}");
    if Path::new("/usr/bin/man").exists() {
        let o = Command::new("man")
            .arg("-l")
            .arg(generated().join("man/sandbox-run.1"))
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("EXIT STATUS") && text.contains("128+N"),
            "{text}"
        );
    } else {
        eprintln!("note: man is not installed: the page's rendering is not checked");
    }
}

/// What bash's completion function offers for the words `line` (the last is the one being
/// completed), with the binary under test on PATH as `sandbox-run`.
fn complete(line: &[&str]) -> Vec<String> {
    let script = generated().join("completions/sandbox-run.bash");
    let o = Command::new("bash")
        .arg("-c")
        .arg(
            r#"source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ));
               _sandbox__run sandbox-run "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}";
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(&script)
        .args(line)
        .env(
            "PATH",
            format!(
                "{}:/usr/bin:/bin",
                Path::new(BIN).parent().unwrap().display()
            ),
        )
        .env_remove("SANDBOX_RUN_PROFILE_PATH")
        .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn bash_completes_profiles_subcommands_and_the_options_of_run() {
    assert!(
        Path::new(BIN).file_name().unwrap() == "sandbox-run",
        "the completion runs `sandbox-run profiles list`"
    );
    // --profile v<TAB>, with run implicit, explicit, and for check and validate
    assert_eq!(complete(&["sandbox-run", "--profile", "v"]), ["validate"]);
    assert_eq!(
        complete(&["sandbox-run", "-v", "run", "--profile", "v"]),
        ["validate"]
    );
    assert_eq!(
        complete(&["sandbox-run", "check", "--profile", "g"]),
        ["github-actions"]
    );
    assert_eq!(
        complete(&["sandbox-run", "validate", "--profile", ""]),
        ["adapter", "ci", "github-actions", "validate"]
    );
    // home PROFILE and profiles show NAME
    assert_eq!(complete(&["sandbox-run", "home", "a"]), ["adapter"]);
    assert_eq!(complete(&["sandbox-run", "profiles", "show", "c"]), ["ci"]);
    // a path is completed as a path
    assert_eq!(
        complete(&["sandbox-run", "--profile", "./examples/hello-no"]),
        ["./examples/hello-node"]
    );
    // subcommands, and the options of run before any command name
    assert_eq!(complete(&["sandbox-run", "do"]), ["doctor"]);
    assert_eq!(
        complete(&["sandbox-run", "--profile", "validate", "--allow-p"]),
        ["--allow-program"]
    );
    // a profile named like a subcommand is not taken for it
    assert_eq!(
        complete(&["sandbox-run", "--profile", "validate", "--net", "f"]),
        ["filtered"]
    );
    assert_eq!(complete(&["sandbox-run", "changes", "d"]), ["diff", "drop"]);
}

/// fish offers the same: profile names after `--profile` (with `run` implicit), driven through
/// fish's own `complete -C`; zsh's script at least parses (zsh has no way to run a completion
/// function without a line editor). Both shells are Debian packages `.ci/run` installs.
#[test]
fn fish_completes_profiles_and_the_zsh_script_parses() {
    let path = format!(
        "{}:/usr/bin:/bin",
        Path::new(BIN).parent().unwrap().display()
    );
    let fish = |line: &str| -> Vec<String> {
        // -i: `commandline`, which the completion functions read, works only interactively
        let o = Command::new("fish")
            .args(["--no-config", "-i", "-c"])
            .arg("source $argv[1]; complete -C $argv[2]")
            .arg(generated().join("completions/sandbox-run.fish"))
            .arg(line)
            .env("PATH", &path)
            .env_remove("SANDBOX_RUN_PROFILE_PATH")
            .env("XDG_CONFIG_HOME", "/nonexistent-sandbox-run-test")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("fish is not installed: apt-get install fish (.ci/run does)");
        assert!(
            o.status.success(),
            "fish: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    // run implicit and explicit, a profile named like a command taken as a value, subcommands
    assert_eq!(fish("sandbox-run --profile v"), ["validate"]);
    assert_eq!(fish("sandbox-run -v run --profile v"), ["validate"]);
    assert_eq!(fish("sandbox-run check --profile g"), ["github-actions"]);
    assert_eq!(fish("sandbox-run --profile validate --net f"), ["filtered"]);
    assert_eq!(
        fish("sandbox-run --profile validate --allow-p"),
        ["--allow-program"]
    );
    assert_eq!(fish("sandbox-run do"), ["doctor"]);
    assert_eq!(fish("sandbox-run changes d"), ["diff", "drop"]);
    assert!(
        fish("sandbox-run profiles show c").contains(&"ci".to_string()),
        "profiles show c: no `ci`"
    );
    let o = Command::new("zsh")
        .arg("-n")
        .arg(generated().join("completions/_sandbox-run"))
        .output()
        .expect("zsh is not installed: apt-get install zsh (.ci/run does)");
    assert!(
        o.status.success(),
        "zsh -n: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

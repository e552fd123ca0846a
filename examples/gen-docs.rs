//! Writes the shell completions and the man pages of sandbox-run from its clap definition
//! (`src/cli.rs`), for the packages (`scripts/package-deb`):
//!
//! ```text
//! cargo run --example gen-docs -- OUT_DIR
//! ```
//!
//! OUT_DIR gets `completions/sandbox-run.bash`, `completions/_sandbox-run` (zsh),
//! `completions/sandbox-run.fish`, and `man/sandbox-run.1` with one page per subcommand
//! (`sandbox-run-run.1`, ...). An example, not part of the binary: clap_complete and
//! clap_mangen are dev-dependencies, so the shipped binary does not grow.

use clap::CommandFactory;
use clap_complete::Shell;
use std::path::PathBuf;

fn main() {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gen-docs OUT_DIR");
        std::process::exit(2);
    };
    if let Err(e) = generate(&out) {
        eprintln!("gen-docs: {e}");
        std::process::exit(1);
    }
}

fn generate(out: &std::path::Path) -> std::io::Result<()> {
    let mut cmd = sandbox_run::cli::Cli::command();
    // The clap definition leaves `run` implicit (`sandbox-run --profile P -- CMD`, see
    // src/main.rs); say it where a reader of the page looks first.
    cmd = cmd.after_long_help(
        "'run' is the default command: 'sandbox-run --profile P -- CMD' is 'sandbox-run run --profile P -- CMD'. \
         'sandbox-run doctor' says what this host and user allow.",
    );
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, "sandbox-run", &completions)?;
        let text = std::fs::read_to_string(&path)?;
        let text = match shell {
            Shell::Bash => bash(&text),
            Shell::Zsh => zsh(&text),
            _ => fish(&text),
        };
        std::fs::write(&path, text)?;
        println!("{}", path.display());
    }
    let man = out.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(cmd, &man)?;
    // The pages users open first get the sections clap knows nothing of.
    for page in ["sandbox-run.1", "sandbox-run-run.1"] {
        let path = man.join(page);
        let text = std::fs::read_to_string(&path)?;
        std::fs::write(&path, with_sections(&text))?;
    }
    let mut pages: Vec<_> = std::fs::read_dir(&man)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pages.sort();
    for p in pages {
        println!("{}", p.display());
    }
    Ok(())
}

/// The README's exit codes table.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0-123", "the command's own exit code"),
    ("124", "timed out (the sandbox was torn down)"),
    ("125", "sandbox-run itself failed: a bad flag, a bad profile, or a layer the profile requires is missing on this host (the report's status is sandbox_error)"),
    ("126", "the policy gate denied the command (the message names the rule and the word)"),
    ("127", "the program was not found"),
    ("128+N", "the command was killed by signal N (an OOM kill is 137 and the report says oom)"),
];

/// The README's examples: what each does, then the command.
const EXAMPLES: &[(&str, &str)] = &[
    ("Run the bundled example's tests under the validate profile (node, npm and npx only, the repo copy-on-write, no network, every layer required):",
     "sandbox-run --profile validate --repo examples/hello-node -- npm test"),
    ("The command as one string, split like a shell splits words but never run by one:",
     "sandbox-run --profile validate --command 'npm test -- --grep \"a|b\"'"),
    ("Ask the gate only; nothing runs (exit 0 allowed, 126 denied, 127 not found):",
     "sandbox-run check --json --profile validate --command 'npm test && rm -rf /'"),
    ("Where this user cannot have a cgroup, run without one (listed under degraded in the report):",
     "sandbox-run --profile validate --without cgroup -- npm test"),
    ("Allow one more program for this command only, checked as the profile's own:",
     "sandbox-run --profile validate --allow-program make -- make test"),
    ("Keep the run's writes for review instead of applying them, then look and apply:",
     "sandbox-run --profile ci --changes keep -- make\nsandbox-run changes list\nsandbox-run changes diff ID\nsandbox-run changes apply ID"),
    ("Each validation command of a gene, fail-fast, into one report:",
     "sandbox-run validate --profile validate --gene gene.json --report report.json"),
    ("What this kernel and user allow, and how to fix what they do not (exit 0 when every shipped profile runs with every layer):",
     "sandbox-run doctor"),
];

const FILES: &[(&str, &str)] = &[
    ("~/.config/sandbox-run/profiles/NAME.toml", "the caller's profiles ($XDG_CONFIG_HOME/sandbox-run/profiles when set), looked up after $SANDBOX_RUN_PROFILE_PATH"),
    ("/etc/sandbox-run/profiles/NAME.toml", "the host's profiles, looked up next; then the built-in ones (adapter, ci, github-actions, validate; sandbox-run profiles list)"),
    ("~/.local/state/sandbox-run/", "sandbox-run's state directory ($XDG_STATE_HOME/sandbox-run when set), of the user the sandbox runs as; when root runs the repo of a uid without a home, /var/lib/sandbox-run. No link below it is followed"),
    ("~/.local/state/sandbox-run/changes/ID/", "changesets kept by --changes keep, for sandbox-run changes show, diff, apply or drop"),
    ("~/.local/state/sandbox-run/home/PROFILE/", "the $HOME kept under --home persist (sandbox-run home PROFILE)"),
    ("~/.local/state/sandbox-run/runs/", "the private working directories of a run or a gene, removed at its end"),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    ("SANDBOX_RUN_PROFILE_PATH", "absolute directories, separated by colons, searched first for a profile named by --profile"),
    ("XDG_CONFIG_HOME", "where the caller's profile directory is (default ~/.config)"),
    ("XDG_STATE_HOME", "where sandbox-run keeps its state: kept changes, kept homes, run directories (default ~/.local/state)"),
    ("PATH", "how the gate finds a program, unless the profile sets its own PATH"),
    ("XDG_RUNTIME_DIR", "where a systemd user manager is asked for a delegated cgroup, rootless on cgroup v2"),
    ("GITHUB_ACTIONS", "when true, a profile (or profile directory) a sandboxed step could have written is refused"),
    ("SANDBOX_RUN_EXPORT_ENV, SANDBOX_RUN_EXPORT_PATH", "under GitHub Actions, the GITHUB_ENV and GITHUB_PATH entries a sandboxed step may hand to unsandboxed steps"),
];

/// `s` as roff text: backslashes and hyphens escaped, no line read as a request.
fn roff(s: &str) -> String {
    s.replace('\\', "\\e")
        .replace('-', "\\-")
        .lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// EXIT STATUS, EXAMPLES, FILES, ENVIRONMENT and SEE ALSO, before the page's VERSION section
/// (or at its end).
fn with_sections(page: &str) -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, what) in EXIT_STATUS {
        s += &format!(".TP\n\\fB{}\\fR\n{}\n", roff(code), roff(what));
    }
    s += ".SH EXAMPLES\n";
    for (what, command) in EXAMPLES {
        s += &format!(
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
            roff(what),
            roff(command)
        );
    }
    s += ".SH FILES\n";
    for (file, what) in FILES {
        s += &format!(".TP\n\\fI{}\\fR\n{}\n", roff(file), roff(what));
    }
    s += ".SH ENVIRONMENT\n";
    for (var, what) in ENVIRONMENT {
        s += &format!(".TP\n\\fB{}\\fR\n{}\n", roff(var), roff(what));
    }
    s += ".SH \"SEE ALSO\"\n";
    s += &roff(
        "sandbox-run-run(1), sandbox-run-check(1), sandbox-run-validate(1), sandbox-run-doctor(1), sandbox-run-profiles(1), sandbox-run-home(1), sandbox-run-changes(1)",
    );
    s += "\n";
    // clap_mangen calls the after_long_help text EXTRA
    let page = page.replace(".SH EXTRA\n", ".SH NOTES\n");
    match page.find(".SH VERSION") {
        Some(i) => format!("{}{s}{}", &page[..i], &page[i..]),
        None => format!("{page}{s}"),
    }
}

/// clap_complete's bash script, fixed and taught two things:
/// - its case labels spell the subcommands `sandbox__subcmd__run__subcmd__X` where its loop
///   names them `sandbox__run__subcmd__X` (the `-` in the name), so no subcommand's options
///   were ever offered: the labels are made to match;
/// - `run` is the default command, so `sandbox-run --profile ...` completes as `run` does;
/// - where a profile goes (`--profile`, `home PROFILE`, `profiles show NAME`), the profiles
///   reachable by name are offered (`sandbox-run profiles list`), and files for a path.
fn bash(script: &str) -> String {
    let fixed = script.replace("sandbox__subcmd__run", "sandbox__run");
    let anchor = "    done\n\n    case \"${cmd}\" in\n";
    let added = r#"    done

    # (added by examples/gen-docs.rs) `run` is the default command: `sandbox-run --profile P`
    # completes as `sandbox-run run`, whatever words follow (a profile named `validate` is
    # not the command of that name)
    for i in "${COMP_WORDS[@]:1:COMP_CWORD}"; do
        case "${i}" in
            -v|-vv|-vvv|--verbose|-q|--quiet) ;;
            -h|--help|-V|--version|"") break ;;
            -*) cmd="sandbox__run__subcmd__run"; break ;;
            *) break ;;
        esac
    done
    # where a profile goes: the profiles reachable by name, and files for a path
    if [[ "${prev}" == "--profile" ]] \
        || [[ "${cmd}" == "sandbox__run__subcmd__home" && "${prev}" == "home" ]] \
        || [[ "${cmd}" == "sandbox__run__subcmd__profiles__subcmd__show" && "${prev}" == "show" ]]; then
        local names
        names="$("${COMP_WORDS[0]}" profiles list 2>/dev/null | while read -r name _; do printf '%s\n' "${name}"; done)"
        COMPREPLY=( $(compgen -W "${names}" -- "${cur}") )
        if [[ "${cur}" == */* || "${cur}" == .* || "${cur}" == ~* ]]; then
            COMPREPLY+=( $(compgen -f -- "${cur}") )
        fi
        return 0
    fi

    case "${cmd}" in
"#;
    assert!(
        fixed.contains(anchor),
        "clap_complete's bash script changed shape"
    );
    fixed.replacen(anchor, added, 1)
}

/// zsh: profile names where a profile goes (and files, for a path).
fn zsh(script: &str) -> String {
    let func = r#"#compdef sandbox-run

# (added by examples/gen-docs.rs) the profiles reachable by name, and .toml files
(( $+functions[__sandbox_run_profiles] )) ||
__sandbox_run_profiles() {
    local -a names
    names=(${${(f)"$(_call_program profiles ${words[1]} profiles list 2>/dev/null)"}%% *})
    _alternative "profiles:profile:(${names[*]})" 'files:profile file:_files -g "*.toml"'
}
"#;
    let out = script
        .replacen("#compdef sandbox-run\n", func, 1)
        .replace(":NAME|PATH:_default'", ":NAME|PATH:__sandbox_run_profiles'")
        .replace(
            "':profile -- Profile name or path to a .toml file:_default'",
            "':profile -- Profile name or path to a .toml file:__sandbox_run_profiles'",
        )
        .replace(
            "':name -- Profile name or path to a .toml file:_default'",
            "':name -- Profile name or path to a .toml file:__sandbox_run_profiles'",
        );
    assert!(
        out.contains(":NAME|PATH:__sandbox_run_profiles'"),
        "clap_complete's zsh script changed shape"
    );
    out
}

/// fish: profile names after --profile (also before the command name: `run` is the default),
/// and for `home` and `profiles show`.
fn fish(script: &str) -> String {
    // `run` is the default command, so its options may come before any command name: each of
    // run's rules is given again under __fish_sandbox_run_implicit_run, which holds while no
    // command name (nor `--`) has been typed, skipping the values of run's options.
    const RUN: &str = "complete -c sandbox-run -n \"__fish_sandbox_run_using_subcommand run\" ";
    let mut valued = Vec::new();
    let mut implicit = String::new();
    // A rule whose values carry descriptions spans several lines (inside double quotes).
    let mut statements: Vec<String> = Vec::new();
    for line in script.lines() {
        match statements.last_mut() {
            Some(open) if open.matches('"').count() % 2 == 1 => {
                open.push('\n');
                open.push_str(line);
            }
            _ => statements.push(line.to_string()),
        }
    }
    let mut out = String::new();
    for line in statements {
        let line = if line.contains(" -l profile ") && line.ends_with(" -r") {
            format!("{line} -f -a \"(__fish_sandbox_run_profiles)\"")
        } else {
            line.to_string()
        };
        if let Some(rest) = line.strip_prefix(RUN) {
            let words: Vec<&str> = rest.split(' ').collect();
            if words.contains(&"-r") {
                if let Some(w) = words.windows(2).find(|w| w[0] == "-l") {
                    valued.push(format!("--{}", w[1]));
                }
            }
            if !rest.contains(" -l help ")
                && !rest.contains(" -l verbose ")
                && !rest.contains(" -l quiet ")
            {
                implicit += &format!(
                    "complete -c sandbox-run -n \"__fish_sandbox_run_implicit_run\" {rest}\n"
                );
            }
        }
        out += &line;
        out += "\n";
    }
    assert!(
        !valued.is_empty(),
        "clap_complete's fish script changed shape"
    );
    out += &format!(
        r#"
# (added by examples/gen-docs.rs) true while the words typed hold no command name and no `--`:
# `run` is then the command, implicitly
function __fish_sandbox_run_implicit_run
    set -l cmd (commandline -opc)
    set -e cmd[1]
    set -l skip 0
    for w in $cmd
        if test $skip = 1
            set skip 0
            continue
        end
        switch $w
            case {}
                set skip 1
            case '--*=*' '-?*'
            case '*'
                return 1
        end
    end
    return 0
end
"#,
        valued.join(" ")
    );
    out += &implicit;
    out += r#"
# (added by examples/gen-docs.rs) the profiles reachable by name, and .toml files
function __fish_sandbox_run_profiles
    set -l cmd (commandline -opc)
    $cmd[1] profiles list 2>/dev/null | string replace -r ' .*' ''
    __fish_complete_suffix .toml
end
complete -c sandbox-run -n "__fish_seen_subcommand_from home; and not __fish_seen_subcommand_from (__fish_sandbox_run_profiles)" -f -a "(__fish_sandbox_run_profiles)"
complete -c sandbox-run -n "__fish_seen_subcommand_from show; and __fish_seen_subcommand_from profiles" -f -a "(__fish_sandbox_run_profiles)"
"#;
    out
}

use clap::{CommandFactory, Parser};
use sandbox_run::app;
use sandbox_run::cli::Cli;
use sandbox_run::exit::EXIT_SANDBOX_ERROR;

fn main() {
    let _ = sandbox_run::app::STARTED.set(std::time::Instant::now());
    // The re-executed stage 2 of a run: nothing else happens in that process.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == sandbox_run::launcher::STAGE2_ARG)
    {
        sandbox_run::launcher::stage2::main();
    }
    // A signal that arrives before the supervisor is waiting (a workflow runner aborting us
    // right after the spawn) must be relayed to the sandbox, not kill us on the spot: block
    // them now; the supervisor takes pending ones from its signalfd.
    sandbox_run::supervisor::block_relayed();
    let args = with_default_command(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => std::process::exit(usage_error(e, &args)),
    };
    init_logging(cli.verbose, cli.quiet);
    match app::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(fail) => {
            eprintln!("sandbox-run: {}", fail.msg.replace('\n', " "));
            if let Some(hint) = &fail.hint {
                eprintln!("sandbox-run: {}", hint.replace('\n', " "));
            }
            std::process::exit(fail.code);
        }
    }
}

/// `--help` and `--version` print and exit 0 (the top-level help with the options of `run`,
/// the default command); a bare `sandbox-run` prints the usage on stderr and exits 125; every
/// other flag problem is one line and 125, pointing to the help of the command at hand, and
/// the `--report` the command line names (if any) says so too.
fn usage_error(e: clap::Error, args: &[std::ffi::OsString]) -> i32 {
    use clap::error::ErrorKind;
    let sub = subcommand(args);
    match e.kind() {
        ErrorKind::DisplayHelp if sub.is_none() => {
            let _ = e.print();
            // (a closed pipe, `sandbox-run --help | head`, is not a panic)
            let _ = std::io::Write::write_all(&mut std::io::stdout(), run_options().as_bytes());
            0
        }
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprint!("{}", Cli::command().render_help());
            eprintln!(
                "\nsandbox-run: a command is required, e.g. sandbox-run --profile validate -- npm test (the options of run: 'sandbox-run run --help')"
            );
            EXIT_SANDBOX_ERROR
        }
        _ => {
            let mut line = one_line(&e);
            if let Some(hint) = missing_dashes(&e, args, sub.as_deref()) {
                line = format!("{line}; {hint}");
            }
            let see = match &sub {
                Some(s) => format!("sandbox-run {s} --help"),
                None => "sandbox-run --help".into(),
            };
            let line = format!("{line} (see '{see}')");
            eprintln!("sandbox-run: {line}");
            app::usage_error_report(args, &line);
            EXIT_SANDBOX_ERROR
        }
    }
}

/// The command named on the line (`run` when [`with_default_command`] put it there), if it
/// is one of ours.
fn subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    let word = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !GLOBAL.contains(a))?;
    Cli::command()
        .get_subcommands()
        .any(|c| c.get_name() == word)
        .then(|| word.to_string())
}

/// The options of `run` (the default command), for the end of `sandbox-run --help`: the
/// part of `sandbox-run run --help` from its `Options:` on.
fn run_options() -> String {
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("run")
        .map(|r| r.render_help().to_string())
        .unwrap_or_default();
    let options = help
        .find("Options:")
        .map_or("", |i| &help[i + "Options:".len()..]);
    // its own -h line says "see more with '--help'", which is this page
    let options: Vec<&str> = options
        .trim_end()
        .lines()
        .filter(|l| !l.trim_start().starts_with("-h, --help"))
        .collect();
    format!(
        "\nrun is the default command: sandbox-run [run] --profile NAME|PATH [OPTIONS] -- PROGRAM [ARGS]...\n\
         Options of run:{}\n",
        options.join("\n")
    )
}

/// `sandbox-run --profile validate npm test`: the command's first word was taken for an
/// argument of ours. Names the `--` it needs and the line with it, where the stray word is
/// the first positional word (the words after it are the command's).
fn missing_dashes(
    e: &clap::Error,
    args: &[std::ffi::OsString],
    sub: Option<&str>,
) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument || !matches!(sub, Some("run" | "check")) {
        return None;
    }
    let Some(ContextValue::String(stray)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    if stray.starts_with('-') || args.iter().any(|a| a == "--" || a == "--command") {
        return None;
    }
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let at = first_positional(&words, sub?)?;
    if words[at] != *stray {
        return None;
    }
    // As the user wrote it: without the `run` put in for them.
    let mut shown: Vec<String> = vec!["sandbox-run".into()];
    let implicit = std::env::args_os().nth(1).is_some_and(|a| a != "run");
    for (i, w) in words.iter().enumerate().skip(1) {
        if i == at {
            shown.push("--".into());
        }
        if !(implicit && i == 1 && w == "run") {
            shown.push(w.clone());
        }
    }
    Some(format!("the command goes after '--': {}", shown.join(" ")))
}

/// The index of the first word after the command name that is neither a flag nor a flag's
/// value, as clap parses `sub`'s arguments.
fn first_positional(words: &[String], sub: &str) -> Option<usize> {
    let cmd = Cli::command();
    let sc = cmd.find_subcommand(sub)?;
    let takes_value = |w: &str| {
        let long = w.strip_prefix("--")?;
        let arg = sc.get_arguments().find(|a| a.get_long() == Some(long))?;
        Some(arg.get_action().takes_values())
    };
    let start = words.iter().position(|w| w == sub)? + 1;
    let mut i = start;
    while i < words.len() {
        let w = &words[i];
        if w.starts_with('-') {
            i += if !w.contains('=') && takes_value(w) == Some(true) {
                2
            } else {
                1
            };
            continue;
        }
        return Some(i);
    }
    None
}

/// clap's message on one line: its paragraphs before "Usage:" (the error, then any "tip: a
/// similar argument exists: ..." paragraph), joined with "; ".
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        let line = line.trim();
        // each tip is a paragraph of its own
        if (line.is_empty() || line.starts_with("tip:")) && !current.is_empty() {
            paragraphs.push(current.join(" "));
            current.clear();
        }
        if !line.is_empty() {
            current.push(line);
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join(" "));
    }
    // "did you mean" says what went wrong; "to pass X as a value, use '-- X'" would then
    // only lead astray (a mistyped flag is not the command's)
    if paragraphs.iter().any(|p| p.starts_with("tip: a similar")) {
        paragraphs.retain(|p| !p.starts_with("tip: to pass"));
    }
    let msg = paragraphs.join("; ");
    msg.trim_start_matches("error: ").to_string()
}

fn init_logging(verbose: u8, quiet: bool) {
    use tracing::Level;
    let level = match (quiet, verbose) {
        (true, _) => Level::ERROR,
        (false, 0) => Level::WARN,
        (false, 1) => Level::INFO,
        (false, 2) => Level::DEBUG,
        _ => Level::TRACE,
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .event_format(Prefixed)
        .init();
}

/// Log lines look like every other line of ours: `sandbox-run: MESSAGE`, one line.
struct Prefixed;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Prefixed
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "sandbox-run: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The global flags, which may come before the command name.
const GLOBAL: &[&str] = &["-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"];

/// `run` is the default command: `sandbox-run --profile P -- CMD` means `sandbox-run run ...`.
/// Global flags (`-v`, `-q`) may come before the command name.
fn with_default_command(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const COMMANDS: &[&str] = &["run", "check", "validate", "profiles", "doctor"];
    let first = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| !GLOBAL.contains(a))
        .unwrap_or("");
    let help = ["-h", "--help", "-V", "--version"];
    if !COMMANDS.contains(&first) && first.starts_with('-') && !help.contains(&first) {
        args.insert(1, "run".into());
    }
    args
}

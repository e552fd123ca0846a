use clap::Parser;
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
            std::process::exit(fail.code);
        }
    }
}

/// `--help` and `--version` print and exit 0; every other flag problem is one line and 125,
/// and the `--report` the command line names (if any) says so too.
fn usage_error(e: clap::Error, args: &[std::ffi::OsString]) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!("sandbox-run: a command is required (see 'sandbox-run --help')");
            EXIT_SANDBOX_ERROR
        }
        _ => {
            let line = format!("{} (see 'sandbox-run --help')", one_line(&e));
            eprintln!("sandbox-run: {line}");
            app::usage_error_report(args, &line);
            EXIT_SANDBOX_ERROR
        }
    }
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

/// `run` is the default command: `sandbox-run --profile P -- CMD` means `sandbox-run run ...`.
/// Global flags (`-v`, `-q`) may come before the command name.
fn with_default_command(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const COMMANDS: &[&str] = &["run", "check", "validate", "profiles", "doctor"];
    const GLOBAL: &[&str] = &["-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"];
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

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
         'sandbox-run doctor' says what this host and user allow.\n\n\
         Exit status: 0-123 the command's own; 124 timed out; 125 sandbox-run itself failed (a bad \
         flag or profile, or a layer the profile requires is missing on this host); 126 the policy gate \
         denied the command; 127 the program was not found; 128+N the command was killed by signal N \
         (an OOM kill is 137).",
    );
    let completions = out.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, "sandbox-run", &completions)?;
        println!("{}", path.display());
    }
    let man = out.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(cmd, &man)?;
    let mut pages: Vec<_> = std::fs::read_dir(&man)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pages.sort();
    for p in pages {
        println!("{}", p.display());
    }
    Ok(())
}

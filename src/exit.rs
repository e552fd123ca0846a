//! The exit codes sandbox-run itself chooses (DESIGN.md section 2). A bottom module: the
//! commands, the run's report and `main` all name them, and it uses nothing of the crate.

/// Exit code for failures of sandbox-run itself (bad flag, bad profile, unusable host).
pub const EXIT_SANDBOX_ERROR: i32 = 125;

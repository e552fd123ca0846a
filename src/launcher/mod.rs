//! Stage 2 and pid 1: the part of sandbox-run that runs inside the sandbox.
//!
//! The supervisor re-executes its own binary (`/proc/self/exe __stage2`) with the plan on
//! stdin and the record channel on fd 3. Stage 2 is single-threaded from its first
//! instruction, so it may unshare a user namespace and fork without the hazards of forking a
//! multi-threaded process.

pub mod channel;
pub mod init;
pub mod stage2;

/// argv[1] that selects stage 2 in `main`.
pub const STAGE2_ARG: &str = "__sandbox-run-stage2";

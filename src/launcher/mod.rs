//! Stage 2 and pid 1: the part of sandbox-run that runs inside the sandbox.
//!
//! The supervisor re-executes its own binary (`/proc/self/exe __stage2`) with the plan on
//! stdin and the record channel on fd 3. On stdin: the plan's length (u64, little-endian),
//! the plan (JSON), then one [`JOINED`] byte once the supervisor has moved stage 2 into the
//! cgroup leaf (sent at once when the run has no cgroup). Stage 2 prepares what it can in
//! between (seccomp, namespaces), and waits for the byte before it unshares its cgroup
//! namespace or forks. Stage 2 is single-threaded from its first
//! instruction, so it may unshare a user namespace and fork without the hazards of forking a
//! multi-threaded process.

pub mod channel;
pub mod init;
pub mod stage2;

/// argv[1] that selects stage 2 in `main`.
pub const STAGE2_ARG: &str = "__sandbox-run-stage2";

/// Sent on stage 2's stdin after the plan: stage 2 is now in the cgroup leaf.
pub const JOINED: u8 = b'J';

/// The largest plan stage 2 accepts (a sanity bound on the length prefix).
pub const PLAN_MAX: u64 = 64 << 20;

//! sandbox-run: a deny-by-default policy gate in front of a kernel-confined child.
//! See `DESIGN.md` (shared) for the contracts and the architecture.
//!
//! # Which module may use which
//!
//! Imports go one way, down: a top-level module uses only modules on the lines below its own
//! (and, on its own line, only as said there), never one above, so each can be read and
//! tested without those above it. `scripts/module-graph` prints who uses whom and fails on
//! any loop. From the top:
//!
//! - `app`: the commands: turns the parsed command line into work and an exit code. `app.rs`
//!   only dispatches; each command is a room in `src/app/` (`run.rs`, `validate.rs`,
//!   `check.rs`, ...) built on `resolve`, `report_sink` and `runner`. May use everything below.
//! - `cli`: the command line (clap). Uses `changes` (the `--changes` mode), `secrets` and
//!   `units`.
//! - `explain`, `advice`, `doctor`: what a user reads before or after a run (`explain` a plan
//!   and its report, fixes for a host, the host check); `doctor` uses `advice`.
//! - `learn`: a learned profile and the refusals of a run turned into its entries (the pure
//!   part of `sandbox-run learn`).
//! - `report`: the JSON report of a run, from the plan and the run's `outcome`.
//! - `denials`: every refusal of a run, judged and assembled (the filesystem paths against the
//!   plan's view, the network's and the resources' logs, the gate's verdict); uses `plan`,
//!   `profile`, `layers`, `toolchain`.
//! - `supervisor`: the run's life: spawns the launcher, watches, kills, collects the outcome.
//! - `outcome`: what a run came to (`Finished`, `Lost`) and the exit code it means, filled by
//!   `supervisor`, read by `report` and `app`.
//! - `launcher`: stage 2 and pid 1 inside the sandbox, applying the layers of a plan.
//! - `plan`: everything decided before the fork, from the profile, the host and the flags.
//! - `changes`: the way back of a kept layer (scan, store, apply); the `changes` command that
//!   reviews what it kept is a room of `app`.
//! - `profile`, `secrets`, `toolchain`, `trust`: the policy's data: the profile (it uses
//!   `secrets` to check its entries), the secrets a run gets, the toolchains it binds, the CA
//!   bundle it trusts.
//! - `state`, `home`: sandbox-run's own directories on the host (run dirs, the layer dir) and
//!   the kept homes built on them (`home` uses `state`).
//! - `layers`: the kernel mechanisms, one per file, with the channel records stage 2 and pid 1
//!   send (`layers::channel`). They take parameters of their own types, never the plan or the
//!   profile; the seccomp notification names what it refused as a `refusal`.
//! - `refusal`: what a refusal is (kind, what, rule, fix, the profile change learn applies) and
//!   a path the command looked up: plain data.
//! - `net`: the network's own pieces (allow-list, proxy, name service, TLS); uses only `sink`
//!   and `sys`.
//! - `fsops`, `workspace`, `strict_modes`: directory-fd operations, the repo and cwd, strict
//!   file modes; they use `hostfs` only.
//! - `policy`: the command's policy gate; uses `visible` only (to quote words in reasons).
//! - At the bottom, using nothing of the crate: `sys`, `units` (sizes, durations, the
//!   timestamp format), `canon`, `hostfs`, `sink`, `gene`, `exit` (exit codes), `refname`
//!   (git's ref-name rules), `termout` (what of the command's output may reach the caller's
//!   terminal), `visible` (text the sandbox chose, escaped to be shown: the one
//!   escaping of every name or reason printed), `dbus` (a D-Bus client, for the systemd user
//!   manager that `layers::cgroup` asks for a scope), `apparmor` (what Ubuntu's AppArmor
//!   restriction on user namespaces says about this binary), and for the unit tests only,
//!   `testdir` (where they write their fixtures).

pub mod advice;
pub mod app;
pub mod apparmor;
pub mod canon;
pub mod changes;
pub mod cli;
pub mod dbus;
pub mod denials;
pub mod doctor;
pub mod exit;
pub mod explain;
pub(crate) mod fsops;
pub mod gene;
pub mod home;
pub mod hostfs;
pub mod launcher;
pub mod layers;
pub mod learn;
pub mod net;
pub mod outcome;
pub mod plan;
pub mod policy;
pub mod profile;
pub mod refname;
pub mod refusal;
pub mod report;
pub mod secrets;
pub mod sink;
pub mod state;
pub mod strict_modes;
pub mod supervisor;
pub mod sys;
pub mod termout;
#[cfg(test)]
pub(crate) mod testdir;
pub mod toolchain;
pub mod trust;
pub mod units;
pub mod visible;
pub mod workspace;

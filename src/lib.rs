//! sandbox-run: a deny-by-default policy gate in front of a kernel-confined child.
//! See `DESIGN.md` (shared) for the contracts and the architecture.

pub mod advice;
pub mod app;
pub mod canon;
pub mod changes;
pub mod cli;
pub mod doctor;
pub mod exit;
pub mod explain;
pub(crate) mod fsops;
pub mod gene;
pub mod home;
pub mod hostfs;
pub mod launcher;
pub mod layers;
pub mod net;
pub mod plan;
pub mod policy;
pub mod profile;
pub mod refname;
pub mod report;
pub mod secrets;
pub mod sink;
pub mod state;
pub mod strict_modes;
pub mod supervisor;
pub mod sys;
pub mod toolchain;
pub mod trust;
pub mod units;
pub mod workspace;

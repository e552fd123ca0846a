//! Resource limits of the workload. Child side, just before exec. Core dumps are always off
//! (a dump could write memory holding secrets of the run into the repo). A limit can only be
//! lowered: a request above the current hard limit is capped at it.

use crate::layers::{Step, StepError};
use rlimit::Resource;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub nofile: u64,
    pub fsize: u64,
}

pub fn apply(l: Limits) -> Result<(), StepError> {
    for (res, want) in [
        (Resource::CORE, 0),
        (Resource::NOFILE, l.nofile),
        (Resource::FSIZE, l.fsize),
    ] {
        let (_, hard) = res
            .get()
            .map_err(|e| StepError::new(Step::Rlimit, e.raw_os_error().unwrap_or(libc::EINVAL)))?;
        let v = want.min(hard);
        res.set(v, v)
            .map_err(|e| StepError::new(Step::Rlimit, e.raw_os_error().unwrap_or(libc::EINVAL)))?;
    }
    Ok(())
}

//! Capabilities: none. Child side, in the workload just before exec.
//!
//! Inside its own user namespace the sandbox holds every capability (of that namespace). The
//! bounding and ambient sets are cleared while we still hold CAP_SETPCAP, or a workload running
//! as uid 0 inside would get them all back at exec; then permitted, effective and inheritable
//! are emptied. The caps crate allocates: fine here, the workload is forked from the
//! single-threaded pid 1. An unprivileged run without namespaces holds nothing to drop.

use crate::layers::{Step, StepError};
use caps::CapSet;

pub fn drop_all() -> Result<(), StepError> {
    let fail = |_| StepError::new(Step::Capabilities, libc::EPERM);
    // Without CAP_SETPCAP the bounding set cannot be changed. That happens only in a run
    // without namespaces by an unprivileged user, who holds no capability at all: exec cannot
    // give any back either, as no_new_privs (set next) stops setuid and file capabilities.
    let setpcap =
        caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false);
    let none_held = caps::read(None, CapSet::Permitted).is_ok_and(|p| p.is_empty());
    for cap in caps::all() {
        if !setpcap && none_held {
            break;
        }
        // Capabilities this kernel does not know fail with EINVAL: nothing to drop there.
        if caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) {
            caps::drop(None, CapSet::Bounding, cap).map_err(fail)?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(fail)?;
    caps::clear(None, CapSet::Inheritable).map_err(fail)?;
    caps::clear(None, CapSet::Effective).map_err(fail)?;
    caps::clear(None, CapSet::Permitted).map_err(fail)?;
    Ok(())
}

//! What this host offers: cgroup v2 (as root, or a delegated subtree) or v1/hybrid, and why
//! not when it offers nothing usable. Only looks; changes nothing.

use super::*;
use std::path::Path;

/// Why a cgroup version cannot be used.
pub(super) struct Reason {
    pub(super) text: String,
    pub(super) hint: Option<&'static str>,
    /// The hierarchy has the controllers (the problem is access, not the host's setup).
    pub(super) has_controllers: bool,
}

impl Reason {
    pub(super) fn new(text: String, hint: Option<&'static str>) -> Reason {
        Reason {
            text,
            hint,
            has_controllers: false,
        }
    }
}

pub(super) fn detect_v2(mounts: &[Mount], own: &[Membership], euid: u32) -> Result<Host, Reason> {
    let own_path = own
        .iter()
        .find(|m| m.id == 0 && m.controllers.is_empty())
        .map(|m| m.path.as_str());
    let candidates: Vec<&Mount> = mounts
        .iter()
        .filter(|m| m.v2 && relative(own_path.unwrap_or("/"), &m.root).is_some())
        .collect();
    let mount = candidates
        .iter()
        .find(|m| m.mount_point == Path::new("/sys/fs/cgroup"))
        .or_else(|| candidates.first())
        .copied()
        .ok_or_else(|| Reason::new("no cgroup2 mount".into(), None))?;
    let root = mount.mount_point.clone();
    let ctrl = read_controllers(&root.join("cgroup.controllers"))
        .map_err(|e| Reason::new(e.to_string(), None))?;
    let miss = missing(&NEEDED, &ctrl);
    if !miss.is_empty() {
        return Err(Reason::new(
            format!(
                "cgroup2 at {} lacks the {} controller(s) (on a hybrid host they are bound to cgroup v1)",
                root.display(),
                miss.join(", ")
            ),
            None,
        ));
    }
    if mount.read_only {
        return Err(Reason {
            text: format!("cgroup2 at {} is mounted read-only", root.display()),
            hint: Some(HINT_READ_ONLY),
            has_controllers: true,
        });
    }
    // The real root cgroup has no cgroup.events; the root of a cgroup namespace has one and,
    // unlike the real root, must hold no processes to enable controllers for its children.
    let real_root = !root.join("cgroup.events").exists();
    if euid == 0 {
        let enabled = read_controllers(&root.join("cgroup.subtree_control")).unwrap_or_default();
        let busy = !real_root && !read_procs(&root.join("cgroup.procs")).is_empty();
        if real_root || missing(&NEEDED, &enabled).is_empty() || !busy {
            return Ok(Host {
                version: Version::V2,
                parents: vec![Parent {
                    controllers: Vec::new(),
                    dir: root.join(ROOT_PARENT),
                }],
                leaf_prefix: "run-",
                prepare: Prepare::Root { root },
                plain: false,
            });
        }
    }
    // A delegated subtree: our own cgroup (or its parent, if we already moved into the
    // supervisor group).
    let Some(rel) = own_path.and_then(|p| relative(p, &mount.root)) else {
        return Err(Reason::new(
            "this process's cgroup v2 membership is not visible in /proc/self/cgroup".into(),
            Some(HINT_DELEGATE),
        ));
    };
    let mut own_dir = join(&root, &rel);
    if own_dir.file_name().is_some_and(|n| n == SUPERVISOR_GROUP) {
        own_dir.pop();
    }
    let denied = |text: String, hint: &'static str| Reason {
        text,
        hint: Some(hint),
        has_controllers: true,
    };
    if own_dir == root && real_root {
        return Err(denied(
            format!(
                "uid {euid} may not create groups under the root cgroup {}",
                root.display()
            ),
            HINT_DELEGATE,
        ));
    }
    for f in [
        own_dir.clone(),
        own_dir.join("cgroup.procs"),
        own_dir.join("cgroup.subtree_control"),
    ] {
        match owner(&f) {
            Some(uid) if uid == euid => {}
            Some(uid) => {
                return Err(denied(
                    format!(
                        "{} is owned by uid {uid}, not delegated to uid {euid}",
                        f.display()
                    ),
                    HINT_DELEGATE,
                ))
            }
            None => {
                return Err(denied(
                    format!("{} does not exist", f.display()),
                    HINT_DELEGATE,
                ))
            }
        }
    }
    let ctrl = read_controllers(&own_dir.join("cgroup.controllers"))
        .map_err(|e| denied(e.to_string(), HINT_DELEGATE))?;
    let miss = missing(&NEEDED, &ctrl);
    if !miss.is_empty() {
        return Err(denied(
            format!(
                "the delegated cgroup {} lacks the {} controller(s)",
                own_dir.display(),
                miss.join(", ")
            ),
            HINT_USER_CONTROLLERS,
        ));
    }
    Ok(Host {
        version: Version::V2,
        parents: vec![Parent {
            controllers: Vec::new(),
            dir: own_dir,
        }],
        leaf_prefix: "sandbox-run-",
        prepare: Prepare::Delegated,
        plain: false,
    })
}

pub(super) fn detect_v1(mounts: &[Mount], own: &[Membership], euid: u32) -> Result<Host, Reason> {
    let mut parents: Vec<Parent> = Vec::new();
    let mut used: Vec<&Path> = Vec::new();
    for c in ["memory", "cpu", "pids", "cpuacct", "freezer"] {
        let required = NEEDED.contains(&c);
        let found = own
            .iter()
            .filter(|m| m.id != 0 && m.controllers.iter().any(|x| x == c))
            .find_map(|m| {
                mounts
                    .iter()
                    .filter(|mt| {
                        !mt.v2
                            && m.controllers
                                .iter()
                                .all(|x| mt.options.iter().any(|o| o == x))
                    })
                    .find_map(|mt| relative(&m.path, &mt.root).map(|rel| (m, mt, rel)))
            });
        let Some((m, mt, rel)) = found else {
            if required {
                return Err(Reason::new(
                    format!("no {c} hierarchy mounted for this process"),
                    None,
                ));
            }
            continue;
        };
        if used.contains(&mt.mount_point.as_path()) {
            continue; // co-mounted with an earlier controller (cpu,cpuacct)
        }
        if mt.read_only {
            return Err(Reason {
                text: format!("{} is mounted read-only", mt.mount_point.display()),
                hint: Some(HINT_READ_ONLY),
                has_controllers: true,
            });
        }
        let dir = join(&mt.mount_point, &rel);
        if !dir.is_dir() {
            if required {
                return Err(Reason::new(
                    format!("{} does not exist", dir.display()),
                    None,
                ));
            }
            continue;
        }
        if euid != 0 {
            for f in [dir.clone(), dir.join("cgroup.procs")] {
                if owner(&f) != Some(euid) {
                    if !required {
                        continue;
                    }
                    return Err(Reason {
                        text: format!("{} is not writable by uid {euid}", f.display()),
                        hint: Some(HINT_V1_ROOTLESS),
                        has_controllers: true,
                    });
                }
            }
        }
        used.push(&mt.mount_point);
        parents.push(Parent {
            controllers: m.controllers.clone(),
            dir,
        });
    }
    Ok(Host {
        version: Version::V1,
        parents,
        leaf_prefix: "sandbox-run-",
        prepare: Prepare::Nothing,
        plain: false,
    })
}

// ---------------------------------------------------------------------------------------------
// Leaf

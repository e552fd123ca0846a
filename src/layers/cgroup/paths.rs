//! Where the cgroups are: /proc/self/mountinfo and /proc/self/cgroup parsed, and paths
//! relative to a hierarchy's root.

use super::*;
use std::path::{Component, Path, PathBuf};

/// One cgroup or cgroup2 mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mount {
    /// The group of the hierarchy mounted there (`/` unless a subtree is bind-mounted).
    pub(super) root: String,
    pub(super) mount_point: PathBuf,
    pub(super) v2: bool,
    pub(super) read_only: bool,
    /// v1: the superblock options (controller names among them); v2: empty.
    pub(super) options: Vec<String>,
}

/// Undo mountinfo's octal escapes (`\040` is a space).
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup and cgroup2 mounts, in mount order, a mount point shadowed by a later mount on
/// the same point dropped.
pub(super) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT MOUNT_OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split_whitespace().collect();
        let r: Vec<&str> = right.split_whitespace().collect();
        if l.len() < 6 || r.is_empty() {
            continue;
        }
        let mount_point = PathBuf::from(unescape(l[4]));
        // Whatever was mounted last on a mount point hides what was there before.
        out.retain(|m| m.mount_point != mount_point);
        let v2 = match r[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        let super_opts: Vec<String> = r
            .get(2)
            .map(|s| s.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        let read_only = l[5].split(',').any(|o| o == "ro") || super_opts.iter().any(|o| o == "ro");
        out.push(Mount {
            root: unescape(l[3]),
            mount_point,
            v2,
            read_only,
            options: if v2 { Vec::new() } else { super_opts },
        });
    }
    out
}

/// One line of `/proc/self/cgroup`: `ID:CONTROLLERS:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Membership {
    pub(super) id: u32,
    /// v1: the hierarchy's controllers (`cpu,cpuacct` gives two; `name=systemd` one);
    /// v2 (id 0): empty.
    pub(super) controllers: Vec<String>,
    pub(super) path: String,
}

pub(super) fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let id = it.next()?.parse().ok()?;
            let controllers = it
                .next()?
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            let path = it.next()?.trim_end_matches(" (deleted)").to_string();
            Some(Membership {
                id,
                controllers,
                path,
            })
        })
        .collect()
}

/// [`Host::v1_only`] on a text of `/proc/self/cgroup`.
pub(super) fn v1_only_in(proc_self_cgroup: &str) -> bool {
    let own = parse_proc_cgroup(proc_self_cgroup);
    NEEDED.iter().all(|c| {
        own.iter()
            .any(|m| m.id != 0 && m.controllers.iter().any(|x| x == c))
    })
}

/// `path` (a cgroup path as in /proc/self/cgroup) relative to a mount of the group `root`;
/// `None` when it lies outside that mount.
pub(super) fn relative(path: &str, root: &str) -> Option<PathBuf> {
    let rest = if root == "/" {
        path
    } else {
        let r = path.strip_prefix(root.trim_end_matches('/'))?;
        if !(r.is_empty() || r.starts_with('/')) {
            return None;
        }
        r
    };
    let rel = PathBuf::from(rest.trim_start_matches('/'));
    if rel.components().all(|c| matches!(c, Component::Normal(_))) {
        Some(rel)
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Small file helpers

/// `base/rel`, without a trailing `/` when `rel` is empty.
pub(super) fn join(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

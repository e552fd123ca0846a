//! Parsing and file-format tests on a fake cgroupfs LAYOUT (plain files in a temp dir).
//! They do not replace the kernel tests in `tests/cgroup_layer.rs`.
use super::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temp directory removed on drop, even when the test fails.
struct Tmp(PathBuf);

impl Tmp {
    fn new() -> Tmp {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "sandbox-run-cgroup-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
    /// Create `rel` with `content` (and its parent directories).
    fn file(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn dir(&self, rel: &str) {
        fs::create_dir_all(self.path(rel)).unwrap();
    }
    /// A mountinfo sample with `{R}` replaced by this directory.
    fn mountinfo(&self, sample: &str) -> String {
        sample.replace("{R}", &self.0.display().to_string())
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn text(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

const LIMITS: Limits = Limits {
    memory_max: 64 << 20,
    cpus: 0.5,
    pids_max: 32,
};

/// This machine: hybrid, controllers on v1 (cpu and cpuacct mounted apart), an empty
/// cgroup2 at `unified`.
const HYBRID: &str = "\
24 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
31 23 0:28 / {R} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {R}/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {R}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / {R}/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / {R}/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / {R}/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / {R}/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / {R}/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / {R}/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / {R}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {R}/unified rw,relatime - cgroup2 cgroup2 rw
";
const HYBRID_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n\
5:devices:/\n4:memory:/process_api/b34fb927\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";

/// Ubuntu 20.04 (systemd hybrid): cpu and cpuacct co-mounted, nsdelegate cgroup2.
const UBUNTU_HYBRID: &str = "\
25 24 0:22 / {R} ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / {R}/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / {R}/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
31 25 0:28 / {R}/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
32 25 0:29 / {R}/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
35 25 0:32 / {R}/pids rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,pids
36 25 0:33 / {R}/freezer rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,freezer
";
const UBUNTU_HYBRID_CGROUP: &str = "12:freezer:/\n\
11:pids:/user.slice/user-1000.slice/session-2.scope\n\
6:memory:/user.slice/user-1000.slice/session-2.scope\n4:cpu,cpuacct:/user.slice\n\
1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n\
0::/user.slice/user-1000.slice/session-2.scope\n";

/// Debian 12 / Ubuntu 22.04+ / Fedora: pure cgroup v2.
const PURE_V2: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
29 22 0:26 / {R} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
const ROOT_SESSION: &str = "0::/user.slice/user-0.slice/session-1.scope\n";
const USER_SCOPE: &str =
    "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r9.scope\n";

/// Docker with a private cgroup namespace: cgroup2 read-only, we are at its root.
const DOCKER_V2: &str = "\
678 657 0:27 / {R} ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
";
/// Podman (or docker --privileged): the same, writable.
const CONTAINER_V2_RW: &str = "\
678 657 0:27 / {R} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
";
/// Docker on a v1 host without cgroup namespace: the container's group bind-mounted.
const DOCKER_V1: &str = "\
1190 1188 0:29 /docker/0123abcd {R}/memory ro,nosuid,nodev,noexec,relatime master:15 - cgroup cgroup rw,memory
1191 1188 0:30 /docker/0123abcd {R}/cpu,cpuacct ro,nosuid,nodev,noexec,relatime master:16 - cgroup cgroup rw,cpu,cpuacct
1192 1188 0:31 /docker/0123abcd {R}/pids ro,nosuid,nodev,noexec,relatime master:17 - cgroup cgroup rw,pids
";
const DOCKER_V1_CGROUP: &str =
    "6:memory:/docker/0123abcd\n4:cpu,cpuacct:/docker/0123abcd\n3:pids:/docker/0123abcd\n0::/\n";

const ALL_CONTROLLERS: &str = "cpuset cpu io memory hugetlb pids rdma misc\n";

#[test]
fn mountinfo_hybrid() {
    let m = parse_mountinfo(&HYBRID.replace("{R}", "/sys/fs/cgroup"));
    assert_eq!(m.len(), 10, "{m:?}");
    let mem = m
        .iter()
        .find(|x| x.mount_point == Path::new("/sys/fs/cgroup/memory"))
        .unwrap();
    assert!(!mem.v2 && !mem.read_only && mem.root == "/");
    assert!(mem.options.contains(&"memory".to_string()));
    let v2: Vec<_> = m.iter().filter(|x| x.v2).collect();
    assert_eq!(v2.len(), 1);
    assert_eq!(v2[0].mount_point, Path::new("/sys/fs/cgroup/unified"));
}

#[test]
fn mountinfo_pure_v2_container_and_escapes() {
    let m = parse_mountinfo(&PURE_V2.replace("{R}", "/sys/fs/cgroup"));
    assert_eq!(m.len(), 1);
    assert!(m[0].v2 && !m[0].read_only);
    let m = parse_mountinfo(&DOCKER_V2.replace("{R}", "/sys/fs/cgroup"));
    assert!(m[0].v2 && m[0].read_only, "{m:?}");
    let m = parse_mountinfo(&DOCKER_V1.replace("{R}", "/sys/fs/cgroup"));
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].root, "/docker/0123abcd");
    assert!(m[1].options.contains(&"cpuacct".into()));
    assert!(m.iter().all(|x| x.read_only));
    let m = parse_mountinfo(
        "40 31 0:37 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n\
         41 31 0:38 / /mnt/my\\040cg rw,relatime - tmpfs tmpfs rw\n\
         42 31 0:39 / /mnt/other rw - cgroup2 cgroup2 rw\n\
         garbage line\n",
    );
    // The tmpfs mounted over the first cgroup2 hides it.
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(unescape("/a\\040b\\134c"), "/a b\\c");
    assert_eq!(unescape("\\04"), "\\04");
}

#[test]
fn v1_only_when_the_needed_controllers_are_on_v1() {
    let hybrid = "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:cpu:/\n5:memory:/x\n0::/\n";
    assert!(v1_only_in(hybrid));
    // cpu co-mounted with cpuacct counts
    assert!(v1_only_in("3:cpu,cpuacct:/\n2:memory:/\n1:pids:/\n0::/\n"));
    // pure v2, or pids left to v2: not sure
    assert!(!v1_only_in("0::/user.slice\n"));
    assert!(!v1_only_in("6:cpu:/\n5:memory:/\n0::/\n"));
    assert!(!v1_only_in(""));
}

#[test]
fn proc_cgroup_and_relative_paths() {
    let c = parse_proc_cgroup(UBUNTU_HYBRID_CGROUP);
    assert_eq!(c.len(), 6);
    assert_eq!(c[3].controllers, vec!["cpu", "cpuacct"]);
    assert_eq!(c[3].path, "/user.slice");
    assert_eq!(c[5].id, 0);
    assert!(c[5].controllers.is_empty());
    let c = parse_proc_cgroup("0::/a:b (deleted)\n");
    assert_eq!(c[0].path, "/a:b");

    assert_eq!(relative("/", "/"), Some(PathBuf::new()));
    assert_eq!(relative("/a/b", "/"), Some(PathBuf::from("a/b")));
    assert_eq!(relative("/docker/x", "/docker/x"), Some(PathBuf::new()));
    assert_eq!(
        relative("/docker/x/y", "/docker/x"),
        Some(PathBuf::from("y"))
    );
    assert_eq!(relative("/docker/xy", "/docker/x"), None);
    assert_eq!(relative("/other", "/docker/x"), None);
    // A cgroup namespace shows groups outside it with `..`.
    assert_eq!(relative("/../../user.slice", "/"), None);
}

#[test]
fn cpu_max_values() {
    let l = |cpus| Limits { cpus, ..LIMITS };
    assert_eq!(l(0.5).cpu_max(), "50000 100000");
    assert_eq!(l(2.0).cpu_max(), "200000 100000");
    assert_eq!(l(1.0).cpu_max(), "100000 100000");
    assert_eq!(l(1.234567).cpu_quota_us(), 123457);
    assert_eq!(l(0.001).cpu_quota_us(), CPU_QUOTA_MIN_US);
    assert_eq!(l(0.0).cpu_quota_us(), CPU_QUOTA_MIN_US);
    assert!(l(f64::NAN).check().is_err());
    assert!(l(-1.0).check().is_err());
    assert!(l(0.0).check().is_err());
    assert!(Limits {
        pids_max: 0,
        ..LIMITS
    }
    .check()
    .is_err());
    assert!(Limits {
        memory_max: 0,
        ..LIMITS
    }
    .check()
    .is_err());
    assert!(LIMITS.check().is_ok());
}

fn hybrid_layout(t: &Tmp) {
    t.file("unified/cgroup.controllers", "hugetlb\n");
    for d in [
        "cpu",
        "cpuacct",
        "freezer",
        "pids",
        "memory/process_api/b34fb927",
    ] {
        t.dir(d);
    }
}

#[test]
fn detect_hybrid_uses_v1_with_our_own_groups() {
    let t = Tmp::new();
    hybrid_layout(&t);
    let h = Host::detect_from(&t.mountinfo(HYBRID), HYBRID_CGROUP, 0).unwrap();
    assert_eq!(h.version(), Version::V1);
    assert_eq!(
        h.leaf_parents(),
        vec![
            t.path("memory/process_api/b34fb927"),
            t.path("cpu"),
            t.path("pids"),
            t.path("cpuacct"),
            t.path("freezer"),
        ]
    );
    assert!(
        h.describe()
            .starts_with("cgroup v1: leaves under memory in "),
        "{}",
        h.describe()
    );
}

#[test]
fn detect_co_mounted_cpu_cpuacct_once() {
    let t = Tmp::new();
    t.file("unified/cgroup.controllers", "");
    let s = "user.slice/user-1000.slice/session-2.scope";
    for d in [
        format!("memory/{s}"),
        format!("pids/{s}"),
        "cpu,cpuacct/user.slice".into(),
        "freezer".into(),
    ] {
        t.dir(&d);
    }
    let h = Host::detect_from(&t.mountinfo(UBUNTU_HYBRID), UBUNTU_HYBRID_CGROUP, 0).unwrap();
    assert_eq!(h.version(), Version::V1);
    assert_eq!(h.parents.len(), 4, "{h:?}");
    assert_eq!(h.parents[1].controllers, vec!["cpu", "cpuacct"]);
    assert_eq!(h.parents[1].dir, t.path("cpu,cpuacct/user.slice"));
}

#[test]
fn v1_rootless_is_a_clear_error() {
    let t = Tmp::new();
    t.file("unified/cgroup.controllers", "");
    let s = "user.slice/user-1000.slice/session-2.scope";
    for d in [
        format!("memory/{s}"),
        format!("pids/{s}"),
        "cpu,cpuacct/user.slice".into(),
    ] {
        t.dir(&d);
    }
    // Nobody owns a file as uid 4242.
    let e = Host::detect_from(&t.mountinfo(UBUNTU_HYBRID), UBUNTU_HYBRID_CGROUP, 4242).unwrap_err();
    let s = e.to_string();
    assert_eq!(e.op, Op::Detect);
    assert!(
        s.starts_with("cgroup: detect: no cgroup to be had: v2: cgroup2 at "),
        "{s}"
    );
    assert!(
        s.contains("lacks the memory, cpu, pids controller(s)"),
        "{s}"
    );
    assert!(s.contains("is not writable by uid 4242"), "{s}");
    assert!(
        s.contains("; to fix: cgroup v1 cannot be delegated safely"),
        "{s}"
    );
    assert!(!s.contains('\n'));
}

#[test]
fn detect_nothing_mounted() {
    let e = Host::detect_from("", "0::/\n", 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cgroup: detect: no cgroup to be had: v2: no cgroup2 mount; v1: no memory hierarchy mounted for this process"
    );
}

#[test]
fn detect_read_only_containers() {
    let t = Tmp::new();
    t.file("cgroup.controllers", "cpu memory pids\n");
    t.file("cgroup.events", "populated 1\nfrozen 0\n");
    let e = Host::detect_from(&t.mountinfo(DOCKER_V2), "0::/\n", 0).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("is mounted read-only"), "{s}");
    assert!(s.ends_with(&format!("; to fix: {HINT_READ_ONLY}")), "{s}");

    let t = Tmp::new();
    for d in ["memory", "cpu,cpuacct", "pids"] {
        t.dir(d);
    }
    let e = Host::detect_from(&t.mountinfo(DOCKER_V1), DOCKER_V1_CGROUP, 0).unwrap_err();
    assert!(
        e.to_string().contains("/memory is mounted read-only"),
        "{e}"
    );
}

#[test]
fn v2_as_root_prepares_sandbox_run_parent() {
    let t = Tmp::new();
    t.file("cgroup.controllers", ALL_CONTROLLERS);
    t.file("cgroup.subtree_control", "memory pids\n");
    t.file("cgroup.procs", "1\n2\n");
    t.dir("user.slice/user-0.slice/session-1.scope");
    let h = Host::detect_from(&t.mountinfo(PURE_V2), ROOT_SESSION, 0)
        .unwrap()
        .with_plain_files();
    assert_eq!(h.version(), Version::V2);
    assert_eq!(h.prepare, Prepare::Root { root: t.0.clone() });
    assert_eq!(h.leaf_parents(), vec![t.path("sandbox-run")]);
    let leaf = h.create_leaf(&LIMITS).unwrap();
    // Only the missing controller is enabled at the root; all three in the parent.
    assert_eq!(text(&t.path("cgroup.subtree_control")), "+cpu");
    assert_eq!(
        text(&t.path("sandbox-run/cgroup.subtree_control")),
        "+memory +cpu +pids"
    );
    let d = leaf.path_v2().unwrap().to_path_buf();
    assert_eq!(d.parent().unwrap(), t.path("sandbox-run"));
    let name = d.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        leaf_owner(&name, "run-"),
        Some(Owner {
            pid: std::process::id() as i32,
            pidns: Some(own_pidns())
        })
    );
    assert_eq!(text(&d.join("memory.max")), (64u64 << 20).to_string());
    assert_eq!(text(&d.join("memory.swap.max")), "0");
    assert_eq!(text(&d.join("cpu.max")), "50000 100000");
    assert_eq!(text(&d.join("pids.max")), "32");
    leaf.add(4321).unwrap();
    assert_eq!(text(&d.join("cgroup.procs")), "4321");
    assert_eq!(leaf.procs(), vec![4321]);
    assert!(leaf.open_v2().is_ok());
    leaf.remove_dirs_for_test();
    assert!(!d.exists());
    // The parent stays for the next runs.
    assert!(t.path("sandbox-run").is_dir());
}

impl Leaf {
    /// `remove` without the kill: the plain-file `cgroup.procs` holds made-up pids.
    fn remove_dirs_for_test(mut self) {
        self.removed = true;
        self.remove_dirs().unwrap();
    }
}

#[test]
fn v2_cpu_max_for_two_cpus() {
    let t = Tmp::new();
    let h = Host::v2_at(t.0.clone()).with_plain_files();
    let leaf = h
        .create_leaf(&Limits {
            cpus: 2.0,
            ..LIMITS
        })
        .unwrap();
    let d = leaf.path_v2().unwrap().to_path_buf();
    assert_eq!(text(&d.join("cpu.max")), "200000 100000");
    assert!(d
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(&format!("sandbox-run-{}-", std::process::id())));
    leaf.remove().unwrap();
    assert!(!d.exists());
}

/// The uid the fake delegated tree belongs to, and a uid it does not belong to.
fn delegate(t: &Tmp, own: &str) -> (u32, u32) {
    let me = euid();
    if me != 0 {
        return (me, me + 1);
    }
    for f in [
        "",
        "/cgroup.procs",
        "/cgroup.subtree_control",
        "/cgroup.threads",
    ] {
        let p = t.path(&format!("{own}{f}"));
        std::os::unix::fs::chown(&p, Some(4242), Some(4242)).unwrap();
    }
    (4242, 4243)
}

const OWN: &str = "user.slice/user-1000.slice/user@1000.service/app.slice/run-r9.scope";

fn user_scope_layout(t: &Tmp) {
    t.file("cgroup.controllers", ALL_CONTROLLERS);
    t.file("cgroup.subtree_control", "cpu memory pids\n");
    t.file(&format!("{OWN}/cgroup.controllers"), "cpu memory pids\n");
    t.file(&format!("{OWN}/cgroup.subtree_control"), "");
    t.file(&format!("{OWN}/cgroup.procs"), "1200\n1201\n");
    t.file(&format!("{OWN}/cgroup.threads"), "1200\n1201\n");
    t.file(&format!("{OWN}/cgroup.events"), "populated 1\nfrozen 0\n");
}

#[test]
fn v2_rootless_delegated_scope() {
    let t = Tmp::new();
    user_scope_layout(&t);
    let (uid, _) = delegate(&t, OWN);
    let h = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, uid)
        .unwrap()
        .with_plain_files();
    assert_eq!(h.prepare, Prepare::Delegated);
    assert_eq!(h.leaf_parents(), vec![t.path(OWN)]);
    assert!(h.describe().contains("(delegated subtree)"));
    let leaf = h.create_leaf(&LIMITS).unwrap();
    // Our scope's processes moved out (one write each; the plain file keeps the last),
    // then the controllers were enabled in the scope.
    assert_eq!(
        text(&t.path(&format!("{OWN}/{SUPERVISOR_GROUP}/cgroup.procs"))),
        "1201"
    );
    assert_eq!(
        text(&t.path(&format!("{OWN}/cgroup.subtree_control"))),
        "+memory +cpu +pids"
    );
    let d = leaf.path_v2().unwrap().to_path_buf();
    assert_eq!(d.parent().unwrap(), t.path(OWN));
    assert_eq!(text(&d.join("cpu.max")), "50000 100000");
    leaf.remove().unwrap();

    // Once we live in the supervisor group, the scope is still the parent.
    let moved = format!("0::/{OWN}/{SUPERVISOR_GROUP}\n");
    let h2 = Host::detect_from(&t.mountinfo(PURE_V2), &moved, uid).unwrap();
    assert_eq!(h2.leaf_parents(), vec![t.path(OWN)]);
}

#[test]
fn v2_rootless_without_delegation_says_how() {
    let t = Tmp::new();
    user_scope_layout(&t);
    let (_, other) = delegate(&t, OWN);
    let e = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, other).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("run-r9.scope is owned by uid"), "{s}");
    assert!(s.contains(&format!("not delegated to uid {other}")), "{s}");
    assert!(
        s.contains(
            "; to fix: run under 'systemd-run --user --scope -p Delegate=yes sandbox-run ...'"
        ),
        "{s}"
    );
    // Delegated, but without cpu.
    let (uid, _) = delegate(&t, OWN);
    t.file(&format!("{OWN}/cgroup.controllers"), "memory pids\n");
    let e = Host::detect_from(&t.mountinfo(PURE_V2), USER_SCOPE, uid).unwrap_err();
    let s = e.to_string();
    assert!(s.contains("lacks the cpu controller(s)"), "{s}");
    assert!(s.contains("Delegate=cpu memory pids"), "{s}");
    // The root cgroup is never ours without root.
    let e = Host::detect_from(&t.mountinfo(PURE_V2), "0::/\n", uid).unwrap_err();
    assert!(
        e.to_string()
            .contains("may not create groups under the root cgroup"),
        "{e}"
    );
}

#[test]
fn v2_container_root_with_busy_namespace_root_is_delegated() {
    let t = Tmp::new();
    t.file("cgroup.controllers", "cpu memory pids\n");
    t.file("cgroup.subtree_control", "");
    t.file("cgroup.procs", "1\n7\n");
    t.file("cgroup.events", "populated 1\nfrozen 0\n");
    let me = euid();
    let h = Host::detect_from(&t.mountinfo(CONTAINER_V2_RW), "0::/\n", me).unwrap();
    assert_eq!(h.prepare, Prepare::Delegated);
    assert_eq!(h.leaf_parents(), vec![t.0.as_path()]);
    // An idle namespace root (nothing in it) is used like the real root.
    if me == 0 {
        t.file("cgroup.procs", "");
        let h = Host::detect_from(&t.mountinfo(CONTAINER_V2_RW), "0::/\n", 0).unwrap();
        assert_eq!(h.leaf_parents(), vec![t.path("sandbox-run")]);
    }
}

#[test]
fn v1_limit_files() {
    let t = Tmp::new();
    for d in ["memory", "cpu", "cpuacct", "pids", "freezer"] {
        t.dir(d);
    }
    let h = Host::v1_at([
        ("memory", t.path("memory")),
        ("cpu", t.path("cpu")),
        ("pids", t.path("pids")),
        ("cpuacct", t.path("cpuacct")),
        ("freezer", t.path("freezer")),
    ])
    .with_plain_files();
    let leaf = h.create_leaf(&LIMITS).unwrap();
    let p = leaf
        .paths()
        .iter()
        .map(|p| p.to_path_buf())
        .collect::<Vec<_>>();
    assert_eq!(p.len(), 5);
    assert!(leaf.path_v2().is_none());
    assert!(leaf.open_v2().is_err());
    let mem = (64u64 << 20).to_string();
    assert_eq!(text(&p[0].join("memory.limit_in_bytes")), mem);
    assert_eq!(text(&p[0].join("memory.memsw.limit_in_bytes")), mem);
    // The period of a new group is the kernel's 100 ms: not written.
    assert!(!p[1].join("cpu.cfs_period_us").exists());
    assert_eq!(text(&p[1].join("cpu.cfs_quota_us")), "50000");
    assert_eq!(text(&p[2].join("pids.max")), "32");
    assert!(!p[3].join("cpu.cfs_quota_us").exists());
    leaf.add(77).unwrap();
    for d in &p {
        assert_eq!(text(&d.join("cgroup.procs")), "77");
    }
    leaf.remove_dirs_for_test();
    assert!(p.iter().all(|d| !d.exists()));
}

#[test]
fn v1_optional_files_follow_the_kernel() {
    let t = Tmp::new();
    // What the kernel would show in a fresh leaf without swap accounting, under a parent
    // that disabled the OOM killer.
    t.file("m/memory.limit_in_bytes", "9223372036854771712\n");
    t.file("m/memory.swappiness", "60\n");
    t.file(
        "m/memory.oom_control",
        "oom_kill_disable 1\nunder_oom 0\noom_kill 0\n",
    );
    t.file("c/cpu.cfs_period_us", "100000\n");
    t.file("c/cpu.cfs_quota_us", "-1\n");
    t.file("p/pids.max", "max\n");
    let mut leaf = Leaf {
        version: Version::V1,
        dirs: vec![
            Parent {
                controllers: vec!["memory".into()],
                dir: t.path("m"),
            },
            Parent {
                controllers: vec!["cpu".into(), "cpuacct".into()],
                dir: t.path("c"),
            },
            Parent {
                controllers: vec!["pids".into()],
                dir: t.path("p"),
            },
        ],
        limits: Some(Limits {
            cpus: 1.5,
            ..LIMITS
        }),
        plain: false,
        removed: true,
        locks: Vec::new(),
    };
    leaf.write_limits().unwrap();
    assert!(!t.path("m/memory.memsw.limit_in_bytes").exists());
    assert_eq!(text(&t.path("m/memory.swappiness")), "0");
    assert_eq!(text(&t.path("m/memory.oom_control")), "0");
    assert_eq!(text(&t.path("c/cpu.cfs_quota_us")), "150000");
    // v2 without swap accounting: no memory.swap.max is written.
    t.file("v2/memory.max", "max\n");
    t.file("v2/cpu.max", "max 100000\n");
    t.file("v2/pids.max", "max\n");
    leaf.version = Version::V2;
    leaf.dirs = vec![Parent {
        controllers: vec![],
        dir: t.path("v2"),
    }];
    leaf.write_limits().unwrap();
    assert!(!t.path("v2/memory.swap.max").exists());
    assert_eq!(text(&t.path("v2/cpu.max")), "150000 100000");
}

#[test]
fn usage_v2_real_formats() {
    let t = Tmp::new();
    let leaf = Host::v2_at(t.0.clone())
        .with_plain_files()
        .create_leaf(&LIMITS)
        .unwrap();
    let d = leaf.path_v2().unwrap();
    assert_eq!(leaf.usage(), Usage::default());
    fs::write(d.join("memory.peak"), "66998272\n").unwrap();
    fs::write(
        d.join("cpu.stat"),
        "usage_usec 1012345\nuser_usec 1000000\nsystem_usec 12345\n\
         core_sched.force_idle_usec 0\nnr_periods 21\nnr_throttled 20\n\
         throttled_usec 987654\nnr_bursts 0\nburst_usec 0\n",
    )
    .unwrap();
    fs::write(
        d.join("memory.events"),
        "low 0\nhigh 0\nmax 153\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 0\n",
    )
    .unwrap();
    fs::write(d.join("pids.events"), "max 3\n").unwrap();
    assert_eq!(
        leaf.usage(),
        Usage {
            peak_memory_bytes: Some(66998272),
            cpu_user_usec: Some(1_000_000),
            cpu_system_usec: Some(12345),
            oom_kills: 1,
            pids_max_hits: 3,
        }
    );
    let json = serde_json::to_string(&leaf.usage()).unwrap();
    assert_eq!(
        json,
        r#"{"peak_memory_bytes":66998272,"cpu_user_usec":1000000,"cpu_system_usec":12345,"oom_kills":1,"pids_max_hits":3}"#
    );
    assert_eq!(serde_json::to_string(&Version::V2).unwrap(), "2");
    leaf.remove().unwrap();
}

#[test]
fn usage_v1_real_formats() {
    let t = Tmp::new();
    for d in ["memory", "cpu,cpuacct", "pids"] {
        t.dir(d);
    }
    let h = Host::v1_at([
        ("memory", t.path("memory")),
        ("cpu,cpuacct", t.path("cpu,cpuacct")),
        ("pids", t.path("pids")),
    ])
    .with_plain_files();
    let leaf = h.create_leaf(&LIMITS).unwrap();
    let p: Vec<PathBuf> = leaf.paths().iter().map(|p| p.to_path_buf()).collect();
    fs::write(p[0].join("memory.max_usage_in_bytes"), "67108864\n").unwrap();
    fs::write(
        p[0].join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    .unwrap();
    fs::write(p[1].join("cpuacct.stat"), "user 52\nsystem 7\n").unwrap();
    fs::write(p[2].join("pids.events"), "max 5\n").unwrap();
    let tick = 1_000_000 / clk_tck();
    assert_eq!(
        leaf.usage(),
        Usage {
            peak_memory_bytes: Some(67108864),
            cpu_user_usec: Some(52 * tick),
            cpu_system_usec: Some(7 * tick),
            oom_kills: 2,
            pids_max_hits: 5,
        }
    );
    // Nanosecond counters win over ticks.
    fs::write(p[1].join("cpuacct.usage_user"), "1002003004\n").unwrap();
    fs::write(p[1].join("cpuacct.usage_sys"), "5006007\n").unwrap();
    let u = leaf.usage();
    assert_eq!(
        (u.cpu_user_usec, u.cpu_system_usec),
        (Some(1002003), Some(5006))
    );
    leaf.remove().unwrap();
}

#[test]
fn errors_read_as_one_line() {
    let p = Path::new("/sys/fs/cgroup/x/memory.max");
    let e = Error::io(Op::Write, p, &io::Error::from_raw_os_error(libc::EACCES));
    let s = e.to_string();
    assert!(
        s.starts_with("cgroup: write /sys/fs/cgroup/x/memory.max: Permission denied"),
        "{s}"
    );
    if euid() != 0 {
        assert!(s.contains("; to fix: run under 'systemd-run --user --scope -p Delegate=yes"));
    }
    let p = Path::new("/sys/fs/cgroup/a/cgroup.subtree_control");
    let s = Error::io(Op::Write, p, &io::Error::from_raw_os_error(libc::EBUSY)).to_string();
    assert_eq!(
        s,
        "cgroup: write /sys/fs/cgroup/a/cgroup.subtree_control: Device or resource busy; to fix: /sys/fs/cgroup/a holds processes, and a cgroup v2 group with processes cannot enable controllers for its children (no internal processes rule)"
    );
    let s = Error::io(
        Op::Mkdir,
        Path::new("/c/x"),
        &io::Error::from_raw_os_error(libc::EROFS),
    )
    .to_string();
    assert!(
        s.starts_with(
            "cgroup: mkdir /c/x: Read-only file system; to fix: the cgroup filesystem is read-only"
        ),
        "{s}"
    );
    let e = Host::v2_at("/nonexistent")
        .create_leaf(&Limits {
            cpus: f64::NAN,
            ..LIMITS
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cgroup: limits: invalid limits: cpus must be a number above 0, not NaN"
    );
    let e = Host::v1_at([("memory", PathBuf::from("/m"))])
        .create_leaf(&LIMITS)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cgroup: detect: no cgroup v1 hierarchy given for cpu, pids"
    );
}

#[test]
fn failures_after_mkdir_leave_nothing() {
    // v1: the third hierarchy's parent is missing: the first two leaves go again.
    let t = Tmp::new();
    t.dir("memory");
    t.dir("cpu");
    let h = Host::v1_at([
        ("memory", t.path("memory")),
        ("cpu", t.path("cpu")),
        ("pids", t.path("pids")),
    ])
    .with_plain_files();
    let e = h.create_leaf(&LIMITS).unwrap_err();
    assert_eq!(e.op, Op::Mkdir);
    assert_eq!(e.errno, Some(libc::ENOENT));
    let s = e.to_string();
    assert!(
        s.starts_with(&format!(
            "cgroup: mkdir {}/sandbox-run-",
            t.path("pids").display()
        )),
        "{s}"
    );
    assert!(s.ends_with(": No such file or directory"), "{s}");
    assert!(names_in(&t.path("memory")).is_empty());
    assert!(names_in(&t.path("cpu")).is_empty());

    // v2 with kernel semantics on a plain directory: memory.max does not exist, so the
    // first limit write fails after the mkdir; the leaf goes again.
    let t = Tmp::new();
    let e = Host::v2_at(t.0.clone()).create_leaf(&LIMITS).unwrap_err();
    assert_eq!((e.op, e.errno), (Op::Write, Some(libc::ENOENT)));
    assert!(
        e.to_string()
            .contains("/memory.max: No such file or directory"),
        "{e}"
    );
    assert!(names_in(&t.0).is_empty(), "{:?}", names_in(&t.0));
}

#[test]
fn stale_leaves() {
    let owner = |pid, pidns| Some(Owner { pid, pidns });
    assert_eq!(
        leaf_owner("sandbox-run-123-4", "sandbox-run-"),
        owner(123, None)
    );
    assert_eq!(leaf_owner("run-123-4", "run-"), owner(123, None));
    assert_eq!(
        leaf_owner("run-123-4-4026531836", "run-"),
        owner(123, Some(4026531836))
    );
    assert_eq!(leaf_owner("run-123-4-", "run-"), None);
    assert_eq!(leaf_owner("run-123-4-5-6", "run-"), None);
    assert_eq!(leaf_owner("sandbox-run-supervisor", "sandbox-run-"), None);
    assert_eq!(leaf_owner("sandbox-run-12x-4", "sandbox-run-"), None);
    assert_eq!(leaf_owner("sandbox-run-123-", "sandbox-run-"), None);
    assert_eq!(leaf_owner("sandbox-run-0-1", "sandbox-run-"), None);
    assert_eq!(leaf_owner("other-123-4", "sandbox-run-"), None);

    let t = Tmp::new();
    // No pid above pid_max (at most 2^22) exists.
    let dead = "sandbox-run-2147483000-0";
    let mine = format!("sandbox-run-{}-999", std::process::id());
    for d in [dead, mine.as_str(), SUPERVISOR_GROUP, "user-thing-1-2"] {
        t.dir(&format!("a/{d}"));
        t.dir(&format!("b/{d}"));
    }
    // A pids hierarchy without the stale leaf (it was never made there).
    t.dir("c");
    // The leftover of a run made when the caller was elsewhere in the first hierarchy:
    // still removed from the others.
    let moved = "sandbox-run-2147483001-0";
    t.dir(&format!("b/{moved}"));
    t.dir(&format!("c/{moved}"));
    let h = Host::v1_at([
        ("memory", t.path("a")),
        ("cpu,cpuacct", t.path("b")),
        ("pids", t.path("c")),
    ])
    .with_plain_files();
    let removed = h.remove_stale().unwrap();
    assert_eq!(
        removed,
        vec![
            t.path(&format!("a/{dead}")),
            t.path(&format!("b/{dead}")),
            t.path(&format!("b/{moved}")),
            t.path(&format!("c/{moved}")),
        ]
    );
    let left = vec![
        mine.clone(),
        SUPERVISOR_GROUP.to_string(),
        "user-thing-1-2".to_string(),
    ];
    let mut left_sorted = left.clone();
    left_sorted.sort();
    assert_eq!(names_in(&t.path("a")), left_sorted);
    assert_eq!(names_in(&t.path("b")), left_sorted);
}

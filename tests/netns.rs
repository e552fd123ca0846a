//! The sandbox's network namespace, made by stage 2 once it has forked pid 1 and entered by
//! pid 1 after it built the root (`ns::Net`): seen from the host, while a workload runs,
//! stage 2, pid 1 and the workload are in one network namespace that is not the caller's and
//! that belongs to the sandbox's own user namespace, and stage 2 has no child but pid 1.
//! Under `--net host` the workload is in the caller's. When the namespace cannot be made, the
//! run fails closed: exit 125, the step and errno named, no process left.

mod common;

use common::*;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One test at a time: the fail-closed test makes this process a child subreaper and looks at
/// all its children.
static SERIAL: Mutex<()> = Mutex::new(());

/// `NS_GET_USERNS` (`_IO(0xb7, 0x1)`): an fd of the user namespace that owns a namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// The (device, inode) that names a namespace.
fn ns_id(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// The user namespace that owns the network namespace of `pid`.
fn net_owner(pid: i32) -> (u64, u64) {
    let net = std::fs::File::open(format!("/proc/{pid}/ns/net")).unwrap();
    // SAFETY: NS_GET_USERNS takes no argument and returns a new fd, owned below.
    let fd = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS as _) };
    assert!(
        fd >= 0,
        "NS_GET_USERNS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new fd of ours.
    let owner = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let m = owner.metadata().unwrap();
    (m.dev(), m.ino())
}

/// The NUL-separated command line of `pid`.
fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// A running sandbox, seen from the host: supervisor -> stage 2 -> pid 1 -> workload, the
/// workload being the probe's `sleep` (exec'd).
struct Tree {
    stage2: i32,
    init: i32,
    workload: i32,
}

fn wait_for_tree(supervisor: i32) -> Tree {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        for stage2 in children(supervisor) {
            for init in children(stage2) {
                for workload in children(init) {
                    if cmdline(workload).get(1).map(String::as_str) == Some("sleep") {
                        return Tree {
                            stage2,
                            init,
                            workload,
                        };
                    }
                }
            }
        }
        assert!(
            Instant::now() < end,
            "no sandboxed sleep under {supervisor}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Start the probe's `sleep 20` in a sandbox, look at the process tree, kill the run.
fn look(opts: &[&str], check: impl FnOnce(&Tree)) {
    let f = Fixture::new("netns-look");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    let mut c = sandbox_command(
        &p,
        &repo,
        opts,
        &[probe().as_os_str(), "sleep".as_ref(), "20".as_ref()],
    );
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = spawn_retrying(&mut c).expect("start sandbox-run");
    let tree = wait_for_tree(child.id() as i32);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&tree)));
    // SAFETY: SIGTERM to our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// Under `--net none` (the default): the workload's network namespace is not the caller's,
/// stage 2 and pid 1 are in the same one (pid 1 entered it before forking the workload), the
/// namespace's owner is the workload's user namespace (the sandbox's, not the caller's), and
/// stage 2's only child is pid 1.
#[test]
fn the_network_namespace_is_the_sandboxs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !sandbox_works() {
        return;
    }
    let me = ns_id(Path::new("/proc/self/ns/net"));
    let my_user = ns_id(Path::new("/proc/self/ns/user"));
    look(&[], |t| {
        let net = ns_id(Path::new(&format!("/proc/{}/ns/net", t.workload)));
        let user = ns_id(Path::new(&format!("/proc/{}/ns/user", t.workload)));
        assert_ne!(net, me, "the workload is in the caller's network namespace");
        assert_ne!(
            user, my_user,
            "the workload is in the caller's user namespace"
        );
        assert_eq!(
            ns_id(Path::new(&format!("/proc/{}/ns/net", t.init))),
            net,
            "pid 1 is not in the workload's network namespace"
        );
        assert_eq!(
            ns_id(Path::new(&format!("/proc/{}/ns/net", t.stage2))),
            net,
            "stage 2 is not in the workload's network namespace"
        );
        assert_eq!(
            net_owner(t.workload),
            user,
            "the network namespace is not owned by the sandbox's user namespace"
        );
        assert_eq!(
            children(t.stage2),
            vec![t.init],
            "stage 2 has another child than pid 1"
        );
    });
}

/// Control: under `--net host` the workload is in the caller's network namespace.
#[test]
fn under_net_host_the_workload_is_in_the_callers_network_namespace() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !sandbox_works() {
        return;
    }
    let me = ns_id(Path::new("/proc/self/ns/net"));
    look(&["--net", "host"], |t| {
        assert_eq!(
            ns_id(Path::new(&format!("/proc/{}/ns/net", t.workload))),
            me
        );
        assert_eq!(children(t.stage2), vec![t.init]);
    });
}

/// `c` run where no network namespace can be made (`user.max_net_namespaces` 0).
fn without_netns(c: Command) -> Command {
    under_zero_sysctl(c, "user/max_net_namespaces")
}

/// Stage 2 cannot make the namespace: exit 125 naming the step and the errno, and no
/// process left (this test process is the child subreaper of everything the run started, so
/// any orphan would be its child). Control: the same wrapper with `--net host` runs.
#[test]
fn a_network_namespace_that_cannot_be_made_fails_closed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("netns-fail");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::default());
    // SAFETY: prctl with integer arguments, on this process.
    assert_eq!(
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) },
        0
    );
    let probe_path = probe();
    let argv = [probe_path.as_os_str(), "pid".as_ref()];

    let control = run_command(
        without_netns(sandbox_command(&p, &repo, &["--net", "host"], &argv)),
        LIMIT,
    );
    if control.code != Some(0) {
        skip(
            "userns",
            &format!("cannot run sandbox-run in a user namespace without network namespaces here:\n{control}"),
        );
        return;
    }
    let r = run_command(without_netns(sandbox_command(&p, &repo, &[], &argv)), LIMIT);
    assert_eq!(r.code, Some(125), "{r}");
    assert!(
        r.stderr
            .contains("namespaces: network namespace: No space left on device"),
        "{r}"
    );
    assert!(!r.stdout.contains("pid="), "the workload ran: {r}");
    let me = std::process::id() as i32;
    let end = Instant::now() + Duration::from_secs(2);
    // Zombies of orphans are ours to reap; anything alive is a leftover.
    loop {
        // SAFETY: waitpid with WNOHANG and no status pointer.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let left = children(me);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "left behind: {:?}",
            left.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

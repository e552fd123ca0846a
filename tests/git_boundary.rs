//! The host boundary, git's side: after a run in a
//! read-write mode, the next plain `git status` or `git commit` ON THE HOST must run nothing
//! the command planted. Each attack plants a `core.fsmonitor` (or a hook) that would touch a
//! marker file, then the test runs git on the host and checks the marker is absent. Controls:
//! the same plant made on the host (unconfined) does fire the marker, so the check can see
//! it; and git's ordinary work (add, commit, branch, checkout, stash, diff, log, worktree
//! list) still works inside, in a plain repo, with a submodule, and in a linked worktree.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A git config text whose fsmonitor touches `marker`.
fn fsmonitor_config(marker: &Path) -> String {
    format!(
        "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    )
}

const GIT: &str = "git -c user.name=agent -c user.email=agent@example.invalid";

/// Findings 1a, 1d-variant and the control: `.git/commondir` and `config.worktree` planted
/// inside are gone afterwards, `.git/config` is read-only, and git's ordinary work persists.
#[test]
fn planted_git_config_never_reaches_the_hosts_git() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-plain");
    let repo = real_repo(&f, "repo");
    let marker = f.path("pwned");
    let p = ci_profile(&f);

    // control: the plant works when made on the host, and the check sees it
    let ctl = real_repo(&f, "control");
    std::fs::create_dir_all(ctl.join("planted")).unwrap();
    std::fs::write(ctl.join("planted/config"), fsmonitor_config(&marker)).unwrap();
    for d in ["objects", "refs"] {
        std::fs::create_dir_all(ctl.join("planted").join(d)).unwrap();
    }
    std::fs::write(ctl.join(".git/commondir"), "../planted\n").unwrap();
    host_git(&f, &ctl, &["status", "--short"]);
    assert!(
        marker.exists(),
        "the control plant did not fire: the check is blind"
    );
    std::fs::remove_file(&marker).unwrap();

    let script = format!(
        r#"set -u
echo two >> file.txt
{GIT} add file.txt && {GIT} commit -qm second && echo RESULT commit ok
{GIT} branch feature && echo RESULT branch ok
{GIT} checkout -q -b topic && echo RESULT checkout ok
echo three >> file.txt
{GIT} stash -q && echo RESULT stash ok
{GIT} diff --quiet HEAD && echo RESULT diff ok
{GIT} log --oneline | grep -q second && echo RESULT log ok
{GIT} worktree list >/dev/null && echo RESULT worktree-list ok
# attacks
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' >> .git/config 2>/dev/null && echo RESULT config WRITTEN
mkdir -p planted/objects planted/refs
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' > planted/config
printf '../planted\n' > .git/commondir 2>/dev/null && echo RESULT commondir-in-view
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' > .git/config.worktree 2>/dev/null && echo RESULT config.worktree-in-view
mkdir .git/hooks/x 2>/dev/null && echo RESULT hooks WRITTEN
rm -f .git/HEAD.sample; true
"#,
        m = marker.display()
    );
    let r = inside(&p, &repo, &script);
    for want in [
        "commit",
        "branch",
        "checkout",
        "stash",
        "diff",
        "log",
        "worktree-list",
    ] {
        assert!(
            r.stdout.contains(&format!("RESULT {want} ok")),
            "git {want} failed inside:\n{r}"
        );
    }
    assert!(
        !r.stdout.contains("WRITTEN"),
        "a config surface was writable:\n{r}"
    );

    // the host: nothing planted survived, the work did
    assert!(
        !repo.join(".git/commondir").exists(),
        "commondir reached the host"
    );
    assert!(!repo.join(".git/config.worktree").exists());
    let st = host_git(&f, &repo, &["status", "--short"]);
    assert!(
        !marker.exists(),
        "the host's git status ran planted code:\n{st}"
    );
    let log = host_git(&f, &repo, &["log", "--oneline", "--all"]);
    assert!(
        log.stdout.contains("second"),
        "the commit was lost:\n{log}\n{r}"
    );
    let br = host_git(&f, &repo, &["branch", "--list"]);
    assert!(
        br.stdout.contains("feature") && br.stdout.contains("* topic"),
        "branches or HEAD were not recorded:\n{br}"
    );
    let stash = host_git(&f, &repo, &["stash", "list"]);
    assert!(
        !stash.stdout.trim().is_empty(),
        "the stash was lost:\n{stash}"
    );
    assert!(!marker.exists());
}

/// Finding 1e: a hooks path that the repo's config names inside the work tree is read-only,
/// and one that does not exist yet cannot be created; the host's next `git commit` runs no
/// planted hook. Control: the same hook written on the host runs.
#[test]
fn a_hooks_path_inside_the_repo_is_read_only() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-hookspath");
    let marker = f.path("pwned");
    let hook = format!("#!/bin/sh\ntouch {}\n", marker.display());
    let p = ci_profile(&f);
    for (name, existing) in [("husky", true), ("missing", false)] {
        let repo = real_repo(&f, name);
        host_git(&f, &repo, &["config", "core.hooksPath", ".hooks"]).assert_code(0);
        if existing {
            std::fs::create_dir_all(repo.join(".hooks")).unwrap();
        }
        let script = format!(
            "mkdir -p .hooks 2>/dev/null\nprintf '{}' > .hooks/pre-commit 2>/dev/null && chmod +x .hooks/pre-commit && echo RESULT WRITTEN\necho ok > other.txt && echo RESULT control ok\n",
            hook.replace('\n', "\\n")
        );
        let r = inside(&p, &repo, &script);
        assert!(r.stdout.contains("RESULT control ok"), "{r}");
        assert!(
            !r.stdout.contains("WRITTEN"),
            "the hooks path was writable ({name}):\n{r}"
        );
        std::fs::write(repo.join("file.txt"), "changed\n").unwrap();
        host_git(&f, &repo, &["commit", "-qam", "host"]);
        assert!(
            !marker.exists(),
            "the host's git commit ran a planted hook ({name})"
        );
        // control: a hook the host writes there runs
        std::fs::create_dir_all(repo.join(".hooks")).unwrap();
        std::fs::write(repo.join(".hooks/pre-commit"), &hook).unwrap();
        std::fs::set_permissions(
            repo.join(".hooks/pre-commit"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(repo.join("file.txt"), "again\n").unwrap();
        host_git(&f, &repo, &["commit", "-qam", "host2"]);
        assert!(
            marker.exists(),
            "control: the hook did not run: the check is blind"
        );
        std::fs::remove_file(&marker).unwrap();
    }
}

/// Finding 1b: a submodule's git dir (`.git/modules/NAME`) is a view too: its config and
/// hooks are read-only; committing inside the submodule still works.
#[test]
fn a_submodules_git_dir_is_read_only_but_for_its_work() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-submodule");
    let lib = real_repo(&f, "lib");
    let repo = real_repo(&f, "repo");
    host_git(
        &f,
        &repo,
        &["submodule", "add", "-q", lib.to_str().unwrap(), "sub"],
    )
    .assert_code(0);
    host_git(&f, &repo, &["commit", "-qm", "sub"]).assert_code(0);
    let marker = f.path("pwned");
    let p = ci_profile(&f);
    let script = format!(
        r#"(cd sub && echo two >> file.txt && {GIT} commit -qam in-sub) && echo RESULT sub-commit ok
{GIT} add sub && {GIT} commit -qm bump && echo RESULT super-commit ok
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' >> .git/modules/sub/config 2>/dev/null && echo RESULT config WRITTEN
printf '#!/bin/sh\ntouch {m}\n' > .git/modules/sub/hooks/pre-commit 2>/dev/null && echo RESULT hook WRITTEN
# in the view only: gone with it
printf '../../../planted\n' > .git/modules/sub/commondir
"#,
        m = marker.display()
    );
    let r = inside(&p, &repo, &script);
    assert!(r.stdout.contains("RESULT sub-commit ok"), "{r}");
    assert!(r.stdout.contains("RESULT super-commit ok"), "{r}");
    assert!(!r.stdout.contains("WRITTEN"), "{r}");
    assert!(!repo.join(".git/modules/sub/commondir").exists());
    host_git(&f, &repo.join("sub"), &["status", "--short"]);
    host_git(&f, &repo, &["status", "--short"]);
    assert!(!marker.exists(), "the host's git ran planted code");
    let log = host_git(&f, &repo.join("sub"), &["log", "--oneline"]);
    assert!(log.stdout.contains("in-sub"), "{log}");
}

/// Finding 1c: in a linked worktree `.git` is a file: it is read-only (it cannot be pointed
/// at a planted dir), the worktree's own git dir is a view, and commits there still work.
#[test]
fn a_linked_worktree_keeps_its_git_file_and_works() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-worktree");
    let main = real_repo(&f, "main");
    let wt = f.path("wt");
    host_git(&f, &main, &["worktree", "add", "-q", wt.to_str().unwrap()]).assert_code(0);
    let marker = f.path("pwned");
    let p = ci_profile(&f);
    let script = format!(
        r#"echo two >> file.txt && {GIT} commit -qam in-wt && echo RESULT commit ok
{GIT} worktree list | grep -q main && echo RESULT list ok
mkdir -p planted/objects planted/refs && echo 'ref: refs/heads/main' > planted/HEAD
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' > planted/config
printf 'gitdir: planted\n' > .git 2>/dev/null && echo RESULT dotgit WRITTEN
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' >> {main}/.git/config 2>/dev/null && echo RESULT config WRITTEN
printf '[core]\n\tfsmonitor = "touch {m}; false"\n' >> {main}/.git/worktrees/wt/config.worktree
# in the view only: gone with it
printf '../../planted\n' > {main}/.git/worktrees/wt/commondir
"#,
        m = marker.display(),
        main = main.display()
    );
    let r = inside(&p, &wt, &script);
    assert!(r.stdout.contains("RESULT commit ok"), "{r}");
    assert!(r.stdout.contains("RESULT list ok"), "{r}");
    assert!(!r.stdout.contains("WRITTEN"), "{r}");
    assert_eq!(
        std::fs::read_to_string(main.join(".git/worktrees/wt/commondir")).unwrap(),
        "../..\n",
        "the worktree's commondir changed on the host"
    );
    assert!(!main.join(".git/worktrees/wt/config.worktree").exists());
    let st = host_git(&f, &wt, &["status", "--short"]);
    host_git(&f, &main, &["status", "--short"]);
    assert!(!marker.exists(), "the host's git ran planted code:\n{st}");
    let log = host_git(&f, &main, &["log", "--oneline", "--all"]);
    assert!(log.stdout.contains("in-wt"), "{log}");
}

/// Finding 1d: where the repo has no `.git`, none can be made (an empty read-only one stands
/// there during the run, removed after); the rest of the repo stays writable.
#[test]
fn no_git_dir_can_appear_where_none_existed() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-none");
    let repo = f.repo("repo");
    let p = ci_profile(&f);
    let r = inside(
        &p,
        &repo,
        "git init -q . 2>/dev/null && echo RESULT init WRITTEN\nmkdir -p .git/hooks 2>/dev/null && echo RESULT mkdir WRITTEN\necho x > new.txt && echo RESULT control ok\n",
    );
    assert!(r.stdout.contains("RESULT control ok"), "{r}");
    if disk_cap_works() {
        // Behind the repo's layer the .git is made inside and refused on the way back.
        assert!(r.stderr.contains("refused .git (a new .git)"), "{r}");
    } else {
        // The repo bound as it is: the read-only placeholder keeps it from being made.
        assert!(!r.stdout.contains("WRITTEN"), "{r}");
    }
    assert!(
        repo.join(".git").symlink_metadata().is_err(),
        "a .git is left in the repo"
    );
    assert!(repo.join("new.txt").exists());
}

/// Finding 1d with runs side by side: runs on one repo without `.git` share the placeholder,
/// and one that ends leaves it to those still running. Removing it would detach their
/// read-only pin, in their namespaces too, and a command still running could then make a
/// `.git` in the host's repo. Run A waits inside; run B starts and ends beside it (exit 0);
/// the placeholder is still there when B has ended; A can make no `.git` (control: A's other
/// write lands); none is left once both have ended. The repo is bound as it is (`disk =
/// "off"`, as on a kernel without the disk layer), where the placeholder is on the host.
#[test]
fn a_run_that_ends_beside_another_leaves_it_the_git_placeholder() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("git-none-beside");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("ci").disk("off"));
    std::fs::write(
        repo.join("a.sh"),
        "for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done
         mkdir -p .git/hooks 2>/dev/null && echo RESULT hooks WRITTEN
         rmdir .git 2>/dev/null; mkdir .git 2>/dev/null && echo RESULT git WRITTEN
         echo x > a.txt && echo RESULT control ok
",
    )
    .unwrap();
    let a = sandbox_command(&p, &repo, &[], &["bash", "a.sh"]);
    let a = std::thread::spawn(move || run_command(a, slack_secs(120)));
    let dot_git = repo.join(".git");
    let deadline = std::time::Instant::now() + slack_secs(30);
    while dot_git.symlink_metadata().is_err() {
        assert!(
            std::time::Instant::now() < deadline && !a.is_finished(),
            "run A made no placeholder .git"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let b = run_command(
        sandbox_command(&p, &repo, &[], &["bash", "-c", "echo b > b.txt"]),
        slack_secs(60),
    );
    b.assert_code(0);
    let still = dot_git.symlink_metadata().is_ok();
    std::fs::write(repo.join("go"), "").unwrap();
    let a = a.join().unwrap();
    assert!(
        still,
        "run B removed the placeholder while run A was running: {b}"
    );
    assert!(a.stdout.contains("RESULT control ok"), "{a}");
    assert!(!a.stdout.contains("WRITTEN"), "{a}");
    assert!(
        dot_git.symlink_metadata().is_err(),
        "a .git is left in the repo"
    );
    assert!(repo.join("b.txt").exists() && repo.join("a.txt").exists());
}

/// Fail closed: a placeholder that a host process holds locked exclusively (no run could
/// share it, nor tell whether it is being removed) is waited for, then refused with exit 125
/// and a line that says what to do; the command never ran.
#[test]
fn a_placeholder_locked_by_a_host_process_is_refused() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("git-none-locked");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("ci").disk("off"));
    std::fs::create_dir(repo.join(".git")).unwrap();
    let held = std::fs::File::open(repo.join(".git")).unwrap();
    // SAFETY: flock on a file we own.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );
    let r = run_command(
        sandbox_command(&p, &repo, &[], &["bash", "-c", "echo ran > ran.txt"]),
        slack_secs(60),
    );
    r.assert_code(125);
    assert!(
        r.stderr.contains("placeholder .git") && r.stderr.contains("fuser -v"),
        "{r}"
    );
    assert!(!repo.join("ran.txt").exists());
    drop(held);
}

/// Findings 2a, 2b, 6b, 6c: repo-controlled links and special files as `.git` or in it
/// steer nothing: a `hooks` link into the caller's home stays a link resolved inside the
/// sandbox; a `.git` file naming a host directory that is not a git dir, a FIFO and a link to
/// /dev/zero as `.git` are refused at once (exit 125, nothing read).
#[test]
fn repo_links_and_special_files_steer_no_mount_and_block_nothing() {
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("git-links");
    let secret = f.write("home/.ssh/id_ed25519", "PRIVATE KEY\n");
    let p = f.profile(&Spec::default().repo("rw"));

    // 2a: .git/hooks -> ../../home (the caller's home, relative)
    let repo = f.git_repo("repo");
    std::fs::remove_dir_all(repo.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink("../../home", repo.join(".git/hooks")).unwrap();
    let via = repo.join(".git/hooks/.ssh/id_ed25519");
    assert_eq!(
        std::fs::read_to_string(&via).unwrap(),
        "PRIVATE KEY\n",
        "control"
    );
    let r = run_probe(&p, &repo, &[], &["read", via.to_str().unwrap()]);
    r.assert_errno(&[libc::ENOENT, libc::EACCES]);
    // control: a link in the git dir is kept as the same link (resolved inside the view)
    std::os::unix::fs::symlink("HEAD", repo.join(".git/head-link")).unwrap();
    let link = repo.join(".git/head-link");
    let d = run_probe(&p, &repo, &[], &["symlink-read", link.to_str().unwrap()]).assert_ok();
    assert!(d.ends_with("target=HEAD"), "{d}");

    // 2b: a .git file whose gitdir is a host directory holding secrets
    let kube = f.write("kube/config", "KUBE TOKEN\n");
    let repo2 = f.repo("repo2");
    std::fs::write(
        repo2.join(".git"),
        format!("gitdir: {}\n", kube.parent().unwrap().display()),
    )
    .unwrap();
    let r = run_command(
        sandbox_command(&p, &repo2, &[], &[probe().to_str().unwrap(), "pid"]),
        slack_secs(30),
    );
    r.assert_code(125);
    assert!(r.stderr.contains("not a git directory"), "{r}");
    assert!(!r.all().contains("KUBE TOKEN"));

    // 6b: .git is a FIFO; 6c: .git -> /dev/zero. Refused at once, not after a hang.
    for (name, make) in [("fifo", 0), ("zero", 1)] {
        let rp = f.repo(&format!("repo-{name}"));
        if make == 0 {
            nix::unistd::mkfifo(
                &rp.join(".git"),
                nix::sys::stat::Mode::from_bits_truncate(0o644),
            )
            .unwrap();
        } else {
            std::os::unix::fs::symlink("/dev/zero", rp.join(".git")).unwrap();
        }
        let t0 = std::time::Instant::now();
        let r = run_command(
            sandbox_command(
                &p,
                &rp,
                &["--timeout", "5s"],
                &[probe().to_str().unwrap(), "pid"],
            ),
            slack_secs(30),
        );
        r.assert_code(125);
        assert!(
            t0.elapsed() < slack_secs(5),
            "{name}: took {:?}",
            t0.elapsed()
        );
        assert!(r.stderr.contains(".git"), "{r}");
    }
    let _ = secret;
}

/// The uid and gid of the local user `name` (from /etc/passwd), if there is one.
fn local_user(name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// Another local user, who may only read the repo, cannot hold the placeholder `.git`: it is
/// 0700 and owned by the user the command runs as, so it cannot be opened, and a lock needs
/// an open file. Found: such a user held a shared lock on it during a run, so the run could
/// not remove it (it stayed in the repo), then an exclusive one, so every later run waited
/// 5 s and was refused. Here, as root on a repo of `sbxtest`'s, `nobody` keeps trying to
/// lock it (shared and exclusive) while run A waits inside and until run B has ended: A's
/// placeholder is `sbxtest`'s and 0700, none is left after A, B runs at once (exit 0), and
/// `nobody` never held it. Rootless: the mode and owner only (playing another user needs
/// root).
#[test]
fn another_user_cannot_hold_the_git_placeholder() {
    use std::os::unix::fs::MetadataExt;
    if !sandbox_works() {
        return;
    }
    let f = Fixture::new("git-none-foreign-lock");
    let repo = f.repo("repo");
    let p = f.profile(&Spec::extends("ci").disk("off"));
    std::fs::write(
        repo.join("a.sh"),
        "for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done\necho RESULT a ok\n",
    )
    .unwrap();
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    let mut owner = unsafe { (libc::geteuid(), libc::getegid()) };
    let attacker = if is_root() {
        match (local_user("sbxtest"), local_user("nobody")) {
            (Some(o), Some(n)) => {
                let (uid, gid) = o;
                for e in [repo.clone(), repo.join("src"), repo.join("a.sh")] {
                    std::os::unix::fs::lchown(&e, Some(uid), Some(gid)).unwrap();
                }
                std::os::unix::fs::lchown(repo.join("inside.txt"), Some(uid), Some(gid)).unwrap();
                std::os::unix::fs::lchown(repo.join("src/lib.txt"), Some(uid), Some(gid)).unwrap();
                owner = o;
                Some(n)
            }
            _ => {
                skip(
                    "sbxtest",
                    "no users sbxtest and nobody to play the repo owner and another user",
                );
                None
            }
        }
    } else {
        eprintln!(
            "another_user_cannot_hold_the_git_placeholder: rootless, only the placeholder's mode and owner are checked (playing another user needs root)"
        );
        None
    };
    let a = sandbox_command(&p, &repo, &[], &["bash", "a.sh"]);
    let a = std::thread::spawn(move || run_command(a, slack_secs(120)));
    let dot_git = repo.join(".git");
    let deadline = std::time::Instant::now() + slack_secs(30);
    while dot_git.symlink_metadata().is_err() {
        assert!(
            std::time::Instant::now() < deadline && !a.is_finished(),
            "run A made no placeholder .git"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Made, then given to the run's user: look again for a moment when it shows between the two.
    let settle = std::time::Instant::now() + Duration::from_secs(2);
    let private = loop {
        let m = dot_git.symlink_metadata().unwrap();
        let seen = (m.mode() & 0o7777, m.uid(), m.gid());
        if seen == (0o700, owner.0, owner.1) || std::time::Instant::now() > settle {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The other user, until told to stop: lock it shared, then exclusively, whenever it can.
    let stop = f.path("stop");
    let attack = attacker.map(|_| {
        let script = format!(
            "while [ ! -e {stop} ]; do
               flock -n -s {g} -c 'echo HELD shared; sleep 2' 2>>{log}
               flock -n -x {g} -c 'echo HELD exclusive; sleep 8' 2>>{log}
               sleep 0.01
             done",
            stop = stop.display(),
            g = dot_git.display(),
            log = "/dev/null",
        );
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", "bash", "-c", &script]);
        std::thread::spawn(move || run_command(c, slack_secs(120)))
    });
    // and one try whose error shows
    let tried = attacker.map(|_| {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", "flock", "-n", "-s"])
            .arg(&dot_git)
            .args(["-c", "echo HELD"]);
        run_command(c, slack_secs(30))
    });
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(repo.join("go"), "").unwrap();
    let a = a.join().unwrap();
    let check_private = || {
        assert_eq!(
            private,
            (0o700, owner.0, owner.1),
            "the placeholder is not private to the user the command runs as"
        )
    };
    assert!(a.stdout.contains("RESULT a ok"), "{a}");
    if attacker.is_none() {
        check_private();
        return;
    }
    std::thread::sleep(Duration::from_millis(300));
    let left = dot_git.symlink_metadata().is_ok();
    let t0 = std::time::Instant::now();
    let b = run_command(
        sandbox_command(&p, &repo, &[], &["bash", "-c", "echo b > b.txt"]),
        slack_secs(60),
    );
    let took = t0.elapsed();
    std::fs::write(&stop, "").unwrap();
    let attack = attack.unwrap().join().unwrap();
    let tried = tried.unwrap();
    assert!(!tried.stdout.contains("HELD"), "{tried}");
    assert!(tried.stderr.contains("Permission denied"), "{tried}");
    assert!(
        !attack.stdout.contains("HELD"),
        "the other user held the placeholder: {attack}"
    );
    assert!(
        !left,
        "the placeholder .git was left in the repo after run A"
    );
    b.assert_code(0);
    assert!(
        took < Duration::from_secs(4),
        "run B waited for the placeholder: {took:?}: {b}"
    );
    assert!(repo.join("b.txt").exists());
    assert!(
        dot_git.symlink_metadata().is_err(),
        "a .git is left in the repo"
    );
    check_private();
}

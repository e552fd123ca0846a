//! The way back: what a command changed in a read-write repo reaches the host only as a
//! changeset, and the host program that reads what the command left (the user's next
//! `git checkout`, `git add`, `git status`) finds nothing that writes or runs where the command
//! chose. Each attack is played from inside a real sandbox, then git is run on the host;
//! controls show that the same plant made on the host does fire (so the check can see it) and
//! that the run's ordinary changes do land.

mod common;

use common::*;
use std::path::Path;

fn report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The report's entries of the first result: (path, refused reason) pairs.
fn entries(v: &serde_json::Value) -> Vec<(String, Option<String>)> {
    v["results"][0]["repo_changes"]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {v:#}"))
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["refused"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn refused(v: &serde_json::Value, path: &str) -> String {
    entries(v)
        .into_iter()
        .find(|(p, _)| p == path)
        .and_then(|(_, r)| r)
        .unwrap_or_else(|| panic!("{path} is not refused in {v:#}"))
}

/// Run `script` under the ci profile with a report; returns the run and the report.
fn run_with_report(
    f: &Fixture,
    repo: &Path,
    script: &str,
    opts: &[&str],
) -> (Run, serde_json::Value) {
    let rep = f.path("report.json");
    let _ = std::fs::remove_file(&rep);
    let p = ci_profile(f);
    std::fs::write(repo.join(".sandbox-test.sh"), script).unwrap();
    let mut all = vec!["--report", rep.to_str().unwrap()];
    all.extend_from_slice(opts);
    let c = sandbox_command(&p, repo, &all, &["bash", ".sandbox-test.sh"]);
    let r = run_command(c, slack_secs(120));
    let _ = std::fs::remove_file(repo.join(".sandbox-test.sh"));
    let v = report(&rep);
    (r, v)
}

/// The object id git gives `content` as a blob (its loose object lands in `objects/<2 hex>`).
fn blob_id(f: &Fixture, repo: &Path, content: &str) -> String {
    let file = f.write("blob-content", content);
    let r = host_git(f, repo, &["hash-object", file.to_str().unwrap()]);
    r.assert_code(0);
    r.stdout.trim().to_string()
}

fn tree_is_empty(d: &Path) -> bool {
    std::fs::read_dir(d)
        .map(|mut e| e.next().is_none())
        .unwrap_or(true)
}

const GIT: &str = "git -c user.name=agent -c user.email=agent@example.invalid";
const BLOB: &str = "a blob the host's git add will write\n";

/// git appends to a reflog and creates loose objects through links it finds in its own dirs:
/// a `.git/logs/HEAD` linked to the user's `~/.bashrc`, on a branch named `p$(touch …)`, gets
/// the next host `git checkout`'s line ("moving from p$(touch …)"), which the next shell runs;
/// a linked `.git/objects/XX` takes the host's next `git add`. Neither link may come back.
#[test]
fn git_follows_no_link_the_run_left() {
    if !sandbox_works() || !have_git() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-git-links");
    let bashrc = f.write("home/.bashrc", "");
    let objects_out = f.path("outside-objects");
    std::fs::create_dir_all(&objects_out).unwrap();
    let marker = f.path("marker");
    let branch = format!("p$(touch${{IFS}}{})", marker.display());

    // control: the same plants made on the host fire, so the checks below can see them
    let ctl = real_repo(&f, "control");
    let id = blob_id(&f, &ctl, BLOB);
    let xx = &id[..2];
    host_git(&f, &ctl, &["checkout", "-q", "-b", &branch]).assert_code(0);
    std::fs::remove_file(ctl.join(".git/logs/HEAD")).unwrap();
    std::os::unix::fs::symlink(&bashrc, ctl.join(".git/logs/HEAD")).unwrap();
    let _ = std::fs::remove_dir_all(ctl.join(".git/objects").join(xx));
    std::os::unix::fs::symlink(&objects_out, ctl.join(".git/objects").join(xx)).unwrap();
    host_git(&f, &ctl, &["checkout", "-q", "main"]).assert_code(0);
    std::fs::write(ctl.join("blob.txt"), BLOB).unwrap();
    host_git(&f, &ctl, &["add", "blob.txt"]).assert_code(0);
    let fired = std::fs::read_to_string(&bashrc).unwrap();
    assert!(
        fired.contains("moving from p$(touch"),
        "control: the host's checkout did not write through the link: {fired:?}"
    );
    assert!(
        !tree_is_empty(&objects_out),
        "control: git add did not write through the link"
    );
    std::fs::write(&bashrc, "").unwrap();
    std::fs::remove_dir_all(&objects_out).unwrap();
    std::fs::create_dir_all(&objects_out).unwrap();

    // the attack, from inside a read-write run
    let repo = real_repo(&f, "repo");
    let script = format!(
        r#"set -u
{GIT} checkout -q -b '{branch}' && echo RESULT branch ok
rm -f .git/logs/HEAD && ln -s {bashrc} .git/logs/HEAD && echo RESULT reflog linked
rm -rf .git/objects/{xx} && ln -s {out} .git/objects/{xx} && echo RESULT objects linked
echo edited >> file.txt
"#,
        bashrc = bashrc.display(),
        out = objects_out.display()
    );
    let (r, v) = run_with_report(&f, &repo, &script, &[]);
    r.assert_code(0);
    for want in ["branch ok", "reflog linked", "objects linked"] {
        assert!(
            r.stdout.contains(want),
            "the attack did not run ({want}):\n{r}"
        );
    }
    assert!(refused(&v, ".git/logs/HEAD").contains("link"), "{v:#}");
    assert!(
        refused(&v, &format!(".git/objects/{xx}")).contains("link"),
        "{v:#}"
    );
    assert!(r.stderr.contains("refused .git/logs/HEAD"), "{r}");
    // nothing of the links is on the host
    for p in [
        repo.join(".git/logs/HEAD"),
        repo.join(".git/objects").join(xx),
    ] {
        let m = p.symlink_metadata();
        assert!(
            m.as_ref().map_or(true, |m| !m.file_type().is_symlink()),
            "{} came back as a link",
            p.display()
        );
    }
    // the host's own git after the run
    host_git(&f, &repo, &["checkout", "-q", "main"]).assert_code(0);
    std::fs::write(repo.join("blob.txt"), BLOB).unwrap();
    host_git(&f, &repo, &["add", "blob.txt"]).assert_code(0);
    host_git(&f, &repo, &["status", "--short"]).assert_code(0);
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "",
        "the reflog reached ~/.bashrc"
    );
    assert!(
        tree_is_empty(&objects_out),
        "git add wrote outside the repo"
    );
    assert!(!marker.exists(), "the branch name ran");
    assert!(repo.join(".git/objects").join(xx).join(&id[2..]).is_file());
    // control: the run's ordinary changes landed
    assert_eq!(
        std::fs::read_to_string(repo.join("file.txt")).unwrap(),
        "one\nedited\n"
    );
    assert_eq!(v["results"][0]["repo_changes"]["applied"], "all", "{v:#}");
}

/// What the rules let into a git dir: names git would write, contents git would write, only
/// where git records work. A HEAD that leads out of `refs/`, an invalid ref name, a FIFO, a
/// new `objects/info/alternates` (where git reads objects from) and a top-level file git
/// never writes are refused; a branch made the ordinary way lands.
#[test]
fn git_dirs_take_only_what_git_writes() {
    if !sandbox_works() || !have_git() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-git-rules");
    let repo = real_repo(&f, "repo");
    let head = std::fs::read_to_string(repo.join(".git/HEAD")).unwrap();
    let script = format!(
        r#"set -u
{GIT} branch feature && echo RESULT branch ok
printf 'ref: refs/heads/../../config\n' > .git/HEAD && echo RESULT head written
printf '%s\n' "$(cat .git/refs/heads/main)" > '.git/refs/heads/bad..name' && echo RESULT badref
mkfifo .git/refs/heads/fifo && echo RESULT fifo
mkdir -p .git/objects/info && echo /etc > .git/objects/info/alternates && echo RESULT alternates
"#
    );
    let (r, v) = run_with_report(&f, &repo, &script, &[]);
    r.assert_code(0);
    for want in ["branch ok", "head written", "badref", "fifo", "alternates"] {
        assert!(
            r.stdout.contains(want),
            "the attack did not run ({want}):\n{r}"
        );
    }
    assert!(refused(&v, ".git/HEAD").contains("HEAD"), "{v:#}");
    assert!(
        refused(&v, ".git/refs/heads/bad..name").contains("ref name"),
        "{v:#}"
    );
    assert!(
        refused(&v, ".git/refs/heads/fifo").contains("FIFO"),
        "{v:#}"
    );
    assert!(
        refused(&v, ".git/objects/info/alternates").contains("alternates"),
        "{v:#}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/HEAD")).unwrap(),
        head
    );
    assert!(!repo.join(".git/refs/heads/bad..name").exists());
    assert!(!repo.join(".git/refs/heads/fifo").exists());
    assert!(!repo.join(".git/objects/info/alternates").exists());
    // control
    assert!(repo.join(".git/refs/heads/feature").is_file(), "{v:#}");
    host_git(&f, &repo, &["status", "--short"]).assert_code(0);
}

/// A linked worktree's common dir lies outside the repo the run was given: it gets a layer of
/// its own and the same rules, where it used to be bound read-write as it is.
#[test]
fn a_linked_worktrees_common_dir_gets_the_same_rules() {
    if !sandbox_works() || !have_git() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-worktree");
    let main = real_repo(&f, "main");
    let wt = f.path("wt");
    host_git(&f, &main, &["worktree", "add", "-q", wt.to_str().unwrap()]).assert_code(0);
    let bashrc = f.write("home/.bashrc", "");
    let script = format!(
        r#"set -u
echo more >> file.txt
{GIT} commit -qam 'from the worktree' && echo RESULT commit ok
rm -f {common}/logs/refs/heads/main && ln -s {bashrc} {common}/logs/refs/heads/main && echo RESULT linked
"#,
        common = main.join(".git").display(),
        bashrc = bashrc.display()
    );
    let (r, v) = run_with_report(&f, &wt, &script, &[]);
    r.assert_code(0);
    assert!(
        r.stdout.contains("commit ok") && r.stdout.contains("linked"),
        "{r}"
    );
    let link = main.join(".git/logs/refs/heads/main");
    assert!(
        refused(&v, link.to_str().unwrap()).contains("link"),
        "{v:#}"
    );
    assert!(!link.symlink_metadata().unwrap().file_type().is_symlink());
    // the host's git in the main checkout
    host_git(
        &f,
        &main,
        &["commit", "--allow-empty", "-qm", "on the host"],
    )
    .assert_code(0);
    host_git(&f, &main, &["status", "--short"]).assert_code(0);
    assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "");
    // control: the worktree's commit landed in the common dir
    let log = host_git(&f, &wt, &["log", "--oneline"]);
    assert!(log.stdout.contains("from the worktree"), "{log}");
}

/// The way back runs once the sandbox is gone: a command that ends at the timeout's SIGTERM
/// after writing many files has every one of them applied, however short the kill grace.
#[test]
fn the_way_back_is_not_cut_by_the_kill_grace() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-grace");
    let repo = f.repo("repo");
    let n = 5_000;
    let script = format!(
        r#"trap 'exit 0' TERM
mkdir many
for i in $(seq 1 {n}); do echo "$i" > many/f$i; done
echo RESULT written
sleep 300 & wait
"#
    );
    let (r, v) = run_with_report(
        &f,
        &repo,
        &script,
        &["--timeout", "8s", "--kill-grace", "100ms"],
    );
    assert!(r.stdout.contains("RESULT written"), "{r}");
    assert_eq!(r.code, Some(124), "{r}");
    let c = &v["results"][0]["repo_changes"];
    assert_eq!(c["applied"], "all", "{v:#}");
    let landed = std::fs::read_dir(repo.join("many")).unwrap().count();
    assert_eq!(landed, n, "only {landed} of {n} files came back");
}

/// `--changes discard` throws the run's writes away: the repo is untouched, the report says so.
#[test]
fn discarded_changes_never_touch_the_repo() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-discard");
    let repo = f.repo("repo");
    let (r, v) = run_with_report(
        &f,
        &repo,
        "echo changed > inside.txt; echo new > new.txt\n",
        &["--changes", "discard"],
    );
    r.assert_code(0);
    assert_eq!(
        v["results"][0]["repo_changes"]["applied"], "discarded",
        "{v:#}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        INSIDE
    );
    assert!(!repo.join("new.txt").exists());
}

/// `sandbox-run` on its own (the `changes` commands), with the fixture's state directory.
fn changes(f: &Fixture, args: &[&str]) -> Run {
    let mut c = std::process::Command::new(BIN);
    c.arg("changes")
        .args(args)
        .env("XDG_STATE_HOME", f.path("state"))
        .current_dir(&f.dir);
    run_command(c, slack_secs(60))
}

/// The review path: an agent's edit kept (`--changes keep`) leaves the repo untouched; `changes
/// show` and `diff` list it; a `validate` run with it laid over the repo sees it, the repo
/// still untouched; `changes apply` brings it; one kept before the repo changed at its paths is
/// refused, naming them; `--changes discard` leaves nothing.
#[test]
fn an_edit_is_kept_reviewed_tested_and_applied() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return;
    }
    let f = Fixture::new("wayback-review");
    let repo = f.repo("repo");
    std::fs::write(
        repo.join("check.js"),
        "console.log(require('fs').readFileSync('inside.txt', 'utf8').trim())\n",
    )
    .unwrap();
    let state = f.path("state");
    let edit = "echo 'the agent was here' > inside.txt; echo new > added.txt\n";
    let keep = |f: &Fixture| {
        let (r, v) = {
            let rep = f.path("report.json");
            let _ = std::fs::remove_file(&rep);
            let p = ci_profile(f);
            std::fs::write(repo.join(".sandbox-test.sh"), edit).unwrap();
            let mut c = sandbox_command(
                &p,
                &repo,
                &["--changes", "keep", "--report", rep.to_str().unwrap()],
                &["bash", ".sandbox-test.sh"],
            );
            c.env("XDG_STATE_HOME", &state);
            let r = run_command(c, slack_secs(60));
            let _ = std::fs::remove_file(repo.join(".sandbox-test.sh"));
            (r, report(&rep))
        };
        r.assert_code(0);
        let c = &v["results"][0]["repo_changes"];
        assert_eq!(c["applied"], "kept", "{v:#}");
        let id = c["changeset"].as_str().unwrap().to_string();
        assert!(r.stderr.contains(&format!("kept as {id}")), "{r}");
        id
    };
    let id = keep(&f);
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        INSIDE
    );
    assert!(!repo.join("added.txt").exists());

    let list = changes(&f, &["list"]);
    list.assert_code(0);
    assert!(list.stdout.contains(&id), "{list}");
    let show = changes(&f, &["show", &id, "--json"]);
    show.assert_code(0);
    assert!(
        show.stdout.contains("added.txt") && show.stdout.contains("inside.txt"),
        "{show}"
    );
    let diff = changes(&f, &["diff", &id]);
    diff.assert_code(0);
    assert!(diff.stdout.contains("+the agent was here"), "{diff}");
    assert!(diff.stdout.contains("-a file inside the repo"), "{diff}");

    // validate, with the edit laid over the repo: the test sees it, the repo stays as it was
    let p = f.profile(&Spec::extends("validate"));
    let mut c = sandbox_command(&p, &repo, &["--with-changes", &id], &["node", "check.js"]);
    c.env("XDG_STATE_HOME", &state);
    let r = run_command(c, slack_secs(60));
    r.assert_code(0);
    assert_eq!(r.stdout.trim(), "the agent was here", "{r}");
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        INSIDE
    );
    // control: without it, the same test sees the repo
    let mut c = sandbox_command(&p, &repo, &[], &["node", "check.js"]);
    c.env("XDG_STATE_HOME", &state);
    let r = run_command(c, slack_secs(60));
    assert_eq!(r.stdout.trim(), INSIDE.trim(), "{r}");

    let applied = changes(&f, &["apply", &id]);
    applied.assert_code(0);
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        "the agent was here\n"
    );
    assert!(repo.join("added.txt").is_file());
    assert!(!changes(&f, &["list"]).stdout.contains(&id));

    // a conflict: the repo changed at a path of the changeset since it was kept
    std::fs::write(repo.join("inside.txt"), INSIDE).unwrap();
    std::fs::remove_file(repo.join("added.txt")).unwrap();
    let id = keep(&f);
    std::fs::write(repo.join("inside.txt"), "edited on the host meanwhile\n").unwrap();
    let refused = changes(&f, &["apply", &id]);
    assert_ne!(refused.code, Some(0), "{refused}");
    assert!(refused.stderr.contains("inside.txt"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        "edited on the host meanwhile\n"
    );
    assert!(
        !repo.join("added.txt").exists(),
        "a refused apply applied a part"
    );
    changes(&f, &["drop", &id]).assert_code(0);
    assert!(!changes(&f, &["list"]).stdout.contains(&id));
}

/// `limits_hit` says `disk` whenever the repo's layer was full during the run: a command that
/// fills it, meets ENOSPC, and frees the space before it ends (an unlinked file it held open)
/// used to leave it empty, under a read-write profile and under `validate` alike. Control: a
/// run that stays under the cap hits no limit.
#[test]
fn a_layer_filled_and_freed_before_the_end_is_still_reported() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    if which("node").is_none() {
        skip_tool("node is not installed");
        return;
    }
    let f = Fixture::new("wayback-full-freed");
    let repo = f.repo("repo");
    // Fill the layer through an fd, unlink the file, hold it a while, then let it go.
    std::fs::write(
        repo.join("fill.js"),
        r#"const fs = require('fs');
const mb = Number(process.argv[2]);
const fd = fs.openSync('big', 'w');
const chunk = Buffer.alloc(1 << 20, 1);
let written = 0, enospc = false;
for (let i = 0; i < mb; i++) {
  try { fs.writeSync(fd, chunk); written++; } catch (e) { if (e.code === 'ENOSPC') { enospc = true; break; } throw e; }
}
fs.unlinkSync('big');
setTimeout(() => { fs.closeSync(fd); console.log(`RESULT written=${written} enospc=${enospc}`); }, 400);
"#,
    )
    .unwrap();
    for base in ["ci", "validate"] {
        let p = f.profile(&Spec::extends(base).disk("32M").programs(&["node"]));
        let limits = |mb: &str| {
            let rep = f.path(&format!("report-{base}-{mb}.json"));
            let mut c = sandbox_command(
                &p,
                &repo,
                &["--report", rep.to_str().unwrap()],
                &["node", "fill.js", mb],
            );
            c.env("XDG_STATE_HOME", f.path("state"));
            let r = run_command(c, slack_secs(60));
            r.assert_code(0);
            let v = report(&rep);
            let hit: Vec<String> = v["results"][0]["limits_hit"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            (r, hit)
        };
        let (r, hit) = limits("64");
        assert!(
            r.stdout.contains("enospc=true"),
            "{base}: the layer did not fill:\n{r}"
        );
        assert_eq!(hit, vec!["disk".to_string()], "{base}:\n{r}");
        assert!(r.stderr.contains("filled the repo's layer"), "{base}:\n{r}");
        // control
        let (r, hit) = limits("4");
        assert!(r.stdout.contains("enospc=false"), "{base}:\n{r}");
        assert!(hit.is_empty(), "{base}: {hit:?}\n{r}");
    }
    assert!(!repo.join("big").exists());
}

/// The cap bounds what lands on the host, not only the blocks the layer used: a sparse file
/// takes almost nothing in the layer but would be written whole on the host. With the layer
/// on disk (`ci`'s 8G) it cannot even be made: the file-size limit follows the budget, so the
/// `truncate` fails with EFBIG; were it made, the way back's scan would refuse it. A small
/// file beside it lands.
#[test]
fn a_sparse_file_past_the_cap_does_not_land() {
    if !sandbox_works() || !disk_cap_works() {
        return;
    }
    let f = Fixture::new("wayback-sparse");
    let repo = f.repo("repo");
    let (r, v) = run_with_report(
        &f,
        &repo,
        "truncate -s 8G sparse.img; echo ok > small.txt && echo RESULT made\n",
        &[],
    );
    r.assert_code(0);
    assert!(r.stdout.contains("RESULT made"), "{r}");
    let made_inside = !r.stderr.contains("File too large");
    if made_inside {
        assert!(refused(&v, "sparse.img").contains("disk cap"), "{v:#}");
    }
    // (the refused truncate leaves the empty file it created)
    let landed = std::fs::metadata(repo.join("sparse.img")).map_or(0, |m| m.len());
    assert_eq!(landed, 0, "8 GiB landed on the host");
    assert_eq!(
        std::fs::read_to_string(repo.join("small.txt")).unwrap(),
        "ok\n"
    );
}

/// Where the repo is bound as it is (`disk = "off"`, or a kernel without the layer), git's
/// files at the top of a view still come back only as git writes them: a HEAD that names no
/// valid ref is refused. Control: a valid branch switch lands.
#[test]
fn without_the_layer_head_still_comes_back_only_as_git_writes_it() {
    if !sandbox_works() || !have_git() {
        return;
    }
    let f = Fixture::new("wayback-nolayer-head");
    let repo = real_repo(&f, "repo");
    let head = std::fs::read_to_string(repo.join(".git/HEAD")).unwrap();
    let p = f.profile(&Spec::extends("ci").disk("off"));
    let r = inside(
        &p,
        &repo,
        "printf 'ref: refs/heads/../../config\\n' > .git/HEAD\n",
    );
    r.assert_code(0);
    assert!(
        r.stderr.contains("refused") && r.stderr.contains("HEAD"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/HEAD")).unwrap(),
        head
    );
    let script = format!("{GIT} checkout -q -b topic && echo RESULT switched\n");
    let r = inside(&p, &repo, &script);
    assert!(r.stdout.contains("RESULT switched"), "{r}");
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/topic\n"
    );
}

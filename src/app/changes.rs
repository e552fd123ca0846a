//! `sandbox-run changes list|show|diff|apply|drop`: the kept changesets, reviewed and
//! applied or thrown away. Errors are one line (the caller prints them, exit 125).

use crate::changes::store::{self, Held, Stored};
use crate::changes::{Applied, Changeset, Kind, What};
use crate::cli::ChangesAction;
use crate::fsops as fs;
use crate::hostfs::Tree;
use crate::visible;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

/// Files larger than this are not read for a diff (shown as binary files that differ).
const DIFF_CAP: u64 = 8 << 20;

pub(super) fn run(action: ChangesAction) -> Result<i32, String> {
    // Errors name paths the command chose, escaped where they are written; this is the net
    // that keeps any other control off the terminal (backslashes left: they begin escapes).
    run_action(action).map_err(|e| visible::text_keeping(&e, &['\\']))
}

fn run_action(action: ChangesAction) -> Result<i32, String> {
    match action {
        ChangesAction::List => list(),
        ChangesAction::Show { id, json } => show(&id, json),
        ChangesAction::Diff { id } => diff(&id),
        ChangesAction::Apply { id } => apply(&id),
        ChangesAction::Drop { id } => {
            store::drop(&id)?;
            println!("dropped {id}");
            Ok(0)
        }
    }
}

fn counts(cs: &Changeset) -> (usize, usize, u64) {
    let acc = cs.entries.iter().filter(|e| e.accepted()).count();
    let bytes = cs
        .entries
        .iter()
        .filter(|e| e.accepted())
        .map(|e| e.bytes)
        .sum();
    (acc, cs.entries.len() - acc, bytes)
}

fn list() -> Result<i32, String> {
    let all = store::list()?;
    if all.is_empty() {
        eprintln!("sandbox-run: no kept changesets");
    }
    for s in all {
        match s {
            Ok(s) => {
                let m = &s.manifest;
                let (acc, refused, bytes) = counts(&m.changeset);
                println!(
                    "{}  {}  {}  {}  {acc} accepted, {refused} refused, {bytes} bytes  {}",
                    s.id,
                    visible::text(&m.meta.created),
                    visible::path(&m.meta.repo),
                    if m.meta.profile.is_empty() {
                        "-".to_string()
                    } else {
                        visible::text(&m.meta.profile)
                    },
                    visible::text(&m.meta.command),
                )
            }
            Err((id, e)) => println!(
                "{}  (unreadable: {})",
                visible::text(&id),
                visible::text_keeping(&e, &['\\'])
            ),
        }
    }
    Ok(0)
}

/// An entry's path as the diff and the listing show it: relative for the repo, the whole
/// path (without its leading `/`) for another root; escaped by [`visible::path`].
fn shown(cs: &Changeset, root: usize, path: &Path) -> String {
    if root == 0 {
        return visible::path(path);
    }
    let full = cs.roots.get(root).cloned().unwrap_or_default().join(path);
    visible::path(full.strip_prefix("/").unwrap_or(&full))
}

fn kind_word(k: Kind) -> &'static str {
    match k {
        Kind::Added => "added",
        Kind::Modified => "modified",
        Kind::Removed => "removed",
        Kind::TypeChange => "type-change",
        Kind::Mode => "mode",
    }
}

fn what_word(w: What) -> &'static str {
    match w {
        What::File => "file",
        What::Dir => "dir",
        What::Link => "link",
        What::Special => "special",
    }
}

fn show(id: &str, json: bool) -> Result<i32, String> {
    let s = store::open(id)?;
    let m = &s.manifest;
    if json {
        let v = serde_json::json!({
            "id": s.id,
            "changeset": m.changeset,
            "meta": m.meta,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(0);
    }
    let (acc, refused, bytes) = counts(&m.changeset);
    println!("changeset {}", s.id);
    println!("repo      {}", visible::path(&m.meta.repo));
    println!("profile   {}", visible::text(&m.meta.profile));
    println!("command   {}", visible::text(&m.meta.command));
    println!("created   {}", visible::text(&m.meta.created));
    println!("entries   {acc} accepted, {refused} refused, {bytes} bytes");
    for e in &m.changeset.entries {
        let refused = e
            .refused
            .as_deref()
            .map(|r| format!("  refused: {}", visible::text(r)))
            .unwrap_or_default();
        println!(
            "  {:<11} {:<7} {:>10}  {}{refused}",
            kind_word(e.kind),
            what_word(e.what),
            e.bytes,
            shown(&m.changeset, e.root, &e.path)
        );
    }
    Ok(0)
}

/// What a path holds, for a diff.
enum Thing {
    Absent,
    File { data: Option<Vec<u8>>, mode: u32 },
    Link(Vec<u8>),
    Dir(u32),
    Other,
}

/// What `rel` holds below the directory `root`, no link followed (a link on the way, or an
/// unreadable file, reads as something other than a file).
fn read_thing(root: RawFd, rel: &Path) -> Thing {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let Ok(comps) = fs::components(rel) else {
        return Thing::Other;
    };
    let (last, up) = (comps[comps.len() - 1], &comps[..comps.len() - 1]);
    let dir = match fs::walk_dir(root, up) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Thing::Absent,
        Err(_) => return Thing::Other,
    };
    let st = match fs::lstat_at(dir.as_raw_fd(), last) {
        Ok(Some(st)) => st,
        Ok(None) => return Thing::Absent,
        Err(_) => return Thing::Other,
    };
    let mode = st.st_mode & 0o7777;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Thing::Dir(mode),
        libc::S_IFLNK => fs::read_link(dir.as_raw_fd(), last)
            .map(|t| Thing::Link(t.as_bytes().to_vec()))
            .unwrap_or(Thing::Other),
        libc::S_IFREG => {
            let data = (st.st_size as u64 <= DIFF_CAP)
                .then(|| {
                    let mut buf = Vec::new();
                    fs::open_regular(dir.as_raw_fd(), last)
                        .and_then(|f| f.take(DIFF_CAP + 1).read_to_end(&mut buf))
                        .ok()
                        .filter(|n| *n as u64 <= DIFF_CAP)
                        .map(|_| buf)
                })
                .flatten();
            Thing::File { data, mode }
        }
        _ => Thing::Other,
    }
}

/// The files and links below the directory `rel` of `root` (sorted, at most 100000).
fn files_under(root: RawFd, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(comps) = fs::components(rel) else {
        return;
    };
    let Ok(dir) = fs::walk_dir(root, &comps) else {
        return;
    };
    for n in fs::names(dir.as_raw_fd()).unwrap_or_default() {
        if out.len() >= 100_000 {
            return;
        }
        let p = rel.join(&n);
        match fs::lstat_at(dir.as_raw_fd(), &n) {
            Ok(Some(st)) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                files_under(root, &p, out)
            }
            Ok(Some(_)) => out.push(p),
            _ => {}
        }
    }
}

/// git's mode of a file or link.
fn git_mode(t: &Thing) -> &'static str {
    match t {
        Thing::File { mode, .. } if mode & 0o100 != 0 => "100755",
        Thing::Link(_) => "120000",
        _ => "100644",
    }
}

fn content(t: &Thing) -> Option<&[u8]> {
    match t {
        Thing::File { data, .. } => data.as_deref(),
        Thing::Link(t) => Some(t),
        _ => Some(b""),
    }
}

/// `a/NAME` or `b/NAME` as a diff header names it: in double quotes, as git quotes a name it
/// escaped, when `name` holds an escape (every escape begins with a backslash, and a
/// backslash of the name is escaped too), so that `git apply` refuses it rather than
/// writing a file of another name.
fn side(prefix: &str, name: &str) -> String {
    if name.contains('\\') {
        format!("\"{prefix}/{name}\"")
    } else {
        format!("{prefix}/{name}")
    }
}

/// A diff body as a terminal is shown it: each line's text escaped by [`visible`] but for
/// its newline and tabs, and git's `\ No newline at end of file` line as it is (no content
/// line begins with a backslash: each begins with its sign).
fn on_terminal(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    for line in crate::changes::diff::lines(body) {
        if line.starts_with(b"\\ ") {
            out.extend_from_slice(line);
        } else {
            out.extend_from_slice(visible::bytes_keeping(line, &['\n', '\t']).as_bytes());
        }
    }
    out
}

/// One file's part of the diff, turning `old` into `new` (each absent, a file or a link);
/// on a terminal (`tty`) the bodies are escaped by [`on_terminal`].
fn file_diff(out: &mut Vec<u8>, name: &str, old: &Thing, new: &Thing, tty: bool) {
    let a_name = side("a", name);
    let b_name = side("b", name);
    let head = |out: &mut Vec<u8>| {
        out.extend_from_slice(format!("diff --git {a_name} {b_name}\n").as_bytes());
    };
    let body = |out: &mut Vec<u8>, a: &Thing, b: &Thing, an: &str, bn: &str| match (
        content(a),
        content(b),
    ) {
        (Some(x), Some(y)) if x == y => {}
        (Some(x), Some(y))
            if !crate::changes::diff::is_binary(x) && !crate::changes::diff::is_binary(y) =>
        {
            out.extend_from_slice(format!("--- {an}\n+++ {bn}\n").as_bytes());
            let hunks = crate::changes::diff::hunks(x, y, 3);
            if tty {
                out.extend_from_slice(&on_terminal(&hunks));
            } else {
                out.extend_from_slice(&hunks);
            }
        }
        _ => out.extend_from_slice(format!("Binary files {an} and {bn} differ\n").as_bytes()),
    };
    let is_file = |t: &Thing| matches!(t, Thing::File { .. } | Thing::Link(_));
    let same_type = matches!(
        (old, new),
        (Thing::File { .. }, Thing::File { .. }) | (Thing::Link(_), Thing::Link(_))
    );
    if same_type {
        let modes = git_mode(old) != git_mode(new);
        let differ = content(old) != content(new) || content(old).is_none();
        if !modes && !differ {
            return;
        }
        head(out);
        if modes {
            out.extend_from_slice(
                format!("old mode {}\nnew mode {}\n", git_mode(old), git_mode(new)).as_bytes(),
            );
        }
        if differ {
            body(out, old, new, &a_name, &b_name);
        }
        return;
    }
    if is_file(old) {
        head(out);
        out.extend_from_slice(format!("deleted file mode {}\n", git_mode(old)).as_bytes());
        if content(old) != Some(b"") {
            body(out, old, &Thing::Absent, &a_name, "/dev/null");
        }
    }
    if is_file(new) {
        head(out);
        out.extend_from_slice(format!("new file mode {}\n", git_mode(new)).as_bytes());
        if content(new) != Some(b"") {
            body(out, &Thing::Absent, new, "/dev/null", &b_name);
        }
    }
}

fn diff(id: &str) -> Result<i32, String> {
    let s = store::open(id)?;
    let cs = &s.manifest.changeset;
    let roots = open_roots(cs)?;
    let trees = s.sources()?;
    let stdout = std::io::stdout();
    // Names are always escaped; on a terminal the files' bytes are too (shown, not obeyed).
    let tty = std::io::IsTerminal::is_terminal(&stdout);
    let mut w = stdout.lock();
    for e in cs.entries.iter().filter(|e| e.accepted()) {
        let (Some(root), Some(tree)) = (roots.get(e.root), trees.get(e.root)) else {
            return Err(format!("changes diff {id}: an entry names no root"));
        };
        let name = shown(cs, e.root, &e.path);
        let old = read_thing(root.raw_fd(), &e.path);
        let new = match (e.kind, e.what) {
            (Kind::Removed, _) => Thing::Absent,
            (_, What::Dir) => Thing::Dir(e.mode & 0o7777),
            _ => read_thing(tree.raw_fd(), &e.path),
        };
        let mut out = Vec::new();
        match (&old, &new) {
            (Thing::Dir(a), Thing::Dir(b)) => {
                if a != b {
                    out.extend_from_slice(
                        format!(
                            "diff --git {} {}\nold mode 040{a:o}\nnew mode 040{b:o}\n",
                            side("a", &name),
                            side("b", &name)
                        )
                        .as_bytes(),
                    );
                }
            }
            (Thing::Dir(_), _) => {
                let mut files = Vec::new();
                files_under(root.raw_fd(), &e.path, &mut files);
                for f in files {
                    let t = read_thing(root.raw_fd(), &f);
                    file_diff(&mut out, &shown(cs, e.root, &f), &t, &Thing::Absent, tty);
                }
                file_diff(&mut out, &name, &Thing::Absent, &new, tty);
            }
            _ => file_diff(&mut out, &name, &old, &new, tty),
        }
        if w.write_all(&out).is_err() {
            return Ok(0);
        }
    }
    Ok(0)
}

fn open_roots(cs: &Changeset) -> Result<Vec<Tree>, String> {
    cs.roots
        .iter()
        .map(|r| {
            Tree::open(r)
                .map_err(|e| format!("changes: opening {} (no link followed): {e}", r.display()))
        })
        .collect()
}

/// The paths whose content changed since the changeset was kept.
fn changed_since(s: &Stored) -> Result<Vec<String>, String> {
    let cs = &s.manifest.changeset;
    let now = store::base_now(cs)?;
    let mut out = Vec::new();
    for b in &now {
        let then = s.manifest.meta.base.iter().find(|x| x.entry == b.entry);
        let same = match (then, &b.held) {
            (Some(t), now) => t.held == *now,
            (None, _) => false,
        };
        if !same {
            let e = &cs.entries[b.entry];
            let how = match (&b.held, then.map(|t| &t.held)) {
                (Held::Unreachable { .. }, _) => "now unreachable",
                (Held::Absent, _) => "now missing",
                (_, Some(Held::Absent)) => "now exists",
                _ => "changed",
            };
            out.push(format!("{} ({how})", shown(cs, e.root, &e.path)));
        }
    }
    Ok(out)
}

/// The repo root's owner and that user's group (from the passwd file; else the root's).
fn owner_of(repo: &Path) -> Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let m =
        std::fs::symlink_metadata(repo).map_err(|e| format!("changes: {}: {e}", repo.display()))?;
    let uid = m.uid();
    let gid = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 4 && f[2].parse() == Ok(uid))
                    .then(|| f[3].parse().ok())
                    .flatten()
            })
        })
        .unwrap_or(m.gid());
    Ok((uid, gid))
}

fn apply(id: &str) -> Result<i32, String> {
    let s = store::open(id)?;
    let held = s.lock()?;
    let cs = &s.manifest.changeset;
    let repo = cs
        .roots
        .first()
        .ok_or_else(|| format!("changes apply {id}: no repo in the changeset"))?;
    let changed = changed_since(&s)?;
    if !changed.is_empty() {
        return Err(format!(
            "changes apply {id}: nothing applied: the repo changed since the changes were kept: {} (`sandbox-run changes diff {id}` shows them against the repo now)",
            changed.join(", ")
        ));
    }
    let targets = open_roots(cs)?;
    let sources = s.sources()?;
    let (uid, gid) = owner_of(repo)?;
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 && me != uid {
        return Err(format!(
            "changes apply {id}: nothing applied: {} belongs to uid {uid}: apply as that user (or as root, which applies as that user)",
            visible::path(repo)
        ));
    }
    let o = crate::changes::owner::run_as(uid, gid, || {
        crate::changes::apply::apply(cs, &sources, &targets)
    })
    .map_err(|e| format!("changes apply {id}: nothing applied: {e}"))?;
    let err = o.error.clone().unwrap_or_default();
    match o.applied {
        Applied::All => {
            let dropped = match store::remove_locked(id, held) {
                Ok(()) => "the kept changeset is removed".to_string(),
                Err(e) => format!("the kept changeset could not be removed: {e}"),
            };
            println!(
                "applied {id} to {}: {} entries, {} bytes written, {} removed; {dropped}",
                visible::path(repo),
                counts(cs).0,
                o.written,
                o.removed
            );
            if !err.is_empty() {
                eprintln!("sandbox-run: {err}");
            }
            Ok(0)
        }
        Applied::None if err.is_empty() => {
            println!("nothing to apply in {id}");
            Ok(0)
        }
        Applied::None => Err(format!(
            "changes apply {id}: nothing applied (everything rolled back): {err}"
        )),
        _ => {
            let left: Vec<String> = o.left.iter().map(|(r, p)| shown(cs, *r, p)).collect();
            Err(format!(
                "changes apply {id}: PARTLY applied, could not roll back: {err}; left changed: {}; the kept changeset is still there",
                left.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_rewrites_a_terminal_is_shown_escaped() {
        assert_eq!(visible::text("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(visible::text("x\u{202e}y\u{9b}"), "x\\u{202e}y\\u{9b}");
        assert_eq!(visible::text("plain/ünïcode.txt"), "plain/ünïcode.txt");
    }

    #[test]
    fn on_a_terminal_a_body_is_escaped_but_its_layout_and_gits_marker() {
        let body = b"@@ -1 +1 @@\n-\told\x1b[2J\n+new\\n\xff\n\\ No newline at end of file\n";
        assert_eq!(
            String::from_utf8(on_terminal(body)).unwrap(),
            "@@ -1 +1 @@\n-\told\\u{1b}[2J\n+new\\\\n\\xff\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn a_header_quotes_an_escaped_name_only() {
        assert_eq!(side("a", "café.txt"), "a/café.txt");
        assert_eq!(side("b", "x\\u{200b}"), "\"b/x\\u{200b}\"");
    }
}

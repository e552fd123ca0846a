//! The stderr heuristic: paths picked out of the usual error texts on the command's stderr
//! (coreutils, dash, bash, Node, Python, git), with the errno the text names. Cheap enough
//! for every run and rootless: the supervisor feeds the bytes as it relays them; nothing here
//! touches the host (the paths are judged after the run, [`super::fs`]).
//!
//! Bounded: one line buffer of at most [`LINE_MAX`] bytes (a longer line is cut there) and at
//! most [`PATHS_MAX`] distinct candidates (later ones are counted onto nothing: dropped).

use super::{Access, PathSeen};
use std::path::{Component, Path, PathBuf};

/// The longest line looked at; the rest of a longer line is skipped.
pub const LINE_MAX: usize = 4096;
/// The most distinct (path, errno) candidates kept.
pub const PATHS_MAX: usize = 64;

/// The texts that name an errno, as C libraries (strerror) and Node print them.
const ERRNOS: &[(&str, i32)] = &[
    ("no such file or directory", libc::ENOENT),
    ("read-only file system", libc::EROFS),
    ("permission denied", libc::EACCES),
    ("operation not permitted", libc::EPERM),
    ("too many open files", libc::EMFILE),
    ("file too large", libc::EFBIG),
];

/// Words before a path that say the command meant to create it.
const CREATE_WORDS: &[&str] = &[
    "cannot create",
    "can't create",
    "cannot touch",
    "cannot make directory",
    "cannot create directory",
    "mkdir",
    "EROFS",
];

/// Words before a path that say the command meant to truncate it (coreutils' `truncate`
/// once its file is open: `failed to truncate '/x' at 0 bytes`).
const TRUNCATE_WORDS: &[&str] = &["failed to truncate", "cannot truncate"];

/// Feeds on stderr bytes, keeps candidates.
#[derive(Debug, Default)]
pub struct Scanner {
    line: Vec<u8>,
    /// The current line passed [`LINE_MAX`]: skip to its end.
    skipping: bool,
    found: Vec<Found>,
    /// How many of `found` [`Scanner::fresh`] has handed out.
    told: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    path: String,
    access: Access,
    errno: i32,
    count: u64,
}

impl Scanner {
    pub fn feed(&mut self, data: &[u8]) {
        for &b in data {
            if b == b'\n' {
                if !self.skipping {
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line);
                    self.line = line;
                }
                self.line.clear();
                self.skipping = false;
            } else if !self.skipping {
                if self.line.len() >= LINE_MAX {
                    self.skipping = true;
                } else {
                    self.line.push(b);
                }
            }
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        let Some((path, access, errno)) = scan_line(&String::from_utf8_lossy(line)) else {
            return;
        };
        if let Some(f) = self
            .found
            .iter_mut()
            .find(|f| f.path == path && f.errno == errno)
        {
            f.count += 1;
        } else if self.found.len() < PATHS_MAX {
            self.found.push(Found {
                path,
                access,
                errno,
                count: 1,
            });
        }
    }

    /// The candidates, relative paths resolved against `cwd` (the command's working directory
    /// inside). An errno seen without a path (`Too many open files`) gives an empty path.
    pub fn finish(mut self, cwd: &Path) -> Vec<PathSeen> {
        if !self.line.is_empty() && !self.skipping {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line);
        }
        self.found.iter().map(|f| f.seen(cwd)).collect()
    }

    /// The candidates found since the last call (`-v` judges them as they come), as
    /// [`Scanner::finish`] will give them, counted once.
    pub fn fresh(&mut self, cwd: &Path) -> Vec<PathSeen> {
        let new = self.found[self.told..].iter().map(|f| PathSeen {
            count: 1,
            ..f.seen(cwd)
        });
        let new = new.collect();
        self.told = self.found.len();
        new
    }
}

impl Found {
    fn seen(&self, cwd: &Path) -> PathSeen {
        PathSeen {
            path: match self.path.is_empty() {
                true => PathBuf::new(),
                false => normalize(&cwd.join(&self.path)),
            },
            access: self.access,
            errno: Some(self.errno),
            count: self.count,
        }
    }
}

/// `a/./b/../c` -> `a/c`, lexically (the path as the command named it).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// One line: the path it names, what the command meant to do, the errno. Pure.
pub fn scan_line(line: &str) -> Option<(String, Access, i32)> {
    let lower = line.to_ascii_lowercase();
    let (at, text, errno) = ERRNOS
        .iter()
        .filter_map(|(t, e)| lower.find(t).map(|at| (at, *t, *e)))
        .min_by_key(|(at, _, _)| *at)?;
    let creates = CREATE_WORDS.iter().any(|w| line.contains(w));
    let truncates = TRUNCATE_WORDS.iter().any(|w| lower.contains(w));
    let access = match errno {
        libc::EROFS if creates => Access::Create,
        libc::EROFS => Access::Write,
        libc::EACCES | libc::EPERM if truncates => Access::Truncate,
        libc::EACCES | libc::EPERM if creates => Access::Create,
        libc::EACCES | libc::EPERM if lower.contains("for writing") => Access::Write,
        libc::EACCES if shell_exec(line) => Access::Exec,
        _ => Access::Read,
    };
    let path = quoted(line)
        .or_else(|| before(line, at))
        .or_else(|| after(line, at + text.len()));
    match (path, errno) {
        (Some(p), _) => Some((p, access, errno)),
        // counted as a resource refusal even without a path
        (None, libc::EMFILE | libc::EFBIG) => Some((String::new(), access, errno)),
        (None, _) => None,
    }
}

/// dash's words when it cannot run a program: `sh: 1: /x/tool: Permission denied` (the
/// program's name, a line number, the path, nothing else; a redirection says `cannot
/// create` or `cannot open`). bash prints a failed redirection the same way as a failed
/// exec, so its lines stay reads.
fn shell_exec(line: &str) -> bool {
    let mut parts = line.splitn(4, ": ");
    let (Some(_prog), Some(n), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && path.starts_with('/')
        && !path.contains(' ')
}

/// Does `s` look like a path a program was given (not a URL, not a sentence)?
fn pathlike(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 1024
        && !s.contains("://")
        && !s.chars().any(char::is_control)
        && (s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || !s.contains(' '))
}

/// The first quoted string of the line that looks like a path: `touch: cannot touch '/x'`,
/// Node's `open '/x'`, Python's `: '/x'`, git's `unable to access '/x'`.
fn quoted(line: &str) -> Option<String> {
    for q in ['\'', '"', '‘'] {
        let close = if q == '‘' { '’' } else { q };
        let mut rest = line;
        while let Some(i) = rest.find(q) {
            let tail = &rest[i + q.len_utf8()..];
            let Some(j) = tail.find(close) else { break };
            let s = &tail[..j];
            if pathlike(s) && (s.contains('/') || s.contains('.')) {
                return Some(s.to_string());
            }
            rest = &tail[j + close.len_utf8()..];
        }
    }
    None
}

/// The words just before `: ERRTEXT`: `cat: /x: No such...`, `sh: 1: cannot create /x: ...`.
fn before(line: &str, at: usize) -> Option<String> {
    let head = line[..at].trim_end().strip_suffix(':')?;
    let seg = head.rsplit(": ").next()?.trim();
    let seg = [
        "cannot create ",
        "can't create ",
        "cannot open ",
        "can't open ",
        "cannot access ",
        "cannot stat ",
        "cannot truncate ",
        "can't cd to ",
        "cd: ",
    ]
    .iter()
    .find_map(|w| seg.strip_prefix(w))
    .unwrap_or(seg);
    // `bash: line 1: ...`, `sh: 1: ...`: a program's name and a line number are not paths
    let is_word = !seg.contains('/') && !seg.contains('.');
    (pathlike(seg) && !is_word && seg != head.trim()).then(|| seg.to_string())
}

/// A path after the errno text, Python's unquoted form: `...: /x`.
fn after(line: &str, end: usize) -> Option<String> {
    let tail = line[end..].trim_start().strip_prefix(':')?.trim();
    (tail.starts_with('/') && pathlike(tail)).then(|| tail.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_error_texts() {
        let t = |l: &str| scan_line(l);
        let c = |p: &str, a: Access, e: i32| Some((p.to_string(), a, e));
        use libc::{EACCES, EFBIG, EMFILE, ENOENT, EROFS};
        use Access::*;
        assert_eq!(
            t("cat: /etc/x: No such file or directory"),
            c("/etc/x", Read, ENOENT)
        );
        assert_eq!(
            t("ls: cannot access '/sys/class/net': No such file or directory"),
            c("/sys/class/net", Read, ENOENT)
        );
        assert_eq!(
            t("ls: cannot access \u{2018}/sys/class/net\u{2019}: No such file or directory"),
            c("/sys/class/net", Read, ENOENT)
        );
        assert_eq!(
            t("touch: cannot touch '/usr/x': Read-only file system"),
            c("/usr/x", Create, EROFS)
        );
        assert_eq!(
            t("sh: 1: cannot create /usr/x: Read-only file system"),
            c("/usr/x", Create, EROFS)
        );
        assert_eq!(
            t("bash: line 1: /usr/x: Read-only file system"),
            c("/usr/x", Write, EROFS)
        );
        assert_eq!(
            t("sh: 1: cannot create /proc/self/comm: Permission denied"),
            c("/proc/self/comm", Create, EACCES)
        );
        assert_eq!(
            t("Error: ENOENT: no such file or directory, open '/root/.npmrc'"),
            c("/root/.npmrc", Read, ENOENT)
        );
        assert_eq!(
            t("Error: EROFS: read-only file system, open '/usr/lib/x'"),
            c("/usr/lib/x", Create, EROFS)
        );
        assert_eq!(
            t("Error: EACCES: permission denied, mkdir '/opt/y'"),
            c("/opt/y", Create, EACCES)
        );
        assert_eq!(
            t("FileNotFoundError: [Errno 2] No such file or directory: 'conf/a.toml'"),
            c("conf/a.toml", Read, ENOENT)
        );
        assert_eq!(
            t("OSError: [Errno 30] Read-only file system: '/usr/z'"),
            c("/usr/z", Write, EROFS)
        );
        assert_eq!(
            t("PermissionError: [Errno 13] Permission denied: '/etc/shadow'"),
            c("/etc/shadow", Read, EACCES)
        );
        assert_eq!(
            t("fatal: unable to access '/root/.config/git/config': Permission denied"),
            c("/root/.config/git/config", Read, EACCES)
        );
        assert_eq!(
            t("ls: cannot access 'x.txt': No such file or directory"),
            c("x.txt", Read, ENOENT)
        );
        assert_eq!(
            t("sh: 1: /opt/tool/run: Permission denied"),
            c("/opt/tool/run", Exec, EACCES)
        );
        assert_eq!(
            t("bash: line 1: /opt/tool/run: Permission denied"),
            c("/opt/tool/run", Read, EACCES)
        );
        assert_eq!(
            t("truncate: failed to truncate '/srv/f' at 0 bytes: Permission denied"),
            c("/srv/f", Truncate, EACCES)
        );
        assert_eq!(
            t("truncate: cannot open '/srv/f' for writing: Permission denied"),
            c("/srv/f", Write, EACCES)
        );
        assert_eq!(
            t("stty: /dev/null: Permission denied"),
            c("/dev/null", Read, EACCES)
        );
        assert_eq!(t("sh: 1: cannot open /x/y: No such file"), None);
        // nothing a path, or no errno text: nothing
        assert_eq!(
            t("fatal: unable to access 'https://h.example/r/': Could not resolve host"),
            None
        );
        assert_eq!(t("sh: 1: foo: not found"), None);
        assert_eq!(t("bash: line 1: Permission denied"), None);
        assert_eq!(t("error: some words here: Permission denied"), None);
        // resource texts count even without a path
        assert_eq!(t("accept: Too many open files"), c("", Read, EMFILE));
        assert_eq!(
            t("dd: error writing 'out': File too large"),
            c("", Read, EFBIG)
        );
    }

    #[test]
    fn lines_are_bounded_split_and_counted() {
        let mut s = Scanner::default();
        s.feed(b"cat: /a: No such file or direc");
        s.feed(b"tory\ncat: /a: No such file or directory\n");
        let mut long = vec![b'x'; LINE_MAX + 10];
        long.extend_from_slice(b" cat: /b: No such file or directory\n");
        s.feed(&long);
        for i in 0..200 {
            s.feed(format!("cat: /many/{i}: No such file or directory\n").as_bytes());
        }
        s.feed(b"cat: rel/../c: Permission denied");
        let seen = s.finish(Path::new("/repo"));
        assert_eq!(seen.len(), PATHS_MAX);
        assert_eq!(seen[0].path, Path::new("/a"));
        assert_eq!(seen[0].count, 2);
        assert!(seen.iter().all(|p| p.path != Path::new("/b")));
        let mut s = Scanner::default();
        s.feed(b"cat: rel/../c: Permission denied");
        assert_eq!(s.finish(Path::new("/repo"))[0].path, Path::new("/repo/c"));
    }
}

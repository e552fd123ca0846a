//! The processes of a sandbox, and a scan of their environment, memory and files for a value.

use std::path::{Path, PathBuf};

/// The pid namespace of a process (the target of `/proc/PID/ns/pid`).
pub fn pid_ns(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

fn parent(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // after the command's name in parentheses: state, then ppid
    s[s.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn descendants(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for t in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// The processes of the sandbox started under `root` (a process outside it, e.g. the
/// sandbox-run the test started): every process of the run's pid namespace (the first
/// descendant in another namespace than the test's is its pid 1), and pid 1's parent, the
/// launcher's stage 2. The supervisor, which holds the real values by design, is not one.
pub fn sandbox_pids(root: i32) -> Vec<i32> {
    let ours = pid_ns(std::process::id() as i32);
    let all = descendants(root);
    let Some(init) = all.iter().copied().find(|p| {
        let ns = pid_ns(*p);
        ns.is_some() && ns != ours
    }) else {
        return vec![];
    };
    let ns = pid_ns(init);
    let mut pids: Vec<i32> = all.into_iter().filter(|p| pid_ns(*p) == ns).collect();
    if let Some(stage2) = parent(init) {
        pids.push(stage2);
    }
    pids
}

/// Where `needle` occurs in one process: its environment, its command line, and every
/// readable region of its memory (as bytes, and as UTF-16, the other form of a JavaScript
/// string). Regions it cannot read are counted in `unreadable`.
#[derive(Debug, Default)]
pub struct Scan {
    pub hits: Vec<String>,
    pub bytes_read: u64,
    pub unreadable: usize,
}

/// Does `hay` hold `needle`? (glibc's memmem: gigabytes of memory are scanned, and the
/// tests are built without optimisations.)
fn find(hay: &[u8], needle: &[u8]) -> bool {
    // SAFETY: both pointers and lengths come from live slices; memmem only reads them.
    !needle.is_empty()
        && !unsafe {
            libc::memmem(
                hay.as_ptr().cast(),
                hay.len(),
                needle.as_ptr().cast(),
                needle.len(),
            )
        }
        .is_null()
}

pub fn scan_process(pid: i32, needle: &str) -> Scan {
    use std::os::unix::fs::FileExt;
    let mut s = Scan::default();
    let forms: Vec<Vec<u8>> = vec![
        needle.as_bytes().to_vec(),
        needle
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect(),
    ];
    for f in ["environ", "cmdline"] {
        match std::fs::read(format!("/proc/{pid}/{f}")) {
            Ok(b) if forms.iter().any(|n| find(&b, n)) => s.hits.push(format!("{pid}: {f}")),
            Ok(_) => {}
            Err(_) => s.unreadable += 1,
        }
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        s.unreadable += 1;
        return s;
    };
    let overlap = forms[1].len();
    let mut buf = vec![0u8; 4 << 20];
    for m in maps.lines() {
        let mut w = m.split_whitespace();
        let (Some(range), Some(perms)) = (w.next(), w.next()) else {
            continue;
        };
        if !perms.starts_with('r') || m.ends_with("[vvar]") || m.ends_with("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut at = a;
        while at < b {
            let n = ((b - at) as usize).min(buf.len());
            match mem.read_at(&mut buf[..n], at) {
                Ok(0) | Err(_) => {
                    s.unreadable += 1;
                    break;
                }
                Ok(got) => {
                    s.bytes_read += got as u64;
                    if forms.iter().any(|f| find(&buf[..got], f)) {
                        s.hits.push(format!("{pid}: memory {m}"));
                        break;
                    }
                    // the next read overlaps this one by a needle's length
                    at += if got > overlap && at + (got as u64) < b {
                        (got - overlap) as u64
                    } else {
                        got as u64
                    };
                }
            }
        }
    }
    s
}

/// The name and command line of a process, for messages.
pub fn describe(pid: i32) -> String {
    let c = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let c = String::from_utf8_lossy(&c).replace('\0', " ");
    format!("{pid} ({})", c.chars().take(120).collect::<String>().trim())
}

/// The value of `name` in a process's environment.
pub fn environ_value(pid: i32, name: &str) -> Option<String> {
    let e = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    e.split(|b| *b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{name}=")).map(|v| v.to_string())
    })
}

/// Every regular file under `dir` (no links followed) whose bytes hold `needle`.
pub fn files_with(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file()
                && std::fs::read(e.path()).is_ok_and(|b| find(&b, needle.as_bytes()))
            {
                hits.push(e.path());
            }
        }
    }
    hits
}

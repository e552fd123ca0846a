//! `changes diff` costs the reviewer's machine memory linear in the files, whatever the
//! sandboxed command wrote: a 20,000-line file rewritten whole, and 20,000 random lines of
//! four kinds against as many (a shortest script of thousands of changes, where the search's
//! cost bound cuts in), each diffed by the binary in well under 100 MB, measured from outside
//! as the child's peak resident size. Alone in its file: `RUSAGE_CHILDREN` counts every
//! child this test binary waited for.

mod common;

use common::*;
use sandbox_run::changes::store::{self, Meta};
use sandbox_run::changes::{Changeset, Entry, Kind, What};
use sandbox_run::hostfs::Tree;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const MAX_RSS_BYTES: i64 = 100 << 20;

/// The peak resident size of the largest child waited for so far, in bytes.
fn children_max_rss() -> i64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer we own; it is zeroed beforehand.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr()) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    // SAFETY: initialized above (zeroed, then filled by a successful getrusage).
    unsafe { ru.assume_init() }.ru_maxrss * 1024
}

fn keep(f: &Fixture, name: &str, old: &str, new: &str) -> String {
    let repo = f.path(&format!("{name}/repo"));
    let upper = f.path(&format!("{name}/upper"));
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::write(repo.join("big.txt"), old).unwrap();
    std::fs::write(upper.join("big.txt"), new).unwrap();
    let cs = Changeset {
        roots: vec![repo],
        entries: vec![Entry {
            root: 0,
            path: "big.txt".into(),
            kind: Kind::Modified,
            what: What::File,
            mode: 0o644,
            bytes: new.len() as u64,
            refused: None,
        }],
    };
    store::keep(&cs, &[Tree::open(&upper).unwrap()], Meta::default()).unwrap()
}

/// `changes diff ID`: its output, how long it took and the children's peak RSS after it.
fn diff(state: &Path, id: &str) -> (Run, Duration, i64) {
    let mut c = Command::new(BIN);
    c.args(["changes", "diff", id])
        .env("XDG_STATE_HOME", state)
        .env("LC_ALL", "C");
    let t = Instant::now();
    let r = run_command(c, slack_secs(120));
    (r, t.elapsed(), children_max_rss())
}

fn random_lines(seed: &mut u64, n: usize, kinds: u64) -> String {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            format!("a line of kind {}\n", *seed % kinds)
        })
        .collect()
}

#[test]
fn a_huge_rewrite_is_diffed_in_bounded_memory() {
    let f = Fixture::new("diff-memory");
    let state = f.path("state");
    std::fs::create_dir_all(&state).unwrap();
    std::env::set_var("XDG_STATE_HOME", &state);
    assert!(
        children_max_rss() < MAX_RSS_BYTES,
        "a child before the test was large already"
    );

    let old: String = (0..20_000)
        .map(|i| format!("the old line number {i}\n"))
        .collect();
    let new: String = (0..20_000)
        .map(|i| format!("the new line number {i}\n"))
        .collect();
    let id = keep(&f, "rewrite", &old, &new);
    let (r, took, rss) = diff(&state, &id);
    r.assert_code(0);
    // control: the diff is really there, whole
    assert!(
        r.stdout.contains("@@ -1,20000 +1,20000 @@\n") && r.stdout.lines().count() > 40_000,
        "{}",
        &r.stdout[..r.stdout.len().min(400)]
    );
    eprintln!("whole rewrite of 20,000 lines: {took:?}, children's peak RSS {rss} bytes");
    assert!(rss < MAX_RSS_BYTES, "changes diff took {rss} bytes");

    let mut seed = 0x5851f42d4c957f2du64;
    let (old, new) = (
        random_lines(&mut seed, 20_000, 4),
        random_lines(&mut seed, 20_000, 4),
    );
    let id = keep(&f, "random", &old, &new);
    let (r, took, rss) = diff(&state, &id);
    r.assert_code(0);
    assert!(r.stdout.starts_with("diff --git a/big.txt b/big.txt\n"));
    eprintln!("20,000 random lines of 4 kinds: {took:?}, children's peak RSS {rss} bytes");
    assert!(rss < MAX_RSS_BYTES, "changes diff took {rss} bytes");
    assert!(
        took < slack_secs(60),
        "changes diff took {took:?}: the search's cost bound did not hold"
    );
}

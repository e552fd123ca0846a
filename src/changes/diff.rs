//! A unified diff of two texts, in the form `git diff` prints the body of one file: hunks
//! with 3 lines of context, `\ No newline at end of file` after a last line without one.
//!
//! The edit script is Myers' O(ND) difference in linear space (the divide-and-conquer
//! "middle snake" search that git's xdiff also uses, `xdl_recs_cmp`): memory is linear in
//! the number of lines, whatever the texts. Time is bounded as in xdiff: past a cost of
//! about the square root of the number of lines (at least 256) one search stops at the
//! diagonal that got furthest and splits there, so a huge rewrite gives a correct diff at
//! once rather than a minimal one late. Lines found in only one of the texts are changed
//! whatever the script, so they are set aside before the search (as xdiff does), which
//! makes a whole rewrite cost nothing. The script is minimal when no search hit the bound;
//! where several minimal scripts exist, the one chosen may place a change differently from
//! git's (git also slides changes to fit the indentation).

use std::collections::HashMap;

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Eq(usize, usize),
    Del(usize),
    Ins(usize),
}

/// The least cost one search may reach before it settles for a split that is not minimal.
const MIN_COST: usize = 256;

/// `text` split after each `\n` (the last line may have none).
pub fn lines(text: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in text.iter().enumerate() {
        if *b == b'\n' {
            out.push(&text[start..=i]);
            start = i + 1;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Does `data` look binary to git (a NUL in its first 8000 bytes)?
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

/// The edit script from `a` to `b`: deletions before insertions in each change, as git
/// prints them.
fn script(a: &[&[u8]], b: &[&[u8]]) -> Vec<Edit> {
    script_bounded(a, b, None)
}

/// [`script`], the searches' cost bound set to `max_cost` if given (the tests' way to
/// reach the bound on small inputs).
fn script_bounded(a: &[&[u8]], b: &[&[u8]], max_cost: Option<usize>) -> Vec<Edit> {
    let (del, ins) = changed(a, b, max_cost);
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && del[i] {
            out.push(Edit::Del(i));
            i += 1;
        } else if j < b.len() && ins[j] {
            out.push(Edit::Ins(j));
            j += 1;
        } else {
            out.push(Edit::Eq(i, j));
            i += 1;
            j += 1;
        }
    }
    out
}

/// Which lines of `a` are removed and which of `b` added.
fn changed<'t>(a: &[&'t [u8]], b: &[&'t [u8]], max_cost: Option<usize>) -> (Vec<bool>, Vec<bool>) {
    // Each distinct line becomes a number, and how often it occurs on each side is counted.
    let mut ids: HashMap<&'t [u8], usize> = HashMap::new();
    let mut count: Vec<[u32; 2]> = Vec::new();
    let mut number = |line: &'t [u8], side: usize, count: &mut Vec<[u32; 2]>| {
        let next = ids.len();
        let id = *ids.entry(line).or_insert(next);
        if id == count.len() {
            count.push([0, 0]);
        }
        count[id][side] += 1;
        id as u32
    };
    let na: Vec<u32> = a.iter().map(|l| number(l, 0, &mut count)).collect();
    let nb: Vec<u32> = b.iter().map(|l| number(l, 1, &mut count)).collect();
    drop(ids);
    let (mut del, mut ins) = (vec![true; a.len()], vec![true; b.len()]);
    // Only lines found on both sides can be kept: the search runs on those, and maps back.
    let ka: Vec<usize> = (0..a.len())
        .filter(|&i| count[na[i] as usize][1] > 0)
        .collect();
    let kb: Vec<usize> = (0..b.len())
        .filter(|&j| count[nb[j] as usize][0] > 0)
        .collect();
    let sa: Vec<u32> = ka.iter().map(|&i| na[i]).collect();
    let sb: Vec<u32> = kb.iter().map(|&j| nb[j]).collect();
    let (mut da, mut db) = (vec![true; sa.len()], vec![true; sb.len()]);
    let mut search = Search::new(&sa, &sb);
    if let Some(c) = max_cost {
        search.max_cost = c;
    }
    search.run(&mut da, &mut db);
    for (k, &i) in ka.iter().enumerate() {
        del[i] = da[k];
    }
    for (k, &j) in kb.iter().enumerate() {
        ins[j] = db[k];
    }
    (del, ins)
}

/// The linear-space search over two sequences of line numbers.
struct Search<'a> {
    a: &'a [u32],
    b: &'a [u32],
    /// The furthest x on each diagonal, forward and backward, offset by `off`.
    fwd: Vec<isize>,
    bwd: Vec<isize>,
    off: isize,
    max_cost: usize,
}

impl<'a> Search<'a> {
    fn new(a: &'a [u32], b: &'a [u32]) -> Search<'a> {
        let diags = a.len() + b.len() + 3;
        let mut root = 1;
        while root * root < diags {
            root *= 2;
        }
        Search {
            a,
            b,
            fwd: vec![0; 2 * diags + 1],
            bwd: vec![0; 2 * diags + 1],
            off: diags as isize,
            max_cost: root.max(MIN_COST),
        }
    }

    /// Marks as kept (false) the lines of the script in `del` (of `a`) and `ins` (of `b`),
    /// which start all true. The ranges still to compare are kept on a stack, not by
    /// recursion, so no input can make the call stack deep.
    fn run(&mut self, del: &mut [bool], ins: &mut [bool]) {
        let mut todo = vec![(0, self.a.len(), 0, self.b.len())];
        while let Some((mut x0, mut x1, mut y0, mut y1)) = todo.pop() {
            while x0 < x1 && y0 < y1 && self.a[x0] == self.b[y0] {
                (del[x0], ins[y0]) = (false, false);
                x0 += 1;
                y0 += 1;
            }
            while x0 < x1 && y0 < y1 && self.a[x1 - 1] == self.b[y1 - 1] {
                x1 -= 1;
                y1 -= 1;
                (del[x1], ins[y1]) = (false, false);
            }
            if x0 == x1 || y0 == y1 {
                continue; // what is left is all removed or all added
            }
            let (mut x, mut y) = self.split(x0, x1, y0, y1);
            if (x, y) == (x0, y0) || (x, y) == (x1, y1) {
                // Never expected; but a split that leaves a box whole would loop forever:
                // one line removed instead (a correct script, perhaps not minimal).
                (x, y) = (x0 + 1, y0);
            }
            todo.push((x, x1, y, y1));
            todo.push((x0, x, y0, y));
        }
    }

    /// A point (x, y) on an edit script of the box [x0, x1) x [y0, y1) that both halves
    /// make progress from: the middle of a shortest script, or past the cost bound, the end
    /// of the snake that got furthest. Both texts are non-empty and differ at both ends.
    fn split(&mut self, x0: usize, x1: usize, y0: usize, y1: usize) -> (usize, usize) {
        let (a, b, off) = (self.a, self.b, self.off);
        let (x0, x1, y0, y1) = (x0 as isize, x1 as isize, y0 as isize, y1 as isize);
        let (kmin, kmax) = (x0 - y1, x1 - y0);
        let (fmid, bmid) = (x0 - y0, x1 - y1);
        let odd = (fmid - bmid) & 1 != 0;
        let (mut fmin, mut fmax, mut bmin, mut bmax) = (fmid, fmid, bmid, bmid);
        let at = |k: isize| (k + off) as usize;
        self.fwd[at(fmid)] = x0;
        self.bwd[at(bmid)] = x1;
        for cost in 1.. {
            // forward: one more difference on each diagonal
            if fmin > kmin {
                fmin -= 1;
                self.fwd[at(fmin - 1)] = -1;
            } else {
                fmin += 1;
            }
            if fmax < kmax {
                fmax += 1;
                self.fwd[at(fmax + 1)] = -1;
            } else {
                fmax -= 1;
            }
            let mut d = fmax;
            while d >= fmin {
                let (left, right) = (self.fwd[at(d - 1)], self.fwd[at(d + 1)]);
                let mut x = if left >= right { left + 1 } else { right };
                let mut y = x - d;
                while x < x1 && y < y1 && a[x as usize] == b[y as usize] {
                    x += 1;
                    y += 1;
                }
                self.fwd[at(d)] = x;
                if odd && bmin <= d && d <= bmax && self.bwd[at(d)] <= x {
                    return (x as usize, y as usize);
                }
                d -= 2;
            }
            // backward
            if bmin > kmin {
                bmin -= 1;
                self.bwd[at(bmin - 1)] = isize::MAX;
            } else {
                bmin += 1;
            }
            if bmax < kmax {
                bmax += 1;
                self.bwd[at(bmax + 1)] = isize::MAX;
            } else {
                bmax -= 1;
            }
            let mut d = bmax;
            while d >= bmin {
                let (left, right) = (self.bwd[at(d - 1)], self.bwd[at(d + 1)]);
                let mut x = if left < right { left } else { right - 1 };
                let mut y = x - d;
                while x > x0 && y > y0 && a[x as usize - 1] == b[y as usize - 1] {
                    x -= 1;
                    y -= 1;
                }
                self.bwd[at(d)] = x;
                if !odd && fmin <= d && d <= fmax && x <= self.fwd[at(d)] {
                    return (x as usize, y as usize);
                }
                d -= 2;
            }
            if cost >= self.max_cost {
                return self.furthest(x0, x1, y0, y1, (fmin, fmax), (bmin, bmax));
            }
        }
        unreachable!("the searches meet by cost x1 - x0 + y1 - y0")
    }

    /// Past the cost bound: the end of the forward or backward snake that went furthest
    /// into the box, which is on some edit script and leaves both halves smaller.
    fn furthest(
        &self,
        x0: isize,
        x1: isize,
        y0: isize,
        y1: isize,
        (fmin, fmax): (isize, isize),
        (bmin, bmax): (isize, isize),
    ) -> (usize, usize) {
        let at = |k: isize| (k + self.off) as usize;
        // Each diagonal's furthest point, brought back into the box along its edge.
        let mut best_f = (-1, 0, 0);
        for d in (fmin..=fmax).rev().step_by(2) {
            let mut x = self.fwd[at(d)].min(x1);
            let mut y = x - d;
            if y > y1 {
                (x, y) = (y1 + d, y1);
            }
            if x + y > best_f.0 {
                best_f = (x + y, x, y);
            }
        }
        let mut best_b = (isize::MAX, 0, 0);
        for d in (bmin..=bmax).rev().step_by(2) {
            let mut x = self.bwd[at(d)].max(x0);
            let mut y = x - d;
            if y < y0 {
                (x, y) = (y0 + d, y0);
            }
            if x + y < best_b.0 {
                best_b = (x + y, x, y);
            }
        }
        let f_gain = best_f.0 - (x0 + y0);
        let b_gain = (x1 + y1) - best_b.0;
        let (_, x, y) = if f_gain >= b_gain { best_f } else { best_b };
        (x as usize, y as usize)
    }
}

/// `start,count` as a hunk header shows it (`,1` left out; an empty range names the line
/// before it).
fn range(start: usize, count: usize) -> String {
    match count {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{count}", start + 1),
    }
}

fn push_line(out: &mut Vec<u8>, sign: u8, line: &[u8]) {
    out.push(sign);
    out.extend_from_slice(line);
    if !line.ends_with(b"\n") {
        out.extend_from_slice(b"\n\\ No newline at end of file\n");
    }
}

/// The hunks (from the first `@@`) turning `a` into `b`, `ctx` lines of context; empty when
/// they are the same.
pub fn hunks(a: &[u8], b: &[u8], ctx: usize) -> Vec<u8> {
    let (la, lb) = (lines(a), lines(b));
    let edits = script(&la, &lb);
    let mut out = Vec::new();
    let changed: Vec<usize> = edits
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches!(e, Edit::Eq(..)))
        .map(|(i, _)| i)
        .collect();
    // where the next hunk starts in each text: the lines before it, counted as we go
    let (mut sa, mut sb, mut counted) = (0, 0, 0);
    let mut i = 0;
    while i < changed.len() {
        // one hunk: changes no more than 2*ctx equal lines apart
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] - changed[j] <= 2 * ctx + 1 {
            j += 1;
        }
        let from = changed[i].saturating_sub(ctx);
        let to = (changed[j] + ctx + 1).min(edits.len());
        for e in &edits[counted..from] {
            match e {
                Edit::Eq(..) => {
                    sa += 1;
                    sb += 1
                }
                Edit::Del(_) => sa += 1,
                Edit::Ins(_) => sb += 1,
            }
        }
        let part = &edits[from..to];
        let ca = part.iter().filter(|e| !matches!(e, Edit::Ins(_))).count();
        let cb = part.iter().filter(|e| !matches!(e, Edit::Del(_))).count();
        out.extend_from_slice(format!("@@ -{} +{} @@\n", range(sa, ca), range(sb, cb)).as_bytes());
        for e in part {
            match *e {
                Edit::Eq(x, _) => push_line(&mut out, b' ', la[x]),
                Edit::Del(x) => push_line(&mut out, b'-', la[x]),
                Edit::Ins(y) => push_line(&mut out, b'+', lb[y]),
            }
        }
        (sa, sb, counted) = (sa + ca, sb + cb, to);
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(a: &str, b: &str) -> String {
        String::from_utf8(hunks(a.as_bytes(), b.as_bytes(), 3)).unwrap()
    }

    #[test]
    fn hunks_as_git_prints_them() {
        assert_eq!(h("a\n", "a\n"), "");
        assert_eq!(h("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(h("a\n", ""), "@@ -1 +0,0 @@\n-a\n");
        assert_eq!(
            h(
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n",
                "1\n2\n3\n4\nfive\n6\n7\n8\n9\n"
            ),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
        // two changes far apart: two hunks
        let a: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let b: String = (1..=20)
            .map(|i| match i {
                2 => "two\n".to_string(),
                18 => "eighteen\n".to_string(),
                _ => format!("{i}\n"),
            })
            .collect();
        assert_eq!(
            h(&a, &b),
            "@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"
        );
        // no newline at the end
        assert_eq!(
            h("a\nb", "a\nc"),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn the_script_is_shortest() {
        let a = lines(b"a\nb\nc\na\nb\nb\na\n");
        let b = lines(b"c\nb\na\nb\na\nc\n");
        let s = script(&a, &b);
        assert_eq!(s.iter().filter(|e| !matches!(e, Edit::Eq(..))).count(), 5);
        assert_eq!(replay(&a, &b, &s), b);
    }

    /// What the script makes of `a`, checking that it walks both texts in order.
    fn replay<'a>(a: &[&'a [u8]], b: &[&'a [u8]], s: &[Edit]) -> Vec<&'a [u8]> {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        for e in s {
            match *e {
                Edit::Eq(x, y) => {
                    assert_eq!((x, y), (i, j));
                    assert_eq!(a[x], b[y]);
                    out.push(a[x]);
                    (i, j) = (i + 1, j + 1);
                }
                Edit::Del(x) => {
                    assert_eq!(x, i);
                    i += 1;
                }
                Edit::Ins(y) => {
                    assert_eq!(y, j);
                    out.push(b[y]);
                    j += 1;
                }
            }
        }
        assert_eq!((i, j), (a.len(), b.len()));
        out
    }

    /// The length of the longest common subsequence, by the quadratic table.
    fn lcs(a: &[&[u8]], b: &[&[u8]]) -> usize {
        let mut row = vec![0usize; b.len() + 1];
        for x in a {
            let mut diag = 0;
            for (j, y) in b.iter().enumerate() {
                let up = row[j + 1];
                row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
                diag = up;
            }
        }
        row[b.len()]
    }

    /// A small random text over a few distinct lines (so that many scripts are shortest).
    fn random_text(seed: &mut u64, max: u64, alphabet: u64) -> Vec<u8> {
        // `max` past 20,000: exactly 20,000 lines
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let n = if max > 20_000 { 20_000 } else { next() % max };
        let mut t = Vec::new();
        for _ in 0..n {
            t.push(b'a' + (next() % alphabet) as u8);
            t.push(b'\n');
        }
        t
    }

    #[test]
    fn random_scripts_are_correct_and_shortest_and_correct_past_the_bound() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for round in 0..3000 {
            let (ta, tb) = (
                random_text(&mut seed, 60, 2 + round % 6),
                random_text(&mut seed, 60, 2 + round % 6),
            );
            let (a, b) = (lines(&ta), lines(&tb));
            let s = script(&a, &b);
            assert_eq!(replay(&a, &b, &s), b, "{ta:?} {tb:?}");
            let kept = s.iter().filter(|e| matches!(e, Edit::Eq(..))).count();
            assert_eq!(kept, lcs(&a, &b), "not shortest: {ta:?} {tb:?}");
            // a search cut short still gives a script that turns a into b
            for bound in [1, 2, 5] {
                let s = script_bounded(&a, &b, Some(bound));
                assert_eq!(replay(&a, &b, &s), b, "bound {bound}: {ta:?} {tb:?}");
            }
        }
    }

    #[test]
    fn a_whole_rewrite_is_quick_and_small() {
        let a: String = (0..20_000).map(|i| format!("old line {i}\n")).collect();
        let b: String = (0..20_000).map(|i| format!("new line {i}\n")).collect();
        let h = hunks(a.as_bytes(), b.as_bytes(), 3);
        assert!(h.starts_with(b"@@ -1,20000 +1,20000 @@\n-old line 0\n"));
        // 20,000 random lines of 4 kinds against as many: every line is on both sides, the
        // shortest script costs thousands, and the bound cuts the searches short
        let mut seed = 0x2545f4914f6cdd1du64;
        let (ta, tb) = (
            random_text(&mut seed, u64::MAX, 4),
            random_text(&mut seed, u64::MAX, 4),
        );
        let (a, b) = (lines(&ta), lines(&tb));
        let s = script(&a, &b);
        assert_eq!(replay(&a, &b, &s), b);
    }

    #[test]
    fn binary_is_a_nul_near_the_start() {
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary(b"text\n"));
    }
}

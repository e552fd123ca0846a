//! A unified diff of two texts, as `git diff` prints the body of one file: Myers' O(ND)
//! shortest edit script over lines, hunks with 3 lines of context.

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Eq(usize, usize),
    Del(usize),
    Ins(usize),
}

/// Beyond this many differences the lines are shown as removed and added whole (the
/// search's memory grows with the square of the differences).
const MAX_D: usize = 2000;

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

/// The shortest edit script from `a` to `b` (common prefix and suffix first).
fn script(a: &[&[u8]], b: &[&[u8]]) -> Vec<Edit> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<Edit> = (0..pre).map(|i| Edit::Eq(i, i)).collect();
    let middle = myers(ma, mb).unwrap_or_else(|| {
        (0..ma.len())
            .map(Edit::Del)
            .chain((0..mb.len()).map(Edit::Ins))
            .collect()
    });
    out.extend(middle.into_iter().map(|e| match e {
        Edit::Eq(i, j) => Edit::Eq(i + pre, j + pre),
        Edit::Del(i) => Edit::Del(i + pre),
        Edit::Ins(j) => Edit::Ins(j + pre),
    }));
    let (ea, eb) = (a.len() - suf, b.len() - suf);
    out.extend((0..suf).map(|k| Edit::Eq(ea + k, eb + k)));
    out
}

/// Myers' greedy forward search, keeping each round's frontier to walk back; `None` beyond
/// [`MAX_D`] differences.
fn myers(a: &[&[u8]], b: &[&[u8]]) -> Option<Vec<Edit>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m) as usize;
    let off = max as isize + 1;
    let mut v = vec![0isize; 2 * max + 3];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let mut found = None;
    'outer: for d in 0..=max.min(MAX_D) as isize {
        for k in (-d..=d).step_by(2) {
            let idx = (k + off) as usize;
            let mut x = if k == -d || (k != d && v[idx - 1] < v[idx + 1]) {
                v[idx + 1]
            } else {
                v[idx - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[idx] = x;
            if x >= n && y >= m {
                trace.push(v.clone());
                found = Some(d);
                break 'outer;
            }
        }
        trace.push(v.clone());
    }
    let dmax = found?;
    // Walk back from (n, m).
    let mut edits = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (1..=dmax).rev() {
        let v = &trace[(d - 1) as usize];
        let k = x - y;
        let idx = |k: isize| (k + off) as usize;
        let prev_k = if k == -d || (k != d && v[idx(k - 1)] < v[idx(k + 1)]) {
            k + 1
        } else {
            k - 1
        };
        let px = v[idx(prev_k)];
        let py = px - prev_k;
        while x > px && y > py {
            x -= 1;
            y -= 1;
            edits.push(Edit::Eq(x as usize, y as usize));
        }
        if x == px {
            y -= 1;
            edits.push(Edit::Ins(y as usize));
        } else {
            x -= 1;
            edits.push(Edit::Del(x as usize));
        }
    }
    while x > 0 && y > 0 {
        x -= 1;
        y -= 1;
        edits.push(Edit::Eq(x as usize, y as usize));
    }
    edits.reverse();
    Some(edits)
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
    let mut i = 0;
    while i < changed.len() {
        // one hunk: changes no more than 2*ctx equal lines apart
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] - changed[j] <= 2 * ctx + 1 {
            j += 1;
        }
        let from = changed[i].saturating_sub(ctx);
        let to = (changed[j] + ctx + 1).min(edits.len());
        let part = &edits[from..to];
        // where the hunk starts in each text: the lines before it
        let (mut sa, mut sb) = (0, 0);
        for e in &edits[..from] {
            match e {
                Edit::Eq(..) => {
                    sa += 1;
                    sb += 1
                }
                Edit::Del(_) => sa += 1,
                Edit::Ins(_) => sb += 1,
            }
        }
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
        // replaying the script gives b
        let mut out = Vec::new();
        for e in s {
            match e {
                Edit::Eq(_, j) | Edit::Ins(j) => out.push(b[j]),
                Edit::Del(_) => {}
            }
        }
        assert_eq!(out, b);
    }

    #[test]
    fn binary_is_a_nul_near_the_start() {
        assert!(is_binary(b"a\0b"));
        assert!(!is_binary(b"text\n"));
    }
}

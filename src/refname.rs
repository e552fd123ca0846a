//! git's rules for reference names (git-check-ref-format(1)), and the contents git accepts in
//! `HEAD` and `packed-refs`. A ref name that breaks them is not one git would have written:
//! whatever made it was not git, and the host's git must not read it.

/// Does `name` (a full name such as `refs/heads/main`) pass `git check-ref-format`?
pub fn valid(name: &[u8]) -> bool {
    if name.is_empty() || name == b"@" || name.ends_with(b"/") || name.ends_with(b".") {
        return false;
    }
    if !name.contains(&b'/') {
        return false;
    }
    if name
        .windows(2)
        .any(|w| w == b".." || w == b"@{" || w == b"//")
    {
        return false;
    }
    let bad = |c: &u8| *c < 0x20 || *c == 0x7f || b" ~^:?*[\\".contains(c);
    if name.iter().any(bad) {
        return false;
    }
    name.split(|c| *c == b'/').all(component)
}

/// One component of a ref name: not empty, not starting with `.`, not ending with `.lock`.
pub fn component(c: &[u8]) -> bool {
    !c.is_empty() && !c.starts_with(b".") && !c.ends_with(b".lock")
}

/// An object id as git writes it: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
pub fn object_id(s: &[u8]) -> bool {
    (s.len() == 40 || s.len() == 64) && s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The content of a `HEAD` git would write: `ref: refs/...` (a valid name under `refs/`) or a
/// detached object id, with one optional newline at the end.
pub fn head(content: &[u8]) -> bool {
    let c = content.strip_suffix(b"\n").unwrap_or(content);
    match c.strip_prefix(b"ref: ") {
        Some(target) => target.starts_with(b"refs/") && valid(target),
        None => object_id(c),
    }
}

/// The content of a `packed-refs` git would write: an optional `# pack-refs with:` header,
/// then `<oid> <refname>` lines, each optionally followed by a `^<oid>` line (the peeled tag).
pub fn packed_refs(content: &[u8]) -> bool {
    let body = match content.strip_suffix(b"\n") {
        Some(b) => b,
        None if content.is_empty() => return true,
        None => return false,
    };
    let mut last_was_ref = false;
    for (i, line) in body.split(|c| *c == b'\n').enumerate() {
        if i == 0 && line.starts_with(b"# pack-refs with:") {
            continue;
        }
        if let Some(peeled) = line.strip_prefix(b"^") {
            if !last_was_ref || !object_id(peeled) {
                return false;
            }
            last_was_ref = false;
            continue;
        }
        let Some(sp) = line.iter().position(|c| *c == b' ') else {
            return false;
        };
        let (oid, name) = (&line[..sp], &line[sp + 1..]);
        if !object_id(oid) || !name.starts_with(b"refs/") || !valid(name) {
            return false;
        }
        last_was_ref = true;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_follow_check_ref_format() {
        for ok in [
            "refs/heads/main",
            "refs/heads/feature/x-1",
            "refs/tags/v1.0",
            "refs/remotes/origin/HEAD",
            // shell syntax is a valid ref name: it is the reflog that must not land in a file
            // a link names, not the name that must be refused
            "refs/heads/p$(touch${IFS}/tmp/x)",
            "refs/heads/caf\u{e9}",
        ] {
            assert!(valid(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "@",
            "main",
            "refs/heads/",
            "refs//heads",
            "/refs/heads/x",
            "refs/heads/x.",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/a..b",
            "refs/heads/a@{1}",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[b",
            "refs/heads/a\\b",
            "refs/heads/a\nb",
            "refs/heads/a\x7f",
        ] {
            assert!(!valid(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn head_is_a_ref_under_refs_or_an_object_id() {
        let oid = "0123456789abcdef0123456789abcdef01234567";
        assert!(head(b"ref: refs/heads/main\n"));
        assert!(head(b"ref: refs/heads/main"));
        assert!(head(format!("{oid}\n").as_bytes()));
        assert!(head(&[b'a'; 64]));
        for bad in [
            &b"ref: ../../config\n"[..],
            b"ref: refs/heads/../../x\n",
            b"ref: HEAD\n",
            b"ref: refs/heads/main\n\n",
            b"ref:refs/heads/main\n",
            b"0123\n",
            b"",
            b"ref: refs/heads/x\nextra\n",
        ] {
            assert!(!head(bad), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(!head(oid.to_uppercase().as_bytes()));
    }

    #[test]
    fn packed_refs_lines_are_checked() {
        let a = "0123456789abcdef0123456789abcdef01234567";
        let good = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{a} refs/heads/main\n{a} refs/tags/v1\n^{a}\n"
        );
        assert!(packed_refs(good.as_bytes()));
        assert!(packed_refs(b""));
        for bad in [
            format!("{a} refs/heads/a..b\n"),
            format!("{a} HEAD\n"),
            format!("^{a}\n"),
            format!("{a} refs/heads/x"),
            format!("{a}  refs/heads/x\n"),
            format!("# a comment later\n{a} refs/heads/x\n# x\n"),
        ] {
            assert!(!packed_refs(bad.as_bytes()), "{bad:?}");
        }
    }
}

//! Text that the sandboxed command chose (a file name, a refusal's reason, a line it wrote),
//! made safe to show a person: every character that does not show itself is written as an
//! escape, so what a terminal shows is what the bytes are.
//!
//! What passes as is: the printable characters, that is every character whose Unicode
//! general category is not one of Cc (controls: C0, DEL, C1), Cf (format: zero-width
//! characters, bidi marks, overrides and isolates, the soft hyphen, the byte-order mark),
//! Zl, Zp (line and paragraph separators), Zs other than the ASCII space (spaces that look
//! like one but are not), Co (private use), Cs (surrogates) or Cn (unassigned in the Unicode
//! version of [`table`], so of unknown meaning), and that is not a Default_Ignorable_Code_Point
//! (what a renderer draws as nothing: beyond those categories, the Hangul fillers, the
//! combining grapheme joiner, the variation selectors). So `café.txt` and `報告.txt` show as
//! they are, and neither `safe\u{200b}.txt` nor `safe\u{3164}.txt` can pass for `safe.txt`.
//!
//! The escapes: `\n`, `\t`, `\r` for those three, `\u{hex}` for any other escaped
//! character, `\xHH` for each byte that is not part of valid UTF-8, and `\\` for the
//! backslash itself, so every backslash shown begins an escape and the bytes can be read
//! back exactly.

mod table;

pub use table::UNICODE_VERSION;

/// Does `c` show something other than itself (or nothing), so that it must be escaped?
pub fn hides(c: char) -> bool {
    let c = c as u32;
    // Printable ASCII is the common case: no search.
    if (0x20..0x7f).contains(&c) {
        return false;
    }
    table::ESCAPED
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Appends the escape of `c` (whether or not it [`hides`]): `\n`, `\t`, `\r`, `\\`, `\u{hex}`.
pub fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\\' => out.push_str("\\\\"),
        _ => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// The escape of one character, as [`push_escape`] writes it.
pub fn escape(c: char) -> String {
    let mut s = String::new();
    push_escape(&mut s, c);
    s
}

/// Appends `c` as shown: itself, or its escape when it [`hides`] or is a backslash, unless
/// `keep` lets it through (a diff's newlines and tabs).
fn push_char(out: &mut String, c: char, keep: &[char]) {
    if keep.contains(&c) || !(hides(c) || c == '\\') {
        out.push(c);
    } else {
        push_escape(out, c);
    }
}

/// `s` as shown: see the module's notes.
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_char(&mut out, c, &[]);
    }
    out
}

/// `s` as shown, but the characters of `keep` let through as they are (a backslash, for a
/// line whose names are escaped already).
pub fn text_keeping(s: &str, keep: &[char]) -> String {
    bytes_keeping(s.as_bytes(), keep)
}

/// `b` as shown: valid UTF-8 as [`text`], every other byte as `\xHH`; `keep` names the
/// characters let through as they are.
pub fn bytes_keeping(b: &[u8], keep: &[char]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c, keep);
        }
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out
}

/// `b` as shown: valid UTF-8 as [`text`], every other byte as `\xHH`.
pub fn bytes(b: &[u8]) -> String {
    bytes_keeping(b, &[])
}

/// A path as shown, from its bytes (not lossily: an invalid byte is `\xHH`, never U+FFFD).
pub fn path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    bytes(p.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_hides_is_escaped_and_the_rest_passes() {
        for (c, shown) in [
            ('\u{200b}', "\\u{200b}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
            ('\u{ad}', "\\u{ad}"),
            ('\u{feff}', "\\u{feff}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{202e}', "\\u{202e}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{61c}', "\\u{61c}"),
            ('\u{1b}', "\\u{1b}"),
            ('\u{7f}', "\\u{7f}"),
            ('\u{9b}', "\\u{9b}"),
            ('\u{a0}', "\\u{a0}"),
            ('\u{e000}', "\\u{e000}"),
            ('\u{e0001}', "\\u{e0001}"),
            ('\u{3164}', "\\u{3164}"),
            ('\u{115f}', "\\u{115f}"),
            ('\u{34f}', "\\u{34f}"),
            ('\u{fe0f}', "\\u{fe0f}"),
            ('\u{e0100}', "\\u{e0100}"),
            ('\n', "\\n"),
            ('\\', "\\\\"),
        ] {
            assert_eq!(text(&format!("a{c}b")), format!("a{shown}b"), "{c:?}");
        }
        for s in [
            "café.txt",
            "報告.txt",
            "a b",
            "Ωmega-ß_ü~",
            "emoji😀",
            "e\u{301}",
        ] {
            assert_eq!(text(s), s);
        }
    }

    #[test]
    fn invalid_utf8_and_the_backslash_are_unambiguous() {
        assert_eq!(bytes(b"a\xffb\xc3"), "a\\xffb\\xc3");
        // the bytes `\xff` typed out are not the byte 0xff
        assert_eq!(bytes(b"a\\xffb"), "a\\\\xffb");
        assert_eq!(bytes("x\u{200b}".as_bytes()), "x\\u{200b}");
        assert_eq!(bytes_keeping(b"a\tb\n\x1b", &['\n', '\t']), "a\tb\n\\u{1b}");
    }

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for w in table::ESCAPED.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 + 1 < w[1].0, "{w:?}");
        }
        // the edges of the table's search
        assert!(hides('\u{0}'));
        assert!(hides('\u{10ffff}'));
        assert!(!hides(' '));
        assert!(!hides('~'));
    }
}

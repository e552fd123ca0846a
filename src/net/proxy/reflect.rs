//! A server that echoes what it was sent (an error message quoting a request header, a
//! debugging endpoint) would hand a secret's value to the sandbox in its answer, and from there
//! the command could send it anywhere the allow-list reaches. So every answer of a terminated
//! connection passes through [`Unreflect`] on its way to the client:
//! - a whole value becomes its placeholder again (the same length: framing is unchanged);
//! - the end of a read that begins a value, [`HOLD`] bytes of it or more, waits for the next
//!   read (or the end of the answer) before it goes;
//! - a value whose first bytes (fewer than [`HOLD`]) already went out cuts the connection.
//!
//! At most `HOLD - 1` bytes of a value reach the sandbox that way: less than any known prefix.

use crate::net::secret::Secrets;

/// How many bytes of a value at the end of a read are held back.
pub(super) const HOLD: usize = 4;

/// The state of one connection's answers.
#[derive(Default)]
pub(super) struct Unreflect {
    /// Bytes not given to the client yet: they may begin a value.
    held: Vec<u8>,
    /// The last bytes given to the client (fewer than [`HOLD`]): they may begin a value too.
    sent: Vec<u8>,
}

impl Unreflect {
    /// What of the answer may go to the client now, with `data` read after what came before.
    /// `Err(i)`: a value of secret `i` began in what already went; cut the connection.
    pub(super) fn feed(&mut self, secrets: &Secrets, data: &[u8]) -> Result<Vec<u8>, usize> {
        let mut w = std::mem::take(&mut self.held);
        w.extend_from_slice(data);
        for s in &secrets.list {
            replace_all(&mut w, s.value(), &s.placeholder);
        }
        // A value begun in what went: complete now (cut), or still possible (wait).
        for (i, s) in secrets.list.iter().enumerate() {
            let v = s.value();
            for start in 0..self.sent.len() {
                let head = &self.sent[start..];
                if !v.starts_with(head) {
                    continue;
                }
                let rest = &v[head.len()..];
                if w.starts_with(rest) {
                    return Err(i);
                }
                if rest.starts_with(&w) {
                    self.held = w;
                    return Ok(Vec::new());
                }
            }
        }
        // The longest end of `w` that begins some value, at least HOLD bytes of it, waits.
        let mut keep = 0;
        for s in &secrets.list {
            let v = s.value();
            for k in (HOLD..v.len().min(w.len() + 1)).rev() {
                if k > keep && w.ends_with(&v[..k]) {
                    keep = k;
                    break;
                }
            }
        }
        self.held = w.split_off(w.len() - keep);
        self.note_sent(&w);
        Ok(w)
    }

    /// The end of the answer: whatever was held goes (it was no value).
    pub(super) fn flush(&mut self) -> Vec<u8> {
        let w = std::mem::take(&mut self.held);
        self.note_sent(&w);
        w
    }

    pub(super) fn holds(&self) -> bool {
        !self.held.is_empty()
    }

    fn note_sent(&mut self, out: &[u8]) {
        self.sent.extend_from_slice(out);
        let extra = self.sent.len().saturating_sub(HOLD - 1);
        self.sent.drain(..extra);
    }
}

/// Every occurrence of `from` in `buf` replaced by `to` (of the same length for a run's
/// secrets, so an answer's framing is unchanged).
fn replace_all(buf: &mut Vec<u8>, from: &[u8], to: &[u8]) {
    let Some(first) = find(buf, from) else {
        return;
    };
    let mut out = Vec::with_capacity(buf.len());
    out.extend_from_slice(&buf[..first]);
    let mut at = first;
    loop {
        out.extend_from_slice(to);
        at += from.len();
        match find(&buf[at..], from) {
            Some(i) => {
                out.extend_from_slice(&buf[at..at + i]);
                at += i;
            }
            None => break,
        }
    }
    out.extend_from_slice(&buf[at..]);
    *buf = out;
}

/// The first occurrence of `needle` in `hay` (glibc's memmem: the answer's bytes are many,
/// and this runs over each of them).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    // SAFETY: memmem reads `hay.len()` bytes of `hay` and `needle.len()` of `needle`, both
    // valid slices; the result is null or a pointer into `hay`.
    let p = unsafe {
        libc::memmem(
            hay.as_ptr().cast(),
            hay.len(),
            needle.as_ptr().cast(),
            needle.len(),
        )
    };
    (!p.is_null()).then(|| p as usize - hay.as_ptr() as usize)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::net::secret::Secret;

    /// A secret's value and its placeholder (same length), for this module's tests and
    /// `answer`'s.
    pub(in crate::net::proxy) const VALUE: &str = "sk-ant-realvalue-0123456789";
    pub(in crate::net::proxy) const PH: &str = "sk-ant-PLACEHOLDERxxxxxxxxx";

    pub(in crate::net::proxy) fn secrets() -> Secrets {
        Secrets {
            list: vec![Secret::new(
                "K".into(),
                vec!["a.com".into()],
                PH.into(),
                VALUE.as_bytes(),
            )
            .unwrap()],
        }
    }

    /// Feed `parts` one read each, then the end: what the client got, or the cut.
    fn run(parts: &[&[u8]]) -> Result<Vec<u8>, usize> {
        let s = secrets();
        let mut u = Unreflect::default();
        let mut out = Vec::new();
        for p in parts {
            out.extend(u.feed(&s, p)?);
        }
        out.extend(u.flush());
        Ok(out)
    }

    #[test]
    fn values_go_back_as_placeholders_wherever_the_reads_split_them() {
        let answer = format!("{{\"error\":\"bad key {VALUE}\"}}\n");
        let want = answer.replace(VALUE, PH);
        let b = answer.as_bytes();
        for cut in 0..=b.len() {
            let got = run(&[&b[..cut], &b[cut..]]);
            match got {
                Ok(g) => assert_eq!(String::from_utf8(g).unwrap(), want, "cut at {cut}"),
                // a value whose first byte or three went out alone: cut, never completed
                Err(0) => {
                    let at = answer.find(VALUE).unwrap();
                    assert!((at + 1..at + HOLD).contains(&cut), "cut at {cut}");
                }
                Err(i) => panic!("{i}"),
            }
        }
        // byte by byte
        let parts: Vec<&[u8]> = b.chunks(1).collect();
        assert!(run(&parts).is_err());
    }

    #[test]
    fn answers_without_a_value_pass_unchanged_and_whole() {
        for text in [
            "ok",
            "sk-",
            "sk-ant-rea",
            "ends with sk-ant-realvalue-012345678",
            "",
        ] {
            let b = text.as_bytes();
            for cut in 0..=b.len() {
                assert_eq!(
                    run(&[&b[..cut], &b[cut..]]).unwrap(),
                    b,
                    "{text:?} cut at {cut}"
                );
            }
        }
        // held only while it may be a value: the next read that differs releases it
        let s = secrets();
        let mut u = Unreflect::default();
        assert_eq!(u.feed(&s, b"data: sk-an").unwrap(), b"data: ");
        assert!(u.holds());
        assert_eq!(u.feed(&s, b"x\n\n").unwrap(), b"sk-anx\n\n");
        assert!(!u.holds());
    }
}

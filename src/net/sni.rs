//! The server name (SNI) of a TLS ClientHello (RFC 8446 section 4.1.2, RFC 6066 section 3),
//! read from the first bytes a client sends through a CONNECT tunnel. Pure code: bounded,
//! never panics, never allocates more than the handshake it is given.

/// The largest ClientHello we wait for (post-quantum key shares make them about 1.8 KiB; a
/// handshake message may span several records).
pub const MAX_HELLO: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet.
    Partial,
    /// The stream does not start with a TLS handshake record: some other protocol.
    NotTls,
    /// A ClientHello, with its server name if it has one.
    Sni(Option<String>),
    /// Starts like TLS but is not a well-formed ClientHello.
    Malformed(&'static str),
    /// A ClientHello with an extension of this type, which is not one that [`passes`]: the
    /// server it reaches may not be the one its `server_name` names (Encrypted Client Hello
    /// routes on an encrypted inner hello behind a shared front end).
    Unlisted(u16),
}

/// The extension types a ClientHello may carry through a tunnel: none of them names another
/// server than `server_name`. They are the registered types 0 to 61 (RFC 8446 and the IANA
/// registry: server_name, supported_groups, key_share, ALPN, padding, ...),
/// renegotiation_info (0xff01), next_protocol_negotiation (0x3374), application_settings
/// (0x4469, 0x44cd), and GREASE values (RFC 8701: 0x0a0a, 0x1a1a, ... 0xfafa), which servers
/// ignore. Anything else is refused: Encrypted Client Hello (0xfe0d, and the drafts' 0xfe08
/// to 0xfe0c, 0xff02), encrypted SNI (0xffce), and whatever comes next.
pub fn passes(kind: u16) -> bool {
    let [hi, lo] = kind.to_be_bytes();
    let grease = hi == lo && lo & 0x0f == 0x0a;
    kind <= 61 || matches!(kind, 0xff01 | 0x3374 | 0x4469 | 0x44cd) || grease
}

/// A name for the extension types [`passes`] refuses, for the refusal's line.
pub fn refused_name(kind: u16) -> &'static str {
    match kind {
        0xfe08..=0xfe0d | 0xff02 => "Encrypted Client Hello",
        0xffce => "encrypted SNI",
        _ => "an extension the proxy cannot vouch for",
    }
}

/// A bounds-checked reader over a byte slice.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| b[0] as usize)
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize)
    }
    /// A vector with a length prefix of `n` bytes.
    fn vec(&mut self, n: usize) -> Option<&'a [u8]> {
        let len = match n {
            1 => self.u8()?,
            2 => self.u16()?,
            _ => self.u24()?,
        };
        self.take(len)
    }
}

/// Read the ClientHello at the start of `buf` (the client's first bytes).
pub fn parse(buf: &[u8]) -> Hello {
    // Reassemble the handshake message from the records' fragments.
    let mut msg = Vec::new();
    let mut r = Reader { b: buf };
    let mut need = None;
    loop {
        if let Some(n) = need {
            if msg.len() >= n {
                break;
            }
        }
        let Some(header) = r.take(5) else {
            return if buf.first().is_some_and(|&b| b != 0x16) {
                Hello::NotTls
            } else {
                Hello::Partial
            };
        };
        // content type 22 (handshake), legacy version 3.x
        if header[0] != 0x16 {
            return if msg.is_empty() {
                Hello::NotTls
            } else {
                Hello::Malformed("a record other than handshake inside the ClientHello")
            };
        }
        if header[1] != 3 {
            return Hello::Malformed("record version is not 3.x");
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 || len > 16384 + 256 {
            return Hello::Malformed("bad record length");
        }
        let Some(fragment) = r.take(len) else {
            return Hello::Partial;
        };
        msg.extend_from_slice(fragment);
        if need.is_none() && msg.len() >= 4 {
            if msg[0] != 1 {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let n = 4 + ((msg[1] as usize) << 16 | (msg[2] as usize) << 8 | msg[3] as usize);
            if n > MAX_HELLO {
                return Hello::Malformed("ClientHello too large");
            }
            need = Some(n);
        }
    }
    match client_hello(&msg) {
        Some(h) => h,
        None => Hello::Malformed("truncated ClientHello"),
    }
}

fn client_hello(msg: &[u8]) -> Option<Hello> {
    let mut r = Reader { b: msg };
    r.u8()?; // handshake type (1, checked)
    let body = r.vec(3)?;
    let mut r = Reader { b: body };
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    r.vec(1)?; // legacy_session_id
    r.vec(2)?; // cipher_suites
    r.vec(1)?; // legacy_compression_methods
    if r.b.is_empty() {
        return Some(Hello::Sni(None)); // no extensions at all
    }
    let mut ext = Reader { b: r.vec(2)? };
    let mut sni = None;
    while !ext.b.is_empty() {
        let kind = ext.u16()?;
        let data = ext.vec(2)?;
        let typ = u16::try_from(kind).unwrap_or(u16::MAX);
        if !passes(typ) {
            return Some(Hello::Unlisted(typ));
        }
        if kind != 0 {
            continue;
        }
        if sni.is_some() {
            return Some(Hello::Malformed("two server_name extensions"));
        }
        // ServerNameList: one host_name (type 0) is all a client may send (RFC 6066).
        let mut list = Reader { b: data };
        let mut names = Reader { b: list.vec(2)? };
        if !list.b.is_empty() {
            return Some(Hello::Malformed("bytes after the server name list"));
        }
        let mut found = None;
        while !names.b.is_empty() {
            let t = names.u8()?;
            let name = names.vec(2)?;
            if t == 0 {
                if found.is_some() {
                    return Some(Hello::Malformed("two host names in server_name"));
                }
                match std::str::from_utf8(name) {
                    Ok(s) if !s.is_empty() && s.is_ascii() => found = Some(s.to_string()),
                    _ => return Some(Hello::Malformed("server name is not an ASCII name")),
                }
            }
        }
        match found {
            Some(n) => sni = Some(n),
            None => return Some(Hello::Malformed("server_name without a host name")),
        }
    }
    Some(Hello::Sni(sni))
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A ClientHello as a TLS 1.3 client sends it (RFC 8446 4.1.2), built field by field:
    /// cipher suites, supported_versions, a key share, and `server_name` when given.
    pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
        client_hello_with(sni, &[])
    }

    /// The same, with extra extensions (type, body) after the others.
    pub fn client_hello_with(sni: Option<&str>, extra: &[(u16, &[u8])]) -> Vec<u8> {
        fn vec(n: usize, body: &[u8]) -> Vec<u8> {
            let len = body.len().to_be_bytes();
            let mut v = len[8 - n..].to_vec();
            v.extend_from_slice(body);
            v
        }
        fn ext(kind: u16, body: &[u8]) -> Vec<u8> {
            let mut v = kind.to_be_bytes().to_vec();
            v.extend(vec(2, body));
            v
        }
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let mut entry = vec![0u8];
            entry.extend(vec(2, name.as_bytes()));
            exts.extend(ext(0, &vec(2, &entry)));
        }
        exts.extend(ext(43, &vec(1, &[3, 4, 3, 3]))); // supported_versions
        exts.extend(ext(10, &vec(2, &[0, 0x1d]))); // supported_groups: x25519
        let mut ks = vec![0, 0x1d];
        ks.extend(vec(2, &[7u8; 32]));
        exts.extend(ext(51, &vec(2, &ks))); // key_share
        for (kind, body) in extra {
            exts.extend(ext(*kind, body));
        }
        let mut body = vec![3, 3];
        body.extend([0x42u8; 32]);
        body.extend(vec(1, &[9u8; 32]));
        body.extend(vec(2, &[0x13, 0x01, 0x13, 0x02]));
        body.extend(vec(1, &[0]));
        body.extend(vec(2, &exts));
        let mut hs = vec![1u8];
        hs.extend(vec(3, &body));
        let mut rec = vec![0x16, 3, 1];
        rec.extend(vec(2, &hs));
        rec
    }

    #[test]
    fn server_name_of_a_built_hello() {
        let h = client_hello(Some("api.example.com"));
        assert_eq!(parse(&h), Hello::Sni(Some("api.example.com".into())));
        assert_eq!(parse(&client_hello(None)), Hello::Sni(None));
        // every prefix is partial, never a wrong answer
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Hello::Partial, "prefix {n}");
        }
        // bytes after the hello (the client may pipeline nothing else, but be safe)
        let mut more = h.clone();
        more.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
        assert_eq!(parse(&more), Hello::Sni(Some("api.example.com".into())));
    }

    /// Encrypted Client Hello (its RFC codepoint, the drafts', encrypted SNI) is refused:
    /// the outer name is not what a shared front end routes on. The same hello without it,
    /// and with GREASE or the extensions ordinary clients send, passes.
    #[test]
    fn encrypted_client_hello_is_refused() {
        let ech_body: &[u8] = &[0, 0, 1, 0, 1, 7, 0, 4, 1, 2, 3, 4, 0, 2, 9, 9];
        for kind in [
            0xfe0d, 0xfe0a, 0xfe08, 0xff02, 0xffce, 0xfd00, 0x0040, 0x7550, 0xffff,
        ] {
            let h = client_hello_with(Some("public.example.com"), &[(kind, ech_body)]);
            assert_eq!(parse(&h), Hello::Unlisted(kind), "{kind:#06x}");
            // with no server name at all: the same
            let h = client_hello_with(None, &[(kind, ech_body)]);
            assert_eq!(parse(&h), Hello::Unlisted(kind), "{kind:#06x}");
        }
        assert_eq!(refused_name(0xfe0d), "Encrypted Client Hello");
        assert_eq!(refused_name(0xffce), "encrypted SNI");
        let ordinary: Vec<(u16, &[u8])> = vec![
            (0x0a0a, &[]),
            (0xfafa, &[0]),
            (0x4a4a, &[]),
            (21, &[0, 0, 0]),
            (0xff01, &[0]),
            (16, &[0, 3, 2, b'h', b'2']),
            (0x44cd, &[0, 3, 2, b'h', b'2']),
            (35, &[]),
            (23, &[]),
            (57, &[1, 2]),
        ];
        let h = client_hello_with(Some("public.example.com"), &ordinary);
        assert_eq!(parse(&h), Hello::Sni(Some("public.example.com".into())));
        for k in 0..=u16::MAX {
            let [hi, lo] = k.to_be_bytes();
            if hi == lo && lo & 0x0f == 0x0a {
                assert!(passes(k), "GREASE {k:#06x}");
            }
        }
        assert!(!passes(0xfe0d) && !passes(0xffce) && !passes(0x0a0b) && !passes(0x1a0a));
    }

    #[test]
    fn a_hello_split_over_records() {
        let h = client_hello(Some("split.example.org"));
        let hs = &h[5..];
        let mut two = Vec::new();
        for part in [&hs[..10], &hs[10..]] {
            two.extend_from_slice(&[0x16, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(parse(&two), Hello::Sni(Some("split.example.org".into())));
        assert_eq!(parse(&two[..20]), Hello::Partial);
    }

    /// Captured from `openssl s_client -connect 127.0.0.1:PORT -servername captured.example`
    /// (OpenSSL 3.0.19): the first record it wrote, as hex.
    const OPENSSL_HELLO: &str = concat!(
        "160301013d0100013903039f8ae09a96f97dec41b775d0a51f6e2fb84c52c6dd9d351402b0fa024e5dcb7b20",
        "d1b0e28bc88801817164370b21fcd936bc57c1e4494b9d746f081f6dd6cb550e003e130213031301c02cc030",
        "009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d",
        "003c0035002f00ff010000b200000015001300001063617074757265642e6578616d706c65000b0004030001",
        "02000a00160014001d0017001e0019001801000101010201030104002300000016000000170000000d002a00",
        "28040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b00",
        "09080304030303020301002d00020101003300260024001d0020829c34fb893add6051e249e42de2e50e7405",
        "20f52c42c5a12d65c4a4c225cf3d",
    );

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn server_name_of_a_captured_hello() {
        let h = unhex(OPENSSL_HELLO);
        assert_eq!(parse(&h), Hello::Sni(Some("captured.example".into())));
        assert_eq!(parse(&h[..h.len() - 1]), Hello::Partial);
    }

    #[test]
    fn malformed_and_other_protocols() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(parse(b"SSH-2.0-OpenSSH_9.6\r\n"), Hello::NotTls);
        assert_eq!(parse(&[0x16]), Hello::Partial);
        assert!(matches!(
            parse(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]),
            Hello::Malformed(_)
        ));
        assert!(matches!(parse(&[0x16, 2, 0, 0, 1, 1]), Hello::Malformed(_)));
        // a length that claims more than the record holds
        let mut h = client_hello(Some("a.example"));
        h[5 + 4 + 2 + 32] = 200; // session id length past the end
        assert!(matches!(parse(&h), Hello::Malformed(_)));
    }

    #[test]
    fn never_panics_on_mutations() {
        use proptest::prelude::*;
        let base = client_hello(Some("fuzz.example.com"));
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &(
                    proptest::collection::vec((0..base.len(), any::<u8>()), 0..8),
                    0..base.len() + 1,
                ),
                |(flips, cut)| {
                    let mut b = base.clone();
                    for (i, v) in flips {
                        b[i] = v;
                    }
                    let _ = parse(&b[..cut]);
                    Ok(())
                },
            )
            .unwrap();
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..600), |b| {
                let mut v = vec![0x16, 3, 1];
                v.extend_from_slice(&b);
                let _ = parse(&v);
                let _ = parse(&b);
                Ok(())
            })
            .unwrap();
    }
}

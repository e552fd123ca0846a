//! The D-Bus wire format: types, values, and whole messages to and from bytes.
//!
//! Only what the D-Bus specification ("Message Protocol", "Marshaling") says, with no
//! knowledge of any service. Every read is bounds-checked and every size is limited: a
//! signature at most 255 bytes and 32 levels of arrays plus 32 of structs deep (as the
//! specification allows), a message at most [`MAX_MESSAGE`] bytes (far below the
//! specification's 128 MiB: this client only talks to a bus daemon and to systemd, whose
//! answers are small).

use std::fmt;

/// The largest message this client sends or accepts, header included.
pub const MAX_MESSAGE: usize = 1 << 20;
/// The longest signature the specification allows.
const MAX_SIGNATURE: usize = 255;
/// Array and struct nesting limits of the specification.
const MAX_DEPTH: usize = 32;

/// What is wrong with bytes or a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad<T>(what: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(what.into()))
}

/// One complete D-Bus type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Byte,
    Bool,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Double,
    Str,
    ObjectPath,
    Signature,
    /// A unix fd index (`h`); this client passes no fds, it only reads the index.
    UnixFd,
    Variant,
    Array(Box<Type>),
    Struct(Vec<Type>),
    DictEntry(Box<Type>, Box<Type>),
}

impl Type {
    /// The complete types of a signature, e.g. `ssa(sv)a(sa(sv))` gives four.
    pub fn parse(sig: &str) -> Result<Vec<Type>, WireError> {
        if sig.len() > MAX_SIGNATURE {
            return bad(format!("signature longer than {MAX_SIGNATURE} bytes"));
        }
        let b = sig.as_bytes();
        let mut i = 0;
        let mut out = Vec::new();
        while i < b.len() {
            out.push(parse_one(b, &mut i, 0, 0)?);
        }
        Ok(out)
    }

    /// The signature of this one type.
    pub fn signature(&self) -> String {
        let mut s = String::new();
        self.write_sig(&mut s);
        s
    }

    fn write_sig(&self, s: &mut String) {
        let c = match self {
            Type::Byte => 'y',
            Type::Bool => 'b',
            Type::I16 => 'n',
            Type::U16 => 'q',
            Type::I32 => 'i',
            Type::U32 => 'u',
            Type::I64 => 'x',
            Type::U64 => 't',
            Type::Double => 'd',
            Type::Str => 's',
            Type::ObjectPath => 'o',
            Type::Signature => 'g',
            Type::UnixFd => 'h',
            Type::Variant => 'v',
            Type::Array(t) => {
                s.push('a');
                t.write_sig(s);
                return;
            }
            Type::Struct(ts) => {
                s.push('(');
                for t in ts {
                    t.write_sig(s);
                }
                s.push(')');
                return;
            }
            Type::DictEntry(k, v) => {
                s.push('{');
                k.write_sig(s);
                v.write_sig(s);
                s.push('}');
                return;
            }
        };
        s.push(c);
    }

    /// The alignment of the type's values in bytes.
    pub fn align(&self) -> usize {
        match self {
            Type::Byte | Type::Signature | Type::Variant => 1,
            Type::I16 | Type::U16 => 2,
            Type::Bool
            | Type::I32
            | Type::U32
            | Type::Str
            | Type::ObjectPath
            | Type::UnixFd
            | Type::Array(_) => 4,
            Type::I64 | Type::U64 | Type::Double | Type::Struct(_) | Type::DictEntry(..) => 8,
        }
    }

    fn basic(&self) -> bool {
        !matches!(
            self,
            Type::Variant | Type::Array(_) | Type::Struct(_) | Type::DictEntry(..)
        )
    }
}

/// The signature of a list of types (a message body's).
pub fn signature_of(types: &[Type]) -> String {
    types.iter().map(Type::signature).collect()
}

fn parse_one(b: &[u8], i: &mut usize, arrays: usize, structs: usize) -> Result<Type, WireError> {
    let Some(&c) = b.get(*i) else {
        return bad("signature ends inside a type");
    };
    *i += 1;
    Ok(match c {
        b'y' => Type::Byte,
        b'b' => Type::Bool,
        b'n' => Type::I16,
        b'q' => Type::U16,
        b'i' => Type::I32,
        b'u' => Type::U32,
        b'x' => Type::I64,
        b't' => Type::U64,
        b'd' => Type::Double,
        b's' => Type::Str,
        b'o' => Type::ObjectPath,
        b'g' => Type::Signature,
        b'h' => Type::UnixFd,
        b'v' => Type::Variant,
        b'a' => {
            if arrays >= MAX_DEPTH {
                return bad("arrays nested too deep in signature");
            }
            if b.get(*i) == Some(&b'{') {
                *i += 1;
                let k = parse_one(b, i, arrays + 1, structs)?;
                if !k.basic() {
                    return bad("dict entry key is not a basic type");
                }
                let v = parse_one(b, i, arrays + 1, structs)?;
                if b.get(*i) != Some(&b'}') {
                    return bad("dict entry without closing '}'");
                }
                *i += 1;
                Type::Array(Box::new(Type::DictEntry(Box::new(k), Box::new(v))))
            } else {
                Type::Array(Box::new(parse_one(b, i, arrays + 1, structs)?))
            }
        }
        b'(' => {
            if structs >= MAX_DEPTH {
                return bad("structs nested too deep in signature");
            }
            let mut fields = Vec::new();
            loop {
                match b.get(*i) {
                    Some(b')') => {
                        *i += 1;
                        break;
                    }
                    Some(_) => fields.push(parse_one(b, i, arrays, structs + 1)?),
                    None => return bad("struct without closing ')'"),
                }
            }
            if fields.is_empty() {
                return bad("empty struct in signature");
            }
            Type::Struct(fields)
        }
        other => {
            return bad(format!(
                "unknown type code {:?} in signature",
                other as char
            ))
        }
    })
}

/// One value of a [`Type`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Double(f64),
    Str(String),
    ObjectPath(String),
    Signature(String),
    UnixFd(u32),
    Variant(Box<Value>),
    /// The element type (needed for an empty array) and the elements.
    Array(Type, Vec<Value>),
    Struct(Vec<Value>),
    DictEntry(Box<Value>, Box<Value>),
}

impl Value {
    /// This value's type.
    pub fn type_of(&self) -> Type {
        match self {
            Value::Byte(_) => Type::Byte,
            Value::Bool(_) => Type::Bool,
            Value::I16(_) => Type::I16,
            Value::U16(_) => Type::U16,
            Value::I32(_) => Type::I32,
            Value::U32(_) => Type::U32,
            Value::I64(_) => Type::I64,
            Value::U64(_) => Type::U64,
            Value::Double(_) => Type::Double,
            Value::Str(_) => Type::Str,
            Value::ObjectPath(_) => Type::ObjectPath,
            Value::Signature(_) => Type::Signature,
            Value::UnixFd(_) => Type::UnixFd,
            Value::Variant(_) => Type::Variant,
            Value::Array(t, _) => Type::Array(Box::new(t.clone())),
            Value::Struct(vs) => Type::Struct(vs.iter().map(Value::type_of).collect()),
            Value::DictEntry(k, v) => Type::DictEntry(Box::new(k.type_of()), Box::new(v.type_of())),
        }
    }

    /// The string of a `s`, `o` or `g` value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::ObjectPath(s) | Value::Signature(s) => Some(s),
            _ => None,
        }
    }

    /// The number of a `u` value.
    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::U32(n) => Some(*n),
            _ => None,
        }
    }
}

/// A valid object path: `/`, or `/` followed by `/`-separated non-empty elements of
/// `[A-Za-z0-9_]`.
pub fn valid_object_path(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    p.starts_with('/')
        && p[1..]
            .split('/')
            .all(|e| !e.is_empty() && e.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Marshals values, little-endian, with offsets counted from the start of the message.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn u32_at(&mut self, at: usize, n: u32) {
        self.buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<(), WireError> {
        if s.contains('\0') {
            return bad("string with a NUL byte");
        }
        let n = u32::try_from(s.len()).or_else(|_| bad("string too long"))?;
        self.pad(4);
        self.buf.extend_from_slice(&n.to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn signature(&mut self, s: &str) -> Result<(), WireError> {
        Type::parse(s)?;
        self.buf.push(s.len() as u8); // at most 255: checked by parse
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    /// Append one value.
    pub fn value(&mut self, v: &Value) -> Result<(), WireError> {
        if self.buf.len() > MAX_MESSAGE {
            return bad("message too large");
        }
        self.pad(v.type_of().align());
        match v {
            Value::Byte(n) => self.buf.push(*n),
            Value::Bool(b) => self.buf.extend_from_slice(&u32::from(*b).to_le_bytes()),
            Value::I16(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::U16(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::I32(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::U32(n) | Value::UnixFd(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::I64(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::U64(n) => self.buf.extend_from_slice(&n.to_le_bytes()),
            Value::Double(d) => self.buf.extend_from_slice(&d.to_le_bytes()),
            Value::Str(s) => self.string(s)?,
            Value::ObjectPath(p) => {
                if !valid_object_path(p) {
                    return bad(format!("invalid object path {p:?}"));
                }
                self.string(p)?
            }
            Value::Signature(s) => self.signature(s)?,
            Value::Variant(inner) => {
                self.signature(&inner.type_of().signature())?;
                self.value(inner)?;
            }
            Value::Array(t, items) => {
                let at = self.buf.len();
                self.buf.extend_from_slice(&[0; 4]);
                // The length counts from the first element, after its padding.
                self.pad(t.align());
                let start = self.buf.len();
                for item in items {
                    if item.type_of() != *t {
                        return bad("array element of another type");
                    }
                    self.value(item)?;
                }
                let n = u32::try_from(self.buf.len() - start).or_else(|_| bad("array too long"))?;
                self.u32_at(at, n);
            }
            Value::Struct(fields) => {
                if fields.is_empty() {
                    return bad("empty struct");
                }
                for f in fields {
                    self.value(f)?;
                }
            }
            Value::DictEntry(k, v) => {
                self.value(k)?;
                self.value(v)?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Unmarshals values of either byte order from a whole message (offsets count from its start).
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Reader<'a> {
    /// A reader of `buf` from `pos`; `big` for a big-endian (`B`) message.
    pub fn new(buf: &'a [u8], pos: usize, big: bool) -> Reader<'a> {
        Reader { buf, pos, big }
    }

    /// Where the next read starts.
    pub fn pos(&self) -> usize {
        self.pos
    }

    fn pad(&mut self, align: usize) -> Result<(), WireError> {
        while !self.pos.is_multiple_of(align) {
            match self.buf.get(self.pos) {
                Some(0) => self.pos += 1,
                Some(_) => return bad("non-zero padding"),
                None => return bad("message ends in padding"),
            }
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return bad("message ends inside a value");
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        if self.big {
            a.reverse();
        }
        Ok(a)
    }

    /// Read a `u32` at 4-byte alignment.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        self.pad(4)?;
        Ok(u32::from_le_bytes(self.fixed()?))
    }

    fn text(&mut self, len: usize) -> Result<String, WireError> {
        let bytes = self.take(len)?;
        if self.take(1)? != [0] {
            return bad("string not terminated by NUL");
        }
        if bytes.contains(&0) {
            return bad("string with a NUL byte");
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => bad("string is not UTF-8"),
        }
    }

    fn signature(&mut self) -> Result<String, WireError> {
        let n = self.take(1)?[0] as usize;
        let s = self.text(n)?;
        Type::parse(&s)?;
        Ok(s)
    }

    /// Read one value of type `t`. `depth` counts nested variants (bounded like containers).
    pub fn value(&mut self, t: &Type) -> Result<Value, WireError> {
        self.value_at(t, 0)
    }

    fn value_at(&mut self, t: &Type, depth: usize) -> Result<Value, WireError> {
        if depth > 2 * MAX_DEPTH {
            return bad("values nested too deep");
        }
        self.pad(t.align())?;
        Ok(match t {
            Type::Byte => Value::Byte(self.take(1)?[0]),
            Type::Bool => match u32::from_le_bytes(self.fixed()?) {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                n => return bad(format!("boolean {n}")),
            },
            Type::I16 => Value::I16(i16::from_le_bytes(self.fixed()?)),
            Type::U16 => Value::U16(u16::from_le_bytes(self.fixed()?)),
            Type::I32 => Value::I32(i32::from_le_bytes(self.fixed()?)),
            Type::U32 => Value::U32(u32::from_le_bytes(self.fixed()?)),
            Type::UnixFd => Value::UnixFd(u32::from_le_bytes(self.fixed()?)),
            Type::I64 => Value::I64(i64::from_le_bytes(self.fixed()?)),
            Type::U64 => Value::U64(u64::from_le_bytes(self.fixed()?)),
            Type::Double => Value::Double(f64::from_le_bytes(self.fixed()?)),
            Type::Str => {
                let n = u32::from_le_bytes(self.fixed()?) as usize;
                Value::Str(self.text(n)?)
            }
            Type::ObjectPath => {
                let n = u32::from_le_bytes(self.fixed()?) as usize;
                let p = self.text(n)?;
                if !valid_object_path(&p) {
                    return bad(format!("invalid object path {p:?}"));
                }
                Value::ObjectPath(p)
            }
            Type::Signature => Value::Signature(self.signature()?),
            Type::Variant => {
                let sig = self.signature()?;
                let mut ts = Type::parse(&sig)?;
                if ts.len() != 1 {
                    return bad("variant signature is not one complete type");
                }
                let inner = ts.remove(0);
                Value::Variant(Box::new(self.value_at(&inner, depth + 1)?))
            }
            Type::Array(elem) => {
                let n = u32::from_le_bytes(self.fixed()?) as usize;
                if n > MAX_MESSAGE {
                    return bad("array too long");
                }
                self.pad(elem.align())?;
                let end = self.pos + n;
                if end > self.buf.len() {
                    return bad("array runs past the message");
                }
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value_at(elem, depth + 1)?);
                }
                if self.pos != end {
                    return bad("array elements overrun its length");
                }
                Value::Array((**elem).clone(), items)
            }
            Type::Struct(fields) => Value::Struct(
                fields
                    .iter()
                    .map(|f| self.value_at(f, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Type::DictEntry(k, v) => Value::DictEntry(
                Box::new(self.value_at(k, depth + 1)?),
                Box::new(self.value_at(v, depth + 1)?),
            ),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Messages

/// The four message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// Header flag: the bus must not start a service to deliver this call.
pub const NO_AUTO_START: u8 = 0x2;

/// One message: its header fields and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    pub flags: u8,
    /// Set when sent (the connection numbers its messages); as read, the sender's.
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    /// The body's values; its signature is theirs.
    pub body: Vec<Value>,
}

impl Message {
    /// A method call of `interface.member` on `path` at `destination` (none on a direct
    /// connection to a peer).
    pub fn call(
        destination: Option<&str>,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Message {
        Message {
            kind: Kind::MethodCall,
            flags: 0,
            serial: 0,
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            error_name: None,
            reply_serial: None,
            destination: destination.map(str::to_string),
            sender: None,
            body,
        }
    }

    /// The body's signature.
    pub fn signature(&self) -> String {
        self.body.iter().map(|v| v.type_of().signature()).collect()
    }

    /// The whole message as bytes (little-endian), numbered `serial`.
    pub fn encode(&self, serial: u32) -> Result<Vec<u8>, WireError> {
        if serial == 0 {
            return bad("serial 0");
        }
        let mut body = Writer::default();
        // The body starts at an 8-byte boundary of the message, so offsets modulo 8 match.
        for v in &self.body {
            body.value(v)?;
        }
        let mut fields = Vec::new();
        let mut field = |code: u8, v: Value| {
            fields.push(Value::Struct(vec![
                Value::Byte(code),
                Value::Variant(Box::new(v)),
            ]))
        };
        if let Some(p) = &self.path {
            field(1, Value::ObjectPath(p.clone()));
        }
        if let Some(s) = &self.interface {
            field(2, Value::Str(s.clone()));
        }
        if let Some(s) = &self.member {
            field(3, Value::Str(s.clone()));
        }
        if let Some(s) = &self.error_name {
            field(4, Value::Str(s.clone()));
        }
        if let Some(n) = self.reply_serial {
            field(5, Value::U32(n));
        }
        if let Some(s) = &self.destination {
            field(6, Value::Str(s.clone()));
        }
        if let Some(s) = &self.sender {
            field(7, Value::Str(s.clone()));
        }
        if !self.body.is_empty() {
            field(8, Value::Signature(self.signature()));
        }
        let len = u32::try_from(body.buf.len()).or_else(|_| bad("body too large"))?;
        let mut w = Writer::default();
        w.buf
            .extend_from_slice(&[b'l', self.kind as u8, self.flags, 1]);
        w.buf.extend_from_slice(&len.to_le_bytes());
        w.buf.extend_from_slice(&serial.to_le_bytes());
        let header_field = Type::Struct(vec![Type::Byte, Type::Variant]);
        w.value(&Value::Array(header_field, fields))?;
        w.pad(8);
        w.buf.extend_from_slice(&body.buf);
        if w.buf.len() > MAX_MESSAGE {
            return bad("message too large");
        }
        Ok(w.buf)
    }

    /// How many bytes the message that starts with these 16 bytes has in all, or why it is
    /// not one this client accepts.
    pub fn total_len(head: &[u8; 16]) -> Result<usize, WireError> {
        let big = match head[0] {
            b'l' => false,
            b'B' => true,
            c => return bad(format!("unknown byte order {c:#x}")),
        };
        if head[3] != 1 {
            return bad(format!("protocol version {}", head[3]));
        }
        let word = |at: usize| {
            let b = [head[at], head[at + 1], head[at + 2], head[at + 3]];
            if big {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let (body, fields) = (word(4) as usize, word(12) as usize);
        let header = (16 + fields).next_multiple_of(8);
        let total = header.saturating_add(body);
        if fields > MAX_MESSAGE || total > MAX_MESSAGE {
            return bad(format!(
                "message of {total} bytes (this client accepts up to {MAX_MESSAGE})"
            ));
        }
        Ok(total)
    }

    /// Parse one whole message (as long as [`Message::total_len`] says).
    pub fn decode(buf: &[u8]) -> Result<Message, WireError> {
        let Some(head) = buf.first_chunk::<16>() else {
            return bad("message shorter than its fixed header");
        };
        let total = Message::total_len(head)?;
        if buf.len() != total {
            return bad("message length does not match its header");
        }
        let big = buf[0] == b'B';
        let kind = match buf[1] {
            1 => Kind::MethodCall,
            2 => Kind::MethodReturn,
            3 => Kind::Error,
            4 => Kind::Signal,
            n => return bad(format!("unknown message type {n}")),
        };
        let mut r = Reader::new(buf, 4, big);
        let body_len = r.u32()? as usize;
        let serial = r.u32()?;
        if serial == 0 {
            return bad("serial 0");
        }
        let fields_type = Type::Array(Box::new(Type::Struct(vec![Type::Byte, Type::Variant])));
        let Value::Array(_, fields) = r.value(&fields_type)? else {
            return bad("header fields are not an array");
        };
        let mut m = Message {
            kind,
            flags: buf[2],
            serial,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            body: Vec::new(),
        };
        let mut sig = String::new();
        for f in fields {
            let Value::Struct(pair) = f else {
                return bad("header field is not a struct");
            };
            let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (pair.first(), pair.get(1))
            else {
                return bad("header field is not (yv)");
            };
            let want = match code {
                1 => Type::ObjectPath,
                2..=4 | 6 | 7 => Type::Str,
                5 | 9 => Type::U32,
                8 => Type::Signature,
                _ => continue, // unknown fields must be ignored
            };
            if v.type_of() != want {
                return bad(format!("header field {code} of the wrong type"));
            }
            let s = v.as_str().map(str::to_string);
            match code {
                1 => m.path = s,
                2 => m.interface = s,
                3 => m.member = s,
                4 => m.error_name = s,
                5 => m.reply_serial = v.as_u32(),
                6 => m.destination = s,
                7 => m.sender = s,
                8 => sig = s.unwrap_or_default(),
                _ => {}
            }
        }
        let required = match kind {
            Kind::MethodCall => m.path.is_some() && m.member.is_some(),
            Kind::MethodReturn => m.reply_serial.is_some(),
            Kind::Error => m.reply_serial.is_some() && m.error_name.is_some(),
            Kind::Signal => m.path.is_some() && m.interface.is_some() && m.member.is_some(),
        };
        if !required {
            return bad(format!("{kind:?} without its required header fields"));
        }
        let mut r = Reader::new(buf, r.pos(), big);
        r.pad(8)?;
        if total - r.pos() != body_len {
            return bad("body length does not match the header");
        }
        for t in Type::parse(&sig)? {
            m.body.push(r.value(&t)?);
        }
        if r.pos() != total {
            return bad("bytes left after the body");
        }
        Ok(m)
    }
}

//! The way back: every channel that carries data from the sandbox to the host after a run.
//!
//! A host program reads what the command left with the user's authority (git appends to its
//! reflogs and follows links in its dirs, the Actions runner applies the file commands to later
//! unsandboxed steps, a user copies files into the kept home), so what it will read is a
//! boundary, whoever writes it (DESIGN.md section 3). Nothing the command wrote reaches the
//! host except through this room, which turns it into a [`Changeset`]: every entry listed,
//! each accepted or refused with a reason, applied all or nothing, kept for review, or thrown
//! away.

pub mod actions;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Nothing was there.
    Added,
    /// The same type, other content (a file's bytes, a link's target).
    Modified,
    /// Gone (a directory with everything in it: one entry).
    Removed,
    /// Another type now (a file where a directory was, a link where a file was...).
    TypeChange,
    /// Only the permission bits changed.
    Mode,
}

/// What a path is: the new type, or for [`Kind::Removed`] the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    File,
    Dir,
    Link,
    /// A FIFO, socket or device node: never accepted.
    Special,
}

/// One path of a changeset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Which root of the changeset ([`Changeset::roots`]): 0 is the repo.
    pub root: usize,
    /// Relative to the root; never empty, never `..`. Kept as a JSON string, or when the
    /// command chose a name that is not UTF-8, as the array of its bytes.
    #[serde(with = "path_bytes")]
    pub path: PathBuf,
    pub kind: Kind,
    pub what: What,
    /// The new permission bits (set-ID bits never), for files and directories.
    pub mode: u32,
    /// Bytes written on the host: a file's size, a link target's length, 0 otherwise.
    pub bytes: u64,
    /// Why the entry does not reach the host; `None`: accepted.
    pub refused: Option<String>,
}

impl Entry {
    pub fn accepted(&self) -> bool {
        self.refused.is_none()
    }
}

/// What a run changed, in walk order: a directory before what is in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changeset {
    /// The host directories the entries are relative to: the repo first, then each git dir
    /// outside it that the run could write (a linked worktree's common dir).
    pub roots: Vec<PathBuf>,
    pub entries: Vec<Entry>,
}

/// What became of a changeset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// Every accepted entry reached the host.
    All,
    /// None did (nothing to apply, or a failure rolled back whole).
    None,
    /// A failure part-way that could not be rolled back everywhere: the paths left changed.
    Partial,
    /// Stored for review (`changes show/diff/apply ID`); the repo is untouched.
    Kept,
    /// Thrown away.
    Discarded,
}

/// A path in JSON without loss: a string when it is UTF-8, else the array of its bytes.
mod path_bytes {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        match p.to_str() {
            Some(text) => s.serialize_str(text),
            None => s.collect_seq(p.as_os_str().as_bytes()),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(match Either::deserialize(d)? {
            Either::Text(t) => PathBuf::from(t),
            Either::Bytes(b) => PathBuf::from(std::ffi::OsString::from_vec(b)),
        })
    }

    #[cfg(test)]
    #[test]
    fn a_name_that_is_not_utf8_goes_there_and_back() {
        use super::{Entry, Kind, What};
        for name in [&b"plain.txt"[..], b"bad\xff.txt", "caf\u{e9}".as_bytes()] {
            let e = Entry {
                root: 0,
                path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
                kind: Kind::Added,
                what: What::File,
                mode: 0o644,
                bytes: 0,
                refused: None,
            };
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), e, "{json}");
        }
    }
}

pub mod apply;
pub mod back;
pub mod diff;
pub mod owner;
pub mod scan;
pub mod store;

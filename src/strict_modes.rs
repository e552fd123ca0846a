//! Where a profile may be read from: only where nobody but the caller and root can change it,
//! as ssh's StrictModes does for `authorized_keys`.
//!
//! A profile decides the sandbox's privileges (`uid`, `uid_inside = 0`, read-write binds):
//! whoever can write the file, or replace it or a directory above it, chooses them. Root
//! running with a user's `HOME` (as `sudo -E` keeps it) would otherwise take that user's
//! `~/.config/sandbox-run/profiles/validate.toml` and run the command as host root with the
//! binds the user asked for. So a profile file, found by name or given by path (the same
//! deputy problem: `sudo sandbox-run --profile ~alice/p.toml`, and alice swaps the file), is
//! read only when:
//!
//! - the file and every directory on the way from `/` are owned by the caller or root (in a
//!   user namespace, files of unmapped users count as root's, as in [`crate::hostfs`]);
//! - none of them is writable by group or others, except a root-owned directory with the
//!   sticky bit (`/tmp`: there nobody can rename or remove another user's entry);
//! - a symlink on the way is the caller's or root's; the way on from its target is checked
//!   the same (at most 40 links).
//!
//! The walk opens each directory without following links (`O_NOFOLLOW`) and checks the open
//! fd (`fstat`), and the file is opened the same way and checked on its fd: what is checked is
//! what is read. Built-in profiles need none of this.

use crate::hostfs::Dir;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Linux gives up after 40 symbolic links; so do we.
const MAX_LINKS: usize = 40;

/// Why a place on the way is not trusted, and the fix.
fn refusal(file: &Path, place: &Path, st: &Metadata, uid: u32, why: Why) -> String {
    let kind = if st.is_dir() {
        "directory"
    } else if st.is_symlink() {
        "symlink"
    } else {
        "file"
    };
    let p = sh_quote(&place.to_string_lossy());
    let (what, fix) = match why {
        Why::Owner => (
            format!("the {kind} {} belongs to uid {}", place.display(), st.uid()),
            format!(
                "use a profile of your own (HOME, XDG_CONFIG_HOME or SANDBOX_RUN_PROFILE_PATH may name another user's), or if you trust uid {}, as root: chown {uid} {p}",
                st.uid()
            ),
        ),
        Why::Writable => (
            format!(
                "the {kind} {} is writable by {} (mode {:o})",
                place.display(),
                if st.mode() & 0o002 != 0 {
                    "others"
                } else {
                    "its group"
                },
                st.mode() & 0o7777
            ),
            format!("chmod go-w {p}"),
        ),
    };
    format!(
        "profile {}: not read: {what}, and a profile is read only where no one but you or root can change it; fix: {fix}",
        file.display()
    )
}

/// `s` as one shell word.
fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./=:,+@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[derive(Clone, Copy)]
enum Why {
    Owner,
    Writable,
}

/// Is `st` (of a file, directory or link on the way) trusted for the caller `uid`?
fn check(st: &Metadata, uid: u32, unmapped: Option<u32>) -> Result<(), Why> {
    let owner = st.uid();
    if owner != uid && owner != 0 && Some(owner) != unmapped {
        return Err(Why::Owner);
    }
    if st.is_symlink() {
        // a link's own mode means nothing; who may change it is its directory's matter
        return Ok(());
    }
    let sticky_root = st.is_dir() && st.mode() & libc::S_ISVTX != 0 && owner == 0;
    if st.mode() & 0o022 != 0 && !sticky_root {
        return Err(Why::Writable);
    }
    Ok(())
}

/// The metadata of what `fd` refers to (an `O_PATH` fd, or the opened file).
fn meta(fd: std::os::fd::OwnedFd) -> std::io::Result<(File, Metadata)> {
    let f = File::from(fd);
    let m = f.metadata()?;
    Ok((f, m))
}

/// `io::Error` as one line naming the step.
fn io_line(file: &Path, step: &str, at: &Path, e: std::io::Error) -> String {
    let e = if e.raw_os_error() == Some(libc::ELOOP) {
        std::io::Error::other(format!(
            "{} changed to a link while it was read",
            at.display()
        ))
    } else {
        e
    };
    format!("profile {}: {step} {}: {e}", file.display(), at.display())
}

/// Open the profile at `path` (absolute) for reading, following links only as the module
/// documentation says, and only when every place on the way is the caller's or root's and
/// writable by no one else. The error is one line naming the file and the fix.
pub fn open(path: &Path) -> Result<File, String> {
    let uid = nix::unistd::geteuid().as_raw();
    open_as(path, uid, crate::hostfs::unmapped_uid())
}

fn open_as(path: &Path, uid: u32, unmapped: Option<u32>) -> Result<File, String> {
    if !path.is_absolute() {
        return Err(format!("profile {}: not an absolute path", path.display()));
    }
    let mut want = path.to_path_buf();
    let mut links = 0;
    'again: loop {
        let root = Path::new("/");
        let mut dir = Dir::open_no_links(root).map_err(|e| io_line(path, "open", root, e))?;
        let st = std::fs::metadata(root).map_err(|e| io_line(path, "stat", root, e))?;
        check(&st, uid, unmapped).map_err(|w| refusal(path, root, &st, uid, w))?;
        let mut here = PathBuf::from("/");
        let names: Vec<&OsStr> = want
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        let Some((last, dirs)) = names.split_last() else {
            return Err(format!("profile {}: not a file", path.display()));
        };
        for (i, name) in names.iter().enumerate() {
            let at = here.join(name);
            // the entry itself, not followed (O_PATH: no read permission needed on the way)
            let (_, st) = dir
                .open_at(Path::new(name), libc::O_PATH | libc::O_NOFOLLOW, 0)
                .and_then(meta)
                .map_err(|e| io_line(path, "open", &at, e))?;
            if st.is_symlink() {
                check(&st, uid, unmapped).map_err(|w| refusal(path, &at, &st, uid, w))?;
                links += 1;
                if links > MAX_LINKS {
                    return Err(io_line(
                        path,
                        "open",
                        &at,
                        std::io::Error::from_raw_os_error(libc::ELOOP),
                    ));
                }
                let target = nix::fcntl::readlinkat(dir.fd(), *name)
                    .map_err(|e| io_line(path, "read link", &at, e.into()))?;
                let rest: PathBuf = names[i + 1..].iter().collect();
                want = crate::hostfs::lexical(&here, Path::new(&target)).join(rest);
                continue 'again;
            }
            if i == dirs.len() {
                break;
            }
            check(&st, uid, unmapped).map_err(|w| refusal(path, &at, &st, uid, w))?;
            dir = dir
                .subdir(Path::new(name))
                .map_err(|e| io_line(path, "open", &at, e))?;
            // what was checked is what is walked into
            let (_, now) = dir
                .open_at(Path::new(""), libc::O_PATH, 0)
                .and_then(meta)
                .map_err(|e| io_line(path, "stat", &at, e))?;
            if (now.dev(), now.ino()) != (st.dev(), st.ino()) {
                return Err(io_line(
                    path,
                    "open",
                    &at,
                    std::io::Error::other("replaced while it was checked"),
                ));
            }
            here = at;
        }
        let at = here.join(last);
        let (f, st) = dir
            .open_at(
                Path::new(last),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                0,
            )
            .and_then(meta)
            .map_err(|e| io_line(path, "open", &at, e))?;
        if !st.is_file() {
            return Err(format!(
                "profile {}: {} is not a regular file",
                path.display(),
                at.display()
            ));
        }
        check(&st, uid, unmapped).map_err(|w| refusal(path, &at, &st, uid, w))?;
        return Ok(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sbx-strict-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn me() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    #[test]
    fn group_or_world_writable_places_are_refused_with_the_fix() {
        let d = scratch("modes");
        let f = d.join("p.toml");
        std::fs::write(&f, "").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(open_as(&f, me(), None).is_ok());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = open_as(&f, me(), None).unwrap_err();
        assert!(
            e.contains("writable by its group") && e.contains("fix: chmod go-w"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = open_as(&f, me(), None).unwrap_err();
        assert!(e.contains("writable by others"), "{e}");
        // a sticky directory of another owner than root is no excuse
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let sticky = open_as(&f, me(), None);
        assert_eq!(sticky.is_ok(), me() == 0, "{sticky:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn another_users_file_or_link_is_refused() {
        let d = scratch("owner");
        let f = d.join("p.toml");
        std::fs::write(&f, "").unwrap();
        let l = d.join("l.toml");
        std::os::unix::fs::symlink("p.toml", &l).unwrap();
        // a link of the caller's to a trusted file is followed
        assert!(open_as(&l, me(), None).is_ok());
        // Root makes the places another user's; anyone else asks as another user.
        let other = 4242;
        let caller = if me() == 0 {
            let own = |p: &Path| {
                std::os::unix::fs::lchown(p, Some(other), None).unwrap();
            };
            own(&l);
            assert!(open_as(&f, 0, None).is_ok());
            let e = open_as(&l, 0, None).unwrap_err();
            assert!(
                e.contains("symlink") && e.contains("belongs to uid 4242"),
                "{e}"
            );
            own(&f);
            0
        } else {
            other
        };
        let e = open_as(&f, caller, None).unwrap_err();
        assert!(e.contains("belongs to uid"), "{e}");
        assert!(e.contains(&format!("chown {caller} ")), "{e}");
        assert!(e.contains("fix: use a profile of your own"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn fifos_and_missing_files_are_errors_not_hangs() {
        let d = scratch("fifo");
        let p = d.join("f.toml");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(open_as(&p, me(), None).is_err());
        let e = open_as(&d.join("none.toml"), me(), None).unwrap_err();
        assert!(e.contains("No such file"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

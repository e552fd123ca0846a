//! Where the values of `--secret` live in the supervisor: one anonymous mapping that no
//! forked process inherits (parent side only).
//!
//! Stage 2 and pid 1 are forks of the supervisor that never exec: whatever its memory holds
//! at the fork is in theirs. So a value is never put on the heap or left in the environment:
//! - the mapping is `MADV_WIPEONFORK` (a child sees zeros where the values are) and
//!   `MADV_DONTDUMP` (no core file holds them), and locked in memory when the limits allow
//!   (never written to swap);
//! - a value from the caller's environment is copied straight from the process's own
//!   environment block into the vault ([`Vault::take_env`]), never through `std::env`, and
//!   the bytes in the block are then overwritten in place with the placeholder, so that
//!   neither a later copy of the environment nor `/proc/PID/environ` holds the value;
//! - a `--secret-file` is read with read(2) straight into the vault ([`Vault::read_file`]).
//!
//! The mapping is never unmapped: its slices are `&'static`, for [`super::secret::Secret`].

use std::ffi::c_char;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Mutex;

/// The vault's size: values are API keys and tokens, a few hundred bytes each.
pub const SIZE: usize = 64 << 10;

extern "C" {
    /// The process's environment (glibc and musl both export it).
    static mut environ: *mut *mut c_char;
}

/// The process's one vault.
pub struct Vault {
    base: *mut u8,
    /// Bytes handed out so far (the vault only grows).
    used: Mutex<usize>,
}

// SAFETY: `base` is a mapping that lives as long as the process; the bytes handed out are
// disjoint ranges of it (under `used`'s lock), each written once, before it is shared.
unsafe impl Sync for Vault {}
// SAFETY: as above.
unsafe impl Send for Vault {}

static VAULT: std::sync::OnceLock<Result<Vault, String>> = std::sync::OnceLock::new();

/// Set once a value may have been copied out of the vault (the proxy puts values into
/// requests): the heap may hold one, freed or not, and a fork would inherit it. From then on
/// stage 2 is a re-exec, never a fork ([`crate::launcher::spawn`]): a gene's later command.
static SPILLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Note that values may have left the vault (see [`SPILLED`]).
pub fn spilled() {
    SPILLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether a value may have left the vault: no fork of this process may start a sandbox.
pub fn is_spilled() -> bool {
    SPILLED.load(std::sync::atomic::Ordering::SeqCst)
}

/// The vault, mapped on first use. An error (a kernel before 4.14, without `MADV_WIPEONFORK`)
/// refuses every secret: a value a fork would inherit is not kept.
pub fn vault() -> Result<&'static Vault, String> {
    VAULT
        .get_or_init(Vault::map)
        .as_ref()
        .map_err(|e| e.clone())
}

impl Vault {
    fn map() -> Result<Vault, String> {
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "secrets: mapping the vault: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: madvise and mlock on the mapping just made, of its size.
        unsafe {
            if libc::madvise(p, SIZE, libc::MADV_WIPEONFORK) != 0 {
                let e = std::io::Error::last_os_error();
                libc::munmap(p, SIZE);
                return Err(format!(
                    "secrets: the vault needs MADV_WIPEONFORK (Linux 4.14+), so that no process of the sandbox inherits a value: {e}"
                ));
            }
            libc::madvise(p, SIZE, libc::MADV_DONTDUMP);
            // Best effort: RLIMIT_MEMLOCK may be small; the values are a few pages at most.
            libc::mlock(p, SIZE);
        }
        Ok(Vault {
            base: p.cast(),
            used: Mutex::new(0),
        })
    }

    /// `n` fresh bytes of the vault (zeros).
    fn reserve(&self, n: usize) -> Result<&'static mut [u8], String> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        if SIZE - *used < n {
            return Err(format!(
                "secrets: the values are larger than the vault ({} KiB in all)",
                SIZE >> 10
            ));
        }
        let at = *used;
        *used += n;
        // SAFETY: [at, at+n) lies inside the mapping and was handed out to nobody before (the
        // offset only grows, under the lock); the mapping is never unmapped.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.base.add(at), n) })
    }

    /// Whether `p` points into the vault (the tests' check that a value lives here).
    pub fn holds(&self, p: *const u8) -> bool {
        let b = self.base as usize;
        (b..b + SIZE).contains(&(p as usize))
    }

    /// The caller's value of `name`, copied from the environment block into the vault, and
    /// every `name=` entry of the block overwritten in place with what `mask` makes of the
    /// value it held (the same length: the placeholder). `None` when `name` is not set.
    /// `mask` gets the value in the vault and returns the bytes to write over it; an error
    /// leaves the block as it was.
    ///
    /// Must run before anything copies the environment (`std::env::vars`), while the process
    /// has no other thread that could read it.
    pub fn take_env(
        &self,
        name: &str,
        mut mask: impl FnMut(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<Option<&'static [u8]>, String> {
        let mut found: Option<&'static [u8]> = None;
        for entry in env_entries(name) {
            // SAFETY: an entry of the environment block: a NUL-terminated string whose value
            // starts after `name=`; nothing else writes the block meanwhile (one thread).
            let value = unsafe {
                let v = entry.add(name.len() + 1);
                std::slice::from_raw_parts_mut(v.cast::<u8>(), libc::strlen(v))
            };
            // The first entry is the one getenv returns; a later one is masked too.
            let over = match found {
                None => {
                    let into = self.reserve(value.len())?;
                    into.copy_from_slice(value);
                    found = Some(into);
                    mask(into)?
                }
                Some(_) => mask(value)?,
            };
            if over.len() != value.len() {
                return Err(format!("secrets: {name}: the placeholder's length differs"));
            }
            value.copy_from_slice(&over);
        }
        Ok(found)
    }

    /// The whole file `f` (at most `limit` bytes), read with read(2) into the vault.
    pub fn read_file(&self, f: BorrowedFd<'_>, limit: usize) -> Result<&'static [u8], String> {
        let buf = self.reserve(limit + 1)?;
        let mut got = 0;
        while got < buf.len() {
            // SAFETY: read(2) into the unfilled part of a vault range of ours.
            let n = unsafe {
                libc::read(
                    f.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    buf.len() - got,
                )
            };
            match n {
                0 => break,
                n if n > 0 => got += n as usize,
                _ if crate::sys::last_errno() == libc::EINTR => {}
                _ => return Err(std::io::Error::last_os_error().to_string()),
            }
        }
        if got > limit {
            return Err(format!("larger than {limit} bytes"));
        }
        Ok(&buf[..got])
    }
}

/// Pointers to every `name=...` entry of the environment block.
fn env_entries(name: &str) -> Vec<*mut c_char> {
    let mut out = Vec::new();
    let key = name.as_bytes();
    // SAFETY: `environ` is the NULL-terminated array of NUL-terminated strings the C library
    // keeps; read here before any thread exists that could change it.
    unsafe {
        let mut p = *std::ptr::addr_of!(environ);
        if p.is_null() {
            return out;
        }
        while !(*p).is_null() {
            let e = *p;
            let len = libc::strlen(e);
            let bytes = std::slice::from_raw_parts(e.cast::<u8>(), len);
            if bytes.len() > key.len() && bytes.starts_with(key) && bytes[key.len()] == b'=' {
                out.push(e);
            }
            p = p.add(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_sees_zeros() {
        let v = vault().unwrap();
        let b = v.reserve(16).unwrap();
        b.copy_from_slice(b"0123456789abcdef");
        let (r, w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only reads memory and writes one byte to a pipe, then _exits.
        match unsafe { libc::fork() } {
            0 => unsafe {
                let zero = b.iter().all(|x| *x == 0);
                libc::write(w.as_raw_fd(), [zero as u8].as_ptr().cast(), 1);
                libc::_exit(0);
            },
            pid => {
                let mut got = [9u8];
                nix::unistd::read(&r, &mut got).unwrap();
                let mut st = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(pid, &mut st, 0) };
                assert_eq!(got[0], 1, "the child saw the vault's bytes");
                assert_eq!(b, b"0123456789abcdef");
            }
        }
    }
}

//! Where the unit tests write their fixtures (tests only).
//!
//! Not `/tmp`: several tests need a directory no other user can write (the gate and the
//! workspace refuse world-writable places), and some need a disk filesystem rather than tmpfs.
//! So the crate's `target/`, owned by whoever builds it; or `$SANDBOX_RUN_TEST_TMP` when set:
//! the rootless pass of `scripts/test` runs the unit tests as an unprivileged user against a
//! target dir root built, and points this at a directory that user owns.

use std::path::PathBuf;

/// `$SANDBOX_RUN_TEST_TMP` or `<crate>/target`, created and canonical.
pub(crate) fn base() -> PathBuf {
    let base = std::env::var_os("SANDBOX_RUN_TEST_TMP")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&base).unwrap_or_else(|e| panic!("{}: {e}", base.display()));
    std::fs::canonicalize(&base).unwrap_or_else(|e| panic!("{}: {e}", base.display()))
}

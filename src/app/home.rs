//! `sandbox-run home PROFILE`: the kept home for a profile, made (and seeded) when asked.

use super::resolve::load_profile;
use super::Fail;

/// `sandbox-run home PROFILE`: the caller's kept home for PROFILE, made when missing.
pub(super) fn home_command(
    name: &str,
    seed: &[std::path::PathBuf],
    user: Option<&str>,
    verbose: u8,
    quiet: bool,
) -> Result<i32, Fail> {
    let p = load_profile(name)?;
    let me = nix::unistd::geteuid().as_raw();
    let (uid, gid) = match user {
        Some(u) => crate::home::seed::user_ids(u).map_err(Fail::usage)?,
        None => (me, nix::unistd::getegid().as_raw()),
    };
    if uid != me && me != 0 {
        return Err(Fail::usage(
            "home --user: only root may make or seed another user's kept home",
        ));
    }
    let (base, below) = crate::home::location(
        uid,
        me,
        |k| std::env::var(k).ok(),
        crate::state::passwd_home(uid),
        &p.name,
    )
    .map_err(Fail::usage)?;
    let dir = crate::home::ensure(&base, &below, uid, gid).map_err(Fail::usage)?;
    if !seed.is_empty() {
        let cwd = std::env::current_dir().map_err(|e| Fail::usage(format!("seed: cwd: {e}")))?;
        let done = crate::home::seed::seed(&dir, seed, &cwd, verbose > 0, &mut |l| {
            eprintln!("sandbox-run: {l}")
        })
        .map_err(Fail::usage)?;
        if !quiet {
            eprintln!("sandbox-run: {}", done.summary(&dir));
        }
    }
    println!("{}", dir.display());
    Ok(0)
}

//! The sandbox's `$HOME` when a profile keeps it (`[filesystem] home = "persist"`, `--home
//! persist`), and the minimal git config every sandbox home gets.
//!
//! **Where.** `STATE/sandbox-run/home/<profile>`, where STATE is `$XDG_STATE_HOME` (when
//! absolute) or `~/.local/state` of the user the workload runs as. When root runs a repo
//! owned by someone else, the workload runs as that user ([`crate::plan`]), so the directory
//! is that user's: under their passwd home, owned by them (root's `$XDG_STATE_HOME` does not
//! count then). A root-owned repo run by root uses root's.
//!
//! **How it is made** ([`ensure`]): from the (canonical) base, one component at a time, each
//! opened with `O_NOFOLLOW` (a symlink anywhere on the way is refused, never followed), each
//! missing one made 0700 and, when root makes it for another user, given to that user. The
//! directories sandbox-run owns (`sandbox-run/`, `home/` and the profile's) must be
//! directories owned by the user; the profile's is set to 0700 each run.
//!
//! **What it is not.** Never the user's real home, `~/.claude` or `~/.codex`: it starts empty,
//! and the user seeds it (`sandbox-run home PROFILE` prints it). Whatever the command leaves
//! there, the next run of the same profile sees: its settings and hooks included (see
//! `docs/home.md`), so a command can make the next run under that profile run code of its
//! choosing; still inside the sandbox, never on the host.
//!
//! **git.** The caller's `user.name` and `user.email`, read from the host's global git config
//! files without running git ([`git_identity`]), are written to `$HOME/.gitconfig` inside by
//! pid 1 before the workload starts ([`write_gitconfig`]), and nothing else of the host's git
//! config: no include, alias, hook or helper.

use crate::hostfs::{Dir, Tree};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

pub mod seed;

/// The directory name of a profile's home: its name when that is a plain word, else (a
/// profile given by path) the file's stem, sanitized, and a hash of the whole path, so two
/// profile files of the same name elsewhere do not share a home.
pub fn key(profile: &str) -> String {
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    };
    if plain(profile) {
        return profile.to_string();
    }
    let stem: String = Path::new(profile)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    // FNV-1a, 64 bits: a name, not a secret.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in profile.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{stem}-{h:016x}")
}

/// The state directory under which the homes of user `uid` live, and the components below it
/// (`sandbox-run`, `home`, the key): [`crate::state::location`]. `caller_uid`, `env`: the
/// caller's; `passwd_home`: the user's home from the passwd file.
pub fn location(
    uid: u32,
    caller_uid: u32,
    env_var: impl Fn(&str) -> Option<String>,
    passwd_home: Option<PathBuf>,
    profile: &str,
) -> Result<(PathBuf, Vec<String>), String> {
    let (base, mut below) = crate::state::location(uid, caller_uid, env_var, passwd_home, "home")?;
    below.extend(["home".to_string(), key(profile)]);
    Ok((base, below))
}

/// Make (or check) the persistent home `base/below...` for `uid`:`gid` without following any
/// link, and return its path ([`crate::state::ensure`]). The last three components are
/// sandbox-run's own: each must be a directory owned by `uid`; the last is made 0700.
pub fn ensure(base: &Path, below: &[String], uid: u32, gid: u32) -> Result<PathBuf, String> {
    crate::state::ensure(base, below, 3, crate::layers::ns::Ids { uid, gid }, "home")
}

/// `user.name` and `user.email` of the caller's global git config: `$XDG_CONFIG_HOME/git/config`
/// (or `~/.config/git/config`), then `~/.gitconfig`, the later winning as in git. Read
/// without running git, through [`crate::hostfs`] (no link followed in the file's name,
/// nothing that blocks, 1 MiB at most); `include` and `includeIf` are not followed. Values
/// with control characters are ignored.
pub fn git_identity(home: Option<&str>, xdg_config: Option<&str>) -> Vec<(String, String)> {
    let mut files = Vec::new();
    match (xdg_config.filter(|x| x.starts_with('/')), home) {
        (Some(x), _) => files.push(Path::new(x).join("git/config")),
        (None, Some(h)) if h.starts_with('/') => {
            files.push(Path::new(h).join(".config/git/config"))
        }
        _ => {}
    }
    if let Some(h) = home.filter(|h| h.starts_with('/')) {
        files.push(Path::new(h).join(".gitconfig"));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for f in files {
        let (Some(dir), Some(name)) = (f.parent(), f.file_name()) else {
            continue;
        };
        let text = Dir::open(dir)
            .and_then(|d| d.read_small(Path::new(name), 1 << 20))
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        for (k, v) in user_values(&text) {
            out.retain(|(n, _)| *n != k);
            out.push((k, v));
        }
    }
    out.sort();
    out
}

/// `name` and `email` of the `[user]` sections of a git config text (the last of each).
fn user_values(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_user = false;
    for line in text.lines() {
        let mut l = line.trim();
        if let Some(rest) = l.strip_prefix('[') {
            let name = rest.split([']', ' ', '"']).next().unwrap_or("");
            in_user = name.eq_ignore_ascii_case("user") && !rest.contains('"');
            l = rest.split_once(']').map(|(_, r)| r.trim()).unwrap_or("");
        }
        if !in_user {
            continue;
        }
        let Some((k, v)) = l.split_once('=') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        if k != "name" && k != "email" {
            continue;
        }
        let Some(v) = config_value(v) else { continue };
        if v.is_empty() || v.chars().any(char::is_control) {
            continue;
        }
        out.retain(|(n, _)| *n != k);
        out.push((k, v));
    }
    out
}

/// A git config value: quotes removed, `\"`, `\\`, `\t` and `\n` unescaped (a control
/// character then makes the caller drop it), a comment (`#`, `;` outside quotes) cut.
fn config_value(v: &str) -> Option<String> {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                c => out.push(c),
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    Some(out.trim_end().to_string())
}

/// The `.gitconfig` made in every sandbox home: only `[user]` name and email.
pub fn gitconfig_text(identity: &[(String, String)]) -> Option<String> {
    if identity.is_empty() {
        return None;
    }
    let mut s = String::from("# made by sandbox-run from the caller's user.name and user.email; rewritten each run\n[user]\n");
    for (k, v) in identity {
        let v = v.replace('\\', "\\\\").replace('"', "\\\"");
        s.push_str(&format!("\t{k} = \"{v}\"\n"));
    }
    Some(s)
}

/// Write `text` as `home/.gitconfig` (pid 1, in the new root, before the workload starts):
/// a new file under a name nobody can guess, renamed over whatever is there, so a link, a
/// FIFO or a directory the last run left there is replaced, never followed, and a name it
/// planted cannot make the write fail.
pub fn write_gitconfig(home: &Path, text: &str) -> std::io::Result<()> {
    let dir = Dir::open(home)?;
    Tree::from_fd(dir.fd().try_clone()?).put_bytes(OsStr::new(".gitconfig"), text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_plain_names() {
        assert_eq!(key("adapter"), "adapter");
        let a = key("/tmp/x/my profile.toml");
        assert!(a.starts_with("my_profile-"), "{a}");
        assert_ne!(a, key("/tmp/y/my profile.toml"));
        assert!(!key("../..").contains('/'));
        assert!(!key(".hidden").starts_with('.'));
    }

    #[test]
    fn identity_from_user_sections_only() {
        let text = "[core]\n\tname = no\n[user]\n\tname = \"Ada \\\"L\\\"\" ; c\n\temail = a@b.c # x\n[user \"x\"]\n\tname = no\n[User]\n Email = last@b.c\n[include]\n\tpath = /etc/x\n";
        assert_eq!(
            user_values(text),
            vec![
                ("name".to_string(), "Ada \"L\"".to_string()),
                ("email".to_string(), "last@b.c".to_string())
            ]
        );
        assert!(user_values("[user]\nname = \"a\\nb\"\n").is_empty());
        let t = gitconfig_text(&[("name".into(), "A \"q\" \\".into())]).unwrap();
        assert!(t.contains("name = \"A \\\"q\\\" \\\\\""), "{t}");
        assert_eq!(user_values(&t), vec![("name".into(), "A \"q\" \\".into())]);
    }

    /// Root making another user's kept home: every directory it makes is that user's, and a
    /// link the user planted on the way is refused, not followed (root only).
    #[test]
    fn root_makes_another_users_home_without_following_links() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let base = std::env::temp_dir().join(format!("sandbox-run-home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let user = base.join("alice");
        std::fs::create_dir_all(&user).unwrap();
        std::os::unix::fs::chown(&user, Some(4321), Some(4321)).unwrap();
        let (_, below) = location(4321, 0, |_| None, Some(user.clone()), "ci").unwrap();
        let dir = ensure(&user, &below, 4321, 4321).unwrap();
        assert_eq!(dir, user.join(".local/state/sandbox-run/home/ci"));
        for d in dir.ancestors().take_while(|d| *d != user) {
            assert_eq!(std::fs::metadata(d).unwrap().uid(), 4321, "{}", d.display());
        }
        // the user swaps .local/state for a link to a directory of root's
        let roots = base.join("roots");
        std::fs::create_dir_all(&roots).unwrap();
        std::fs::remove_dir_all(user.join(".local/state")).unwrap();
        std::os::unix::fs::symlink(&roots, user.join(".local/state")).unwrap();
        let e = ensure(&user, &below, 4321, 4321).unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(std::fs::read_dir(&roots).unwrap().count(), 0);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn location_is_the_users_own() {
        let env = |k: &str| match k {
            "HOME" => Some("/root".to_string()),
            "XDG_STATE_HOME" => Some("/x/state".to_string()),
            _ => None,
        };
        let (b, below) = location(0, 0, env, None, "ci").unwrap();
        assert_eq!(
            (b, below.join("/")),
            (PathBuf::from("/x/state"), "sandbox-run/home/ci".into())
        );
        // root running alice's repo: alice's passwd home, not root's variables
        let (b, below) = location(1001, 0, env, Some("/home/alice".into()), "ci").unwrap();
        assert_eq!(
            (b, below.join("/")),
            (
                PathBuf::from("/home/alice"),
                ".local/state/sandbox-run/home/ci".into()
            )
        );
        assert!(location(1001, 0, env, None, "ci").is_err());
    }
}

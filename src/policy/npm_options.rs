//! What npm's option parser (nopt, npm 11) does with an option word, as far as the gate needs
//! to know: which configuration keys it sets and whether it swallows the next word.
//!
//! Two readings are provided:
//! * [`lenient`] errs on the side of *finding* a dangerous key: it expands shorthands and
//!   combined short flags, lower-cases, maps `_` to `-`, strips `no-` and resolves unique
//!   abbreviations (nopt accepts `--node-opt=x` for `--node-options=x`).
//! * [`strict`] accepts only spellings whose effect on the *next word* is certain. Before the
//!   subcommand the gate must agree with npm on which word is the subcommand: an option it
//!   mis-reads as taking a value (or not) would let `npm --flag exec sh test` look like
//!   `npm test`.

/// Boolean configuration keys (npm 11 definitions): never swallow the next word.
pub(crate) const BOOL_KEYS: &[&str] = &[
    "all",
    "allow-same-version",
    "audit",
    "bin-links",
    "browser",
    "bypass-2fa",
    "color",
    "commit-hooks",
    "dangerously-allow-all-scripts",
    "description",
    "dev",
    "diff-ignore-all-space",
    "diff-name-only",
    "diff-no-prefix",
    "diff-text",
    "dry-run",
    "engine-strict",
    "expect-results",
    "force",
    "foreground-scripts",
    "format-package-lock",
    "fund",
    "git-tag-version",
    "global",
    "global-style",
    "if-present",
    "ignore-scripts",
    "include-staged",
    "include-workspace-root",
    "include-attestations",
    "init-private",
    "install-links",
    "json",
    "legacy-bundling",
    "legacy-peer-deps",
    "link",
    "long",
    "offline",
    "omit-lockfile-registry-resolved",
    "optional",
    "package-lock",
    "package-lock-only",
    "parseable",
    "allow-scripts-pending",
    "allow-scripts-pin",
    "prefer-dedupe",
    "prefer-offline",
    "prefer-online",
    "production",
    "progress",
    "provenance",
    "read-only",
    "rebuild-bundle",
    "save",
    "save-bundle",
    "save-dev",
    "save-exact",
    "save-optional",
    "save-peer",
    "save-prod",
    "packages-all",
    "shrinkwrap",
    "sign-git-commit",
    "sign-git-tag",
    "strict-peer-deps",
    "strict-allow-scripts",
    "strict-ssl",
    "timing",
    "unicode",
    "update-notifier",
    "usage",
    "version",
    "versions",
    "workspaces",
    "workspaces-update",
    "yes",
];

/// Configuration keys that take a value (npm 11 definitions): swallow the next word unless
/// written as `--key=value`.
pub(crate) const VALUE_KEYS: &[&str] = &[
    "_auth",
    "access",
    "allow-directory",
    "allow-file",
    "allow-git",
    "allow-remote",
    "allow-scripts",
    "also",
    "audit-level",
    "auth-type",
    "before",
    "ca",
    "cache",
    "cache-max",
    "cache-min",
    "cafile",
    "call",
    "cert",
    "cidr",
    "cpu",
    "depth",
    "diff",
    "diff-dst-prefix",
    "diff-src-prefix",
    "diff-unified",
    "editor",
    "expect-result-count",
    "expires",
    "fetch-retries",
    "fetch-retry-factor",
    "fetch-retry-maxtimeout",
    "fetch-retry-mintimeout",
    "fetch-timeout",
    "git",
    "globalconfig",
    "heading",
    "https-proxy",
    "include",
    "init-author-email",
    "init-author-name",
    "init-author-url",
    "init-license",
    "init-module",
    "init-type",
    "init-version",
    "init.author.email",
    "init.author.name",
    "init.author.url",
    "init.license",
    "init.module",
    "init.version",
    "install-strategy",
    "key",
    "libc",
    "local-address",
    "location",
    "lockfile-version",
    "loglevel",
    "logs-dir",
    "logs-max",
    "name",
    "maxsockets",
    "message",
    "min-release-age",
    "min-release-age-exclude",
    "node-gyp",
    "node-options",
    "noproxy",
    "omit",
    "only",
    "orgs",
    "os",
    "otp",
    "package",
    "pack-destination",
    "packages",
    "prefix",
    "preid",
    "provenance-file",
    "proxy",
    "registry",
    "replace-registry-host",
    "save-prefix",
    "sbom-format",
    "sbom-type",
    "scope",
    "scopes",
    "packages-and-scopes-permission",
    "orgs-permission",
    "password",
    "token-description",
    "script-shell",
    "searchexclude",
    "searchlimit",
    "searchopts",
    "searchstaleness",
    "shell",
    "tag",
    "tag-version-prefix",
    "umask",
    "user-agent",
    "userconfig",
    "viewer",
    "which",
    "workspace",
];

/// npm's shorthands: `(shorthand, key, carries its own value)`. `-d` is `--loglevel info`, so it
/// does not swallow the next word although `loglevel` takes a value.
pub(crate) const SHORTHANDS: &[(&str, &str, bool)] = &[
    ("enjoy-by", "before", false),
    ("d", "loglevel", true),
    ("dd", "loglevel", true),
    ("ddd", "loglevel", true),
    ("quiet", "loglevel", true),
    ("q", "loglevel", true),
    ("s", "loglevel", true),
    ("silent", "loglevel", true),
    ("verbose", "loglevel", true),
    ("desc", "description", false),
    ("help", "usage", false),
    ("local", "global", false),
    ("n", "yes", false),
    ("no", "yes", false),
    ("porcelain", "parseable", false),
    ("readonly", "read-only", false),
    ("reg", "registry", false),
    ("iwr", "include-workspace-root", false),
    ("ws", "workspaces", false),
    ("a", "all", false),
    ("c", "call", false),
    ("f", "force", false),
    ("g", "global", false),
    ("L", "location", false),
    ("l", "long", false),
    ("m", "message", false),
    ("p", "parseable", false),
    ("C", "prefix", false),
    ("S", "save", false),
    ("B", "save-bundle", false),
    ("D", "save-dev", false),
    ("E", "save-exact", false),
    ("O", "save-optional", false),
    ("P", "save-prod", false),
    ("?", "usage", false),
    ("H", "usage", false),
    ("h", "usage", false),
    ("v", "version", false),
    ("w", "workspace", false),
    ("y", "yes", false),
];

/// Is `word` an option word for nopt (`-x`, `--x`, but not `-` or `--`)?
pub(crate) fn is_option(word: &str) -> bool {
    word.len() > 1 && word.starts_with('-') && word != "--"
}

fn shorthand(key: &str) -> Option<(&'static str, bool)> {
    SHORTHANDS
        .iter()
        .find(|(s, _, _)| *s == key)
        .map(|(_, k, carries)| (*k, *carries))
}

fn is_value_key(key: &str) -> bool {
    VALUE_KEYS.contains(&key)
}

fn is_known_key(key: &str) -> bool {
    BOOL_KEYS.contains(&key) || VALUE_KEYS.contains(&key)
}

/// nopt resolves an unambiguous prefix of a known key to that key.
fn unique_abbreviation(prefix: &str) -> Option<&'static str> {
    let mut hits = BOOL_KEYS
        .iter()
        .chain(VALUE_KEYS)
        .filter(|k| k.starts_with(prefix));
    match (hits.next(), hits.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// One configuration key an option word sets, with its inline value (after `=`) and whether
/// the next word would be its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    pub key: String,
    pub inline: Option<String>,
    pub takes_next: bool,
}

/// Every key `word` might set, read generously (see the module docs). Empty for non-options.
pub(crate) fn lenient(word: &str) -> Vec<Setting> {
    if !is_option(word) {
        return Vec::new();
    }
    let single_dash = !word.starts_with("--");
    let body = word.trim_start_matches('-');
    let (raw_key, inline) = match body.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (body, None),
    };
    let setting = |key: &str, carries: bool| Setting {
        key: key.to_owned(),
        inline: inline.clone(),
        takes_next: inline.is_none() && !carries && is_value_key(key),
    };
    if let Some((key, carries)) = shorthand(raw_key) {
        return vec![setting(key, carries)];
    }
    // `-gC dir`: a cluster of one-letter shorthands; only the last may take the next word.
    if single_dash && raw_key.chars().count() > 1 {
        let letters: Option<Vec<(&str, bool)>> = raw_key
            .chars()
            .map(|c| shorthand(c.encode_utf8(&mut [0; 4])))
            .collect();
        if let Some(letters) = letters {
            let last = letters.len() - 1;
            return letters
                .iter()
                .enumerate()
                .map(|(i, (key, carries))| Setting {
                    takes_next: i == last && setting(key, *carries).takes_next,
                    ..setting(key, *carries)
                })
                .collect();
        }
    }
    let mut key = raw_key.to_lowercase().replace('_', "-");
    while let Some(rest) = key.strip_prefix("no-") {
        key = rest.to_owned();
    }
    if let Some((k, carries)) = shorthand(&key) {
        return vec![setting(k, carries)];
    }
    let key = if is_known_key(&key) {
        key
    } else {
        unique_abbreviation(&key).map_or(key, str::to_owned)
    };
    vec![setting(&key, false)]
}

/// How an option word before the subcommand affects the next word, when certain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arity {
    /// Never swallows the next word.
    Flag,
    /// Swallows the next word (value option written without `=`).
    TakesNext,
}

/// The key and arity of `word` if it is spelled exactly as npm knows it: `--key`,
/// `--no-<boolean key>`, `--key=value`, `-<shorthand>`, `--<shorthand>`, `-<shorthand>=value`.
/// `None` for anything else (unknown keys, abbreviations, clusters, odd case or underscores).
pub(crate) fn strict(word: &str) -> Option<(&'static str, Arity)> {
    let (head, has_inline) = match word.split_once('=') {
        Some((h, _)) => (h, true),
        None => (word, false),
    };
    let arity = |key: &str, carries: bool| {
        if has_inline || carries || !is_value_key(key) {
            Arity::Flag
        } else {
            Arity::TakesNext
        }
    };
    if let Some(long) = head.strip_prefix("--") {
        if let Some(key) = BOOL_KEYS.iter().chain(VALUE_KEYS).find(|k| **k == long) {
            return Some((key, arity(key, false)));
        }
        if let Some(key) = long
            .strip_prefix("no-")
            .and_then(|k| BOOL_KEYS.iter().find(|b| **b == k))
        {
            return Some((key, Arity::Flag));
        }
        if long.chars().count() > 1 {
            if let Some((key, carries)) = shorthand(long) {
                return Some((key, arity(key, carries)));
            }
        }
        return None;
    }
    let short = head.strip_prefix('-')?;
    let (key, carries) = shorthand(short)?;
    Some((key, arity(key, carries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(word: &str) -> Vec<String> {
        lenient(word).into_iter().map(|s| s.key).collect()
    }

    #[test]
    fn lenient_finds_disguised_keys() {
        assert_eq!(keys("--node-options=x"), ["node-options"]);
        assert_eq!(keys("--node_options=x"), ["node-options"]);
        assert_eq!(keys("--NODE-OPTIONS=x"), ["node-options"]);
        assert_eq!(keys("--node-opt=x"), ["node-options"]);
        assert_eq!(keys("-node-options=x"), ["node-options"]);
        assert_eq!(keys("---node-options=x"), ["node-options"]);
        assert_eq!(keys("--no-node-options"), ["node-options"]);
        assert_eq!(keys("--script-sh"), ["script-shell"]);
        assert_eq!(keys("-pc"), ["parseable", "call"]);
        assert_eq!(keys("-C"), ["prefix"]);
        assert_eq!(keys("--pre"), ["pre"]);
        assert!(keys("test").is_empty());
        let gc = lenient("-gC");
        assert!(gc[1].takes_next && !gc[0].takes_next);
        assert!(!lenient("-d")[0].takes_next);
        assert!(lenient("--prefix")[0].takes_next);
        assert!(!lenient("--prefix=x")[0].takes_next);
    }

    #[test]
    fn strict_knows_exact_spellings_only() {
        assert_eq!(strict("--prefix"), Some(("prefix", Arity::TakesNext)));
        assert_eq!(strict("--prefix=x"), Some(("prefix", Arity::Flag)));
        assert_eq!(strict("-C"), Some(("prefix", Arity::TakesNext)));
        assert_eq!(strict("-d"), Some(("loglevel", Arity::Flag)));
        assert_eq!(strict("--silent"), Some(("loglevel", Arity::Flag)));
        assert_eq!(strict("--no-audit"), Some(("audit", Arity::Flag)));
        assert_eq!(strict("-v"), Some(("version", Arity::Flag)));
        assert_eq!(strict("--no-prefix"), None);
        assert_eq!(strict("--pre_id"), None);
        assert_eq!(strict("--pref"), None);
        assert_eq!(strict("-gC"), None);
        assert_eq!(strict("--foo"), None);
    }
}

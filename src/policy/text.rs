//! Lexical checks that look only at the characters of words, plus helpers that make words
//! safe to quote in a human-readable reason.

use super::deny::Deny;
use super::split::{Quoting, Word};

/// Longest command we look at (all words together). Longer input is denied before any other
/// work, so a hostile multi-megabyte command costs nothing.
pub const MAX_COMMAND_BYTES: usize = 256 * 1024;
/// Longest single word: Linux's `MAX_ARG_STRLEN` (32 pages); `execve` would fail with E2BIG.
pub const MAX_WORD_BYTES: usize = 128 * 1024;

/// Words that are shell operators. In the argv form nothing interprets them, so a caller that
/// passes one almost certainly believes a shell will run the command (`npm test && rm -rf /`).
const SHELL_OPERATOR_WORDS: &[&str] = &[
    "&&", "||", ";", "|", "&", ">", "<", ">>", "<<", "<<<", "2>", "2>&1", "&>", ">|", ";;", "|&",
    "(", ")", "<>", "&>>", "1>", "1>>", "2>>", ">&", "<&",
];

/// Characters that are operators when unquoted in a shell command line.
const SHELL_OPERATOR_CHARS: &[char] = &[';', '&', '|', '>', '<', '(', ')'];

/// Control characters: C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F). Newline, CR,
/// NUL, ESC and friends can split a command in a logging shell, hide text on a terminal or be
/// truncated by C APIs, so no word may contain one.
pub fn is_control(c: char) -> bool {
    c.is_control()
}

/// True for characters that must never appear raw in a reason: those that do not show
/// themselves (controls, format characters such as zero-width and bidi ones, separators;
/// see `crate::visible`).
pub fn needs_escape(c: char) -> bool {
    crate::visible::hides(c)
}

/// The visible escape of one character: `\n`, `\u{1b}`, `\u{202e}` ... (`crate::visible`'s).
pub fn escape(c: char) -> String {
    crate::visible::escape(c)
}

/// Returns `s` with every control, bidi or zero-width character (and `"` and `\`) escaped,
/// cut after `limit` characters. The result never contains a raw control character.
pub fn clean(s: &str, limit: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == limit {
            out.push_str("...");
            break;
        }
        if c == '"' {
            out.push_str("\\\"");
        } else if needs_escape(c) || c == '\\' {
            out.push_str(&escape(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Quotes a word for a reason: `"..."`, escaped and shortened.
pub fn quote(s: &str) -> String {
    format!("\"{}\"", clean(s, 80))
}

/// Quotes a path for a reason.
pub fn quote_path(p: &std::path::Path) -> String {
    format!("\"{}\"", clean(&p.to_string_lossy(), 200))
}

/// Rule `control-character`: the first word containing a control character.
pub fn check_control<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<(), Deny> {
    for word in words {
        if let Some(c) = word.chars().find(|c| is_control(*c)) {
            return Err(control_deny(word, c));
        }
    }
    Ok(())
}

/// Control characters a free-text argument (a prompt) may hold: newline, tab and CR. ESC,
/// DEL, NUL (impossible in argv anyway) and the rest stay refused there: a prompt is text,
/// and an escape sequence in an argument is how a terminal that shows it (a log, `ps`, the
/// agent's own echo) gets its text hidden or rewritten. Binary data goes through `--stdin`.
pub fn is_free_text_control(c: char) -> bool {
    matches!(c, '\n' | '\t' | '\r')
}

/// Rule `control-character` for the arguments of a `free_text` program.
pub fn check_free_text<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<(), Deny> {
    for word in words {
        if let Some(c) = word
            .chars()
            .find(|c| is_control(*c) && !is_free_text_control(*c))
        {
            return Err(control_deny(word, c));
        }
    }
    Ok(())
}

/// The denial for a control character `c` found in `word`.
pub fn control_deny(word: &str, c: char) -> Deny {
    Deny::denied(
        "control-character",
        Some(word),
        format!(
            "{} contains the control character {} (newline, CR, tab, NUL and ESC can smuggle \
             commands or hide text)",
            quote(word),
            escape(c)
        ),
    )
}

/// Rule `command-substitution`: `$(` or a backtick anywhere, quoted or not. Even where it would
/// be literal, it signals that the author expects a shell to run something.
pub fn check_substitution<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<(), Deny> {
    for word in words {
        if word.contains("$(") || word.contains('`') {
            return Err(Deny::denied(
                "command-substitution",
                Some(word),
                format!(
                    "{} contains command substitution (`$(` or a backtick); commands never run \
                     through a shell",
                    quote(word)
                ),
            ));
        }
    }
    Ok(())
}

/// Rule `shell-operator` for the argv form: a word that *is* an operator such as `&&` or `|`.
pub fn check_operator_words<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<(), Deny> {
    for word in words {
        if SHELL_OPERATOR_WORDS.contains(&word) {
            return Err(Deny::denied(
                "shell-operator",
                Some(word),
                format!(
                    "{} is a shell operator; the command runs without a shell, so it would be \
                     passed as a plain argument",
                    quote(word)
                ),
            ));
        }
    }
    Ok(())
}

/// Rule `shell-operator` for the `--command` form: an unquoted `; & | > < ( )`. A shell would
/// chain, pipe, redirect or background here; we never run a shell, so we refuse rather than
/// silently change the meaning.
pub fn check_unquoted_operators(words: &[Word]) -> Result<(), Deny> {
    for word in words {
        let hit = word
            .chars()
            .find(|(c, q)| *q == Quoting::Unquoted && SHELL_OPERATOR_CHARS.contains(c));
        if let Some((c, _)) = hit {
            return Err(Deny::denied(
                "shell-operator",
                Some(word.as_str()),
                format!(
                    "{} contains the unquoted shell operator '{}'; commands never run through a \
                     shell (quote it to pass it literally)",
                    quote(word.as_str()),
                    c
                ),
            ));
        }
    }
    Ok(())
}

/// Characters after `$` that make a shell expand something: names, positional and special
/// parameters, `${...}`, `$'...'` and `$"..."`.
fn starts_expansion(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '_' | '{' | '(' | '@' | '*' | '#' | '?' | '$' | '!' | '-')
}

/// What a shell would expand in this word, if anything. One pass, so a hostile word of
/// 128 KiB costs linear time.
fn expansion_in(word: &Word) -> Option<&'static str> {
    let chars: Vec<(char, Quoting)> = word.chars().collect();
    let mut braces = BraceScan::default();
    for (i, &(c, q)) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        let after_assign = i > 0 && chars[i - 1] == ('=', Quoting::Unquoted);
        match (c, q) {
            // A shell expands `$x` unquoted *and* inside double quotes.
            ('$', Quoting::Unquoted | Quoting::Double) => match next {
                Some((n, nq)) if nq == q && starts_expansion(n) => return Some("a variable"),
                // `$'..'` / `$".."`: the next character came from a quote that started here.
                Some((_, Quoting::Single | Quoting::Double)) if q == Quoting::Unquoted => {
                    return Some("a $-quoted string")
                }
                _ => {}
            },
            ('~', Quoting::Unquoted) if i == 0 || after_assign => return Some("a tilde"),
            ('*' | '?' | '[', Quoting::Unquoted) => return Some("a glob pattern"),
            (c, Quoting::Unquoted) if braces.step(c, next) => return Some("a brace expansion"),
            _ => {}
        }
    }
    None
}

/// Brace expansion (`{a,b}`, `{1..3}`) needs an unquoted `{`, then an unquoted `,` or `..`,
/// then an unquoted `}`. `{}` and `{x}` stay literal. Nesting is not tracked, which can only
/// find more expansions, never fewer.
#[derive(Default)]
struct BraceScan {
    open: bool,
    separated: bool,
}

impl BraceScan {
    /// Feeds one unquoted character; true once a brace expansion is complete.
    fn step(&mut self, c: char, next: Option<(char, Quoting)>) -> bool {
        match c {
            '{' => self.open = true,
            ',' if self.open => self.separated = true,
            '.' if self.open && next == Some(('.', Quoting::Unquoted)) => self.separated = true,
            '}' => return self.separated,
            _ => {}
        }
        false
    }
}

/// Rule `shell-expansion` (`--command` form): `$NAME`, `${..}`, `$1`, `~`, globs and braces
/// would be expanded by a shell. We do not expand anything, so the command would receive
/// different words than its author expects; the author must quote them (single quotes) to
/// pass them literally.
pub fn check_expansions(words: &[Word]) -> Result<(), Deny> {
    for word in words {
        if let Some(what) = expansion_in(word) {
            return Err(Deny::denied(
                "shell-expansion",
                Some(word.as_str()),
                format!(
                    "{} contains {what} that a shell would expand; sandbox-run does not expand \
                     variables, globs or tildes (single-quote the word to pass it literally)",
                    quote(word.as_str())
                ),
            ));
        }
    }
    Ok(())
}

/// Rule `shell-syntax` (`--command` form): an unquoted `#` starting a word begins a comment in
/// a shell, so the rest of the line would be dropped there but passed here.
pub fn check_comments(words: &[Word]) -> Result<(), Deny> {
    for word in words {
        if let Some(('#', Quoting::Unquoted)) = word.chars().next() {
            return Err(Deny::denied(
                "shell-syntax",
                Some(word.as_str()),
                format!(
                    "{} starts a shell comment; remove the comment or quote the word",
                    quote(word.as_str())
                ),
            ));
        }
    }
    Ok(())
}

/// True for `NAME=...` with a valid shell variable name: in command position a shell treats it
/// as an environment assignment (`NODE_OPTIONS=--require=x node t.js`).
pub fn is_env_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::split::split_command;

    fn expansion(s: &str) -> Option<&'static str> {
        let words = split_command(s).expect("splits");
        words.iter().find_map(expansion_in)
    }

    #[test]
    fn clean_escapes_controls_and_bidi() {
        assert_eq!(clean("a\nb\u{1b}c", 80), "a\\nb\\u{1b}c");
        assert_eq!(clean("\u{85}", 80), "\\u{85}");
        assert_eq!(clean("x\u{202e}y", 80), "x\\u{202e}y");
        assert_eq!(clean("abcdef", 3), "abc...");
        assert!(!clean("\u{2028}", 80).contains('\u{2028}'));
    }

    #[test]
    fn expansions() {
        assert_eq!(expansion("$HOME"), Some("a variable"));
        assert_eq!(expansion("\"$HOME\""), Some("a variable"));
        assert_eq!(expansion("${x}"), Some("a variable"));
        assert_eq!(expansion("$1"), Some("a variable"));
        assert_eq!(expansion("$'abc'"), Some("a $-quoted string"));
        assert_eq!(expansion("'$HOME'"), None);
        assert_eq!(expansion("\\$HOME"), None);
        assert_eq!(expansion("\"\\$HOME\""), None);
        assert_eq!(expansion("a$"), None);
        assert_eq!(expansion("~/x"), Some("a tilde"));
        assert_eq!(expansion("--prefix=~/x"), Some("a tilde"));
        assert_eq!(expansion("a~b"), None);
        assert_eq!(expansion("src/*.js"), Some("a glob pattern"));
        assert_eq!(expansion("'src/*.js'"), None);
        assert_eq!(expansion("{a,b}"), Some("a brace expansion"));
        assert_eq!(expansion("x{1..3}"), Some("a brace expansion"));
        assert_eq!(expansion("{}"), None);
        assert_eq!(expansion("{x}"), None);
        assert_eq!(expansion("{a,b"), None);
        assert_eq!(expansion("'{a,b}'"), None);
        assert_eq!(expansion("{a','b}"), None);
        assert_eq!(expansion("a{b}c,d}"), Some("a brace expansion"));
    }

    #[test]
    fn env_assignments() {
        assert!(is_env_assignment("NODE_OPTIONS=--require=x"));
        assert!(is_env_assignment("_=1"));
        assert!(is_env_assignment("a="));
        assert!(!is_env_assignment("=x"));
        assert!(!is_env_assignment("1A=x"));
        assert!(!is_env_assignment("--opt=x"));
        assert!(!is_env_assignment("node"));
    }
}

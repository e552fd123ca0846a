//! POSIX-style word splitting for the `--command` form.
//!
//! The `--command 'npm test -- --grep "a|b"'` form must be turned into an argv *without* ever
//! running a shell. This module performs only the quote-removal part of the shell's token
//! recognition (POSIX XCU 2.2 and 2.3): single quotes, double quotes, backslash escapes and
//! blank-separated words. It never expands anything (no parameters, no globs, no tildes, no
//! command substitution) and it does not interpret operators.
//!
//! Because the gate must later reject *unquoted* shell syntax (`;`, `|`, `$HOME`, ...) while
//! accepting the same characters when quoted, every character of a [`Word`] remembers how it
//! was quoted ([`Quoting`]).

use std::fmt;

/// How one character of a word was written in the command string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoting {
    /// Written bare: a shell would interpret it (operators, `$`, globs ...).
    Unquoted,
    /// Inside `'...'`: always literal.
    Single,
    /// Inside `"..."`: literal except for `$`, `` ` `` and `\` (a shell still expands `$x` here).
    Double,
    /// Preceded by a backslash (outside quotes, or one of `` $ ` " \ `` inside double quotes):
    /// literal.
    Escaped,
}

/// One word produced by [`split_command`]: its text after quote removal plus, for every
/// character of the text, how it was quoted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Word {
    text: String,
    quoting: Vec<Quoting>,
}

impl Word {
    /// Builds a word whose characters all have the same quoting (handy in tests).
    pub fn uniform(text: &str, quoting: Quoting) -> Word {
        Word {
            text: text.to_owned(),
            quoting: vec![quoting; text.chars().count()],
        }
    }

    fn push(&mut self, c: char, q: Quoting) {
        self.text.push(c);
        self.quoting.push(q);
    }

    /// The word after quote removal.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Consumes the word, returning its text.
    pub fn into_string(self) -> String {
        self.text
    }

    /// Iterates over `(character, quoting)` pairs.
    pub fn chars(&self) -> impl Iterator<Item = (char, Quoting)> + '_ {
        self.text.chars().zip(self.quoting.iter().copied())
    }

    /// True when no character of the word was quoted or escaped.
    pub fn is_fully_unquoted(&self) -> bool {
        self.quoting.iter().all(|q| *q == Quoting::Unquoted)
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why a command string could not be split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitError {
    /// A `'` at byte offset `start` has no closing `'`.
    UnterminatedSingleQuote { start: usize },
    /// A `"` at byte offset `start` has no closing `"`.
    UnterminatedDoubleQuote { start: usize },
    /// The string ends with an unescaped backslash (a shell would wait for more input).
    TrailingBackslash { start: usize },
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitError::UnterminatedSingleQuote { start } => {
                write!(f, "single quote at byte {start} is never closed")
            }
            SplitError::UnterminatedDoubleQuote { start } => {
                write!(f, "double quote at byte {start} is never closed")
            }
            SplitError::TrailingBackslash { start } => {
                write!(
                    f,
                    "backslash at byte {start} ends the command (nothing to escape)"
                )
            }
        }
    }
}

impl std::error::Error for SplitError {}

/// Characters that separate words outside quotes. The gate rejects tab and newline as control
/// characters before it splits, so inside the gate only the space separates words; the
/// splitter itself follows POSIX blanks so that it is correct on its own.
fn is_separator(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n')
}

/// Characters a backslash escapes inside double quotes (POSIX XCU 2.2.3). Before any other
/// character the backslash stays literal.
fn escapable_in_double_quotes(c: char) -> bool {
    matches!(c, '$' | '`' | '"' | '\\' | '\n')
}

/// Splits `s` into words like a POSIX shell's tokenizer with quote removal, without any
/// expansion. Operators are *not* recognised here: `a;b` is one word whose `;` is
/// [`Quoting::Unquoted`]; the gate decides what to do with it.
///
/// Rules: blanks separate words; `'...'` is literal; inside `"..."` a backslash escapes only
/// `` $ ` " \ `` and newline; outside quotes a backslash escapes the next character;
/// backslash-newline is a line continuation and disappears. `''` and `""` produce an empty
/// word.
pub fn split_command(s: &str) -> Result<Vec<Word>, SplitError> {
    let mut words = Vec::new();
    // `None` between words; `Some` once any character (or a pair of quotes) started a word.
    let mut current: Option<Word> = None;
    let mut chars = s.char_indices().peekable();

    while let Some((pos, c)) = chars.next() {
        match c {
            c if is_separator(c) => {
                if let Some(word) = current.take() {
                    words.push(word);
                }
            }
            '\\' => match chars.next() {
                None => return Err(SplitError::TrailingBackslash { start: pos }),
                Some((_, '\n')) => {} // line continuation
                Some((_, escaped)) => current
                    .get_or_insert_with(Word::default)
                    .push(escaped, Quoting::Escaped),
            },
            '\'' => {
                let word = current.get_or_insert_with(Word::default);
                loop {
                    match chars.next() {
                        None => return Err(SplitError::UnterminatedSingleQuote { start: pos }),
                        Some((_, '\'')) => break,
                        Some((_, inner)) => word.push(inner, Quoting::Single),
                    }
                }
            }
            '"' => {
                let word = current.get_or_insert_with(Word::default);
                loop {
                    match chars.next() {
                        None => return Err(SplitError::UnterminatedDoubleQuote { start: pos }),
                        Some((_, '"')) => break,
                        Some((_, '\\')) => match chars.peek() {
                            Some(&(_, '\n')) => {
                                chars.next();
                            }
                            Some(&(_, next)) if escapable_in_double_quotes(next) => {
                                chars.next();
                                word.push(next, Quoting::Escaped);
                            }
                            _ => word.push('\\', Quoting::Double),
                        },
                        Some((_, inner)) => word.push(inner, Quoting::Double),
                    }
                }
            }
            other => current
                .get_or_insert_with(Word::default)
                .push(other, Quoting::Unquoted),
        }
    }
    if let Some(word) = current {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        split_command(s)
            .expect("test input must split")
            .into_iter()
            .map(Word::into_string)
            .collect()
    }

    #[test]
    fn plain_words() {
        assert_eq!(texts("npm test"), ["npm", "test"]);
        assert_eq!(texts("  npm   test  "), ["npm", "test"]);
        assert!(texts("").is_empty());
        assert!(texts("    ").is_empty());
    }

    #[test]
    fn single_quotes_are_literal() {
        assert_eq!(
            texts(r#"node -e 'a "b" \n $x'"#),
            ["node", "-e", r#"a "b" \n $x"#]
        );
        assert_eq!(texts("a'b c'd"), ["ab cd"]);
    }

    #[test]
    fn double_quotes_escape_only_special_characters() {
        assert_eq!(texts(r#""a\"b""#), [r#"a"b"#]);
        assert_eq!(texts(r#""a\nb""#), [r"a\nb"]);
        assert_eq!(texts(r#""a\\b""#), [r"a\b"]);
        assert_eq!(texts(r#""\$HOME""#), ["$HOME"]);
        assert_eq!(texts(r#"--grep "a|b""#), ["--grep", "a|b"]);
    }

    #[test]
    fn backslash_outside_quotes() {
        assert_eq!(texts(r"a\ b"), ["a b"]);
        assert_eq!(texts(r"\;"), [";"]);
        assert_eq!(texts("a\\\nb"), ["ab"]);
    }

    #[test]
    fn empty_quotes_make_empty_words() {
        assert_eq!(texts("'' \"\" x"), ["", "", "x"]);
    }

    #[test]
    fn quoting_is_recorded_per_character() {
        let words = split_command(r#"a"|"\;'&'"#).expect("splits");
        assert_eq!(words.len(), 1);
        let q: Vec<_> = words[0].chars().collect();
        assert_eq!(
            q,
            [
                ('a', Quoting::Unquoted),
                ('|', Quoting::Double),
                (';', Quoting::Escaped),
                ('&', Quoting::Single),
            ]
        );
        assert!(!words[0].is_fully_unquoted());
        assert!(split_command("abc").expect("splits")[0].is_fully_unquoted());
    }

    #[test]
    fn errors() {
        assert_eq!(
            split_command("node 'abc"),
            Err(SplitError::UnterminatedSingleQuote { start: 5 })
        );
        assert_eq!(
            split_command("node \"abc"),
            Err(SplitError::UnterminatedDoubleQuote { start: 5 })
        );
        assert_eq!(
            split_command("node \"a\\\""),
            Err(SplitError::UnterminatedDoubleQuote { start: 5 })
        );
        assert_eq!(
            split_command("node x\\"),
            Err(SplitError::TrailingBackslash { start: 6 })
        );
    }

    #[test]
    fn unicode_is_kept() {
        assert_eq!(texts("nоde 'é ü'"), ["nоde", "é ü"]);
    }
}

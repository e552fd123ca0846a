//! What the command writes to the caller's terminal, passed by allow-list.
//!
//! Where the caller's stdout or stderr is a terminal, the command writes to a pty of
//! sandbox-run's own and the supervisor relays it (`layers::pty`). The bytes still reach a
//! terminal, and a terminal does more with them than show them: a query (`ESC [ 6 n`,
//! `ESC [ c`, `ESC [ 21 t`) makes it type an answer into the caller's input, which the
//! caller's shell reads after the run; `ESC ] 52` sets the clipboard the user pastes from
//! next; other sequences set the window title, hyperlinks, keyboard and paste modes, the
//! character set, or reset the terminal, and those modes outlast the run. No list of bad
//! sequences closes that (each terminal has its own), so this names what passes: text (valid
//! UTF-8 without C1 controls, tab, newline, carriage return, backspace, bell), colours and
//! attributes (`ESC [ … m`), cursor moves along and across lines (`ESC [ … A B C D E F G`),
//! erasing the line (`ESC [ … K`) and below the cursor (`ESC [ J`, `ESC [ 0 J`), and showing
//! or hiding the cursor (`ESC [ ? 25 h/l`): what colours and progress bars use. Everything
//! else is dropped whole and counted, and at the end [`TermOut::finish`] gives what puts the
//! attributes and the cursor back the way a shell prompt expects them (a command killed in
//! the middle of a colour leaves none behind).
//!
//! The filter never holds more than one sequence's first [`SEQ_MAX`] bytes, and what it
//! passes is never longer than what it was given (an invalid byte becomes `?`).

/// The longest control sequence kept whole; a longer one is dropped.
const SEQ_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Esc,
    /// After ESC and intermediate bytes (0x20-0x2f): a character-set or other ESC sequence,
    /// dropped at its final byte.
    EscInter,
    /// In `ESC [`, collecting up to its final byte.
    Csi,
    /// A CSI too long or with bytes it may not hold: dropped, up to its final byte.
    CsiDrop,
    /// In a string (OSC, DCS, SOS, PM, APC): dropped up to its terminator.
    Str,
    /// In a string, after ESC (a `\` ends it).
    StrEsc,
    /// Within a UTF-8 sequence: `need` more continuation bytes.
    Utf8,
}

/// The filter of one stream to the caller's terminal.
#[derive(Debug)]
pub struct TermOut {
    state: State,
    seq: Vec<u8>,
    /// The UTF-8 sequence being read, its length so far and its full length.
    utf8: [u8; 4],
    have: usize,
    need: usize,
    /// Control sequences and control bytes dropped.
    dropped: u64,
    /// Whether the last attributes passed were not a plain reset.
    attrs: bool,
    /// Whether the cursor was last hidden.
    hidden: bool,
}

impl Default for TermOut {
    fn default() -> Self {
        Self::new()
    }
}

impl TermOut {
    pub fn new() -> TermOut {
        TermOut {
            state: State::Ground,
            seq: Vec::with_capacity(SEQ_MAX),
            utf8: [0; 4],
            have: 0,
            need: 0,
            dropped: 0,
            attrs: false,
            hidden: false,
        }
    }

    /// How many control sequences or bytes were dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Filter `input`, appending what passes to `out` (never more bytes than `input`).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    /// What puts the terminal back after the command: attributes reset where the command
    /// left some on, the cursor shown where it left it hidden. An unfinished sequence or
    /// character is dropped.
    pub fn finish(&mut self) -> &'static str {
        if !matches!(self.state, State::Ground) {
            if !matches!(self.state, State::Utf8) {
                self.dropped += 1;
            }
            self.state = State::Ground;
        }
        match (self.attrs, self.hidden) {
            (false, false) => "",
            (true, false) => "\x1b[0m",
            (false, true) => "\x1b[?25h",
            (true, true) => "\x1b[0m\x1b[?25h",
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::Utf8 => {
                if b & 0xc0 == 0x80 {
                    self.utf8[self.have] = b;
                    self.have += 1;
                    if self.have == self.need {
                        self.state = State::Ground;
                        self.char_done(out);
                    }
                } else {
                    // Cut short: one `?` for what came, then this byte afresh.
                    out.push(b'?');
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            }
            State::Esc => match b {
                b'[' => {
                    self.seq.clear();
                    self.state = State::Csi;
                }
                b']' | b'P' | b'X' | b'^' | b'_' => self.state = State::Str,
                0x20..=0x2f => self.state = State::EscInter,
                0x1b => self.dropped += 1,
                0x00..=0x1f => {
                    // ESC cut short by a control byte (a newline): that byte judged alone.
                    self.dropped += 1;
                    self.state = State::Ground;
                    self.ground(b, out);
                }
                _ => {
                    // A two-byte ESC sequence (reset, keypad modes, save/restore cursor,
                    // index...) or a control byte: dropped.
                    self.dropped += 1;
                    self.state = State::Ground;
                }
            },
            State::EscInter => match b {
                0x20..=0x2f => {}
                0x00..=0x1f if b != 0x1b => {
                    self.dropped += 1;
                    self.state = State::Ground;
                    self.ground(b, out);
                }
                _ => {
                    self.dropped += 1;
                    self.state = State::Ground;
                }
            },
            State::Csi => match b {
                0x30..=0x3f if self.seq.len() < SEQ_MAX => self.seq.push(b),
                0x40..=0x7e => {
                    self.state = State::Ground;
                    self.csi_done(b, out);
                }
                0x20..=0x3f => self.state = State::CsiDrop,
                _ => {
                    // A control byte inside: the sequence is dropped, the byte judged alone.
                    self.dropped += 1;
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            },
            State::CsiDrop => {
                if (0x40..=0x7e).contains(&b) {
                    self.dropped += 1;
                    self.state = State::Ground;
                }
            }
            State::Str => match b {
                0x07 => {
                    self.dropped += 1;
                    self.state = State::Ground;
                }
                0x1b => self.state = State::StrEsc,
                _ => {}
            },
            State::StrEsc => {
                if b == b'\\' {
                    self.dropped += 1;
                    self.state = State::Ground;
                } else if b != 0x1b {
                    self.state = State::Str;
                }
            }
        }
    }

    fn ground(&mut self, b: u8, out: &mut Vec<u8>) {
        match b {
            0x1b => self.state = State::Esc,
            b'\n' | b'\r' | b'\t' | 0x08 | 0x07 | 0x20..=0x7e => out.push(b),
            0xc2..=0xf4 => {
                self.utf8[0] = b;
                self.have = 1;
                self.need = match b {
                    0xc2..=0xdf => 2,
                    0xe0..=0xef => 3,
                    _ => 4,
                };
                self.state = State::Utf8;
            }
            0x80..=0xff => out.push(b'?'),
            _ => self.dropped += 1,
        }
    }

    /// A whole UTF-8 sequence: passed when it is a valid character other than a C1 control
    /// (U+0080-U+009F, which a terminal may read as ESC sequences: U+009B is CSI).
    fn char_done(&mut self, out: &mut Vec<u8>) {
        let bytes = &self.utf8[..self.need];
        match std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
        {
            Some(c) if ('\u{80}'..='\u{9f}').contains(&c) => self.dropped += 1,
            Some(_) => out.extend_from_slice(bytes),
            None => out.push(b'?'),
        }
    }

    /// A whole CSI sequence with `params` (0x30-0x3f bytes) and `fin`: passed when named.
    fn csi_done(&mut self, fin: u8, out: &mut Vec<u8>) {
        let p = &self.seq[..];
        let numeric = p.iter().all(|c| c.is_ascii_digit() || *c == b';');
        let pass = match fin {
            // colours and attributes (`:` for the sub-parameters of 24-bit colours)
            b'm' if p
                .iter()
                .all(|c| c.is_ascii_digit() || *c == b';' || *c == b':') =>
            {
                self.attrs = !(p.is_empty() || p.iter().all(|c| *c == b'0' || *c == b';'));
                true
            }
            // cursor up, down, forward, back, next/previous line, to a column
            b'A'..=b'G' => numeric && !p.contains(&b';'),
            // erase in line (any part of it)
            b'K' => numeric && p.len() <= 1,
            // erase below the cursor only: never the screen above or the scrollback
            b'J' => p.is_empty() || p == b"0",
            // show or hide the cursor
            b'h' | b'l' if p == b"?25" => {
                self.hidden = fin == b'l';
                true
            }
            _ => false,
        };
        if pass {
            out.extend_from_slice(b"\x1b[");
            out.extend_from_slice(p);
            out.push(fin);
        } else {
            self.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Vec<u8>, u64) {
        let mut t = TermOut::new();
        let mut out = Vec::new();
        t.feed(input, &mut out);
        (out, t.dropped())
    }

    #[test]
    fn text_colours_and_progress_bars_pass() {
        for ok in [
            &b"plain text\n"[..],
            b"\x1b[1;31merror\x1b[0m: x\r\n",
            b"\x1b[38;2;255;0;0mtrue colour\x1b[m",
            b"\x1b[38:5:208mcolon form\x1b[0m",
            b"50%\r\x1b[K60%\r\x1b[2K\x1b[1A\x1b[G\x1b[0J",
            b"\x1b[?25lspinner\x1b[?25h",
            "caf\u{e9} \u{5831}\u{544a} \u{1f600}\t\x08\x07".as_bytes(),
        ] {
            assert_eq!(
                run(ok),
                (ok.to_vec(), 0),
                "{:?}",
                String::from_utf8_lossy(ok)
            );
        }
    }

    #[test]
    fn queries_titles_clipboard_and_modes_are_dropped() {
        for bad in [
            &b"\x1b[6n"[..],                              // cursor position report
            b"\x1b[c",                                    // device attributes
            b"\x1b[>c",                                   // secondary device attributes
            b"\x1b[21t",                                  // title report
            b"\x1b[5n",                                   // status report
            b"\x1b]0;title\x07",                          // window title
            b"\x1b]52;c;cm0gLXJmIH4K\x1b\\",              // clipboard
            b"\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\", // hyperlink (text passes)
            b"\x1bP+q544e\x1b\\",                         // DCS (termcap query)
            b"\x1b[?2004l",                               // bracketed paste off
            b"\x1b[?1049h",                               // alternate screen
            b"\x1b[2J\x1b[3J",                            // clear screen and scrollback
            b"\x1bc",                                     // full reset
            b"\x1b(0",                                    // line-drawing character set
            b"\x0e\x0f",                                  // shift out / in
            "\u{9b}6n".as_bytes(),                        // C1 CSI as UTF-8
            b"\x9b6n",                                    // C1 CSI as a raw byte
            b"\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23;24;25;26;27m",
        ] {
            let (out, dropped) = run(bad);
            assert!(!out.contains(&0x1b), "{bad:?} -> {out:?}");
            assert!(!out.windows(2).any(|w| w == [0xc2, 0x9b]), "{bad:?}");
            assert!(!out.contains(&0x9b), "{bad:?}");
            let text_only = out.iter().all(|c| c.is_ascii_graphic() || *c == b'?');
            assert!(text_only, "{bad:?} -> {out:?}");
            assert!(dropped > 0 || out.contains(&b'?'), "{bad:?}");
        }
        assert_eq!(run(b"\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\").0, b"link");
        assert_eq!(run(b"a\x1b[6nb").0, b"ab");
        assert_eq!(run(b"a\x1b\nb\x1b(\nc").0, b"a\nb\nc");
        assert_eq!(run(b"\x9b6n").0, b"?6n");
    }

    #[test]
    fn a_sequence_split_across_reads_is_judged_whole() {
        let input = b"x\x1b]52;c;AAAA\x07y\x1b[31mz\x1b[0m\xe5\xa0\xb1";
        let whole = run(input);
        for cut in 0..input.len() {
            let mut t = TermOut::new();
            let mut out = Vec::new();
            t.feed(&input[..cut], &mut out);
            t.feed(&input[cut..], &mut out);
            assert_eq!((out, t.dropped()), whole, "cut at {cut}");
        }
        assert_eq!(whole.0, "x\x79\x1b[31mz\x1b[0m\u{5831}".as_bytes());
    }

    #[test]
    fn the_output_is_never_longer_and_finish_restores() {
        let mut t = TermOut::new();
        let mut out = Vec::new();
        t.feed(b"\x1b[?25l\x1b[1;32mok", &mut out);
        assert!(out.len() <= 16);
        assert_eq!(t.finish(), "\x1b[0m\x1b[?25h");
        let mut t = TermOut::new();
        t.feed(b"\x1b[31mred\x1b[0m\x1b[?25l\x1b[?25h", &mut out);
        assert_eq!(t.finish(), "");
        // a string never ended is dropped and counted
        let mut t = TermOut::new();
        t.feed(b"\x1b]0;never ends", &mut out);
        assert_eq!(t.finish(), "");
        assert_eq!(t.dropped(), 1);
        // random bytes: never longer, never an ESC not at the start of a named sequence
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let mut input = Vec::new();
            for _ in 0..64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                input.push(match x % 4 {
                    0 => 0x1b,
                    1 => b"[]0;?6nmJK52c\x07\\"[(x >> 8) as usize % 15],
                    _ => (x >> 16) as u8,
                });
            }
            let (out, _) = run(&input);
            assert!(out.len() <= input.len());
            let again = run(&out).0;
            assert_eq!(again, out, "what passes passes again unchanged");
        }
    }
}

//! `learn` under GitHub Actions: its section of the step's summary (`$GITHUB_STEP_SUMMARY` in
//! sandbox-run's own environment), in front of the step's own summary.
//!
//! Every byte the command could influence (the paths, hosts and program names of a refusal,
//! the learned profile's comments) is untrusted markdown: it is shown only inside fenced code
//! blocks whose fence is longer than any run of backticks in the text, so no line of it can
//! close the block, with its control characters made visible ([`crate::visible`]), so it
//! cannot add lines of its own. Only the fixed words around the blocks are markdown.

/// The most bytes of the learned profile shown; the rest is on the runner.
const TOML_SHOWN: usize = 64 << 10;
/// The most refusal and learn lines shown; the rest are counted.
const LINES_SHOWN: usize = 200;

/// What one learn run leaves in the summary.
pub(super) struct Summary<'a> {
    /// The refusals (their stderr lines) and what learn made of them (its `learn:` lines).
    pub lines: &'a [String],
    /// Whether the learned profile changed.
    pub changed: bool,
    /// Where the learned profile is on the runner, if there is one.
    pub out: Option<&'a std::path::Path>,
    /// How a shell line names it (`github-actions-learned`, or its path).
    pub by_name: &'a str,
    /// Its text as written.
    pub toml: Option<&'a str>,
}

/// The markdown of learn's section.
pub(super) fn render(s: &Summary) -> String {
    if s.lines.is_empty() {
        return "**sandbox-run learn**: the step ran with no refusal; nothing to add.\n\n".into();
    }
    let mut out = String::from("### sandbox-run learn\n\n");
    out.push_str(if s.changed {
        "What the sandbox refused this step, and what learn added to the learned profile:\n\n"
    } else {
        "What the sandbox refused this step (learn added nothing new):\n\n"
    });
    let mut shown: Vec<String> = s.lines.iter().take(LINES_SHOWN).cloned().collect();
    if s.lines.len() > LINES_SHOWN {
        shown.push(format!(
            "... and {} more lines (on the step's log)",
            s.lines.len() - LINES_SHOWN
        ));
    }
    out.push_str(&fenced("text", &shown.join("\n")));
    if let Some(path) = s.out {
        out.push_str("\nThe learned profile, on the runner:\n\n");
        out.push_str(&fenced("text", &path.display().to_string()));
        out.push_str(
            "\nTo enforce it, remove `SANDBOX_RUN_LEARN` and make it the steps' shell:\n\n",
        );
        out.push_str(&fenced(
            "yaml",
            &format!(
                "shell: sandbox-run --profile {} -- bash -e {{0}}",
                s.by_name
            ),
        ));
    }
    if let Some(text) = s.toml {
        out.push_str(
            "\nThe learned profile (copy it into the runner's image on an ephemeral runner); read each entry before you enforce it:\n\n",
        );
        let cut = floor(text, TOML_SHOWN);
        let mut body = text[..cut].to_string();
        if cut < text.len() {
            body.push_str("\n# ... (the rest is in the file on the runner)");
        }
        out.push_str(&fenced("toml", &body));
    }
    out.push('\n');
    out
}

/// `text` in a fenced code block no line of it can close: each line's control characters made
/// visible, the fence one backtick longer than the longest run of backticks in it (three at
/// least).
pub(super) fn fenced(info: &str, text: &str) -> String {
    let body: Vec<String> = text.split('\n').map(crate::visible::text).collect();
    let body = body.join("\n");
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{info}\n{body}\n{fence}\n")
}

/// The largest char boundary of `s` at or below `at`.
fn floor(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `md` that close a fence opened with `fence`: a run of at least as many
    /// backticks, alone on the line but for up to three spaces before and spaces after.
    fn closers(md: &str, fence: &str) -> usize {
        md.lines()
            .filter(|l| {
                let t = l.trim_end();
                let indent = t.len() - t.trim_start().len();
                let t = t.trim_start();
                indent <= 3 && t.len() >= fence.len() && t.chars().all(|c| c == '`')
            })
            .count()
    }

    #[test]
    fn no_line_of_the_text_closes_its_fence() {
        let hostile = "a\n``````\n</pre><!-- <img src=x onerror=1> | b |\r\n   `````````\u{1b}[2J";
        let md = fenced("text", hostile);
        let fence: String = md.chars().take_while(|c| *c == '`').collect();
        assert_eq!(fence.len(), 10, "{md}");
        // the closing fence only (the opening one has its language)
        assert_eq!(closers(&md, &fence), 1, "{md}");
        assert!(!md.contains('\r') && !md.contains('\u{1b}'), "{md}");
        assert!(md.ends_with(&format!("\n{fence}\n")), "{md}");
        // control: plain text gets three
        assert_eq!(fenced("text", "plain"), "```text\nplain\n```\n");
    }

    #[test]
    fn nothing_refused_is_one_short_line() {
        let s = Summary {
            lines: &[],
            changed: false,
            out: None,
            by_name: "x",
            toml: None,
        };
        assert_eq!(render(&s).trim_end().lines().count(), 1);
    }
}

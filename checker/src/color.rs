//! Colour in what the checker prints: the one rule, for every subcommand.
//!
//! `--color always` and `--color never` decide; `--color auto` (the default) colours
//! only a terminal, and never when `NO_COLOR` is set to anything but the empty string
//! (<https://no-color.org>; `CLICOLOR`, `CLICOLOR_FORCE` and `TERM=dumb` are honoured
//! too). The checker writes coloured text through anstream, which drops the escape
//! codes wherever this rule says no colour: the report needs no `if` of its own.
use anstyle::{AnsiColor, Style};

/// Makes `choice` the rule for everything printed from now on. anstream keeps it
/// process-wide, as cargo and clap do: the colours of one run's output are one choice.
pub fn apply(choice: clap::ColorChoice) {
    let choice = match choice {
        clap::ColorChoice::Auto => anstream::ColorChoice::Auto,
        clap::ColorChoice::Always => anstream::ColorChoice::Always,
        clap::ColorChoice::Never => anstream::ColorChoice::Never,
    };
    choice.write_global();
}

/// The colours of the report.
pub const PASS: Style = AnsiColor::Green.on_default();
pub const FAIL: Style = AnsiColor::Red.on_default();
pub const UNJUDGED: Style = AnsiColor::Yellow.on_default();

/// `text` in `style`, to print with `anstream::println!` (which keeps or drops the
/// colour as [`apply`] said).
pub fn paint(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn painted_text_is_the_ansi_colour_then_a_reset() {
        assert_eq!(paint(PASS, "PASS"), "\x1b[32mPASS\x1b[0m");
        assert_eq!(paint(FAIL, "FAIL"), "\x1b[31mFAIL\x1b[0m");
        assert_eq!(paint(UNJUDGED, "????"), "\x1b[33m????\x1b[0m");
    }
}

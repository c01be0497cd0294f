//! Shortening a report's text where a platform or a reader has no room for all of it:
//! always at a line's or a sentence's end, never inside one, and always saying how much
//! was left out. The one home of that rule, for the terminal report and every format.

/// The start of `text`: its whole lines, then its whole sentences, that fit in `limit`
/// characters (Unicode scalar values) together with the note saying what was left out.
/// A diagnosis comes first in a message, so a message keeps its start.
pub fn keep_start(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let note = |left: usize| format!("\n[{left} more characters left out]");
    // The note's longest form: the count is at most the text's length.
    let room = limit.saturating_sub(note(text.chars().count()).chars().count());
    let kept = start_at_boundary(text, room);
    let left = text.chars().count() - kept.chars().count();
    format!("{kept}{}", note(left))
}

/// The end of `text`: its last whole lines that fit in `limit` characters with the note
/// before them. What a program printed last is the news, so output keeps its end.
pub fn keep_end(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let note = |left: usize| format!("[{left} earlier characters left out]\n");
    let room = limit.saturating_sub(note(text.chars().count()).chars().count());
    let mut kept = 0;
    let mut start = text.len();
    for line in text.split_inclusive('\n').rev() {
        let n = line.chars().count();
        if kept + n > room {
            break;
        }
        kept += n;
        start -= line.len();
    }
    if start == text.len() {
        // Not even the last line fits: its last sentences that do.
        let last = text.trim_end_matches('\n').rsplit('\n').next().unwrap_or("");
        let tail = end_at_boundary(last, room);
        start = text.len() - tail.len() - (text.len() - text.trim_end_matches('\n').len());
        kept = text[start..].chars().count();
    }
    format!("{}{}", note(text.chars().count() - kept), &text[start..])
}

/// The longest start of `text` of at most `room` characters that ends at a line's end,
/// else at a sentence's end (`. `, `; `, `: `), else at a space; empty when none fits.
fn start_at_boundary(text: &str, room: usize) -> &str {
    let Some((fits, _)) = text.char_indices().nth(room) else { return text };
    let head = &text[..fits];
    if text[fits..].starts_with('\n') {
        return head;
    }
    if let Some(end) = head.rfind('\n') {
        return &head[..end];
    }
    for stop in [". ", "; ", ": "] {
        if let Some(end) = head.rfind(stop) {
            return &head[..end + 1];
        }
    }
    head.rfind(' ').map_or("", |end| &head[..end])
}

/// The longest end of one line `line` of at most `room` characters that begins a
/// sentence (after `. ` or `; `), else a word; empty when none fits.
fn end_at_boundary(line: &str, room: usize) -> &str {
    let count = line.chars().count();
    if count <= room {
        return line;
    }
    let skip = count - room;
    let from = line.char_indices().nth(skip).map_or(line.len(), |(i, _)| i);
    let tail = &line[from..];
    for stop in [". ", "; "] {
        if let Some(at) = tail.find(stop) {
            return &tail[at + stop.len()..];
        }
    }
    tail.find(' ').map_or("", |at| &tail[at + 1..])
}

/// The first sentence of `line` (up to `. ` or the end), when it has at most `limit`
/// characters and is not the whole line: a long error line's gist.
pub fn first_sentence(line: &str, limit: usize) -> Option<&str> {
    let end = line.find(". ")?;
    let sentence = &line[..=end];
    (sentence.chars().count() <= limit).then_some(sentence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_keeps_its_first_whole_lines_and_counts_the_rest() {
        let text = "the diagnosis.\nexpected: this.\nhint: do that, then the other thing.";
        assert_eq!(keep_start(text, 1000), text);
        let kept = keep_start(text, 60);
        assert_eq!(kept, "the diagnosis.\nexpected: this.\n[37 more characters left out]");
        assert!(kept.chars().count() <= 60);
    }

    #[test]
    fn one_long_line_is_cut_after_a_sentence_never_inside_one() {
        let text = "First sentence here. Second one is much longer than the room there is for it";
        let kept = keep_start(text, 60);
        assert!(kept.starts_with("First sentence here.\n["), "{kept}");
        assert!(kept.chars().count() <= 60, "{kept}");
        // No sentence end: at a word, never inside one.
        let words = "é".repeat(10) + " " + &"word ".repeat(40);
        let kept = keep_start(&words, 50);
        assert!(kept.starts_with(&format!("{} word", "é".repeat(10))), "{kept}");
        assert!(kept.lines().next().unwrap().ends_with("word"), "{kept}");
        assert!(kept.chars().count() <= 50, "{kept}");
    }

    #[test]
    fn output_keeps_its_last_whole_lines() {
        let text = "first line of output\nsecond line of output\nthe last line\n";
        assert_eq!(keep_end(text, 100), text);
        let kept = keep_end(text, 56);
        assert_eq!(kept, "[43 earlier characters left out]\nthe last line\n");
        assert!(kept.chars().count() <= 56);
        // A last line longer than the room: its last whole sentences.
        let long = format!("start\n{}The end. Last words", "x".repeat(500));
        let kept = keep_end(&long, 80);
        assert!(kept.ends_with("\nLast words"), "{kept}");
        assert!(kept.chars().count() <= 80, "{kept}");
    }

    #[test]
    fn a_long_line_has_a_gist_when_its_first_sentence_is_short() {
        assert_eq!(first_sentence("Detected mismatch. Rank 0 is running X", 40), Some("Detected mismatch."));
        assert_eq!(first_sentence("no sentence end here", 40), None);
        assert_eq!(first_sentence(&format!("{}. more", "x".repeat(50)), 40), None);
    }
}

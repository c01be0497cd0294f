//! The reports `grade` and `verify` write, each in a published format and each
//! rendered from the one grade model ([`crate::grade::Grade`]) by a module of its own:
//! exercism's test-runner results (`--json`), JUnit XML (`--junit`) and Gradescope's
//! results.json (`--gradescope`).
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::grade::Grade;

pub mod exercism;
pub mod gradescope;
pub mod junit;

/// Where the reports go; each is optional.
#[derive(Debug, Clone, Default)]
pub struct Reports {
    pub json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub gradescope: Option<PathBuf>,
}

impl Reports {
    pub fn any(&self) -> bool {
        self.json.is_some() || self.junit.is_some() || self.gradescope.is_some()
    }

    /// Renders every report asked for and writes them atomically: each to a temporary
    /// file beside its path, and only when all are written, each renamed over its path.
    /// A report is whole or absent, and a path that cannot be written leaves none of
    /// them. Returns the paths written.
    pub fn write(&self, grade: &Grade, listing: junit::Listing) -> Result<Vec<PathBuf>, String> {
        let mut rendered: Vec<(&Path, String)> = Vec::new();
        if let Some(path) = &self.json {
            rendered.push((path, json(&exercism::render(grade))));
        }
        if let Some(path) = &self.junit {
            rendered.push((path, junit::render(grade, listing)));
        }
        if let Some(path) = &self.gradescope {
            rendered.push((path, json(&gradescope::render(grade))));
        }
        let cannot = |path: &Path, e: std::io::Error| {
            format!("cannot write the report {}: {e}; name a writable path", path.display())
        };
        let mut pending = Vec::new();
        for (path, text) in &rendered {
            let mut file = atomic_file::Writer::new().create(path).map_err(|e| cannot(path, e))?;
            file.file().write_all(text.as_bytes()).map_err(|e| cannot(path, e))?;
            pending.push((path, file));
        }
        let mut written = Vec::new();
        for (path, file) in pending {
            file.commit().map_err(|e| cannot(path, e))?;
            written.push(path.to_path_buf());
        }
        Ok(written)
    }
}

fn json(report: &impl serde::Serialize) -> String {
    // Serialising these derived types cannot fail (string keys, finite numbers).
    serde_json::to_string_pretty(report).expect("a report serialises") + "\n"
}

/// The end of `text`, at most `limit` characters (Unicode scalar values) of it.
pub fn last_chars(text: &str, limit: usize) -> &str {
    match text.char_indices().rev().nth(limit.saturating_sub(1)) {
        Some((start, _)) if limit > 0 => &text[start..],
        _ if limit == 0 => "",
        _ => text,
    }
}

/// `text` whole when it has at most `limit` characters, else its end under a line
/// saying so, the two together at most `limit` characters.
pub fn keep_end(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let note = |kept: usize| format!("[output cut to its last {kept} characters]\n");
    let kept = limit.saturating_sub(note(limit).chars().count());
    format!("{}{}", note(kept), last_chars(text, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_is_kept_and_counted_in_characters() {
        assert_eq!(last_chars("abcdef", 2), "ef");
        assert_eq!(last_chars("ab", 5), "ab");
        assert_eq!(last_chars("ab", 0), "");
        // Characters, not bytes: "é" is two bytes and one character.
        assert_eq!(last_chars("aéé", 2), "éé");
        let long = "é".repeat(600) + "the end";
        let kept = keep_end(&long, 500);
        assert_eq!(kept.chars().count(), 500);
        assert!(kept.starts_with("[output cut to its last 460 characters]\n"), "{kept}");
        assert!(kept.ends_with("the end"));
        assert_eq!(keep_end("short", 500), "short");
    }
}

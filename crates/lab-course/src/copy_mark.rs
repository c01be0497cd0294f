//! How a students' copy is recognised and where it keeps its starters: below both
//! `files` (which renders a starter, or takes a copy's) and `students_copy` (which
//! writes the copy).
use std::fs;
use std::path::Path;

use crate::LAST_STEP;

/// The file at a students' copy's root that marks it as one (the checker, the hints
/// and `reset` read it); it holds the last step released, as `through = N`.
pub const MARK: &str = ".students-copy";
/// Where a students' copy keeps each released starter as coursegen rendered it, for
/// `cargo checker reset` (which renders starters from the master, absent there).
pub const STARTERS: &str = "course/starters";

/// A students' copy as its mark describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The last step released: the copy holds the starters of steps 0 to this one.
    pub through: u8,
}

/// The mark of the students' copy at `root`, or `None` when `root` is not one (the
/// instructor's full repository).
pub fn read_mark(root: &Path) -> Option<Mark> {
    let text = fs::read_to_string(root.join(MARK)).ok()?;
    let through = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("through")?.trim().strip_prefix('=')?.trim().parse().ok())
        .unwrap_or(LAST_STEP);
    Some(Mark { through })
}

//! `--prebuilt DIR`: programs built elsewhere (on another machine, by
//! `scripts/gpu-bundle.sh`), judged without building. A binary is taken only if it was
//! built from this checker's course revision ([`labkit::revision`]): the checks know
//! the programs of their own revision (their options, their trace), and a binary of
//! another would be judged on what it never was.
use std::path::{Path, PathBuf};

use lab_course::Version;
use labkit::revision::{self, COURSE_REVISION};

/// `DIR/<package>` (e.g. `DIR/solution_14`), once it is known to be a program of this
/// course revision; else why not, and what to do.
pub fn binary(dir: &Path, version: Version) -> Result<PathBuf, String> {
    let package = version.package_name();
    let path = dir.join(&package);
    if !path.is_file() {
        // The other kind of the same step is there: the option that takes it.
        let other = match version {
            Version::Solution(n) => (Version::Starter(n).package_name(), "without --solutions"),
            Version::Starter(n) => (Version::Solution(n).package_name(), "with --solutions"),
        };
        let instead = if dir.join(&other.0).is_file() {
            format!(" ({} is: run it {})", other.0, other.1)
        } else {
            String::new()
        };
        return Err(format!(
            "--prebuilt {}: there is no {package} in it{instead}; copy the binary there from \
             target/release/ or target/debug/ of a build of this course (scripts/gpu-bundle.sh packs \
             them), or drop --prebuilt to build it here",
            dir.display()
        ));
    }
    match revision::of_binary(&path)? {
        Some(theirs) if theirs == COURSE_REVISION => Ok(path),
        Some(theirs) => Err(format!(
            "{} was built from course revision {theirs}, but this checker is of course revision \
             {COURSE_REVISION}: judge it with the checker built with it (the same bundle or checkout), \
             or rebuild the programs from this checker's checkout (scripts/gpu-bundle.sh)",
            path.display()
        )),
        None => Err(format!(
            "{} says no course revision (it has no {} section: built before programs carried one, \
             or not a lab program), and this checker is of course revision {COURSE_REVISION}: rebuild \
             it from this checker's checkout (scripts/gpu-bundle.sh)",
            path.display(),
            revision::SECTION
        )),
    }
}

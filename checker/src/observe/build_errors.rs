//! Building the step's crate for a verification: its binary, or the compiler's errors
//! made readable for the report.
use std::path::{Path, PathBuf};

use crate::cargo_build::{self, Build};

/// Why a build gave no binary; `checks::build_failed` judges it.
#[derive(Debug, Clone)]
pub enum BuildFailure {
    /// The compiler's errors, made readable.
    Errors(String),
    /// cargo itself could not be run: why.
    NoCargo(String),
}

/// Builds a crate: its binary, or why there is none.
pub fn build(
    root: &Path,
    package: &str,
    manifest_dir: Option<&Path>,
    sandbox: Option<&crate::sandbox::Sandbox>,
) -> Result<PathBuf, BuildFailure> {
    match cargo_build::build(root, package, manifest_dir, sandbox) {
        Ok(Build::Binary(bin)) => Ok(bin),
        Ok(Build::Failed(errors)) => Err(BuildFailure::Errors(readable_errors(&errors))),
        Err(e) => Err(BuildFailure::NoCargo(e.to_string())),
    }
}

/// The compiler's errors without the noise: no `Compiling` lines, a linker's command
/// line (thousands of characters of object files) left out so that the linker's own
/// message after it shows, other long lines cut, at most 60 lines.
pub(super) fn readable_errors(text: &str) -> String {
    const WIDEST: usize = 300;
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("Compiling"))
        .map(|l| {
            let body = l.trim_start().trim_start_matches("= note:").trim_start();
            if body.starts_with("\"cc\"") || body.starts_with("\"c++\"") || body.starts_with("LC_ALL=") {
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}= note: (the linker's command line, left out)")
            } else if l.chars().count() > WIDEST {
                format!("{} ...", l.chars().take(WIDEST).collect::<String>())
            } else {
                l.to_string()
            }
        })
        .collect();
    let mut out: Vec<String> = lines.iter().take(60).cloned().collect();
    if lines.len() > 60 {
        out.push("... (more in `cargo build` output)".into());
    }
    if text.contains("No space left on device") {
        out.push(
            "the disk is full: free some space (`cargo clean` removes the build outputs) and check again"
                .into(),
        );
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_error_shows_the_linkers_message_not_its_command_line() {
        let objects = " \"/t/deps/a.o\"".repeat(500);
        let cargo = format!(
            "   Compiling solution_06 v0.1.0\nerror: linking with `cc` failed: exit status: 1\n  |\n  = note:  \"cc\" \"-m64\"{objects}\n  = note: /usr/bin/ld: final link failed: No space left on device\n          collect2: error: ld returned 1 exit status\n"
        );
        let shown = readable_errors(&cargo);
        assert!(!shown.contains("Compiling"), "{shown}");
        assert!(!shown.contains("a.o"), "{shown}");
        assert!(shown.contains("(the linker's command line, left out)"), "{shown}");
        assert!(shown.contains("final link failed: No space left on device"), "{shown}");
        assert!(shown.contains("the disk is full"), "{shown}");
        assert!(shown.lines().all(|l| l.chars().count() < 320), "{shown}");
    }
}

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

/// What [`checker::RECORD_OBSERVATION_ENV`] receives when the crate did not build: a
/// listed mistake that does not compile is a judges' fixture too (its `builds` check
/// fails with these errors), and nothing ran to observe.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFailureRecord {
    pub step: u8,
    pub package: String,
    /// The program's text, as an observation records it.
    pub source: String,
    /// The compiler's errors, made readable as the report shows them.
    pub build_errors: String,
}

impl BuildFailureRecord {
    pub fn record_if_asked(step: u8, package: &str, source: &str, failure: &BuildFailure) {
        let Some(path) = std::env::var_os(checker::RECORD_OBSERVATION_ENV) else { return };
        // cargo not found is the machine's failure, not the program's: nothing to record.
        let BuildFailure::Errors(errors) = failure else { return };
        let record = BuildFailureRecord {
            step,
            package: package.to_string(),
            source: source.to_string(),
            build_errors: errors.clone(),
        };
        let written = serde_json::to_string_pretty(&record)
            .map_err(std::io::Error::other)
            .and_then(|text| atomic_file::write_atomically(Path::new(&path), text));
        if let Err(e) = written {
            eprintln!("warning: cannot record the build failure in {}: {e}", Path::new(&path).display());
        }
    }
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

//! The one error type of the data layer.
//!
//! Every message names the file or URL concerned and says what to do about it,
//! because the person reading it is usually a student in the middle of a lab who
//! needs the next action, not a backtrace.

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::error::Failure;

/// What one mirror answered when a file could not be fetched from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorFailure {
    /// The full URL that was tried.
    pub url: String,
    /// Why it failed, in words (connection refused, HTTP 404, truncated, MD5 mismatch, ...).
    pub reason: String,
}

impl fmt::Display for MirrorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.reason)
    }
}

/// Everything that can go wrong while finding, fetching, generating or reading the data.
#[derive(Debug, Error)]
pub enum DataError {
    /// A file system operation failed (permissions, disk full, ...).
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "create" or "read".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        #[source]
        /// The operating system's error.
        source: io::Error,
    },

    /// One of the four data files is not there.
    #[error("{} is missing. {fix}", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What to do about it.
        fix: String,
    },

    /// A file on disk is not the data the manifest describes: corrupt, truncated,
    /// or from another version of the data.
    #[error("{} is corrupt or incomplete: {subject} is {actual}, expected {expected}. {fix}", path.display())]
    Checksum {
        /// The file.
        path: PathBuf,
        /// What was compared: "its MD5" (the file as stored) or "the MD5 of its
        /// decompressed content".
        subject: &'static str,
        /// The checksum the manifest gives.
        expected: String,
        /// The checksum of the file on disk.
        actual: String,
        /// What to do about it.
        fix: String,
    },

    /// A file on disk failed verification and no verified replacement could be
    /// downloaded: it was left as it is (never deleted before a good copy is in hand).
    #[error("{}", damaged_kept_message(path, problem, failures))]
    DamagedKept {
        /// The file.
        path: PathBuf,
        /// What its verification found.
        problem: String,
        /// Each mirror's answer to the download of a replacement.
        failures: Vec<MirrorFailure>,
    },

    /// A file is not the gz IDX file it should be (wrong magic, dimensions or length).
    #[error("{} is not a valid Fashion-MNIST IDX file: {problem}. {fix}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// What to do about it.
        fix: String,
    },

    /// A checksum manifest could not be parsed or lacks an entry.
    #[error("checksum manifest {origin}: {problem}")]
    Manifest {
        /// Where the manifest came from.
        origin: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A file could not be fetched from any mirror; each mirror's answer is listed.
    #[error("{}", all_mirrors_failed_message(file, failures))]
    AllMirrorsFailed {
        /// The file's name.
        file: String,
        /// Each mirror's answer.
        failures: Vec<MirrorFailure>,
    },

    /// An option or environment variable has a value that cannot work.
    #[error("{0}")]
    InvalidOption(String),
}

fn all_mirrors_failed_message(file: &str, failures: &[MirrorFailure]) -> String {
    let mut s = if failures.is_empty() {
        format!("could not download {file}: no mirror is configured.")
    } else {
        format!("could not download {file} from any mirror:")
    };
    for failure in failures {
        s.push_str(&format!("\n  - {failure}"));
    }
    s.push_str(&format!(
        "\nWhat to do: check the network connection; or set {}=<base URL>[,<base URL>...] \
         to a reachable mirror that serves the four Fashion-MNIST .gz files; or, offline on \
         Debian, `apt-get install dataset-fashion-mnist` (the lab reads it in {}); \
         or use the generated stand-in instead (--dataset generated).",
        super::MIRROR_ENV,
        super::SYSTEM_DIR
    ));
    s
}

fn damaged_kept_message(path: &std::path::Path, problem: &str, failures: &[MirrorFailure]) -> String {
    let mut s = format!(
        "{} is not the published Fashion-MNIST ({problem}), and no verified replacement could be \
         downloaded, so it was left as it is:",
        path.display()
    );
    for failure in failures {
        s.push_str(&format!("\n  - {failure}"));
    }
    s.push_str(&format!(
        "\nWhat to do: replace it with a good copy (any faithful recompression of the published file \
         is accepted), or delete it and run again with network access (or {}=<base URL>); \
         on Debian, `apt-get install dataset-fashion-mnist` installs a copy in {} that the lab \
         uses by itself; or use the generated stand-in (--dataset generated).",
        super::MIRROR_ENV,
        super::SYSTEM_DIR
    ));
    s
}

impl Failure for DataError {
    /// 2 means "bad input": a data file, manifest or option that is wrong and that the
    /// user has to fix (delete the file, correct the option). 1 means the environment
    /// failed (network, disk) and running again later may succeed.
    fn exit_code(&self) -> u8 {
        match self {
            DataError::Io { .. } | DataError::AllMirrorsFailed { .. } => 1,
            DataError::Missing { .. }
            | DataError::Checksum { .. }
            | DataError::DamagedKept { .. }
            | DataError::Format { .. }
            | DataError::Manifest { .. }
            | DataError::InvalidOption(_) => 2,
        }
    }
}

impl DataError {
    /// True for errors that [`exit_code`](Self::exit_code) maps to 2.
    pub fn is_bad_input(&self) -> bool {
        self.exit_code() == 2
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> DataError {
        DataError::Io { action, path: path.into(), source }
    }
}

//! Checksum manifests: which MD5 each of the four data files must have.
//!
//! A manifest is kept in the format of `md5sum` (`<32 hex digits>  <file name>`,
//! `#` comments), so `md5sum -c fashion-mnist.md5` checks a directory by hand.
//! The published checksums live in the repository at `data/fashion-mnist.md5` and are
//! compiled in from there, so there is one copy of them. A generated stand-in writes
//! its own manifest beside its files.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::Path;

use md5::{Digest, Md5};

use super::{fsutil, DataError, FILES};

/// File name of a manifest inside a data directory.
pub const MANIFEST_FILE: &str = "fashion-mnist.md5";

/// The first line of a generated stand-in's manifest; marks the directory as generated.
const GENERATED_MARK: &str = "# labkit generated Fashion-MNIST stand-in";

const PUBLISHED_TEXT: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fashion-mnist.md5"));

/// File name → expected MD5 (lower-case hex) for the four data files.
///
/// Two manifests are equal when they list the same checksums, wherever they came from.
#[derive(Debug, Clone)]
pub struct Manifest {
    entries: BTreeMap<String, String>,
    /// For a generated stand-in, how it was made (seed and sizes).
    generated: Option<String>,
    /// Where the manifest came from, for error messages.
    origin: String,
}

impl PartialEq for Manifest {
    fn eq(&self, other: &Manifest) -> bool {
        self.entries == other.entries
    }
}

impl Eq for Manifest {}

impl Manifest {
    /// The checksums Zalando Research published for the real Fashion-MNIST files.
    pub fn published() -> Manifest {
        Manifest::parse(PUBLISHED_TEXT, "data/fashion-mnist.md5 (compiled in)")
            .expect("the repository's data/fashion-mnist.md5 is a valid manifest")
    }

    /// A manifest for a generated stand-in, from the MD5s of files just written.
    pub(crate) fn generated(entries: BTreeMap<String, String>, description: &str) -> Manifest {
        Manifest {
            entries,
            generated: Some(description.to_string()),
            origin: format!("generated stand-in ({description})"),
        }
    }

    /// Parses `md5sum` text. `origin` names the source in error messages. Every one of
    /// the four data files must be listed: a manifest that silently skips a file
    /// would let that file go unchecked.
    pub fn parse(text: &str, origin: &str) -> Result<Manifest, DataError> {
        let bad = |problem: String| DataError::Manifest { origin: origin.to_string(), problem };
        let mut entries = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (hash, name) = line
                .split_once(' ')
                .ok_or_else(|| bad(format!("line {}: expected `<md5>  <file name>`", n + 1)))?;
            // md5sum writes two spaces, or ` *` for binary mode.
            let name = name.trim_start_matches(' ').trim_start_matches('*');
            if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(format!("line {}: `{hash}` is not an MD5 (32 hex digits)", n + 1)));
            }
            if name.is_empty() {
                return Err(bad(format!("line {}: no file name", n + 1)));
            }
            entries.insert(name.to_string(), hash.to_ascii_lowercase());
        }
        for file in FILES {
            if !entries.contains_key(file) {
                return Err(bad(format!("no checksum for {file}")));
            }
        }
        let generated = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix(GENERATED_MARK))
            .map(|rest| rest.trim_start_matches(':').trim().to_string());
        Ok(Manifest { entries, generated, origin: origin.to_string() })
    }

    /// Reads a manifest file.
    pub fn read(path: &Path) -> Result<Manifest, DataError> {
        let text = fs::read_to_string(path).map_err(|e| DataError::io("read", path, e))?;
        Manifest::parse(&text, &path.display().to_string())
    }

    /// The manifest that governs `dir`: its own `fashion-mnist.md5` when it has one
    /// (a generated stand-in, or a directory filled from an overridden manifest),
    /// otherwise the published checksums of the real data.
    pub fn for_dir(dir: &Path) -> Result<Manifest, DataError> {
        let own = dir.join(MANIFEST_FILE);
        if own.is_file() {
            Manifest::read(&own)
        } else {
            Ok(Manifest::published())
        }
    }

    /// The expected MD5 of `file`.
    pub fn md5_of(&self, file: &str) -> Option<&str> {
        self.entries.get(file).map(String::as_str)
    }

    /// True when this manifest describes a generated stand-in.
    pub fn is_generated(&self) -> bool {
        self.generated.is_some()
    }

    /// Where this manifest came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The manifest as `md5sum` text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(description) = &self.generated {
            s.push_str(&format!("{GENERATED_MARK}: {description}\n"));
        }
        for (name, hash) in &self.entries {
            s.push_str(&format!("{hash}  {name}\n"));
        }
        s
    }

    /// Writes the manifest atomically as `dir/fashion-mnist.md5`.
    pub(crate) fn write(&self, dir: &Path) -> Result<(), DataError> {
        fsutil::write_atomic(dir, MANIFEST_FILE, self.to_text().as_bytes()).map(|_| ())
    }

    /// What a user should do about a bad file in a directory governed by this manifest.
    pub(crate) fn fix_hint(&self) -> String {
        if self.is_generated() {
            "Delete it and run again: the generated stand-in is regenerated.".to_string()
        } else {
            format!(
                "Delete it and run again to download it anew (set {} if the default mirrors \
                 are unreachable, or use --dataset generated).",
                super::MIRROR_ENV
            )
        }
    }

    /// Reads `dir/file`, checks its MD5, and returns its bytes.
    pub fn verified_read(&self, dir: &Path, file: &str) -> Result<Vec<u8>, DataError> {
        let path = dir.join(file);
        let expected = self.md5_of(file).ok_or_else(|| DataError::Manifest {
            origin: self.origin.clone(),
            problem: format!("no checksum for {file}"),
        })?;
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DataError::Missing { path, fix: missing_fix(self.is_generated()) });
            }
            Err(e) => return Err(DataError::io("read", &path, e)),
        };
        let actual = md5_hex(&bytes);
        if actual != expected {
            return Err(DataError::Checksum {
                path,
                expected: expected.to_string(),
                actual,
                fix: self.fix_hint(),
            });
        }
        Ok(bytes)
    }

    /// True when `dir/file` exists and has the expected MD5.
    pub(crate) fn file_is_valid(&self, dir: &Path, file: &str) -> bool {
        let Some(expected) = self.md5_of(file) else { return false };
        match md5_file(&dir.join(file)) {
            Ok(actual) => actual == expected,
            Err(_) => false,
        }
    }
}

fn missing_fix(generated: bool) -> String {
    if generated {
        "Run again to regenerate the stand-in (labkit::ensure_dataset with DatasetKind::Generated)."
            .to_string()
    } else {
        "Download it first (labkit::ensure_dataset, or the lab program's download step).".to_string()
    }
}

/// MD5 of a byte slice, as lower-case hex.
pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&Md5::digest(bytes))
}

/// MD5 of a file, as lower-case hex, read in chunks.
pub fn md5_file(path: &Path) -> Result<String, DataError> {
    let mut file = fs::File::open(path).map_err(|e| DataError::io("open", path, e))?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| DataError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

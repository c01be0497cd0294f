//! Checksum manifests: which MD5s each of the four data files must have.
//!
//! A manifest is kept in the format of `md5sum` (`<32 hex digits>  <file name>`,
//! `#` comments). Each data file can be listed twice: as stored (`train-images-idx3-ubyte.gz`)
//! and by its content, under the name gunzip gives it (`train-images-idx3-ubyte`). The
//! content is what counts: a file whose decompressed bytes have the listed MD5 is the
//! data, however it was compressed (Debian's `dataset-fashion-mnist` recompressed the
//! published files, so their `.gz` MD5s differ while the data is identical). A `.gz`
//! MD5 that matches is a shortcut: the file is accepted without decompressing it.
//! By hand: `gunzip -k *.gz && md5sum -c --ignore-missing fashion-mnist.md5`.
//!
//! The published checksums live in the repository at `data/fashion-mnist.md5` and are
//! compiled in from there, so there is one copy of them. A generated stand-in writes
//! its own manifest beside its files.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::Path;

use md5::{Digest, Md5};

use super::{fsutil, idx, DataError, FILES};

/// File name of a manifest inside a data directory.
pub const MANIFEST_FILE: &str = "fashion-mnist.md5";

/// The first line of a generated stand-in's manifest; marks the directory as generated.
const GENERATED_MARK: &str = "# labkit generated Fashion-MNIST stand-in";

const PUBLISHED_TEXT: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fashion-mnist.md5"));

/// The checksums of one data file: of the `.gz` file as stored, and of its content.
/// At least one is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sums {
    gz: Option<String>,
    content: Option<String>,
}

/// Why a file's bytes are not the data a manifest describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// What was compared, e.g. "the MD5 of its decompressed content".
    pub subject: &'static str,
    pub expected: String,
    /// The MD5 found, or why none could be computed.
    pub actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}, expected {}", self.subject, self.actual, self.expected)
    }
}

/// File name → expected MD5s (lower-case hex) for the four data files.
///
/// Two manifests are equal when they list the same checksums, wherever they came from.
#[derive(Debug, Clone)]
pub struct Manifest {
    entries: BTreeMap<String, Sums>,
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
    /// The checksums of the real Fashion-MNIST: the `.gz` files Zalando Research
    /// published and their decompressed content (the MD5s torchvision checks).
    pub fn published() -> Manifest {
        Manifest::parse(PUBLISHED_TEXT, "data/fashion-mnist.md5 (compiled in)")
            .expect("the repository's data/fashion-mnist.md5 is a valid manifest")
    }

    /// A manifest for a generated stand-in, from the MD5s of files just written:
    /// file name → (MD5 of the `.gz` file, MD5 of its content).
    pub(crate) fn generated(sums: BTreeMap<String, (String, String)>, description: &str) -> Manifest {
        let entries = sums
            .into_iter()
            .map(|(name, (gz, content))| (name, Sums { gz: Some(gz), content: Some(content) }))
            .collect();
        Manifest {
            entries,
            generated: Some(description.to_string()),
            origin: format!("generated stand-in ({description})"),
        }
    }

    /// Parses `md5sum` text. `origin` names the source in error messages. Every one of
    /// the four data files must be listed, as stored or by content: a manifest that
    /// silently skips a file would let that file go unchecked.
    pub fn parse(text: &str, origin: &str) -> Result<Manifest, DataError> {
        let bad = |problem: String| DataError::Manifest { origin: origin.to_string(), problem };
        let mut entries: BTreeMap<String, Sums> = BTreeMap::new();
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
            let hash = hash.to_ascii_lowercase();
            if let Some(file) = FILES.iter().find(|f| **f == name) {
                entries.entry(file.to_string()).or_default().gz = Some(hash);
            } else if let Some(file) = FILES.iter().find(|f| f.strip_suffix(".gz") == Some(name)) {
                entries.entry(file.to_string()).or_default().content = Some(hash);
            } else {
                return Err(bad(format!(
                    "line {}: `{name}` is none of the four data files ({}), nor their decompressed names",
                    n + 1,
                    FILES.join(", ")
                )));
            }
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

    /// The expected MD5 of the `.gz` file `file` as stored, when the manifest lists it.
    pub fn md5_of(&self, file: &str) -> Option<&str> {
        self.entries.get(file).and_then(|s| s.gz.as_deref())
    }

    /// The expected MD5 of the decompressed content of `file`, when the manifest lists it.
    pub fn content_md5_of(&self, file: &str) -> Option<&str> {
        self.entries.get(file).and_then(|s| s.content.as_deref())
    }

    /// True when this manifest describes a generated stand-in.
    pub fn is_generated(&self) -> bool {
        self.generated.is_some()
    }

    /// Where this manifest came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The manifest as `md5sum` text: the `.gz` files, then their content.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(description) = &self.generated {
            s.push_str(&format!("{GENERATED_MARK}: {description}\n"));
        }
        for (name, sums) in &self.entries {
            if let Some(hash) = &sums.gz {
                s.push_str(&format!("{hash}  {name}\n"));
            }
        }
        for (name, sums) in &self.entries {
            if let Some(hash) = &sums.content {
                s.push_str(&format!("{hash}  {}\n", name.trim_end_matches(".gz")));
            }
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
                 are unreachable; Debian's package dataset-fashion-mnist installs a copy the lab \
                 finds by itself; or use --dataset generated).",
                super::MIRROR_ENV
            )
        }
    }

    /// Checks the bytes of the `.gz` file `file` against this manifest: its MD5 as
    /// stored when listed and equal (no decompression needed), otherwise the MD5 of its
    /// decompressed content. Returns the content when it had to decompress it.
    pub(crate) fn check(&self, file: &str, gz: &[u8]) -> Result<Option<Vec<u8>>, Mismatch> {
        let sums = self.entries.get(file).cloned().unwrap_or_default();
        let stored = md5_hex(gz);
        if sums.gz.as_deref() == Some(stored.as_str()) {
            return Ok(None);
        }
        let Some(expected) = sums.content else {
            return Err(Mismatch {
                subject: "its MD5",
                expected: sums.gz.unwrap_or_else(|| "(none listed)".into()),
                actual: stored,
            });
        };
        let subject = "the MD5 of its decompressed content";
        let content = match idx::gunzip(gz, Path::new(file)) {
            Ok(content) => content,
            Err(_) => {
                return Err(Mismatch { subject, expected, actual: "unknown: it does not decompress".into() })
            }
        };
        let actual = md5_hex(&content);
        if actual == expected {
            Ok(Some(content))
        } else {
            Err(Mismatch { subject, expected, actual })
        }
    }

    /// Reads `dir/file` and checks it (see [`check`](Self::check)): its `.gz` bytes,
    /// and its content when checking needed it.
    fn read_checked(&self, dir: &Path, file: &str) -> Result<(Vec<u8>, Option<Vec<u8>>), DataError> {
        let path = dir.join(file);
        let gz = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DataError::Missing { path, fix: missing_fix(self.is_generated()) });
            }
            Err(e) => return Err(DataError::io("read", &path, e)),
        };
        match self.check(file, &gz) {
            Ok(content) => Ok((gz, content)),
            Err(m) => Err(DataError::Checksum {
                path,
                subject: m.subject,
                expected: m.expected,
                actual: m.actual,
                fix: self.fix_hint(),
            }),
        }
    }

    /// Reads `dir/file`, checks it against this manifest (its MD5, as stored or of its
    /// decompressed content), and returns its decompressed content.
    pub fn verified_content(&self, dir: &Path, file: &str) -> Result<Vec<u8>, DataError> {
        match self.read_checked(dir, file)? {
            (_, Some(content)) => Ok(content),
            (gz, None) => idx::gunzip(&gz, &dir.join(file)),
        }
    }

    /// Like [`verified_content`](Self::verified_content), but only the first `len`
    /// bytes of the content are needed. When the `.gz` file's own MD5 matches, only
    /// that much is decompressed: the file is the one the manifest lists, so the rest
    /// of its content is known good without reading it. Otherwise the whole content is
    /// decompressed to check it, and cut.
    pub fn verified_content_prefix(&self, dir: &Path, file: &str, len: usize) -> Result<Vec<u8>, DataError> {
        match self.read_checked(dir, file)? {
            (_, Some(mut content)) => {
                content.truncate(len);
                Ok(content)
            }
            (gz, None) => idx::gunzip_prefix(&gz, len, &dir.join(file)),
        }
    }

    /// Why `dir/file` is not valid under this manifest, or `None` when it is.
    pub(crate) fn problem(&self, dir: &Path, file: &str) -> Option<DataError> {
        self.read_checked(dir, file).err()
    }

    /// True when `dir/file` exists and passes [`check`](Self::check).
    pub(crate) fn file_is_valid(&self, dir: &Path, file: &str) -> bool {
        self.problem(dir, file).is_none()
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

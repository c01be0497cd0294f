//! Fetching the real Fashion-MNIST files from a list of mirrors.
//!
//! Each missing or damaged file is fetched from the first mirror that delivers it
//! intact. The bytes stream into a hidden temporary file beside the target; the length
//! is compared with the announced Content-Length (a dropped connection otherwise looks
//! like a short file) and the bytes are verified against the manifest (by content, so
//! a mirror serving a faithful recompression is accepted); only then is the file
//! flushed and renamed into place, over a damaged file if there was one. Every error
//! path deletes the temporary file, so readers never see a partial file and a damaged
//! file of the user's stays until a verified replacement is in hand. The whole
//! operation runs under the directory lock so that the ranks of one host fetch each
//! file once.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Duration;

use super::fsutil::{self, DirLock};
use super::manifest::{Manifest, MANIFEST_FILE};
use super::{DataError, MirrorFailure, FILES, MANIFEST_ENV, MIRROR_ENV};
use indicatif::{ProgressBar, ProgressStyle};

/// The public locations of Fashion-MNIST, tried in this order.
pub const DEFAULT_MIRRORS: [&str; 2] = [
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
];

/// How to download.
#[derive(Debug, Clone)]
pub struct DownloadOptions {
    /// Base URLs to try in order, each followed by the file name. When empty, the
    /// environment variable `DDP_LAB_MIRROR` (comma-separated base URLs) is used,
    /// and when that is unset or empty, [`DEFAULT_MIRRORS`]. So an explicit choice
    /// in the program (e.g. a command-line option) wins over the environment, which
    /// wins over the built-in list.
    pub mirrors: Vec<String>,
    /// Longest wait for a connection, for the response, and for each read of the
    /// body: a stalled mirror is given up after this long, a slow but moving one is not.
    pub timeout: Duration,
    /// Show a progress bar per file. Only ever drawn when standard error is a terminal.
    pub progress: bool,
    /// The checksums the files must have. When `None`, the manifest file named by
    /// the environment variable `DDP_LAB_MANIFEST` is used, and when that is unset,
    /// the published checksums ([`Manifest::published`]). The override exists for
    /// tests and checkers that serve a generated stand-in from a local mirror.
    pub expected: Option<Manifest>,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            mirrors: Vec::new(),
            timeout: Duration::from_secs(30),
            progress: true,
            expected: None,
        }
    }
}

/// The mirror list in force: `option` when non-empty, else the comma-separated
/// `env` value (the content of `DDP_LAB_MIRROR`) when it names any, else
/// [`DEFAULT_MIRRORS`]. Each base URL gets a trailing `/`, and must be http(s).
pub fn resolve_mirrors(option: &[String], env: Option<&str>) -> Result<Vec<String>, DataError> {
    let from_env: Vec<String> =
        env.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    let (chosen, source): (Vec<String>, &str) = if !option.is_empty() {
        (option.to_vec(), "the mirror option")
    } else if !from_env.is_empty() {
        (from_env, MIRROR_ENV)
    } else {
        (DEFAULT_MIRRORS.iter().map(|s| s.to_string()).collect(), "the default list")
    };
    chosen
        .into_iter()
        .map(|m| {
            let m = m.trim().to_string();
            if !(m.starts_with("http://") || m.starts_with("https://")) {
                return Err(DataError::InvalidOption(format!(
                    "mirror `{m}` (from {source}) is not an http:// or https:// URL; \
                     {MIRROR_ENV} takes comma-separated base URLs such as http://host:8000/fashion/"
                )));
            }
            Ok(if m.ends_with('/') { m } else { format!("{m}/") })
        })
        .collect()
}

/// The manifest in force for a download: the option, else `DDP_LAB_MANIFEST`, else
/// the published checksums.
pub(crate) fn resolve_expected(options: &DownloadOptions) -> Result<Manifest, DataError> {
    if let Some(m) = &options.expected {
        return Ok(m.clone());
    }
    match std::env::var_os(MANIFEST_ENV) {
        Some(path) if !path.is_empty() => Manifest::read(Path::new(&path)).map_err(|e| match e {
            DataError::Io { source, path, .. } => DataError::InvalidOption(format!(
                "{MANIFEST_ENV}={} cannot be read ({source}); point it at an md5sum-style manifest \
                 or unset it to use the published checksums",
                path.display()
            )),
            other => other,
        }),
        _ => Ok(Manifest::published()),
    }
}

/// Makes sure `dir` holds the four files with the expected checksums, downloading
/// what is missing or damaged. Returns the names of the files it downloaded (empty
/// when all were already there). Takes the directory lock for the whole operation.
pub fn download(dir: &Path, options: &DownloadOptions) -> Result<Vec<&'static str>, DataError> {
    let _lock = DirLock::acquire(dir)?;
    download_locked(dir, options)
}

/// [`download`] for a caller that already holds the lock of `dir`.
pub(crate) fn download_locked(dir: &Path, options: &DownloadOptions) -> Result<Vec<&'static str>, DataError> {
    let mirrors = resolve_mirrors(&options.mirrors, std::env::var(MIRROR_ENV).ok().as_deref())?;
    let expected = resolve_expected(options)?;
    fsutil::create_dir(dir)?;
    fsutil::remove_stale_temp_files(dir);

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(options.timeout))
        .timeout_recv_response(Some(options.timeout))
        .timeout_per_read(Some(options.timeout))
        .build()
        .into();
    let show_progress = options.progress && std::io::stderr().is_terminal();

    let mut fetched = Vec::new();
    for file in FILES {
        // A file that fails verification is kept until a verified replacement is in
        // hand: the replacement is renamed over it, so nothing of the user's is lost
        // when every mirror fails (offline, say).
        let damaged = match expected.problem(dir, file) {
            None => continue,
            Some(DataError::Missing { .. }) => None,
            Some(problem) => Some(problem),
        };
        let mut failures = Vec::new();
        let mut done = false;
        for base in &mirrors {
            let url = format!("{base}{file}");
            match fetch(&agent, &url, dir, file, &expected, show_progress) {
                Ok(()) => {
                    done = true;
                    break;
                }
                Err(Fetch::Mirror(reason)) => failures.push(MirrorFailure { url, reason }),
                Err(Fetch::Local(e)) => return Err(e),
            }
        }
        if !done {
            return Err(match damaged {
                Some(problem) => {
                    DataError::DamagedKept { path: dir.join(file), problem: damage(&problem), failures }
                }
                None => DataError::AllMirrorsFailed { file: file.to_string(), failures },
            });
        }
        fetched.push(file);
    }
    sync_manifest(dir, &expected)?;
    Ok(fetched)
}

/// Leaves `dir` governed by the manifest its files were checked against: a
/// non-published manifest is written beside the files, and a stale one replaced, so
/// that [`FashionMnist::load`](super::FashionMnist::load) checks against the same.
fn sync_manifest(dir: &Path, expected: &Manifest) -> Result<(), DataError> {
    let own = dir.join(MANIFEST_FILE);
    let already = match std::fs::read_to_string(&own) {
        Ok(text) => Manifest::parse(&text, "").ok().as_ref() == Some(expected),
        // No manifest of its own: the directory is governed by the published one.
        Err(_) => *expected == Manifest::published(),
    };
    if already {
        Ok(())
    } else {
        expected.write(dir)
    }
}

/// What is wrong with a file, in a few words: "the MD5 of its decompressed content is …".
fn damage(problem: &DataError) -> String {
    match problem {
        DataError::Checksum { subject, expected, actual, .. } => {
            format!("{subject} is {actual}, expected {expected}")
        }
        other => other.to_string(),
    }
}

enum Fetch {
    /// This mirror failed; the next one may succeed.
    Mirror(String),
    /// A local problem (disk full, permissions) that no other mirror can fix.
    Local(DataError),
}

fn describe(e: ureq::Error) -> String {
    match e {
        ureq::Error::StatusCode(code) => format!("HTTP status {code}"),
        ureq::Error::Io(io) => format!("{io}"),
        other => other.to_string(),
    }
}

fn fetch(
    agent: &ureq::Agent,
    url: &str,
    dir: &Path,
    file: &str,
    expected: &Manifest,
    progress: bool,
) -> Result<(), Fetch> {
    let mut response = agent.get(url).call().map_err(|e| Fetch::Mirror(describe(e)))?;
    let announced = response.body().content_length();
    let target = dir.join(file);
    let mut tmp =
        fsutil::writer().create(&target).map_err(|e| Fetch::Local(DataError::io("create", &target, e)))?;
    let bar = progress.then(|| progress_bar(file, announced));

    let mut reader = response.body_mut().as_reader();
    // Kept in memory too (at most 26 MB) for the verification by content.
    let mut body = Vec::with_capacity(announced.unwrap_or(0).min(1 << 26) as usize);
    let mut buf = vec![0u8; 1 << 16];
    let mut received: u64 = 0;
    let result = loop {
        match reader.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                body.extend_from_slice(&buf[..n]);
                if let Err(e) = tmp.file().write_all(&buf[..n]) {
                    break Err(Fetch::Local(DataError::io("write", tmp.path(), e)));
                }
                received += n as u64;
                if let Some(bar) = &bar {
                    bar.set_position(received);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                break Err(Fetch::Mirror(match announced {
                    Some(len) => format!("transfer broke off after {received} of {len} bytes ({e})"),
                    None => format!("transfer broke off after {received} bytes ({e})"),
                }))
            }
        }
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    result?;
    if let Some(len) = announced {
        if received != len {
            return Err(Fetch::Mirror(format!("truncated transfer: received {received} of {len} bytes")));
        }
    }
    if let Err(m) = expected.check(file, &body) {
        return Err(Fetch::Mirror(format!(
            "checksum mismatch for {file}: {m} (the mirror serves damaged or different data)"
        )));
    }
    // `tmp` is deleted by its Drop on every early return above.
    tmp.commit().map_err(|e| Fetch::Local(DataError::io("rename into place", &target, e)))?;
    if progress {
        eprintln!("downloaded {file} from {url}");
    }
    Ok(())
}

fn progress_bar(file: &str, len: Option<u64>) -> ProgressBar {
    let bar = match len {
        Some(len) => ProgressBar::new(len),
        None => ProgressBar::new_spinner(),
    };
    let style = ProgressStyle::with_template("{msg:28} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(file.to_string());
    bar
}

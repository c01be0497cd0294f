//! The IDX format of (Fashion-)MNIST, gzip-compressed.
//!
//! An IDX file is a big-endian header (a magic number whose last byte is the number
//! of dimensions and whose third byte is the element type, 0x08 = u8; then one u32
//! per dimension) followed by the elements in row-major order. Fashion-MNIST uses
//! two shapes: images `[N, 28, 28]` (magic 0x00000803) and labels `[N]` (0x00000801).
//! Everything is checked before it is trusted, so a damaged file fails here with its
//! name rather than later as a shape error deep inside training.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::{Compression, GzBuilder};

use super::DataError;

/// Magic number of an IDX file of u8 with 3 dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of u8 with 1 dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// Image height and width.
pub const SIDE: usize = 28;
/// Pixels per image.
pub const PIXELS: usize = SIDE * SIDE;

const FIX: &str = "Delete it and run again to fetch or generate it anew.";

fn format_error(path: &Path, problem: String) -> DataError {
    DataError::Format { path: path.to_path_buf(), problem, fix: FIX.to_string() }
}

/// Decompresses a gz file's bytes; `path` only names the file in errors.
pub fn gunzip(gz: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    let mut raw = Vec::with_capacity(gz.len() * 4);
    GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .map_err(|e| format_error(path, format!("gzip data cannot be decompressed ({e})")))?;
    Ok(raw)
}

/// The first `len` bytes of a gzip stream's content (all of it when shorter): a subset
/// of the data needs only the start of each file, and decompression is most of a
/// rank's start-up.
pub fn gunzip_prefix(gz: &[u8], len: usize, path: &Path) -> Result<Vec<u8>, DataError> {
    let mut raw = Vec::with_capacity(len);
    GzDecoder::new(gz)
        .take(len as u64)
        .read_to_end(&mut raw)
        .map_err(|e| format_error(path, format!("gzip data cannot be decompressed ({e})")))?;
    Ok(raw)
}

fn be_u32(raw: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]])
}

/// Checks the header of uncompressed IDX bytes and returns the elements.
fn parse(raw: &[u8], path: &Path, magic: u32, dims: &[Option<usize>]) -> Result<Vec<u8>, DataError> {
    parse_first(raw, path, magic, dims, None).map(|(_, body)| body)
}

/// Parses an IDX file, or only its first `first` items when given: then `raw` may stop
/// after them (see [`gunzip_prefix`]). Returns the item count the header promises and
/// the data of the items kept.
fn parse_first(
    raw: &[u8],
    path: &Path,
    magic: u32,
    dims: &[Option<usize>],
    first: Option<usize>,
) -> Result<(usize, Vec<u8>), DataError> {
    let header = 4 + 4 * dims.len();
    if raw.len() < 4 {
        return Err(format_error(
            path,
            format!("{} bytes is shorter than the {header}-byte header", raw.len()),
        ));
    }
    let found = be_u32(raw, 0);
    if found != magic {
        return Err(format_error(path, format!("magic number is {found:#010x}, expected {magic:#010x}")));
    }
    if raw.len() < header {
        return Err(format_error(
            path,
            format!("{} bytes is shorter than the {header}-byte header", raw.len()),
        ));
    }
    let mut count: usize = 1;
    for (i, want) in dims.iter().enumerate() {
        let got = be_u32(raw, 4 + 4 * i) as usize;
        if let Some(want) = want {
            if got != *want {
                return Err(format_error(path, format!("dimension {i} is {got}, expected {want}")));
            }
        }
        count = count.checked_mul(got).ok_or_else(|| format_error(path, "dimensions overflow".into()))?;
    }
    let body = &raw[header..];
    let items = be_u32(raw, 4) as usize;
    let item_bytes = count.checked_div(items).unwrap_or(0);
    match first {
        None if body.len() != count => Err(format_error(
            path,
            format!("header promises {count} bytes of data but the file holds {}", body.len()),
        )),
        None => Ok((items, body.to_vec())),
        Some(first) => {
            let wanted = first.min(items) * item_bytes;
            if body.len() < wanted {
                return Err(format_error(
                    path,
                    format!("header promises {count} bytes of data but the file holds {}", body.len()),
                ));
            }
            Ok((items, body[..wanted].to_vec()))
        }
    }
}

/// Parses uncompressed IDX image bytes into `N * 784` pixels.
pub fn parse_images(raw: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    parse(raw, path, IMAGES_MAGIC, &[None, Some(SIDE), Some(SIDE)])
}

/// Parses uncompressed IDX label bytes into `N` labels.
pub fn parse_labels(raw: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    parse(raw, path, LABELS_MAGIC, &[None])
}

/// The first `first` images (all when `None`) and the number the header promises.
pub fn parse_first_images(
    raw: &[u8],
    path: &Path,
    first: Option<usize>,
) -> Result<(usize, Vec<u8>), DataError> {
    parse_first(raw, path, IMAGES_MAGIC, &[None, Some(SIDE), Some(SIDE)], first)
}

/// The first `first` labels (all when `None`) and the number the header promises.
pub fn parse_first_labels(
    raw: &[u8],
    path: &Path,
    first: Option<usize>,
) -> Result<(usize, Vec<u8>), DataError> {
    parse_first(raw, path, LABELS_MAGIC, &[None], first)
}

/// The bytes of an IDX file holding its first `items` items of `item_bytes` each: its
/// header (`dims` dimensions) and their data.
pub fn prefix_len(dims: usize, items: usize, item_bytes: usize) -> usize {
    4 + 4 * dims + items * item_bytes
}

/// Parses gz-compressed IDX image bytes into `N * 784` pixels.
pub fn decode_images(gz: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    parse_images(&gunzip(gz, path)?, path)
}

/// Parses gz-compressed IDX label bytes into `N` labels.
pub fn decode_labels(gz: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    parse_labels(&gunzip(gz, path)?, path)
}

/// Reads a gz IDX image file: `N * 784` pixels, row-major.
pub fn read_images(path: &Path) -> Result<Vec<u8>, DataError> {
    decode_images(&fs::read(path).map_err(|e| DataError::io("read", path, e))?, path)
}

/// Reads a gz IDX label file: `N` labels.
pub fn read_labels(path: &Path) -> Result<Vec<u8>, DataError> {
    decode_labels(&fs::read(path).map_err(|e| DataError::io("read", path, e))?, path)
}

/// Encodes images (`N * 784` pixels) as gz IDX bytes. The gzip header carries no
/// time stamp or name, so equal pixels always give equal bytes.
pub fn encode_images(pixels: &[u8]) -> Vec<u8> {
    gzip(&raw_images(pixels))
}

/// Encodes labels as gz IDX bytes (deterministic, like [`encode_images`]).
pub fn encode_labels(labels: &[u8]) -> Vec<u8> {
    gzip(&raw_labels(labels))
}

/// Images (`N * 784` pixels) as uncompressed IDX bytes: what a `.gz` file decompresses to.
pub fn raw_images(pixels: &[u8]) -> Vec<u8> {
    assert_eq!(pixels.len() % PIXELS, 0, "image data must be a whole number of 28x28 images");
    let n = (pixels.len() / PIXELS) as u32;
    raw(IMAGES_MAGIC, &[n, SIDE as u32, SIDE as u32], pixels)
}

/// Labels as uncompressed IDX bytes.
pub fn raw_labels(labels: &[u8]) -> Vec<u8> {
    raw(LABELS_MAGIC, &[labels.len() as u32], labels)
}

fn raw(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(4 + 4 * dims.len() + data.len());
    raw.extend_from_slice(&magic.to_be_bytes());
    for d in dims {
        raw.extend_from_slice(&d.to_be_bytes());
    }
    raw.extend_from_slice(data);
    raw
}

/// Compresses bytes as gzip at the fastest level, with no time stamp or name in the
/// header (equal bytes in, equal bytes out). Level 1: the files are mostly background
/// zeros, so the fastest level is nearly as small as the best and keeps generation
/// quick even in debug builds.
pub fn gzip(raw: &[u8]) -> Vec<u8> {
    gzip_at(raw, 1)
}

/// [`gzip`] at another compression level (0-9), e.g. to recompress a file.
pub fn gzip_at(raw: &[u8], level: u32) -> Vec<u8> {
    let mut enc: GzEncoder<Vec<u8>> =
        GzBuilder::new().mtime(0).write(Vec::with_capacity(raw.len() / 3), Compression::new(level.min(9)));
    enc.write_all(raw).expect("writing to memory cannot fail");
    enc.finish().expect("writing to memory cannot fail")
}

/// Writes images as a gz IDX file (not atomically; see `generate` for that).
pub fn write_images(path: &Path, pixels: &[u8]) -> Result<(), DataError> {
    fs::write(path, encode_images(pixels)).map_err(|e| DataError::io("write", path, e))
}

/// Writes labels as a gz IDX file (not atomically).
pub fn write_labels(path: &Path, labels: &[u8]) -> Result<(), DataError> {
    fs::write(path, encode_labels(labels)).map_err(|e| DataError::io("write", path, e))
}

//! The course revision a program was built from, embedded in the program, so that a
//! checker judging binaries built elsewhere (`checker verify --prebuilt DIR`) can refuse
//! those of another revision without running them.
//!
//! The revision is a hash of the sources lab programs are made of
//! ([`crate::course_sources::PATHS`]), computed by labkit's build script. Every program
//! that links labkit holds it in an ELF section of its own, [`SECTION`], 16 hex digits
//! long: `readelf -p .ddp_lab_revision target/debug/solution_14` shows it, `strip`
//! keeps it, and [`of_binary`] reads it back.
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The revision of the course this labkit (and the program or checker linking it) was
/// built from: 16 hex digits.
pub const COURSE_REVISION: &str = env!("DDP_LAB_COURSE_REVISION");

/// The ELF section holding [`COURSE_REVISION`] in every program that links labkit.
pub const SECTION: &str = ".ddp_lab_revision";

const LEN: usize = 16;

#[used]
#[link_section = ".ddp_lab_revision"]
static NOTE: [u8; LEN] = note();

const fn note() -> [u8; LEN] {
    let text = COURSE_REVISION.as_bytes();
    assert!(text.len() == LEN, "the course revision is 16 hex digits");
    let mut out = [0u8; LEN];
    let mut i = 0;
    while i < LEN {
        out[i] = text[i];
        i += 1;
    }
    out
}

/// Keeps the revision's section in the program: called from what every lab program
/// calls (`RunOptions::apply`, `prepare_dataset`, the model, `finish`), so that the
/// linker, which drops what nothing refers to, keeps it.
#[inline(never)]
pub(crate) fn keep() {
    std::hint::black_box(&NOTE);
}

/// The course revision embedded in the program at `path`: `Ok(None)` when it has none
/// (built before programs carried one, or not a lab program); an error when it cannot
/// be read or is not a 64-bit little-endian ELF file (a Linux x86-64 or arm64 binary).
pub fn of_binary(path: &Path) -> Result<Option<String>, String> {
    let what = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let not_elf = || format!("{} is not a Linux program (a 64-bit little-endian ELF file)", path.display());
    let mut file = std::fs::File::open(path).map_err(what)?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header).map_err(|_| not_elf())?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Err(not_elf());
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as u64;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(&header, 0x28), u16_at(&header, 0x3a), u16_at(&header, 0x3c), u16_at(&header, 0x3e));
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum || shnum > 1 << 16 {
        return Err(not_elf());
    }
    let mut table = vec![0u8; (shentsize * shnum) as usize];
    file.seek(SeekFrom::Start(shoff)).map_err(what)?;
    file.read_exact(&mut table).map_err(|_| not_elf())?;
    let section = |i: u64| {
        let s = &table[(i * shentsize) as usize..];
        (u32_at(s, 0), u64_at(s, 0x18), u64_at(s, 0x20))
    };
    let mut read = |offset: u64, size: u64| -> Result<Vec<u8>, String> {
        if size > 1 << 24 {
            return Err(not_elf());
        }
        let mut bytes = vec![0u8; size as usize];
        file.seek(SeekFrom::Start(offset)).map_err(what)?;
        file.read_exact(&mut bytes).map_err(|_| not_elf())?;
        Ok(bytes)
    };
    let (_, names_at, names_size) = section(shstrndx);
    let names = read(names_at, names_size)?;
    for i in 0..shnum {
        let (name_at, offset, size) = section(i);
        let name = names.get(name_at as usize..).unwrap_or_default();
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name == SECTION.as_bytes() {
            let bytes = read(offset, size)?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if bytes.len() != LEN || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "{}'s {SECTION} section holds {text:?}, not a course revision (16 hex digits)",
                    path.display()
                ));
            }
            return Ok(Some(text));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn the_embedded_revision_is_the_hash_of_the_sources_as_they_are() {
        let now = crate::course_sources::revision_of(&workspace()).unwrap();
        assert_eq!(COURSE_REVISION, now, "labkit's build script hashed other sources than these");
        assert_eq!(now, crate::course_sources::revision_of(&workspace()).unwrap(), "not deterministic");
    }

    #[test]
    fn the_revision_follows_contents_and_names_not_times_or_places() {
        let make = |dir: &Path, main: &str| {
            std::fs::create_dir_all(dir.join("course/lab")).unwrap();
            std::fs::create_dir_all(dir.join("crates/labkit/src/data")).unwrap();
            std::fs::write(dir.join("course/lab/main.rs"), main).unwrap();
            std::fs::write(dir.join("crates/labkit/src/data/x.rs"), "x").unwrap();
            // Not part of a program: neither changes the revision.
            std::fs::create_dir_all(dir.join("checker/src")).unwrap();
            std::fs::write(dir.join("checker/src/main.rs"), dir.display().to_string()).unwrap();
            std::fs::write(dir.join("crates/labkit/src/.swap"), dir.display().to_string()).unwrap();
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        make(a.path(), "fn main() {}");
        make(b.path(), "fn main() {}");
        let rev = |d: &Path| crate::course_sources::revision_of(d).unwrap();
        assert_eq!(rev(a.path()), rev(b.path()));
        assert_eq!(rev(a.path()).len(), 16);
        std::fs::write(b.path().join("course/lab/main.rs"), "fn main() { }").unwrap();
        assert_ne!(rev(a.path()), rev(b.path()), "a changed program is another revision");
        make(b.path(), "fn main() {}");
        std::fs::rename(
            b.path().join("crates/labkit/src/data/x.rs"),
            b.path().join("crates/labkit/src/data/y.rs"),
        )
        .unwrap();
        assert_ne!(rev(a.path()), rev(b.path()), "a renamed file is another revision");
    }

    #[test]
    fn a_test_binary_of_labkit_carries_its_revision_and_a_text_file_is_refused() {
        keep();
        let me = std::env::current_exe().unwrap();
        assert_eq!(of_binary(&me).unwrap().as_deref(), Some(COURSE_REVISION));
        let text = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(text.path(), "#!/bin/sh\necho hello, this is long enough to be read as a header..\n")
            .unwrap();
        assert!(of_binary(text.path()).unwrap_err().contains("not a Linux program"));
    }
}

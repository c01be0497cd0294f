//! The data layer end to end, offline: a local HTTP server on 127.0.0.1 plays the
//! mirror and serves a small generated stand-in, whose manifest replaces the
//! published checksums for the downloads.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use labkit::data::{
    self, idx, DataError, DatasetAction, DatasetKind, DatasetOptions, DownloadOptions, FashionMnist,
    GenerateOptions, Manifest, FILES, MANIFEST_FILE,
};
use labkit::Failure;
use tch::{Device, Kind};

// ---------------------------------------------------------------- fixtures

mod common;
use common::{dead_mirror, Scratch};

const SMALL: GenerateOptions = GenerateOptions { train: 300, test: 100, seed: 7 };

/// The small stand-in the server serves: file name → gz bytes, and its manifest.
fn served_set() -> &'static (HashMap<String, Vec<u8>>, Manifest, PathBuf) {
    static SET: OnceLock<(HashMap<String, Vec<u8>>, Manifest, PathBuf)> = OnceLock::new();
    SET.get_or_init(|| {
        // Made (once, under the lock) by ensure_dataset, so test runs in parallel
        // processes share it without regenerating it under each other's feet.
        let ready = data::ensure_dataset(&DatasetOptions {
            dir: Path::new(env!("CARGO_TARGET_TMPDIR")).join("labkit-data-served"),
            kind: DatasetKind::Generated,
            generated: SMALL,
            ..Default::default()
        })
        .unwrap();
        let dir = ready.dir;
        let manifest = Manifest::read(&dir.join(MANIFEST_FILE)).unwrap();
        let files = FILES.iter().map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap())).collect();
        (files, manifest, dir)
    })
}

/// How the server answers a path.
#[derive(Clone)]
enum Reply {
    /// 200 with these bytes.
    Body(Vec<u8>),
    /// 200 announcing `announced` bytes but sending only `body`, then closing.
    Short { body: Vec<u8>, announced: usize },
    /// This status, empty body.
    Status(u16),
}

/// A minimal HTTP/1.1 server: one thread per connection, `Connection: close`,
/// counting the GET requests per path.
struct Server {
    port: u16,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start(routes: HashMap<String, Reply>, delay: Duration) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Server {
            port,
            routes: Arc::new(Mutex::new(routes)),
            hits: Arc::new(Mutex::new(HashMap::new())),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (routes, hits, stop) = (server.routes.clone(), server.hits.clone(), server.stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (routes, hits) = (routes.clone(), hits.clone());
                std::thread::spawn(move || serve(stream, &routes, &hits, delay));
            }
        });
        server
    }

    /// Serves the generated set under `/fashion/`.
    fn with_set(delay: Duration) -> Server {
        let (files, _, _) = served_set();
        let routes = files.iter().map(|(f, b)| (format!("/fashion/{f}"), Reply::Body(b.clone()))).collect();
        Server::start(routes, delay)
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}/fashion/", self.port)
    }

    fn set(&self, file: &str, reply: Reply) {
        self.routes.lock().unwrap().insert(format!("/fashion/{file}"), reply);
    }

    fn hits(&self, file: &str) -> usize {
        self.hits.lock().unwrap().get(&format!("/fashion/{file}")).copied().unwrap_or(0)
    }

    fn total_hits(&self) -> usize {
        self.hits.lock().unwrap().values().sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    mut stream: TcpStream,
    routes: &Mutex<HashMap<String, Reply>>,
    hits: &Mutex<HashMap<String, usize>>,
    delay: Duration,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_string();
    *hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    std::thread::sleep(delay);
    let reply = routes.lock().unwrap().get(&path).cloned().unwrap_or(Reply::Status(404));
    let _ = match reply {
        Reply::Body(body) => stream
            .write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                    .as_bytes(),
            )
            .and_then(|_| stream.write_all(&body)),
        Reply::Short { body, announced } => stream
            .write_all(
                format!("HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .and_then(|_| stream.write_all(&body)),
        Reply::Status(code) => stream.write_all(
            format!("HTTP/1.1 {code} Nope\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
        ),
    };
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn download_options(mirrors: Vec<String>) -> DownloadOptions {
    DownloadOptions {
        mirrors,
        timeout: Duration::from_secs(10),
        progress: false,
        expected: Some(served_set().1.clone()),
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Only the lock file and the files in `allowed`: no temporary or partial file.
fn assert_only(dir: &Path, allowed: &[&str]) {
    for name in listing(dir) {
        assert!(
            name == data::LOCK_FILE || allowed.contains(&name.as_str()),
            "unexpected file {name} left in {}",
            dir.display()
        );
    }
}

// ---------------------------------------------------------------- manifest

#[test]
fn published_manifest_has_the_zalando_md5s() {
    let m = Manifest::published();
    assert_eq!(m.md5_of("train-images-idx3-ubyte.gz"), Some("8d4fb7e6c68d591d4c3dfef9ec88bf0d"));
    assert_eq!(m.md5_of("train-labels-idx1-ubyte.gz"), Some("25c81989df183df01b3e8a0aad5dffbe"));
    assert_eq!(m.md5_of("t10k-images-idx3-ubyte.gz"), Some("bef4ecab320f06d8554ea6380940ec79"));
    assert_eq!(m.md5_of("t10k-labels-idx1-ubyte.gz"), Some("bb300cfdad3c16e7a12a480ee83cd310"));
    assert!(!m.is_generated());
}

#[test]
fn manifest_parse_rejects_bad_lines_and_missing_files() {
    let e = Manifest::parse("xyz  train-images-idx3-ubyte.gz\n", "test").unwrap_err();
    assert!(e.to_string().contains("not an MD5"), "{e}");
    let e = Manifest::parse("8d4fb7e6c68d591d4c3dfef9ec88bf0d  train-images-idx3-ubyte.gz\n", "test")
        .unwrap_err();
    assert!(e.to_string().contains("no checksum for train-labels-idx1-ubyte.gz"), "{e}");
    assert_eq!(e.exit_code(), 2);
    // md5sum's binary marker and comments are accepted.
    let text: String =
        FILES.iter().map(|f| format!("# c\n8d4fb7e6c68d591d4c3dfef9ec88bf0d *{f}\n")).collect();
    assert!(Manifest::parse(&text, "test").is_ok());
}

#[test]
fn mirror_precedence_option_then_env_then_defaults() {
    let opt = vec!["http://a.example/x".to_string()];
    assert_eq!(data::resolve_mirrors(&opt, Some("http://b.example/")).unwrap(), vec!["http://a.example/x/"]);
    assert_eq!(
        data::resolve_mirrors(&[], Some(" http://b.example/ , https://c.example/y ,")).unwrap(),
        vec!["http://b.example/", "https://c.example/y/"]
    );
    let defaults: Vec<String> = data::DEFAULT_MIRRORS.iter().map(|s| s.to_string()).collect();
    assert_eq!(data::resolve_mirrors(&[], Some("  ")).unwrap(), defaults);
    assert_eq!(data::resolve_mirrors(&[], None).unwrap(), defaults);
    let e = data::resolve_mirrors(&[], Some("ftp://x/")).unwrap_err();
    assert!(e.to_string().contains("DDP_LAB_MIRROR") && e.exit_code() == 2, "{e}");
}

// ---------------------------------------------------------------- IDX

#[test]
fn idx_round_trip_and_validation() {
    let dir = Scratch::new("idx");
    let pixels: Vec<u8> = (0..3 * 784).map(|i| (i * 7 % 256) as u8).collect();
    let labels = vec![3u8, 0, 9];
    let (ip, lp) = (dir.0.join("i.gz"), dir.0.join("l.gz"));
    idx::write_images(&ip, &pixels).unwrap();
    idx::write_labels(&lp, &labels).unwrap();
    assert_eq!(idx::read_images(&ip).unwrap(), pixels);
    assert_eq!(idx::read_labels(&lp).unwrap(), labels);
    // Encoding is deterministic (no time stamp in the gzip header).
    assert_eq!(idx::encode_images(&pixels), idx::encode_images(&pixels));

    // Labels read as images: wrong magic, named.
    let e = idx::read_images(&lp).unwrap_err();
    assert!(e.to_string().contains("l.gz") && e.to_string().contains("magic number is 0x00000801"), "{e}");
    // A header promising more than the body holds.
    let mut raw = vec![0, 0, 8, 1, 0, 0, 0, 5];
    raw.extend([1, 2, 3]);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&raw).unwrap();
    let e = idx::decode_labels(&enc.finish().unwrap(), Path::new("short.gz")).unwrap_err();
    assert!(e.to_string().contains("short.gz") && e.to_string().contains("promises 5 bytes"), "{e}");
    // Wrong image side.
    let mut raw = vec![0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 32, 0, 0, 0, 28];
    raw.extend(vec![0u8; 32 * 28]);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&raw).unwrap();
    let e = idx::decode_images(&enc.finish().unwrap(), Path::new("big.gz")).unwrap_err();
    assert!(e.to_string().contains("dimension 1 is 32, expected 28"), "{e}");
    // Not gzip at all.
    let e = idx::decode_images(b"hello", Path::new("text.gz")).unwrap_err();
    assert!(e.to_string().contains("text.gz") && e.exit_code() == 2, "{e}");
}

// ---------------------------------------------------------------- generator

#[test]
fn generation_is_deterministic_and_balanced() {
    let (a, b, c) = (Scratch::new("gen-a"), Scratch::new("gen-b"), Scratch::new("gen-c"));
    let opts = GenerateOptions { train: 250, test: 50, seed: 11 };
    let ma = data::generate(&a.0, &opts).unwrap();
    let mb = data::generate(&b.0, &opts).unwrap();
    let mc = data::generate(&c.0, &GenerateOptions { seed: 12, ..opts }).unwrap();
    assert_eq!(ma, mb, "same seed, same bytes");
    for f in FILES {
        assert_eq!(data::md5_file(&a.0.join(f)).unwrap(), data::md5_file(&b.0.join(f)).unwrap());
        assert_ne!(ma.md5_of(f), mc.md5_of(f), "{f}: another seed gives other data");
    }
    assert!(ma.is_generated());
    assert_only(&a.0, &[FILES[0], FILES[1], FILES[2], FILES[3], MANIFEST_FILE]);

    let set = FashionMnist::load(&a.0).unwrap();
    assert_eq!((set.train.len(), set.test.len()), (250, 50));
    for (split, n) in [(&set.train, 250), (&set.test, 50)] {
        let counts = split.labels.bincount::<&tch::Tensor>(None, 10);
        let counts = Vec::<i64>::try_from(&counts).unwrap();
        assert_eq!(counts.len(), 10);
        assert_eq!(counts.iter().sum::<i64>(), n);
        assert!(counts.iter().all(|&k| k == n / 10), "balanced: {counts:?}");
    }
}

#[test]
fn generated_pixels_are_pinned() {
    // The pixels and labels of a seed must not change between versions or machines:
    // the stand-in's expected accuracy figures depend on them.
    let (pixels, labels) = data::generate_split(3, 0, 40);
    assert_eq!(data::md5_hex(&labels), "d25263d8b52dcb1534cb6688d37ce59c");
    assert_eq!(data::md5_hex(&pixels), "17d3db8ff634d35e51d5d92526aa6d53");
    // Train and test are different streams.
    let (test_pixels, _) = data::generate_split(3, 1, 40);
    assert_ne!(pixels, test_pixels);
}

#[test]
fn generated_images_look_like_garments() {
    let (pixels, labels) = data::generate_split(5, 0, 200);
    let mut ink = [0f64; 10];
    for (img, &l) in pixels.chunks(784).zip(&labels) {
        let lit = img.iter().filter(|&&p| p > 0).count();
        assert!(lit > 40, "class {l}: only {lit} lit pixels");
        assert!(img[0] == 0 && img[27] == 0 && img[783] == 0, "corners stay background");
        ink[l as usize] += lit as f64 / 20.0;
    }
    // Bags and coats cover more of the frame than sandals.
    assert!(ink[8] > ink[5] && ink[4] > ink[5], "{ink:?}");
}

#[test]
fn generate_rejects_empty_sizes() {
    let d = Scratch::new("gen-empty");
    let e = data::generate(&d.0, &GenerateOptions { train: 0, test: 10, seed: 0 }).unwrap_err();
    assert!(matches!(e, DataError::InvalidOption(_)) && e.exit_code() == 2, "{e}");
}

// ---------------------------------------------------------------- in-memory set

#[test]
fn batch_gathers_rows_as_floats_in_unit_range() {
    let set = FashionMnist::load(&served_set().2).unwrap();
    let train = &set.train;
    assert_eq!(train.images.size(), vec![300, 1, 28, 28]);
    assert_eq!(train.images.kind(), Kind::Uint8);
    assert_eq!(train.labels.kind(), Kind::Int64);

    let idx = [5usize, 0, 299, 5];
    let (x, y) = train.batch(&idx, Device::Cpu);
    assert_eq!(x.size(), vec![4, 1, 28, 28]);
    assert_eq!(x.kind(), Kind::Float);
    assert_eq!(y.size(), vec![4]);
    assert_eq!(y.kind(), Kind::Int64);
    let (lo, hi) = (x.min().double_value(&[]), x.max().double_value(&[]));
    assert!(lo >= 0.0 && hi <= 1.0 && hi > 0.5, "pixels in [0,1]: {lo}..{hi}");
    for (row, &i) in idx.iter().enumerate() {
        assert_eq!(y.int64_value(&[row as i64]), train.labels.int64_value(&[i as i64]));
        let expect = train.images.get(i as i64).to_kind(Kind::Float) / 255.0;
        assert!(x.get(row as i64).allclose(&expect, 0.0, 1e-7, false), "row {row} is sample {i}");
    }

    let sub = train.subset(20);
    assert_eq!(sub.len(), 20);
    assert_eq!(sub.images.size(), vec![20, 1, 28, 28]);
    assert_eq!(train.subset(10_000).len(), 300);
}

#[test]
#[should_panic(expected = "out of range")]
fn batch_index_out_of_range_panics() {
    let set = FashionMnist::load(&served_set().2).unwrap();
    let _ = set.test.batch(&[100], Device::Cpu);
}

#[test]
fn corrupt_or_missing_file_on_disk_is_named_on_load() {
    let d = Scratch::new("corrupt");
    data::generate(&d.0, &GenerateOptions { train: 30, test: 10, seed: 1 }).unwrap();
    let path = d.0.join("t10k-images-idx3-ubyte.gz");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = FashionMnist::load(&d.0).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DataError::Checksum { .. }), "{msg}");
    assert!(msg.contains("t10k-images-idx3-ubyte.gz") && msg.contains("Delete it and run again"), "{msg}");
    assert_eq!(e.exit_code(), 2);

    std::fs::remove_file(&path).unwrap();
    let e = FashionMnist::load(&d.0).unwrap_err();
    assert!(matches!(e, DataError::Missing { .. }) && e.to_string().contains("t10k-images"), "{e}");

    // A directory without a manifest of its own is checked against the published
    // checksums, which a generated file cannot match.
    let r = Scratch::new("real-md5");
    for f in FILES {
        std::fs::copy(served_set().2.join(f), r.0.join(f)).unwrap();
    }
    let e = FashionMnist::load(&r.0).unwrap_err();
    assert!(
        e.to_string().contains("train-images-idx3-ubyte.gz") && e.to_string().contains("download"),
        "{e}"
    );
}

// ---------------------------------------------------------------- download

#[test]
fn download_succeeds_and_files_are_valid() {
    let server = Server::with_set(Duration::ZERO);
    let d = Scratch::new("dl-ok");
    let fetched = data::download(&d.0, &download_options(vec![server.base()])).unwrap();
    assert_eq!(fetched, FILES.to_vec());
    let set = FashionMnist::load(&d.0).unwrap();
    assert_eq!((set.train.len(), set.test.len()), (300, 100));
    assert_only(&d.0, &[FILES[0], FILES[1], FILES[2], FILES[3], MANIFEST_FILE]);
    // Everything present: nothing is fetched again.
    assert!(data::download(&d.0, &download_options(vec![server.base()])).unwrap().is_empty());
    assert_eq!(server.total_hits(), 4);
}

#[test]
fn checksum_mismatch_leaves_nothing() {
    let server = Server::with_set(Duration::ZERO);
    let mut wrong = served_set().0["train-labels-idx1-ubyte.gz"].clone();
    wrong[20] ^= 0xff;
    server.set("train-labels-idx1-ubyte.gz", Reply::Body(wrong));
    let d = Scratch::new("dl-md5");
    let e = data::download(&d.0, &download_options(vec![server.base()])).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DataError::AllMirrorsFailed { .. }), "{msg}");
    assert!(msg.contains("train-labels-idx1-ubyte.gz") && msg.contains("checksum mismatch"), "{msg}");
    assert!(!d.0.join("train-labels-idx1-ubyte.gz").exists());
    // The file fetched before it stays (it is complete and verified); no temp file.
    assert_only(&d.0, &["train-images-idx3-ubyte.gz"]);
}

#[test]
fn truncated_transfer_leaves_nothing() {
    let server = Server::with_set(Duration::ZERO);
    let full = served_set().0["train-images-idx3-ubyte.gz"].clone();
    server.set(
        "train-images-idx3-ubyte.gz",
        Reply::Short { body: full[..full.len() / 3].to_vec(), announced: full.len() },
    );
    let d = Scratch::new("dl-trunc");
    let e = data::download(&d.0, &download_options(vec![server.base()])).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("train-images-idx3-ubyte.gz"), "{msg}");
    assert!(msg.contains(&format!("of {} bytes", full.len())), "reports the truncation: {msg}");
    assert_only(&d.0, &[]);
    assert_eq!(e.exit_code(), 1);
}

#[test]
fn server_down_lists_the_mirror_and_the_ways_out() {
    let dead = dead_mirror();
    let d = Scratch::new("dl-down");
    let e = data::download(&d.0, &download_options(vec![dead.clone()])).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&format!("{dead}train-images-idx3-ubyte.gz")), "{msg}");
    assert!(msg.contains("DDP_LAB_MIRROR") && msg.contains("--dataset generated"), "{msg}");
    assert!(msg.contains("network"), "{msg}");
    assert_only(&d.0, &[]);
}

#[test]
fn second_mirror_is_used_when_the_first_fails() {
    let server = Server::with_set(Duration::ZERO);
    let broken = Server::start(HashMap::new(), Duration::ZERO); // 404 for everything
    let d = Scratch::new("dl-second");
    let mirrors = vec![dead_mirror(), broken.base(), server.base()];
    let fetched = data::download(&d.0, &download_options(mirrors)).unwrap();
    assert_eq!(fetched.len(), 4);
    assert_eq!(broken.total_hits(), 4);
    assert_eq!(server.total_hits(), 4);
    FashionMnist::load(&d.0).unwrap();
}

#[test]
fn damaged_file_on_disk_is_downloaded_again() {
    let server = Server::with_set(Duration::ZERO);
    let d = Scratch::new("dl-repair");
    data::download(&d.0, &download_options(vec![server.base()])).unwrap();
    std::fs::write(d.0.join("train-labels-idx1-ubyte.gz"), b"garbage").unwrap();
    let fetched = data::download(&d.0, &download_options(vec![server.base()])).unwrap();
    assert_eq!(fetched, vec!["train-labels-idx1-ubyte.gz"]);
    FashionMnist::load(&d.0).unwrap();
}

/// Copies the served set's four files into `dir`, each decompressed, passed through
/// `edit` (file name, content), and compressed again at `level`.
fn recompressed_copy(dir: &Path, level: u32, edit: impl Fn(&str, &mut Vec<u8>)) {
    for f in FILES {
        let mut content = idx::gunzip(&served_set().0[f], Path::new(f)).unwrap();
        edit(f, &mut content);
        std::fs::write(dir.join(f), idx::gzip_at(&content, level)).unwrap();
    }
}

#[test]
fn a_recompressed_copy_is_accepted_by_its_content() {
    let d = Scratch::new("recompressed");
    recompressed_copy(&d.0, 9, |_, _| {});
    let manifest = &served_set().1;
    for f in FILES {
        // Other bytes on disk, the same data inside.
        assert_ne!(data::md5_file(&d.0.join(f)).unwrap(), manifest.md5_of(f).unwrap(), "{f}");
    }
    let (copy, original) =
        (FashionMnist::load_with(&d.0, manifest).unwrap(), FashionMnist::load(&served_set().2).unwrap());
    assert!(copy.train.images.equal(&original.train.images) && copy.test.labels.equal(&original.test.labels));
    // Verified as it is: nothing is downloaded, even with every mirror down.
    let server = Server::with_set(Duration::ZERO);
    assert!(data::download(&d.0, &download_options(vec![dead_mirror(), server.base()])).unwrap().is_empty());
    assert_eq!(server.total_hits(), 0);
    // A mirror serving a recompressed copy is accepted too.
    let mirror = Server::start(
        FILES
            .iter()
            .map(|f| (format!("/fashion/{f}"), Reply::Body(std::fs::read(d.0.join(f)).unwrap())))
            .collect(),
        Duration::ZERO,
    );
    let fresh = Scratch::new("recompressed-dl");
    assert_eq!(data::download(&fresh.0, &download_options(vec![mirror.base()])).unwrap(), FILES.to_vec());
    FashionMnist::load(&fresh.0).unwrap();
}

// ---------------------------------------------------------------- the first samples only

/// The first samples of each split, as `load` and then `Split::subset` give them.
fn assert_first_samples(
    first: &FashionMnist,
    whole: &FashionMnist,
    train: Option<usize>,
    test: Option<usize>,
) {
    for (got, all, n) in [(&first.train, &whole.train, train), (&first.test, &whole.test, test)] {
        let expected = all.subset(n.unwrap_or(usize::MAX));
        assert_eq!(got.len(), expected.len(), "{n:?}");
        assert!(got.images.equal(&expected.images) && got.labels.equal(&expected.labels), "{n:?}");
    }
}

#[test]
fn the_first_samples_load_as_the_subset_of_the_whole_by_either_check() {
    let (files, manifest, served) = (&served_set().0, &served_set().1, &served_set().2);
    assert!(!files.is_empty());
    let whole = FashionMnist::load(served).unwrap();
    // Checked by the .gz MD5 (only the start decompressed), and by content (a
    // recompressed copy: all decompressed to check it, then cut).
    let recompressed = Scratch::new("first-recompressed");
    recompressed_copy(&recompressed.0, 9, |_, _| {});
    for dir in [served.clone(), recompressed.0.clone()] {
        for (train, test) in [
            (Some(0), Some(1)),
            (Some(17), Some(5)),
            (Some(300), None),
            (Some(10_000), Some(10_000)),
            (None, None),
        ] {
            let first = FashionMnist::load_first(&dir, manifest, train, test).unwrap();
            assert_first_samples(&first, &whole, train, test);
        }
    }
}

#[test]
fn a_subset_decompresses_only_as_far_as_its_samples_reach() {
    // A training-images file whose second half is garbage, listed by its own MD5: the
    // first samples load (nothing after them was read); the whole split does not.
    let d = Scratch::new("first-prefix");
    for f in FILES {
        std::fs::copy(served_set().2.join(f), d.0.join(f)).unwrap();
    }
    let path = d.0.join("train-images-idx3-ubyte.gz");
    let mut bytes = std::fs::read(&path).unwrap();
    let half = bytes.len() / 2;
    bytes[half..].iter_mut().for_each(|b| *b ^= 0xA5);
    std::fs::write(&path, &bytes).unwrap();
    let text: String =
        FILES.iter().map(|f| format!("{}  {f}\n", data::md5_file(&d.0.join(f)).unwrap())).collect();
    let manifest = Manifest::parse(&text, "test").unwrap();
    let whole = FashionMnist::load(&served_set().2).unwrap();
    let first = FashionMnist::load_first(&d.0, &manifest, Some(20), Some(20)).unwrap();
    assert_first_samples(&first, &whole, Some(20), Some(20));
    let e = FashionMnist::load_with(&d.0, &manifest).unwrap_err();
    assert!(matches!(e, DataError::Format { .. }) && e.to_string().contains("train-images"), "{e}");
}

#[test]
fn a_change_after_the_first_samples_is_still_refused() {
    // The last pixel of the training images changed: far after the 5 samples asked
    // for, and still a file that is not the data.
    let d = Scratch::new("first-changed");
    recompressed_copy(&d.0, 6, |f, content| {
        if f == "train-images-idx3-ubyte.gz" {
            let last = content.len() - 1;
            content[last] ^= 0x55;
        }
    });
    let e = FashionMnist::load_first(&d.0, &served_set().1, Some(5), Some(5)).unwrap_err();
    assert!(matches!(e, DataError::Checksum { .. }) && e.to_string().contains("train-images"), "{e}");
}

#[test]
fn a_changed_byte_in_any_file_is_refused_and_the_file_kept() {
    for (i, file) in FILES.iter().enumerate() {
        let d = Scratch::new("changed-byte");
        // One pixel or one label changed, then compressed as a faithful copy would be.
        recompressed_copy(&d.0, 6, |f, content| {
            if f == *file {
                let at = content.len() - 1 - i;
                content[at] = if content[at] == 0 { 1 } else { content[at] - 1 };
            }
        });
        let before = std::fs::read(d.0.join(file)).unwrap();
        let broken = Server::start(HashMap::new(), Duration::ZERO); // 404 for everything
        let opts = dataset_options(&d.0, DatasetKind::Real, vec![dead_mirror(), broken.base()]);
        let e = data::ensure_dataset(&opts).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataError::DamagedKept { .. }) && e.exit_code() == 2, "{file}: {msg}");
        assert!(msg.contains(&d.0.join(file).display().to_string()), "names the file: {msg}");
        assert!(msg.contains("decompressed content") && msg.contains("left as it is"), "{msg}");
        assert!(msg.contains("HTTP status 404") && msg.contains("What to do"), "{msg}");
        assert_eq!(std::fs::read(d.0.join(file)).unwrap(), before, "{file} is still there, unchanged");
        assert_only(&d.0, &FILES);
        // Loading refuses it too, naming it.
        let e = FashionMnist::load_with(&d.0, &served_set().1).unwrap_err();
        assert!(matches!(e, DataError::Checksum { .. }) && e.exit_code() == 2, "{e}");
        assert!(
            e.to_string().contains(file) && e.to_string().contains("the MD5 of its decompressed content"),
            "{e}"
        );
        // Auto falls back to the stand-in and says which file kept the real data out.
        let ready =
            data::ensure_dataset(&DatasetOptions { kind: DatasetKind::Auto, ..opts.clone() }).unwrap();
        assert_eq!(ready.kind_used, DatasetKind::Generated);
        assert!(ready.summary().contains(file), "{}", ready.summary());
        assert_eq!(std::fs::read(d.0.join(file)).unwrap(), before);
    }
}

// ---------------------------------------------------------------- ensure_dataset

fn dataset_options(dir: &Path, kind: DatasetKind, mirrors: Vec<String>) -> DatasetOptions {
    DatasetOptions {
        dir: dir.to_path_buf(),
        kind,
        download: download_options(mirrors),
        generated: GenerateOptions { train: 100, test: 20, seed: 3 },
        system_dir: None,
    }
}

#[test]
fn concurrent_ensure_downloads_each_file_once() {
    // A slow server widens the window in which the callers would race.
    let server = Server::with_set(Duration::from_millis(150));
    let d = Scratch::new("ensure-threads");
    let opts = dataset_options(&d.0, DatasetKind::Real, vec![server.base()]);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| data::ensure_dataset(&opts).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for f in FILES {
        assert_eq!(server.hits(f), 1, "{f} fetched once");
    }
    let downloads = results.iter().filter(|r| r.action == DatasetAction::Downloaded).count();
    assert_eq!(downloads, 1, "one caller downloads, the others find the files present");
    assert!(results.iter().all(|r| r.kind_used == DatasetKind::Real && r.dir == d.0));
    FashionMnist::load(&d.0).unwrap();
}

/// Run by `concurrent_ensure_from_processes` in child processes; does nothing otherwise.
#[test]
fn child_process_ensure() {
    let (Ok(dir), Ok(mirror)) =
        (std::env::var("LABKIT_TEST_CHILD_DIR"), std::env::var("LABKIT_TEST_CHILD_MIRROR"))
    else {
        return;
    };
    // The checksums come from DDP_LAB_MANIFEST, set by the parent, as a checker would.
    let opts = DatasetOptions {
        dir: PathBuf::from(dir),
        kind: DatasetKind::Real,
        download: DownloadOptions { mirrors: vec![mirror], progress: false, ..Default::default() },
        ..Default::default()
    };
    let ready = data::ensure_dataset(&opts).unwrap();
    println!("CHILD-ACTION {:?}", ready.action);
}

#[test]
fn concurrent_ensure_from_processes_downloads_each_file_once() {
    let server = Server::with_set(Duration::from_millis(150));
    let d = Scratch::new("ensure-procs");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_process_ensure", "--nocapture", "--test-threads=1"])
                .env("LABKIT_TEST_CHILD_DIR", &d.0)
                .env("LABKIT_TEST_CHILD_MIRROR", server.base())
                .env(data::MANIFEST_ENV, served_set().2.join(MANIFEST_FILE))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut actions = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let action =
            text.split("CHILD-ACTION ").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_string);
        actions.push(action.unwrap_or_else(|| panic!("child did not report: {text}")));
    }
    for f in FILES {
        assert_eq!(server.hits(f), 1, "{f} fetched once across processes");
    }
    FashionMnist::load(&d.0).unwrap();
    assert_eq!(actions.iter().filter(|a| *a == "Downloaded").count(), 1, "{actions:?}");
}

#[test]
fn ensure_generated_generates_once_in_its_own_subdirectory() {
    let d = Scratch::new("ensure-gen");
    let opts = dataset_options(&d.0, DatasetKind::Generated, vec![]);
    let first = data::ensure_dataset(&opts).unwrap();
    assert_eq!(first.dir, d.0.join("generated-seed3-100-20"));
    assert_eq!((first.kind_used, first.action), (DatasetKind::Generated, DatasetAction::Generated));
    let second = data::ensure_dataset(&opts).unwrap();
    assert_eq!(second.action, DatasetAction::Present);
    let set = FashionMnist::load(&second.dir).unwrap();
    assert_eq!((set.train.len(), set.test.len()), (100, 20));
    // Nothing lands in the real data's directory.
    assert_only(&d.0, &["generated-seed3-100-20"]);

    // A damaged generated file is regenerated, identically.
    let path = first.dir.join("train-images-idx3-ubyte.gz");
    let before = std::fs::read(&path).unwrap();
    std::fs::write(&path, b"x").unwrap();
    assert_eq!(data::ensure_dataset(&opts).unwrap().action, DatasetAction::Generated);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn ensure_auto_prefers_real_and_falls_back_to_generated() {
    let server = Server::with_set(Duration::ZERO);
    let d = Scratch::new("ensure-auto");
    let ready = data::ensure_dataset(&dataset_options(&d.0, DatasetKind::Auto, vec![server.base()])).unwrap();
    assert_eq!((ready.kind_used, ready.action), (DatasetKind::Real, DatasetAction::Downloaded));
    assert!(ready.summary().contains("downloaded"), "{}", ready.summary());

    let offline = Scratch::new("ensure-offline");
    let ready =
        data::ensure_dataset(&dataset_options(&offline.0, DatasetKind::Auto, vec![dead_mirror()])).unwrap();
    assert_eq!((ready.kind_used, ready.action), (DatasetKind::Generated, DatasetAction::Generated));
    let reason = ready.fallback_reason.as_deref().unwrap();
    assert!(reason.contains("could not download"), "{reason}");
    assert!(ready.summary().contains("generated stand-in"), "{}", ready.summary());
    FashionMnist::load(&ready.dir).unwrap();

    // Real, offline: the error, not a fallback.
    let e = data::ensure_dataset(&dataset_options(&offline.0, DatasetKind::Real, vec![dead_mirror()]))
        .unwrap_err();
    assert!(matches!(e, DataError::AllMirrorsFailed { .. }), "{e}");
}

#[test]
fn dataset_kind_parses_from_the_command_line() {
    assert_eq!("generated".parse::<DatasetKind>().unwrap(), DatasetKind::Generated);
    assert_eq!("Real".parse::<DatasetKind>().unwrap(), DatasetKind::Real);
    assert_eq!("auto".parse::<DatasetKind>().unwrap(), DatasetKind::Auto);
    let e = "mnist".parse::<DatasetKind>().unwrap_err();
    assert!(e.to_string().contains("real, generated or auto") && e.exit_code() == 2);
}

/// A tenth of the full-size set, made and encoded as the data files are, reads back
/// whole. (How fast the full set is made is measured, not asserted:
/// `cargo run -p ddp-bench --release --bin generate`.)
#[test]
fn a_tenth_of_the_set_generates_and_reads_back() {
    let (pixels, labels) = data::generate_split(0, 0, 7000);
    assert_eq!((pixels.len(), labels.len()), (7000 * 28 * 28, 7000));
    let back = idx::decode_images(&idx::encode_images(&pixels), Path::new("train-images")).unwrap();
    assert!(back == pixels, "the encoded images must decode to the generated ones");
}

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;

use fashion_mirror::Mirror;
use tempfile::tempdir;

/// Sends one raw request and returns (status code, body).
fn request(mirror: &Mirror, method: &str, target: &str) -> (u16, Vec<u8>) {
    let addr = mirror.url().trim_start_matches("http://").trim_end_matches('/').to_string();
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {target} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    let end = reply.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head") + 4;
    let head = String::from_utf8(reply[..end].to_vec()).unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("every reply has a Content-Length")
        .parse()
        .unwrap();
    let body = reply[end..].to_vec();
    if method != "HEAD" {
        assert_eq!(body.len(), length, "body length matches Content-Length");
    }
    (status, body)
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn labkit_downloads_each_file_once_from_the_mirror() {
    let served = tempdir().unwrap();
    let target = tempdir().unwrap();
    let options = labkit::GenerateOptions { train: 500, test: 100, seed: 3 };
    let manifest = labkit::generate(served.path(), &options).unwrap();
    let mirror = Mirror::serve(served.path()).unwrap();
    assert!(mirror.url().starts_with("http://127.0.0.1:") && mirror.url().ends_with('/'));

    let download = labkit::DownloadOptions {
        mirrors: vec![mirror.url()],
        expected: Some(manifest),
        progress: false,
        ..Default::default()
    };
    let fetched = labkit::download(target.path(), &download).unwrap();
    assert_eq!(fetched, labkit::data::FILES);
    for file in labkit::data::FILES {
        let sent = std::fs::read(served.path().join(file)).unwrap();
        assert_eq!(std::fs::read(target.path().join(file)).unwrap(), sent, "{file} arrived intact");
    }
    let once: Vec<(&str, usize)> = labkit::data::FILES.iter().map(|&f| (f, 1)).collect();
    assert_eq!(mirror.downloads(), counts(&once));

    // Everything is in place now: a second download fetches nothing.
    assert!(labkit::download(target.path(), &download).unwrap().is_empty());
    assert_eq!(mirror.downloads(), counts(&once));
    mirror.reset_counts();
    assert!(mirror.downloads().is_empty());
}

#[test]
fn serves_concurrent_clients_and_counts_each() {
    let dir = tempdir().unwrap();
    let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &content).unwrap();
    let mirror = Mirror::serve(dir.path()).unwrap();
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..8).map(|_| s.spawn(|| request(&mirror, "GET", "/big.bin"))).collect();
        for client in clients {
            let (status, body) = client.join().unwrap();
            assert_eq!(status, 200);
            assert!(body == content, "every client gets the whole file");
        }
    });
    assert_eq!(mirror.downloads(), counts(&[("big.bin", 8)]));
}

#[test]
fn only_files_of_the_directory_are_served_and_only_full_gets_count() {
    let dir = tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/inner.txt"), "inner").unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
    std::fs::write(dir.path().join(".hidden"), "secret").unwrap();
    let mirror = Mirror::serve(&dir.path().join("sub")).unwrap();
    for target in ["/missing", "/../a.txt", "/%2E%2E/a.txt", "/", "/sub"] {
        assert_eq!(request(&mirror, "GET", target).0, 404, "{target}");
    }
    drop(mirror);

    let mirror = Mirror::serve(dir.path()).unwrap();
    assert_eq!(request(&mirror, "GET", "/a.txt"), (200, b"hello".to_vec()));
    assert_eq!(request(&mirror, "GET", "/a.txt?cache=no"), (200, b"hello".to_vec()));
    assert_eq!(request(&mirror, "HEAD", "/a.txt"), (200, Vec::new()));
    assert_eq!(request(&mirror, "POST", "/a.txt").0, 405);
    for target in ["/.hidden", "/sub", "/sub/inner.txt"] {
        assert_eq!(request(&mirror, "GET", target).0, 404, "{target}");
    }
    assert_eq!(mirror.downloads(), counts(&[("a.txt", 2)]));
}

#[test]
fn serving_a_missing_directory_fails_and_drop_frees_the_port() {
    let dir = tempdir().unwrap();
    let err = Mirror::serve(&dir.path().join("nope")).err().expect("no such directory");
    assert!(err.to_string().contains("is not a directory"), "{err}");

    let mirror = Mirror::serve(dir.path()).unwrap();
    let addr = mirror.url().trim_start_matches("http://").trim_end_matches('/').to_string();
    drop(mirror);
    // The acceptor has stopped and the listener is closed: nobody answers any more.
    assert!(TcpStream::connect(&addr).is_err(), "the mirror still listens after drop");
}

//! A local stand-in for a Fashion-MNIST mirror.
//!
//! The checker points a student's program at it (through `DDP_LAB_MIRROR`) and then
//! reads how often each file was fetched: "download once per node" is checked by
//! counting, not by trusting the program's output. It serves the files of one
//! directory at `/<file name>` over plain HTTP/1.1, one thread per connection, and
//! closes every connection after one response, which every client handles.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a connection may stay silent: a stalled client must not pin a thread forever.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head accepted; ours are a few hundred bytes.
const MAX_HEAD: u64 = 16 * 1024;

/// A running server; dropping it stops it.
pub struct Mirror {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    dir: PathBuf,
    counts: Mutex<BTreeMap<String, usize>>,
    shutdown: AtomicBool,
}

impl Shared {
    fn counts(&self) -> MutexGuard<'_, BTreeMap<String, usize>> {
        // A panicking connection thread cannot leave the map half-updated, so a
        // poisoned lock still holds valid counts.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Mirror {
    /// Starts serving the files of `dir` on a free port of 127.0.0.1.
    pub fn serve(dir: &Path) -> io::Result<Mirror> {
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not a directory; create it and put the files to serve in it", dir.display()),
            ));
        }
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            counts: Mutex::new(BTreeMap::new()),
            shutdown: AtomicBool::new(false),
        });
        let state = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("mirror-accept".into())
            .spawn(move || accept_loop(listener, state))?;
        Ok(Mirror { addr, shared, acceptor: Some(acceptor) })
    }

    /// The base URL, with its trailing slash: append a file name to fetch it.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many times each file was served in full (only files fetched at least once appear).
    pub fn downloads(&self) -> BTreeMap<String, usize> {
        self.shared.counts().clone()
    }

    /// Forgets all counts, e.g. between two runs of a program.
    pub fn reset_counts(&self) {
        self.shared.counts().clear();
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // The acceptor is blocked in accept(); a connection of our own wakes it to see the flag.
        let woke = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).is_ok();
        if let Some(acceptor) = self.acceptor.take() {
            // Without the wake-up the join would hang; the thread then ends with the process.
            if woke {
                let _ = acceptor.join();
            }
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        match stream {
            Ok(stream) => {
                let state = Arc::clone(&shared);
                // A connection whose thread cannot start is dropped; the client sees it closed.
                let _ = std::thread::Builder::new().name("mirror-conn".into()).spawn(move || {
                    let _ = handle(stream, &state);
                });
            }
            // E.g. out of file descriptors: pause rather than spin, then keep serving.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Answers one request on `stream`, then closes it.
fn handle(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let request = match read_request_line(&stream)? {
        Some(line) => line,
        None => return Ok(()), // closed without a request, e.g. the shutdown wake-up
    };
    let mut parts = request.split_whitespace();
    let (method, target) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v)) if v.starts_with("HTTP/1.") => (m, t),
        _ => return respond(&mut stream, "400 Bad Request", "malformed request line\n", &[]),
    };
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", "only GET and HEAD\n", &["Allow: GET, HEAD"]);
    }
    let Some((name, file, len)) = open_target(&shared.dir, target) else {
        return respond(&mut stream, "404 Not Found", "no such file\n", &[]);
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes())?;
    if method == "HEAD" {
        return stream.flush();
    }
    // Counted before the body goes out: a client holds every byte before this thread
    // could count afterwards, and a test that asks right after its download must see
    // it. A transfer that fails is taken back out.
    *shared.counts().entry(name.clone()).or_insert(0) += 1;
    let sent = io::copy(&mut file.take(len), &mut stream).and_then(|n| {
        stream.flush()?;
        if n == len {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while being served"))
        }
    });
    if sent.is_err() {
        let mut counts = shared.counts();
        if let Some(n) = counts.get_mut(&name) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&name);
            }
        }
    }
    sent
}

/// The request line; the header lines after it are read and ignored, since nothing
/// in them changes the answer. `None` when the client sent nothing.
fn read_request_line(stream: &TcpStream) -> io::Result<Option<String>> {
    let mut reader = BufReader::new(stream.take(MAX_HEAD));
    let mut first = String::new();
    if reader.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut line = String::new();
    loop {
        line.clear();
        // End of input (or of the size limit) also ends the head: answer what we have.
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
    }
    Ok(Some(first.trim_end().to_string()))
}

/// The file a request target names, opened, with its length: a plain file directly
/// in `dir`. Anything else (subdirectories, `..`, hidden files) is not served.
fn open_target(dir: &Path, target: &str) -> Option<(String, File, u64)> {
    let path = target.split(['?', '#']).next()?;
    let name = path.strip_prefix('/')?;
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0', '%']) {
        return None;
    }
    let file = File::open(dir.join(name)).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then(|| (name.to_string(), file, meta.len()))
}

fn respond(stream: &mut TcpStream, status: &str, body: &str, extra: &[&str]) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for header in extra {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("Content-Type: text/plain\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::open_target;

    #[test]
    fn only_plain_names_in_the_directory_are_served() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert!(open_target(dir, "/Cargo.toml").is_some());
        assert!(open_target(dir, "/Cargo.toml?x=1").is_some());
        for bad in ["/", "Cargo.toml", "/src", "/src/lib.rs", "/../Cargo.toml", "/..", "/.hidden", "/nope"] {
            assert!(open_target(dir, bad).is_none(), "{bad} must not be served");
        }
    }
}

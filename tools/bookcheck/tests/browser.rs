//! The built book in a real browser: headless Chromium (Debian's `chromium`, which
//! scripts/setup.sh installs) loads every page from a local HTTP server, and each page
//! must load without a console error or an uncaught exception, with every image
//! decoded; the book's search must find `set_epoch`; and a screenshot of step 6's page
//! (at its section "Why", with the sampler's figure) is written to
//! `target/book-browser/step-06.png`.
//!
//! Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! JSON messages separated by NUL bytes on file descriptors 3 and 4), so nothing but
//! the browser is needed. Skipped without a built book or without Chromium, except under
//! scripts/test.sh, which sets DDP_LAB_REQUIRE_BOOK and DDP_LAB_REQUIRE_BROWSER.
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one answer from the browser may take.
const PATIENCE: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the crate lies in tools/")
}

/// `skip` explains why the test cannot run; under `require` that is a failure.
fn skip_unless_required(require: &str, why: String) {
    assert!(std::env::var_os(require).is_none(), "{why}, although {require} is set");
    eprintln!("SKIPPED: {why}");
}

#[test]
fn every_page_loads_cleanly_in_chromium_and_search_finds_set_epoch() {
    let root = repo_root();
    // lab-guide/book.toml's build-dir.
    let book = root.join("target/book");
    if !book.join("index.html").is_file() {
        return skip_unless_required(
            "DDP_LAB_REQUIRE_BOOK",
            format!("no book built in {} (bash scripts/book.sh build)", book.display()),
        );
    }
    let Some(chromium) = chromium() else {
        return skip_unless_required(
            "DDP_LAB_REQUIRE_BROWSER",
            "no Chromium here (Debian: apt-get install chromium; scripts/setup.sh --for-tests does it as root)".into(),
        );
    };
    let base = serve(book.clone());
    let mut browser = Browser::start(&chromium);

    let mut pages: Vec<String> = html_pages(&book);
    pages.sort();
    let mut problems = Vec::new();
    let mut images = 0;
    for page in &pages {
        let url = format!("{base}/{page}");
        browser.open(&url);
        let (loaded, broken) = browser.images();
        images += loaded;
        for src in broken {
            problems.push(format!("{page}: image {src} did not load"));
        }
        for error in browser.errors() {
            problems.push(format!("{page}: {error}"));
        }
    }
    assert!(problems.is_empty(), "in Chromium:\n{}", problems.join("\n"));
    assert!(images >= 9, "only {images} images loaded over all pages: are the figures embedded?");

    // mdBook opens its search with the query of `?search=`.
    browser.open(&format!("{base}/index.html?search=set_epoch"));
    let hits = browser
        .poll("Array.from(document.querySelectorAll('#searchresults li')).map(li => li.innerText)", |v| {
            v.as_array().is_some_and(|a| !a.is_empty())
        });
    let hits: Vec<&str> = hits.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        hits.iter().any(|h| h.contains("Step 6") && h.contains("set_epoch")),
        "searching set_epoch found no result on step 6's page: {hits:#?}"
    );
    let errors = browser.errors();
    assert!(errors.is_empty(), "searching: {errors:?}");

    // A screenshot of a step page at its figure, for a person to look at.
    browser.open(&format!("{base}/steps/step-06.html#why"));
    let png = browser.screenshot();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "not a screenshot: {} bytes",
        png.len()
    );
    let out = root.join("target/book-browser");
    std::fs::create_dir_all(&out).unwrap();
    let shot = out.join("step-06.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!(
        "Chromium loaded {} pages and {images} images without an error; screenshot: {}",
        pages.len(),
        shot.display()
    );
}

/// Debian's `chromium` (or `$CHROMIUM`), if it is installed.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|p| p.is_file())
}

/// Every HTML file of the book, relative to it.
fn html_pages(book: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(book.join(&rel)).unwrap().flatten() {
            let rel = rel.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                stack.push(rel);
            } else if rel.extension().is_some_and(|e| e == "html") {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

// --- a static HTTP server for the book -------------------------------------------------

/// Serves `dir` on a free loopback port, one thread per connection, for the rest of the
/// test; returns its base URL.
fn serve(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let dir = dir.clone();
            std::thread::spawn(move || answer(stream, &dir));
        }
    });
    base
}

/// Answers one GET request (the connection closes after it).
fn answer(mut stream: TcpStream, dir: &Path) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // The headers, which nothing here needs.
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split(['?', '#']).next().unwrap_or("/").trim_start_matches('/');
    let path =
        if path.is_empty() || path.ends_with('/') { format!("{path}index.html") } else { path.to_string() };
    let file = dir.join(&path);
    let body = (!path.split('/').any(|s| s == "..")).then(|| std::fs::read(&file).ok()).flatten();
    let _ = match body {
        Some(body) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                content_type(&path),
                body.len()
            );
            stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body))
        }
        None => stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    };
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("ttf") => "font/ttf",
        Some("eot") => "application/vnd.ms-fontobject",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

// --- the browser --------------------------------------------------------------------------

/// Headless Chromium with one page, driven over the DevTools protocol on a pipe.
struct Browser {
    _child: child_process::Child,
    commands: File,
    messages: Receiver<Value>,
    session: String,
    next_id: u64,
    /// Events received since the last [`Browser::open`].
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(chromium: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let (commands_read, commands) = pipe();
        let (messages_read, messages_write) = pipe();
        let mut cmd = Command::new(chromium);
        cmd.args([
            "--headless",
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // Chromium's sandbox refuses to run as root.
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("--no-sandbox");
        }
        cmd.arg("about:blank");
        let (from, to) = (commands_read, messages_write);
        // SAFETY: between fork and exec only fcntl and dup2, which are async-signal-safe.
        // The pipe's ends are first moved above 10, so that neither lands on 3 or 4
        // before the other has been copied.
        unsafe {
            cmd.pre_exec(move || {
                let high_from = libc::fcntl(from, libc::F_DUPFD, 10);
                let high_to = libc::fcntl(to, libc::F_DUPFD, 10);
                if high_from < 0 || high_to < 0 || libc::dup2(high_from, 3) < 0 || libc::dup2(high_to, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = child_process::spawn(cmd).expect("cannot start Chromium");
        // This process keeps only its own ends, so that the reader sees the end when
        // Chromium exits.
        unsafe {
            libc::close(commands_read);
            libc::close(messages_write);
        }
        let (tx, messages) = mpsc::channel();
        let mut reader = BufReader::new(unsafe { File::from_raw_fd(messages_read) });
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            while reader.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(message) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(message).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut browser = Browser {
            _child: child,
            commands: unsafe { File::from_raw_fd(commands) },
            messages,
            session: String::new(),
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target = target["targetId"].as_str().expect("a target id").to_string();
        let attached = browser.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }));
        browser.session = attached["sessionId"].as_str().expect("a session id").to_string();
        for domain in ["Page", "Runtime", "Log"] {
            browser.call(&format!("{domain}.enable"), json!({}));
        }
        browser
    }

    /// Sends a command (to the page once attached) and returns its result; events that
    /// arrive meanwhile are kept.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap_or_else(|e| panic!("Chromium is gone ({e}) before {method}"));
        loop {
            let message = self.next_message(method);
            if message["id"].as_u64() == Some(id) {
                assert!(message.get("error").is_none(), "{method}: {}", message["error"]);
                return message["result"].clone();
            }
            if message.get("method").is_some() {
                self.events.push(message);
            }
        }
    }

    fn next_message(&mut self, waiting_for: &str) -> Value {
        self.messages
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("no answer from Chromium to {waiting_for} in {PATIENCE:?}: {e}"))
    }

    /// Navigates to `url` and waits until it has loaded.
    fn open(&mut self, url: &str) {
        self.events.clear();
        let result = self.call("Page.navigate", json!({ "url": url }));
        assert!(result.get("errorText").is_none(), "{url}: {}", result["errorText"]);
        let deadline = Instant::now() + PATIENCE;
        while !self.events.iter().any(|e| e["method"] == "Page.loadEventFired") {
            assert!(Instant::now() < deadline, "{url} did not finish loading");
            let message = self.next_message("the load event");
            if message.get("method").is_some() {
                self.events.push(message);
            }
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
        );
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {}", result["exceptionDetails"]);
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until `done` accepts its value (for 20 s at most).
    fn poll(&mut self, expression: &str, done: impl Fn(&Value) -> bool) -> Value {
        let patience = Duration::from_secs(20);
        let deadline = Instant::now() + patience;
        loop {
            let value = self.eval(expression);
            if done(&value) {
                return value;
            }
            assert!(Instant::now() < deadline, "{expression} still gives {value} after {patience:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Once every image of the page has finished: how many loaded, and the sources of
    /// those that did not.
    fn images(&mut self) -> (usize, Vec<String>) {
        let value = self.eval(
            "(async () => {
                const images = Array.from(document.images);
                await Promise.all(images.map(img => img.complete ? null
                    : new Promise(done => { img.onload = done; img.onerror = done; })));
                return images.map(img => [img.src, img.complete && img.naturalWidth > 0]);
            })()",
        );
        let mut loaded = 0;
        let mut broken = Vec::new();
        for pair in value.as_array().unwrap() {
            if pair[1].as_bool() == Some(true) {
                loaded += 1;
            } else {
                broken.push(pair[0].as_str().unwrap_or_default().to_string());
            }
        }
        (loaded, broken)
    }

    /// The console errors, uncaught exceptions and failed loads the browser reported
    /// since the page was opened.
    fn errors(&mut self) -> Vec<String> {
        // A round trip, so that every event sent before it has arrived.
        self.eval("0");
        let mut out = BTreeSet::new();
        for event in &self.events {
            let params = &event["params"];
            match event["method"].as_str() {
                Some("Runtime.exceptionThrown") => {
                    let details = &params["exceptionDetails"];
                    let description = details["exception"]["description"].as_str().unwrap_or_default();
                    out.insert(format!(
                        "uncaught: {} {description}",
                        details["text"].as_str().unwrap_or_default()
                    ));
                }
                Some("Runtime.consoleAPICalled")
                    if matches!(params["type"].as_str(), Some("error" | "assert")) =>
                {
                    let args: Vec<String> = params["args"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            a.get("value").or(a.get("description")).map(Value::to_string).unwrap_or_default()
                        })
                        .collect();
                    out.insert(format!("console.error: {}", args.join(" ")));
                }
                // Chromium asks every site for /favicon.ico on its own; the book links
                // its icons (favicon.svg, .png), and bookcheck checks those links.
                Some("Log.entryAdded")
                    if params["entry"]["url"].as_str().is_some_and(|u| u.ends_with("/favicon.ico")) => {}
                Some("Log.entryAdded") if params["entry"]["level"] == "error" => {
                    let entry = &params["entry"];
                    out.insert(format!(
                        "{}: {} {}",
                        entry["source"].as_str().unwrap_or_default(),
                        entry["text"].as_str().unwrap_or_default(),
                        entry["url"].as_str().unwrap_or_default()
                    ));
                }
                _ => {}
            }
        }
        out.into_iter().collect()
    }

    /// A PNG of the page as the window shows it.
    fn screenshot(&mut self) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        base64_decode(shot["data"].as_str().expect("screenshot data"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask politely; dropping the launcher's Child kills whatever is left.
        let _ = self.commands.write_all(b"{\"id\":0,\"method\":\"Browser.close\"}\0");
    }
}

/// A pipe: (read end, write end), both closed on exec (the child gets copies).
fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    let status = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(status, 0, "pipe2: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

/// Standard base64 (what the protocol uses for binary data).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {:?}", c as char),
    };
    let digits: Vec<u8> =
        text.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_round_trips() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
    assert_eq!(base64_decode("Zm9vYmFy"), b"foobar");
}

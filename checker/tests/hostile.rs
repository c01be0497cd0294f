//! Hostile submissions, handed to `checker verify step 0 --crate DIR` (or `grade`),
//! which build and run them in the sandbox. Each must leave the grader running, the
//! host unchanged, no process behind, and the step not passed.
//!
//! Where running an attack without the sandbox harms nothing, the same test runs it
//! with `--unsandboxed` too and sees the attack succeed there: proof that the test
//! would fail with the sandbox switched off. The fork bomb, the memory and disk
//! fillers, the output flood and `kill -9 -1` are never run unsandboxed (they would take
//! the grader's machine down); their tests assert what only the sandbox gives: the
//! verdict naming the limit the job hit, and a process of the grader's that survives.
//!
//! Skips, saying so, where this machine cannot make a sandbox, unless
//! `DDP_LAB_REQUIRE_SANDBOX=1` (scripts/test.sh sets it), which makes that a failure.
mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{repo, sandbox_works};

/// One attack at a time: several at once would fight over two cores and memory. The two
/// that mostly wait (the daemon that outlives its timeout, the tamperer that rewrites a
/// file once a second) take no turn: they run beside the others.
static SERIAL: Mutex<()> = Mutex::new(());

/// The environment variable that marks every process of one test's submission (the
/// sandbox passes `DDP_LAB_*` through), so the test can look for survivors.
const MARK: &str = "DDP_LAB_HOSTILE_MARK";
/// A variable of the grader's environment that no submission may learn.
const GRADER_SECRET: &str = "DDP_HOSTILE_GRADER_TOKEN";

/// A test's own directory (outside the repository), a secret in it, and its marks.
struct Scene {
    dir: PathBuf,
    secret_file: PathBuf,
    token: String,
    mark: String,
    /// Another bubblewrap than the one on PATH (`DDP_LAB_BWRAP`).
    bwrap: Option<PathBuf>,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("ddp-lab-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let token = format!("TOKEN{nanos}X{name}");
        let secret_file = dir.join("secret.txt");
        std::fs::write(&secret_file, &token).unwrap();
        Scene { dir, secret_file, token, mark: format!("{name}-{nanos}"), bwrap: None }
    }

    /// A crate holding only `src/main.rs` = `source`, with `@SECRET@`, `@DIR@` and
    /// `@TOKEN_VAR@` filled in.
    fn submission(&self, source: &str) -> PathBuf {
        let krate = self.dir.join("submission");
        std::fs::create_dir_all(krate.join("src")).unwrap();
        let source = source
            .replace("@SECRET@", &self.secret_file.display().to_string())
            .replace("@DIR@", &self.dir.display().to_string())
            .replace("@TOKEN_VAR@", GRADER_SECRET);
        std::fs::write(krate.join("src/main.rs"), source).unwrap();
        krate
    }

    /// `checker <args>` with the grader's secret in its environment; its output and the
    /// files of the run it kept.
    fn checker(&self, args: &[&str]) -> Seen {
        let progress = self.dir.join("progress.json");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_checker"));
        cmd.current_dir(repo())
            .args(args)
            .env(checker::PROGRESS_FILE_ENV, &progress)
            .env(MARK, &self.mark)
            .env(GRADER_SECRET, &self.token);
        if let Some(bwrap) = &self.bwrap {
            cmd.env(checker::BWRAP_ENV, bwrap);
        }
        let out = child_process::output(cmd, Some(Duration::from_secs(600))).expect("run the checker");
        let output = format!("{}{}", out.stdout, out.stderr);
        let kept =
            output.lines().find_map(|l| l.trim().strip_prefix("run files kept in ")).map(PathBuf::from);
        let files = kept.as_deref().map(read_all).unwrap_or_default();
        if let Some(dir) = &kept {
            let _ = std::fs::remove_dir_all(dir);
        }
        Seen { code: out.status.code(), output, files, timed_out: out.timed_out }
    }

    /// `verify step 0 --crate` of `source`, sandboxed (or not).
    fn verify(&self, source: &str, sandboxed: bool, extra: &[&str]) -> Seen {
        self.verify_step(0, source, sandboxed, extra)
    }

    /// `verify step STEP --crate` of `source`, sandboxed (or not).
    fn verify_step(&self, step: u8, source: &str, sandboxed: bool, extra: &[&str]) -> Seen {
        let krate = self.submission(source);
        let krate = krate.display().to_string();
        let step = step.to_string();
        let mut args = vec!["verify", "step", &step, "--crate", &krate, "--seed", "1", "--keep"];
        if !sandboxed {
            args.push("--unsandboxed");
        }
        args.extend(extra);
        self.checker(&args)
    }

    /// Processes of this test's submission still alive (killed, so the machine stays clean).
    fn survivors(&self) -> Vec<u32> {
        self.survivors_after(Duration::from_secs(5))
    }

    /// [`Scene::survivors`], giving them `wait` to go: an unsandboxed attack's daemon is
    /// meant to stay, and is killed at once instead of after five seconds of waiting.
    fn survivors_after(&self, wait: Duration) -> Vec<u32> {
        let deadline = Instant::now() + wait;
        let mut left = child_process::processes_with_env(MARK, &self.mark);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            left = child_process::processes_with_env(MARK, &self.mark);
        }
        for pid in &left {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        left
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one checker run showed.
struct Seen {
    code: Option<i32>,
    output: String,
    /// The run's kept files, concatenated.
    files: String,
    timed_out: bool,
}

impl Seen {
    /// The grader ran to its end and did not pass the step.
    fn assert_graded_and_failed(&self) {
        assert!(!self.timed_out, "the checker itself hung:\n{}", self.output);
        assert_eq!(self.code, Some(1), "the step must be judged and not passed:\n{}", self.output);
        assert!(self.output.contains("error["), "{}", self.output);
    }

    /// The attack was built and ran (so not seeing it succeed means something).
    fn assert_ran(&self) {
        self.assert_graded_and_failed();
        assert!(!self.output.contains("error[builds]"), "the submission must build:\n{}", self.output);
    }

    fn shows(&self, token: &str) -> bool {
        self.output.contains(token) || self.files.contains(token)
    }
}

fn read_all(dir: &Path) -> String {
    let mut text = String::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return text };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&read_all(&path));
        } else if let Ok(mut f) = std::fs::File::open(&path) {
            let mut bytes = Vec::new();
            let _ = f.by_ref().take(8 << 20).read_to_end(&mut bytes);
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

/// This machine's bubblewrap made to answer as bubblewrap 0.6.1 (Ubuntu 22.04's) does:
/// no `--size` (0.7.0), no `--disable-userns` (0.8.0).
fn bubblewrap_0_6(scene: &Scene) -> PathBuf {
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .expect("bwrap on PATH");
    let path = scene.dir.join("bwrap-0.6.1");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.6.1'; exit 0; fi\n\
             for a in \"$@\"; do case \"$a\" in --size|--disable-userns) echo \"bwrap: Unknown option $a\" >&2; exit 1;; esac; done\n\
             exec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// Whether the checker refused bubblewrap 0.6.1 because nothing caps a job's tmpfs
/// here (not root, no systemd user scope): then it must say so, and the test stops.
fn refused_without_size(seen: &Seen) -> bool {
    if seen.code != Some(2) {
        return false;
    }
    assert!(seen.output.contains("bubblewrap 0.6.1 has no --size"), "{}", seen.output);
    assert!(seen.output.contains("0.8.0 or later"), "{}", seen.output);
    eprintln!("skipped the rest: nothing caps a job's memory here, so bubblewrap 0.6.1 is refused");
    true
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn reads_a_secret_file_of_the_grader_and_prints_it() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("read");
    let source = r#"fn main() {
        let home = std::env::var("HOME").unwrap_or_default();
        for path in ["@SECRET@", "/root/.ssh/id_rsa", "/etc/shadow"] {
            println!("{path}: {:?}", std::fs::read_to_string(path));
        }
        println!("home {home}: {:?}", std::fs::read_dir(&home).map(|d| d.count()));
    }"#;
    let seen = scene.verify(source, true, &[]);
    seen.assert_ran();
    assert!(!seen.shows(&scene.token), "the secret leaked:\n{}\n{}", seen.output, seen.files);
    assert!(scene.survivors().is_empty());
    let open = scene.verify(source, false, &[]);
    assert!(open.shows(&scene.token), "without the sandbox the attack must work:\n{}", open.files);
}

#[test]
fn embeds_a_secret_file_and_a_variable_of_the_grader_at_compile_time() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("embed");
    let source = r#"const FILE: &str = include_str!("@SECRET@");
    const VAR: Option<&str> = option_env!("@TOKEN_VAR@");
    fn main() {
        println!("{FILE} {VAR:?}");
    }"#;
    let seen = scene.verify(source, true, &[]);
    seen.assert_graded_and_failed();
    assert!(seen.output.contains("error[builds]"), "the build must fail:\n{}", seen.output);
    assert!(!seen.shows(&scene.token), "the secret leaked:\n{}", seen.output);
    // Without the file the variable alone still must not come through.
    let var_only = r#"const VAR: Option<&str> = option_env!("@TOKEN_VAR@");
    fn main() { println!("{VAR:?} {:?}", std::env::var("@TOKEN_VAR@")); }"#;
    let seen = scene.verify(var_only, true, &[]);
    seen.assert_ran();
    assert!(!seen.shows(&scene.token), "the grader's variable leaked:\n{}\n{}", seen.output, seen.files);
    let open = scene.verify(source, false, &[]);
    assert!(open.shows(&scene.token), "without the sandbox the attack must work:\n{}", open.output);
}

#[test]
fn writes_outside_its_directory() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("write");
    let shared = repo().join(".checker/data/hostile-was-here.txt");
    let source = format!(
        r#"fn main() {{
        for path in ["@DIR@/written.txt", "{}", "/usr/hostile.txt"] {{
            println!("{{path}}: {{:?}}", std::fs::write(path, "x"));
        }}
    }}"#,
        shared.display()
    );
    let seen = scene.verify(&source, true, &[]);
    seen.assert_ran();
    let written = scene.dir.join("written.txt");
    assert!(!written.exists() && !shared.exists(), "the submission wrote outside:\n{}", seen.files);
    let open = scene.verify(&source, false, &[]);
    let worked = written.exists() && shared.exists();
    let _ = std::fs::remove_file(&shared);
    assert!(worked, "without the sandbox the attack must work:\n{}", open.files);
}

#[test]
fn connects_to_a_listener_on_the_graders_loopback() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("connect");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let source = format!(
        r#"use std::io::Write;
    fn main() {{
        match std::net::TcpStream::connect(("127.0.0.1", {port})) {{
            Ok(mut s) => {{ let _ = s.write_all(b"hello from the submission"); println!("connected"); }}
            Err(e) => println!("refused: {{e}}"),
        }}
    }}"#
    );
    let accepted = |listener: &TcpListener| listener.accept().is_ok();
    let seen = scene.verify(&source, true, &[]);
    seen.assert_ran();
    assert!(!accepted(&listener), "the submission reached the grader's loopback:\n{}", seen.files);
    scene.verify(&source, false, &[]);
    assert!(accepted(&listener), "without the sandbox the attack must work");
}

#[test]
fn daemonizes_with_setsid_ignores_sigterm_and_sleeps_forever() {
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("daemon");
    let source = r#"fn main() {
        let _ = std::process::Command::new("setsid")
            .args(["sh", "-c", "trap '' TERM HUP INT; exec sleep 600"])
            .spawn();
        loop { std::thread::sleep(std::time::Duration::from_secs(60)); }
    }"#;
    // The program never ends: any limit times it out; 5 s leaves the daemon time to start.
    let seen = scene.verify(source, true, &["--timeout", "5"]);
    seen.assert_ran();
    assert!(seen.output.contains("timed out"), "{}", seen.output);
    let left = scene.survivors();
    assert!(left.is_empty(), "processes outlived the sandbox: {left:?}");
    scene.verify(source, false, &["--timeout", "5"]);
    let left = scene.survivors_after(Duration::ZERO);
    assert!(!left.is_empty(), "without the sandbox the setsid daemon must survive (and was killed now)");
}

#[test]
fn tampers_with_the_results_file_after_the_grader_wrote_it() {
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("tamper");
    let results = scene.dir.join("results.json");
    let source = r#"fn main() {
        let results = "@DIR@/results.json";
        let _ = std::fs::write(results, "forged");
        let _ = std::process::Command::new("setsid")
            .args(["sh", "-c", &format!("for i in $(seq 60); do sleep 1; echo forged > {results}; done")])
            .spawn();
    }"#;
    let grade = |sandboxed: bool| {
        let krate = scene.submission(source).display().to_string();
        let json = results.display().to_string();
        let mut args = vec!["grade", "step", "0", "--crate", &krate, "--seed", "1", "--gradescope", &json];
        if !sandboxed {
            args.push("--unsandboxed");
        }
        let seen = scene.checker(&args);
        // A daemon that escaped rewrites the file every second for a minute: whatever
        // the order of its writes and the checker's, 3 s later it has overwritten it.
        std::thread::sleep(Duration::from_secs(3));
        (seen, std::fs::read_to_string(&results).unwrap_or_default())
    };
    let (seen, text) = grade(true);
    assert_eq!(seen.code, Some(0), "grade exits 0 once the report is made:\n{}", seen.output);
    let report: serde_json::Value = serde_json::from_str(&text).expect("the checker's own report");
    assert_eq!(report["score"], 0.0, "{report}");
    assert_eq!(report["extra_data"]["sandbox"]["tool"], "bubblewrap", "{report}");
    assert!(report["extra_data"]["sandbox"]["limits"]["memory_bytes"].as_u64().is_some(), "{report}");
    assert!(scene.survivors().is_empty());
    let (_, text) = grade(false);
    scene.survivors_after(Duration::ZERO);
    assert_eq!(text.trim(), "forged", "without the sandbox the attack must work");
}

#[test]
fn fork_bomb() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("forkbomb");
    let source = r#"fn main() {
        let mut children = Vec::new();
        loop {
            match std::process::Command::new("sleep").arg("600").spawn() {
                Ok(child) => children.push(child),
                Err(e) => { println!("refused after {}: {e}", children.len()); std::thread::sleep(std::time::Duration::from_secs(2)); std::process::exit(3); }
            }
        }
    }"#;
    let seen = scene.verify(source, true, &[]);
    seen.assert_ran();
    assert!(seen.output.contains("limit of") && seen.output.contains("processes"), "{}", seen.output);
    assert!(scene.survivors().is_empty());
    assert!(Command::new("true").status().unwrap().success(), "the grader can still start processes");
}

#[test]
fn allocates_far_more_memory_than_allowed() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("memory");
    let source = r#"fn main() {
        let mut held: Vec<Vec<u8>> = Vec::new();
        loop { held.push(vec![7u8; 64 << 20]); println!("{} MiB", held.len() * 64); }
    }"#;
    let seen = scene.verify(source, true, &["--memory-limit", "512"]);
    seen.assert_ran();
    assert!(seen.output.contains("out of memory"), "{}", seen.output);
    assert!(scene.survivors().is_empty());
}

#[test]
fn fills_the_disk_and_floods_its_output() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("fill");
    let fill = r#"use std::io::Write;
    fn main() {
        let block = vec![0u8; 1 << 20];
        for i in 0.. {
            let mut f = std::fs::File::create(format!("fill-{i}.bin")).unwrap();
            for _ in 0..1024 { f.write_all(&block).unwrap(); }
        }
    }"#;
    let seen = scene.verify(fill, true, &[]);
    seen.assert_ran();
    assert!(seen.output.contains("file reached the limit"), "{}", seen.output);
    assert!(scene.survivors().is_empty());
    let flood = r#"use std::io::Write;
    fn main() {
        let line = [b'x'; 1023];
        let mut out = std::io::stdout().lock();
        loop { out.write_all(&line).unwrap(); out.write_all(b"\n").unwrap(); }
    }"#;
    let seen = scene.verify(flood, true, &[]);
    seen.assert_ran();
    assert!(seen.files.len() < 16 << 20, "{} bytes of output came back", seen.files.len());
    assert!(seen.output.contains("limit of") || seen.output.contains("cut at"), "{}", &seen.output[..2000]);
}

#[test]
fn kills_its_parent_and_every_process_it_can() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("killall");
    // A process of the grader's that must outlive the attack.
    let mut sentinel = Command::new("sleep").arg("300").spawn().unwrap();
    let source = r#"fn main() {
        let parent = std::os::unix::process::parent_id();
        let _ = std::process::Command::new("kill").args(["-9", &parent.to_string()]).status();
        let _ = std::process::Command::new("kill").args(["-9", "-1"]).status();
        std::thread::sleep(std::time::Duration::from_secs(2));
    }"#;
    let seen = scene.verify(source, true, &[]);
    seen.assert_ran();
    assert!(sentinel.try_wait().unwrap().is_none(), "the grader's own process was killed");
    let _ = sentinel.kill();
    let _ = sentinel.wait();
    assert!(scene.survivors().is_empty());
}

#[test]
fn makes_a_user_namespace_of_its_own() {
    let _one = serial();
    if !sandbox_works() || !Path::new("/usr/bin/unshare").exists() {
        return;
    }
    let mut scene = Scene::new("userns");
    let source = r#"fn main() {
        let made = std::process::Command::new("unshare").args(["--user", "true"]).status();
        let made = made.map(|s| s.success()).unwrap_or(false);
        println!("USERNS-{}", if made { "MADE" } else { "REFUSED" });
    }"#;
    // This machine's bubblewrap refuses it with --disable-userns.
    let seen = scene.verify(source, true, &[]);
    seen.assert_ran();
    assert!(seen.shows("USERNS-REFUSED") && !seen.shows("USERNS-MADE"), "{}\n{}", seen.output, seen.files);
    // An older one, without the option, refuses it with the seccomp filter.
    scene.bwrap = Some(bubblewrap_0_6(&scene));
    let seen = scene.verify(source, true, &[]);
    if refused_without_size(&seen) {
        return;
    }
    seen.assert_ran();
    assert!(seen.shows("USERNS-REFUSED") && !seen.shows("USERNS-MADE"), "{}\n{}", seen.output, seen.files);
    assert!(scene.survivors().is_empty());
    scene.bwrap = None;
    let open = scene.verify(source, false, &[]);
    assert!(open.shows("USERNS-MADE"), "without the sandbox the attack must work:\n{}", open.files);
}

#[test]
fn an_older_bubblewrap_still_grades_the_solution_and_says_what_stands_in() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let mut scene = Scene::new("oldbwrap");
    scene.bwrap = Some(bubblewrap_0_6(&scene));
    let json = scene.dir.join("results.json");
    // The sandbox is recorded in Gradescope's extra_data (exercism's format has no place for it).
    let gradescope = scene.dir.join("gradescope.json");
    let seen = scene.checker(&[
        "grade",
        "step",
        "0",
        "--solutions",
        "--seed",
        "1",
        "--json",
        &json.display().to_string(),
        "--gradescope",
        &gradescope.display().to_string(),
    ]);
    if refused_without_size(&seen) {
        return;
    }
    assert_eq!(seen.code, Some(0), "{}", seen.output);
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["status"], "pass", "the honest solution passes in the stand-ins too: {report}");
    let gradescope: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&gradescope).unwrap()).unwrap();
    let sandbox = &gradescope["extra_data"]["sandbox"];
    assert_eq!(sandbox["bubblewrap"]["version"], "0.6.1", "{sandbox}");
    assert!(sandbox["nested_user_namespaces"].as_str().unwrap().contains("seccomp filter"), "{sandbox}");
    assert!(sandbox["work_space"].as_str().unwrap().contains("job's memory limit"), "{sandbox}");
    assert_ne!(sandbox["capping"], "rlimits (RLIMIT_DATA, RLIMIT_NPROC per process)", "{sandbox}");
}

#[test]
fn fills_its_work_directory_past_the_jobs_memory() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let mut scene = Scene::new("tmpfs");
    // 2 GB of files, 50 MB each (under the file size limit), in a job that may use 256 MiB:
    // the work directory is a tmpfs, its pages the job's memory.
    let source = r#"use std::io::Write;
    fn main() {
        let block = vec![1u8; 1 << 20];
        for i in 0..40 {
            let mut f = std::fs::File::create(format!("fill-{i}.bin")).unwrap();
            for _ in 0..50 { f.write_all(&block).unwrap(); }
            println!("wrote {} MiB", (i + 1) * 50);
        }
    }"#;
    let krate = scene.submission(source).display().to_string();
    let json = scene.dir.join("results.json").display().to_string();
    let gradescope = scene.dir.join("gradescope.json").display().to_string();
    let args = [
        "grade",
        "step",
        "0",
        "--crate",
        &krate,
        "--seed",
        "1",
        "--memory-limit",
        "256",
        "--json",
        &json,
        "--gradescope",
        &gradescope,
    ];
    for old in [false, true] {
        scene.bwrap = old.then(|| bubblewrap_0_6(&scene));
        let seen = scene.checker(&args);
        if old && refused_without_size(&seen) {
            return;
        }
        assert_eq!(seen.code, Some(0), "{}", seen.output);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let trains =
            report["tests"].as_array().unwrap().iter().find(|t| t["name"] == "step 0: trains").unwrap();
        let said = format!("{} {}", trains["message"], trains["output"]);
        assert_eq!(trains["status"], "fail", "{said}");
        let gradescope: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&gradescope).unwrap()).unwrap();
        let capping = gradescope["extra_data"]["sandbox"]["capping"].as_str().unwrap();
        if capping.starts_with("rlimits") {
            // Only bubblewrap's --size caps the tmpfs then (the old one was refused above).
            assert!(said.contains("No space left on device"), "{said}");
        } else {
            assert!(said.contains("out of memory (the job may use 256 MiB)"), "{capping}, old={old}: {said}");
        }
        assert!(scene.survivors().is_empty());
    }
}

/// Step 12's stopped run leaves a checkpoint for the resumed run, each in a sandbox whose
/// work directory is a tmpfs of its own: the checkpoint's directory is carried from one
/// to the other, binary files whole, links not followed. The program stands in for a
/// checkpointing one: stopped (no `--resume`), it writes bytes that are no text into
/// `--checkpoint-dir`; resumed, it says whether it finds them there, the same.
#[test]
fn a_binary_file_left_in_a_carried_directory_reaches_the_next_job_whole() {
    let _one = serial();
    if !sandbox_works() {
        return;
    }
    let scene = Scene::new("carry");
    let source = r#"fn main() {
        let args: Vec<String> = std::env::args().collect();
        let Some(at) = args.iter().position(|a| a == "--checkpoint-dir") else { return };
        let dir = std::path::PathBuf::from(&args[at + 1]);
        if !dir.ends_with("resumed-checkpoints") {
            return;
        }
        // 1 MB of every byte value, a marker in the middle.
        let mut blob: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        blob[500_000..500_011].copy_from_slice(b"CARRY-MARK!");
        let file = dir.join("nested").join("weights.bin");
        if args.iter().any(|a| a == "--resume") {
            match std::fs::read(&file) {
                Ok(found) if found == blob => println!("CARRIED-WHOLE"),
                Ok(found) => println!("CARRIED-CHANGED {} bytes", found.len()),
                Err(e) => println!("CARRIED-MISSING {e}"),
            }
            if std::fs::symlink_metadata(dir.join("link")).is_ok() {
                println!("LINK-CARRIED");
            }
        } else {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &blob).unwrap();
            std::os::unix::fs::symlink("/etc/hostname", dir.join("link")).unwrap();
        }
    }"#;
    let seen = scene.verify_step(12, source, true, &[]);
    seen.assert_ran();
    assert!(
        seen.files.contains("CARRIED-WHOLE"),
        "the resumed job must find the stopped job's file, whole:\n{}\n{}",
        seen.output,
        seen.files.lines().filter(|l| l.contains("CARRIED")).collect::<Vec<_>>().join("\n")
    );
    assert!(!seen.files.contains("LINK-CARRIED"), "a link was carried:\n{}", seen.files);
    // The checker wrote it into the run's directory on the host (the kept files).
    assert!(seen.files.contains("CARRY-MARK!"), "the carried file is not in the run's directory");
    assert!(scene.survivors().is_empty());
}

//! The demo binary end to end: a tiny CPU run writes its table, JSON and charts;
//! --predict answers from the cost model; bad input exits 2 with a message.
use std::process::Command;

use child_process::Output;

/// The demo, through the launcher: if this test binary dies, the demo and its ranks go too.
fn demo(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_demo"));
    cmd.args(args);
    child_process::output(cmd, None).expect("run the demo")
}

fn text(out: &Output) -> (String, String) {
    (out.stdout.clone(), out.stderr.clone())
}

#[test]
fn cpu_demo_writes_table_json_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = demo(&[
        "--device",
        "cpu",
        "--world-sizes",
        "1,2",
        "--width",
        "4,8,8,8",
        "--train-subset",
        "256",
        "--test-subset",
        "64",
        "--epochs",
        "2",
        "--dataset",
        "generated",
        "--out-dir",
        out_dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("| ranks | images/sec | speed-up | efficiency |"), "{stdout}");
    assert!(stdout.contains("| 1 | "), "{stdout}");
    assert!(stdout.contains("| 2 | "), "{stdout}");
    // Not a terminal: plain progress lines, one per world size.
    assert!(stderr.contains("demo: 2 ranks:"), "{stderr}");
    // It says which data it trained on: prepared once, before the runs.
    assert!(stderr.contains("demo: dataset: generated stand-in in"), "{stderr}");
    assert!(stdout.contains("; the generated stand-in; width"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("scaling.json")).unwrap()).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["world_size"], 1);
    assert_eq!(results[0]["speedup"], 1.0);
    assert_eq!(results[0]["efficiency"], 1.0);
    for r in results {
        let ips = r["images_per_sec"].as_f64().unwrap();
        assert!(ips.is_finite() && ips > 0.0, "{r}");
        assert_eq!(r["epoch_images_per_sec"].as_array().unwrap().len(), 2);
        // Efficiency is speed-up per rank.
        let ws = r["world_size"].as_f64().unwrap();
        let (s, e) = (r["speedup"].as_f64().unwrap(), r["efficiency"].as_f64().unwrap());
        assert!((s / ws - e).abs() < 1e-9);
    }
    assert_eq!(json["device"], "cpu");
    assert_eq!(json["dataset"], "generated");

    let svg = std::fs::read_to_string(out_dir.join("scaling.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("images/sec") && svg.contains("measured"), "{svg}");
    let png = std::fs::read(out_dir.join("scaling.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 5_000, "a chart with text, not an empty image");
    // No temporary files left behind.
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[test]
fn predict_uses_the_cost_model() {
    let out = demo(&["--predict", "--gpus", "8", "--link-gbps", "300", "--step-ms", "100", "--width", "lab"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    // Hand count in src/predict.rs: 100 / 100.0875 ms = 99.9%; 1, 25, 25, 14.30 MiB buckets.
    assert!(stdout.contains("expected DDP efficiency: 99.9%"), "{stdout}");
    assert!(stdout.contains("1.00, 25.00, 25.00, 14.30"), "{stdout}");
    assert!(stdout.contains("17117466 parameters"), "{stdout}");
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["--world-sizes", "2,4", "--device", "cpu"], "starting with 1"),
        (&["--world-sizes", "1,0", "--device", "cpu"], "increasing"),
        (&["--epochs", "1", "--device", "cpu"], "at least 2"),
        (&["--width", "wide", "--device", "cpu"], "width"),
        (&["--device", "tpu"], "[possible values: auto, cpu, cuda]"),
        (&["--gpus", "8", "--device", "cpu"], "go with --predict"),
        (&["--predict", "--link-gbps", "300", "--device", "cpu"], "--gpus"),
        (&["--predict", "--gpus", "8", "--device", "cpu"], "--link-gbps"),
        (&["--predict", "--gpus", "0", "--link-gbps", "3", "--device", "cpu"], "between 1 and 1024"),
        (&["--predict", "--gpus", "8", "--link-gbps=-1", "--device", "cpu"], "positive"),
        (&["--predict", "--gpus", "8", "--link-gbps", "3", "--step-ms", "0", "--device", "cpu"], "positive"),
        (&["--train-subset", "10", "--device", "cpu", "--world-sizes", "1,2"], "less than one batch"),
    ];
    for (args, expected) in cases {
        let out = demo(args);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn help_explains_the_demo() {
    let out = demo(&["--help"]);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    for needle in ["--predict", "--link-gbps", "efficiency", "scaling.png", "--world-sizes"] {
        assert!(stdout.contains(needle), "{needle} missing from --help:\n{stdout}");
    }
}

/// The demo running the finished lab on one rank, stuck on purpose after its first
/// epoch (labkit's `DDP_LAB_STALL_RANK`) so that the run cannot end on its own while
/// the test watches. It returns once the rank sleeps in that stall: from then on
/// neither process writes to the demo's pipes, so neither can die of a broken pipe
/// when the demo goes; only the launcher can end them. Every process of the run
/// inherits `DEMO_TEST_RUN=marker`, which is how /proc tells it from anything else.
fn demo_with_a_stuck_rank(marker: &str, out_dir: &std::path::Path) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_demo"));
    cmd.args(["--device", "cpu", "--world-sizes", "1", "--width", "4,8,8,8", "--train-subset", "256"])
        .args(["--test-subset", "64", "--epochs", "2", "--dataset", "generated", "--out-dir"])
        .arg(out_dir)
        .env(labkit::STALL_RANK_ENV, "0")
        .env("DEMO_TEST_RUN", marker)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // As from a terminal: a test run in the background (bash `&`, nohup) inherits SIGINT
    // and SIGHUP ignored, and a launcher rightly keeps an ignored signal ignored.
    // SAFETY: signal(2) between fork and exec is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut demo = cmd.spawn().unwrap();
    let start = std::time::Instant::now();
    loop {
        let lab: Vec<u32> = child_process::processes_with_env("DEMO_TEST_RUN", marker)
            .into_iter()
            // The program itself, not a build that links it (its path is the first word).
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).next().is_some_and(|argv0| argv0.ends_with(b"/solution_11"))
                })
            })
            .collect();
        // The parent and its rank; the rank (it has the spawn variables) asleep.
        let rank_asleep = lab.iter().any(|pid| {
            child_process::processes_with_env("TCHD_SPAWN_LOCAL_RANK", "0").contains(pid)
                && std::fs::read_to_string(format!("/proc/{pid}/wchan"))
                    .is_ok_and(|w| w.contains("nanosleep"))
        });
        if lab.len() >= 2 && rank_asleep {
            return demo;
        }
        if start.elapsed() > std::time::Duration::from_secs(300) || demo.try_wait().unwrap().is_some() {
            let _ = demo.kill();
            panic!("the demo's lab run never got stuck");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn no_process_outlives_the_demo_killed_or_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, code) in [(libc::SIGKILL, None), (libc::SIGINT, Some(130))] {
        let marker = format!("demo-{signal}-{}", std::process::id());
        let mut demo = demo_with_a_stuck_rank(&marker, dir.path());
        // SAFETY: kill(2) of our own unreaped child.
        unsafe { libc::kill(demo.id() as i32, signal) };
        let status = demo.wait().unwrap();
        assert_eq!(status.code(), code, "{status}");
        let left = child_process::wait_until_no_process_with_env(
            "DEMO_TEST_RUN",
            &marker,
            std::time::Duration::from_secs(5),
        );
        assert!(left.is_empty(), "after signal {signal} to the demo, still running after 5 s: {left:#?}");
    }
}

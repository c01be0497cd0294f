//! The charts render on a node without fonts (the demo embeds DejaVu Sans), redrawn
//! from a saved scaling.json; and `--predict` models the lab's model by default.
use std::path::Path;
use std::process::Command;

use child_process::Output;

/// The demo, through the launcher: if this test binary dies, the demo goes too.
fn demo(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_demo"));
    cmd.args(args);
    child_process::output(cmd, None).expect("run the demo")
}

fn text(out: &Output) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

/// A scaling.json as the demo writes it, 1 and 2 ranks.
fn saved_scaling(dir: &Path) -> std::path::PathBuf {
    let json = serde_json::json!({
        "demo": "scaling", "device": "cuda", "width": "lab",
        "results": [
            { "world_size": 1, "images_per_sec": 9791.0, "speedup": 1.0, "efficiency": 1.0 },
            { "world_size": 2, "images_per_sec": 19012.5, "speedup": 1.94, "efficiency": 0.97 },
        ],
    });
    let path = dir.join("scaling.json");
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("no {}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 5_000,
        "{} is not a chart",
        path.display()
    );
}

#[test]
fn charts_redrawn_from_a_saved_scaling_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = saved_scaling(dir.path());
    let out_dir = dir.path().join("charts");
    let out = demo(&["--chart-from", json.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_png(&out_dir.join("scaling.png"));
    let svg = std::fs::read_to_string(out_dir.join("scaling.svg")).unwrap();
    assert!(svg.contains("Finished lab, GPU width lab"), "{svg}");
}

/// The PNG's text needs a font: inside a mount namespace whose /usr/share/fonts is an
/// empty tmpfs (a GPU node with no fonts installed), the demo still draws it.
#[test]
fn the_png_renders_with_no_font_installed() {
    let dir = tempfile::tempdir().unwrap();
    let json = saved_scaling(dir.path());
    let out_dir = dir.path().join("charts");
    let script = r#"mount -t tmpfs none /usr/share/fonts || exit 77
[ -z "$(ls -A /usr/share/fonts)" ] || exit 78
exec "$@""#;
    let probe = Command::new("unshare").args(["--mount", "true"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) || !Path::new("/usr/share/fonts").is_dir() {
        eprintln!("SKIPPED: no mount namespace here (unshare --mount needs root) or no /usr/share/fonts");
        return;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(env!("CARGO_BIN_EXE_demo"))
        .args(["--chart-from", json.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]);
    let out = child_process::output(cmd, None).unwrap();
    assert_ne!(out.status.code(), Some(77), "could not mount a tmpfs over /usr/share/fonts: {}", text(&out));
    assert!(out.status.success(), "with no fonts installed: {}", text(&out));
    assert_png(&out_dir.join("scaling.png"));
}

#[test]
fn chart_from_a_file_that_is_not_a_scaling_json_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("other.json");
    std::fs::write(&bad, "{\"results\": []}").unwrap();
    for (file, expected) in
        [(bad.as_path(), "results"), (Path::new("/nonexistent/scaling.json"), "No such file")]
    {
        let out = demo(&["--chart-from", file.to_str().unwrap(), "--out-dir", dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(expected), "{}", text(&out));
    }
    assert!(!dir.path().join("scaling.png").exists(), "a failed redraw left a chart behind");
}

#[test]
fn predict_models_the_lab_width_unless_told_otherwise() {
    let base = ["--predict", "--gpus", "8", "--link-gbps", "300", "--step-ms", "14.3", "--device", "cpu"];
    let out = demo(&base);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("17117466 parameters"), "{}", text(&out));
    let narrow = demo(&[&base[..], &["--width", "narrow"]].concat());
    assert!(text(&narrow).contains("173778 parameters"), "{}", text(&narrow));
}

#[test]
fn predict_without_a_step_time_on_a_cpu_node_asks_for_one() {
    let out = demo(&["--predict", "--gpus", "8", "--link-gbps", "300", "--device", "cpu"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--step-ms") && text(&out).contains("--width narrow"), "{}", text(&out));
}

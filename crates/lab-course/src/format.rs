//! Formats rendered programs with rustfmt, so the crates pass `cargo fmt --check`
//! however the master's blocks happen to leave the code.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{CourseError, Version};

/// `source` as rustfmt formats it with the repository's rustfmt.toml.
pub(crate) fn rustfmt(source: &str, repo_root: &Path, version: Version) -> Result<String, CourseError> {
    let exe = find_on_path("rustfmt").ok_or(CourseError::RustfmtMissing)?;
    let failed = |status: String, stderr: String| CourseError::Rustfmt {
        version: version.to_string(),
        status,
        stderr,
    };
    let mut command = Command::new(&exe);
    command.args(["--edition", "2021", "--emit", "stdout"]);
    let config = repo_root.join("rustfmt.toml");
    if config.is_file() {
        command.arg("--config-path").arg(config);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start {}", exe.display()), e.to_string()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Feed stdin from a thread: rustfmt may fill its output pipes before reading it all.
    let (written, output) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || stdin.write_all(source.as_bytes()));
        let output = child.wait_with_output();
        (writer.join().expect("the stdin writer does not panic"), output)
    });
    let output = output.map_err(|e| failed("no exit status".into(), e.to_string()))?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(failed(output.status.to_string(), stderr));
    }
    // Success without having read all its input would mean formatting a truncated file.
    written.map_err(|e| failed("input not fully written".into(), e.to_string()))?;
    String::from_utf8(output.stdout).map_err(|_| failed("output is not UTF-8".into(), stderr))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(&file)).find(|p| p.is_file())
}

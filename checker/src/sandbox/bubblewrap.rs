//! The bubblewrap found on this machine: its version and which of the options the
//! sandbox uses it knows. Options are probed, not inferred from the version, since
//! distributions backport; the version is for the messages.
//!
//! Option history (containers/bubblewrap, NEWS and tags): `--unshare-all`,
//! `--cap-drop`, `--new-session`, `--die-with-parent`, `--seccomp` and the rest of the
//! line are in 0.3.0; `--ro-bind-try`/`--dev-bind-try` came in 0.3.1 (2018),
//! `--size` in 0.7.0 (2022-11), `--disable-userns` in 0.8.0 (2023-02). Debian 12 ships
//! 0.8.0, Ubuntu 22.04 0.6.1, Ubuntu 24.04 0.9.0.
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use checker::BWRAP_ENV;

use super::Unavailable;

/// The first bubblewrap release with each option the sandbox passes that is newer
/// than 0.3.0.
pub const ADDED_IN: [(&str, &str); 4] = [
    ("--ro-bind-try", "0.3.1"),
    ("--dev-bind-try", "0.3.1"),
    ("--size", "0.7.0"),
    ("--disable-userns", "0.8.0"),
];

/// Where to get a bubblewrap new enough.
pub fn newer() -> String {
    format!(
        "install bubblewrap 0.8.0 or later (Debian 12 ships 0.8.0, Ubuntu 24.04 0.9.0), or build it \
         from https://github.com/containers/bubblewrap (meson) and name it with {BWRAP_ENV}=/path/to/bwrap"
    )
}

/// How one run of bwrap ended.
pub struct Ran {
    pub ok: bool,
    pub said: String,
}

/// Runs `cmd` (a probe: it ends at once), giving up after 20 s.
pub fn run(cmd: Command) -> std::io::Result<Ran> {
    let out = child_process::output(cmd, Some(Duration::from_secs(20)))?;
    Ok(Ran {
        ok: out.success(),
        said: format!("{}{}", out.stderr.trim(), if out.timed_out { " (timed out)" } else { "" }),
    })
}

/// "0.8.0", from `bwrap --version` ("bubblewrap 0.8.0"); `None` where it says nothing
/// that reads as one.
pub fn version(bwrap: &Path) -> std::io::Result<Option<String>> {
    let mut cmd = Command::new(bwrap);
    cmd.arg("--version").env_clear();
    let out = child_process::output(cmd, Some(Duration::from_secs(20)))?;
    Ok(out
        .stdout
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string))
}

/// The option bubblewrap said it does not know ("bwrap: Unknown option --size").
pub fn unknown_option(said: &str) -> Option<String> {
    let rest = &said[said.find("Unknown option ")? + "Unknown option ".len()..];
    rest.split_whitespace().next().map(|o| o.trim_end_matches(['.', ',']).to_string())
}

/// "bubblewrap 0.6.1", or "this bubblewrap (its version unknown)".
pub fn named(version: Option<&str>) -> String {
    match version {
        Some(v) => format!("bubblewrap {v}"),
        None => "this bubblewrap (it names no version)".into(),
    }
}

/// The refusal for a bubblewrap without an option the sandbox cannot do without.
pub fn too_old(bwrap: &Path, version: Option<&str>, option: &str) -> Unavailable {
    let added = ADDED_IN
        .iter()
        .find(|(o, _)| *o == option)
        .map(|(_, v)| format!(" (added in bubblewrap {v})"))
        .unwrap_or_default();
    Unavailable {
        cause: format!(
            "{} at {} does not know {option}{added}, which the sandbox needs",
            named(version),
            bwrap.display()
        ),
        fix: format!("{}; or pass --unsandboxed to run the submitted code with all of your rights", newer()),
    }
}

/// The arguments that try `option` alone on top of the namespaces (`true` runs inside).
pub fn trying(option: &[&str]) -> Vec<String> {
    let mut args: Vec<String> =
        ["--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/"]
            .map(String::from)
            .to_vec();
    args.extend(option.iter().map(|s| s.to_string()));
    args.push("true".into());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_option_an_old_bubblewrap_refuses() {
        assert_eq!(
            unknown_option("bwrap: Unknown option --disable-userns").as_deref(),
            Some("--disable-userns")
        );
        assert_eq!(unknown_option("bwrap: Unknown option --size\n").as_deref(), Some("--size"));
        assert_eq!(unknown_option("bwrap: Creating new namespace failed: Operation not permitted"), None);
    }

    #[test]
    fn a_refusal_names_version_option_release_and_fix() {
        let why = too_old(Path::new("/usr/bin/bwrap"), Some("0.3.0"), "--ro-bind-try");
        assert!(
            why.cause.contains("bubblewrap 0.3.0 at /usr/bin/bwrap does not know --ro-bind-try"),
            "{why}"
        );
        assert!(why.cause.contains("added in bubblewrap 0.3.1"), "{why}");
        assert!(why.fix.contains("0.8.0 or later") && why.fix.contains("DDP_LAB_BWRAP"), "{why}");
        assert!(why.fix.contains("--unsandboxed"), "{why}");
    }
}

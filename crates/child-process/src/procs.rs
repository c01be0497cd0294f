//! Finding processes by their environment in /proc: how tests see what of a run is
//! still there, at any depth below its launcher.
use std::time::{Duration, Instant};

use crate::child::POLL;

/// The running processes whose environment has `key=value` (zombies have none): how
/// tests see what of a run is still there, at any depth below its launcher.
pub fn processes_with_env(key: &str, value: &str) -> Vec<u32> {
    let wanted = format!("{key}={value}").into_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|entry| entry == wanted.as_slice()))
        })
        .collect()
}

/// Waits up to `limit` until no running process has `key=value` in its environment;
/// returns the command lines of those still running then (empty: all gone).
pub fn wait_until_no_process_with_env(key: &str, value: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_with_env(key, value);
        if left.is_empty() || Instant::now() >= deadline {
            return left
                .iter()
                .map(|pid| {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end())
                })
                .collect();
        }
        std::thread::sleep(POLL);
    }
}

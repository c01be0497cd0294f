#!/usr/bin/env bash
# Every test. Sets the machine up (once), then: formatting, clippy (warnings are
# errors), and the whole workspace's tests, the multi-process ones included.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy -q --workspace --all-targets -- -D warnings
echo "== cargo test" >&2
cargo test --workspace "$@"

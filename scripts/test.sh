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
echo "== lab guide: every page SUMMARY.md links exists" >&2
missing=0
for page in $(grep -o '](\([^)]*\.md\))' lab-guide/src/SUMMARY.md | sed 's/^](//; s/)$//'); do
    [ -f "lab-guide/src/$page" ] || { echo "lab-guide/src/SUMMARY.md links $page, which does not exist" >&2; missing=1; }
done
[ "$missing" = 0 ]
echo "== cargo test" >&2
# Setup has just installed torch and the real Fashion-MNIST: tests that would skip
# without them must fail instead.
DDP_LAB_REQUIRE_TORCH=1 DDP_LAB_REQUIRE_REAL_DATA=1 cargo test --workspace "$@"

#!/usr/bin/env bash
# Every test. Sets the machine up for the tests (once: what the lab needs and the test
# tools, `setup.sh --for-tests`), then: formatting, the commits' subject lines, clippy
# (warnings are errors), the lab guide built as a book and checked, and the whole
# workspace's tests, the multi-process ones included.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --for-tests
echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== commit subjects: one line of at most 72 characters" >&2
bash scripts/commit-subjects.sh
echo "== cargo clippy" >&2
cargo clippy -q --workspace --all-targets -- -D warnings
echo "== lab guide: the book builds; SUMMARY.md, internal links, images and README.md's links are whole" >&2
bash scripts/book.sh check
echo "== cargo test" >&2
# Setup has just installed torch, the real Fashion-MNIST, Chromium and bubblewrap, and the book
# was just built: tests that would skip without them must fail instead.
DDP_LAB_REQUIRE_TORCH=1 DDP_LAB_REQUIRE_REAL_DATA=1 DDP_LAB_REQUIRE_BOOK=1 DDP_LAB_REQUIRE_BROWSER=1 DDP_LAB_REQUIRE_SANDBOX=1 \
    cargo test --workspace "$@"

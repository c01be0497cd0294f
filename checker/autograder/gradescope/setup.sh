#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu;
# the autograder zip unpacked in /autograder/source). Written by
# `cargo checker autograder gradescope` (grade @GRADE@); course commit @COMMIT@.
#
# It installs what the course builds with (a C++ compiler, Python with venv, Rust), runs
# the course's own setup (libtorch, the gloo headers, the data set), builds the checker,
# and checks the reference solution of step @STEP@ as a handed-in crate: that builds
# every dependency a student's program needs, and proves the autograder works before
# anyone submits (a failure here fails the image build, with the report in its log).
set -euo pipefail
AUTOGRADER_ROOT=${AUTOGRADER_ROOT:-/autograder}
COURSE=$AUTOGRADER_ROOT/source/ddp-lab

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
    build-essential ca-certificates curl git pkg-config python3 python3-venv bubblewrap
if ! command -v cargo >/dev/null; then
    if [ ! -f "$HOME/.cargo/env" ]; then
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    fi
    # shellcheck disable=SC1091 # written by rustup
    . "$HOME/.cargo/env"
fi
cd "$COURSE"
bash scripts/setup.sh
cargo build -q -p checker
target/debug/checker verify step @STEP@ --crate solutions/step_@STEP2@ --unsandboxed-fallback

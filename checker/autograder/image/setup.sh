#!/usr/bin/env bash
# Builds the grading environment once: for a grading image (`docker build`, as root)
# or for a platform's setup step (CodeGrade's global setup script). Written by
# `cargo checker autograder @PLATFORM@` (grade @GRADE@); course commit @COMMIT@.
#
# It installs what the course builds with (a C++ compiler, Python with venv, Rust),
# unpacks the course (ddp-lab.tar, `git archive` of that commit) into DDP_LAB_COURSE
# (default /opt/ddp-lab), runs the course's own setup (libtorch, the gloo headers, the
# data set), builds the checker, and checks the reference solution of step @STEP@ as a
# handed-in crate: that builds every dependency a student's program needs, and proves
# the grader works before anyone submits (a failure here fails the build).
set -euo pipefail
TAR=${1:-/opt/ddp-lab.tar}
COURSE=${DDP_LAB_COURSE:-/opt/ddp-lab}
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
    build-essential ca-certificates curl git make pkg-config python3 python3-venv bubblewrap
if ! command -v cargo >/dev/null; then
    if [ ! -f "$HOME/.cargo/env" ]; then
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    fi
    # shellcheck disable=SC1091 # written by rustup
    . "$HOME/.cargo/env"
fi
$SUDO mkdir -p "$COURSE"
$SUDO chown "$(id -u):$(id -g)" "$COURSE"
tar -xf "$TAR" -C "$COURSE"
cd "$COURSE"
bash scripts/setup.sh
cargo build -q -p checker
target/debug/checker verify step @STEP@ --crate solutions/step_@STEP2@ --unsandboxed-fallback

#!/usr/bin/env bash
# Sets this machine up for the lab, once; safe to run any number of times (a second
# run takes about a second). Nothing needs root: what only root can install is
# skipped, in one line saying what is lost. `--help` says what is installed where.
#
# The parts, one file each in scripts/setup/: common.sh (messages, apt-get, links),
# rust.sh, gloo.sh, torch.sh, tools.sh (the data set and the test tools).
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: bash scripts/setup.sh [--for-tests]

Sets this machine up, once (a second run takes about a second); cargo build, test
and run then work with nothing exported by hand. Nothing needs root.

For the lab (scripts/main.sh, cargo checker):
  - checks that Rust is at least the workspace's rust-version (Cargo.toml);
  - the gloo headers: $DDP_LAB_GLOO_INCLUDE, else the system's (/usr/include/gloo),
    else Debian's libgloo-dev: with apt-get as root (or password-less sudo), else
    downloaded and unpacked into the cache without root; linked at .gloo-include;
  - libtorch 2.11: the torch of $DDP_LAB_PYTHON, else a venv made in the cache
    (pip, about 4.6 GB); linked at .libtorch, its Python environment at .venv;
  - the real Fashion-MNIST (Debian's dataset-fashion-mnist; needs root or sudo).
--for-tests (what scripts/test.sh runs) adds the test tools:
  mdBook (compiled into the cache, no root), and with root or sudo: Chromium,
  bubblewrap, iproute2, make and python3 (the grading platforms' scripts).
What cannot be installed is skipped, and setup says what is lost without it.

Environment:
  DDP_LAB_CACHE         where setup keeps what it downloads (default ~/.cache/ddp-lab)
  DDP_LAB_PYTHON        a python whose torch is 2.11.x, used instead of a new venv
                        (remembered: later runs keep it until .libtorch is removed)
  DDP_LAB_GLOO_INCLUDE  a directory holding gloo/algorithm.h

Exit status: 0 ready; 1 a step failed (it says which and what to do); 2 refused:
an unknown option, or a Rust, DDP_LAB_PYTHON or DDP_LAB_GLOO_INCLUDE it cannot use.
USAGE
}

FOR_TESTS=0
for arg in "$@"; do
    case "$arg" in
        --for-tests) FOR_TESTS=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; echo "setup: unknown option '$arg' (above: the options)" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DDP_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp-lab}
for part in common rust gloo torch tools; do
    # shellcheck source=/dev/null
    . "$ROOT/scripts/setup/$part.sh"
done

# What the user gave is checked first: a refusal changes nothing.
rust_check
gloo_check_input
torch_check_input

mkdir -p "$CACHE" 2>/dev/null && [ -w "$CACHE" ] ||
    refuse "cannot write the cache $CACHE." "Set DDP_LAB_CACHE to a directory you can write."
# One setup at a time per cache: concurrent clones must not build the venv twice.
exec 9>"$CACHE/.setup.lock"
flock 9

gloo_setup
torch_setup
dataset_setup
if [ "$FOR_TESTS" = 1 ]; then
    test_tools_setup
fi

say "ready: libtorch at $TORCH_DIR"

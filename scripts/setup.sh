#!/usr/bin/env bash
# Idempotent setup for a fresh machine. Installs what the build needs and links it
# where `.cargo/config.toml` looks, so plain `cargo build/test/run` work afterwards.
#
#   1. gloo headers (Debian: libgloo-dev) - ProcessGroupGloo.hpp includes them;
#   2. a Python venv with torch==2.11.0 (+ CUDA headers for the NCCL shim), kept in a
#      cache OUTSIDE the clone so every clone and CI run on this machine reuse it;
#   3. the link `.libtorch` -> that venv's torch directory (libtorch 2.11.0);
#   4. the real Fashion-MNIST (Debian: dataset-fashion-mnist, in
#      /usr/share/datasets/fashion-mnist), so the lab trains on it offline;
#   5. mdBook, which builds the lab guide into a book (scripts/book.sh), compiled
#      from crates.io once into the same cache and linked at `.mdbook`; and Debian's
#      chromium, in which a test loads every page of that book;
#   6. bubblewrap (Debian: bubblewrap), the sandbox `checker grade` and
#      `--crate` run handed-in code in.
#
# Environment: DDP_LAB_CACHE (default ~/.cache/ddp-lab) moves the cache.
# Safe to run any number of times; a second run takes about a second.
set -euo pipefail

TORCH_VERSION=2.11.0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DDP_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddp-lab}
VENV=$CACHE/venv

say() { echo "setup: $*" >&2; }
fail() {
    # $1: the step that failed, $2: what to do about it.
    echo "setup: FAILED at step '$1'" >&2
    echo "setup:   $2" >&2
    exit 1
}

# --- 1. gloo headers -------------------------------------------------------------
if [ ! -f /usr/include/gloo/algorithm.h ]; then
    say "installing the gloo headers (libgloo-dev) with apt-get"
    if ! command -v apt-get >/dev/null; then
        fail "gloo headers" "no apt-get here: install the gloo headers (Debian/Ubuntu package libgloo-dev) so that /usr/include/gloo/algorithm.h exists, then run this again."
    fi
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || fail "gloo headers" "not root and no sudo: run 'apt-get install libgloo-dev' as root, then run this again."
        SUDO=sudo
    fi
    if ! $SUDO apt-get install -y -q libgloo-dev >/tmp/ddp-lab-apt.log 2>&1; then
        # A fresh machine may have empty package lists: refresh once and retry.
        $SUDO apt-get update -q >>/tmp/ddp-lab-apt.log 2>&1 || true
        $SUDO apt-get install -y -q libgloo-dev >>/tmp/ddp-lab-apt.log 2>&1 ||
            fail "gloo headers" "apt-get install libgloo-dev failed (log: /tmp/ddp-lab-apt.log). Without network access to a Debian mirror, install the package by hand."
    fi
fi

# --- 1c. iproute2 (optional) -------------------------------------------------------
# The two-node reliability test builds network namespaces with `ip`; without it the
# test says SKIPPED. Best effort, as root only: never a reason for setup to fail.
if ! command -v ip >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing iproute2 (ip netns, for the two-node test) with apt-get"
    apt-get install -y -q iproute2 >>/tmp/ddp-lab-apt.log 2>&1 ||
        say "iproute2 not installed (log: /tmp/ddp-lab-apt.log); the two-node test will be skipped"
fi

# --- 1d. the real Fashion-MNIST (best effort) -----------------------------------------
# Debian packages the data set; the lab finds it in /usr/share/datasets/fashion-mnist
# and verifies it by content (Debian recompressed the published .gz files). Without
# it the lab downloads the data, or trains on the generated stand-in when offline:
# never a reason for setup to fail, but said plainly.
FMNIST=/usr/share/datasets/fashion-mnist
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
    SUDO=""
    [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO=sudo
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
        say "installing the real Fashion-MNIST (dataset-fashion-mnist, about 30 MB) with apt-get"
        if ! $SUDO apt-get install -y -q dataset-fashion-mnist >>/tmp/ddp-lab-apt.log 2>&1; then
            $SUDO apt-get update -q >>/tmp/ddp-lab-apt.log 2>&1 || true
            $SUDO apt-get install -y -q dataset-fashion-mnist >>/tmp/ddp-lab-apt.log 2>&1 || true
        fi
    fi
    if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
        say "the real Fashion-MNIST is in $FMNIST"
    else
        say "NOTE: the real Fashion-MNIST could not be installed (no apt-get, not root, or no Debian mirror; log: /tmp/ddp-lab-apt.log)."
        say "      The lab will download it when it can, else train on the generated stand-in; the tests that need it fail until 'apt-get install dataset-fashion-mnist' works."
    fi
fi

# --- 1e. Chromium (best effort) ------------------------------------------------------
# The lab guide's browser test (crates/bookcheck/tests/browser.rs) loads every page of
# the built book in headless Chromium. Without it that test fails under scripts/test.sh
# (and skips elsewhere): never a reason for setup to fail, but said plainly.
if ! command -v chromium >/dev/null; then
    SUDO=""
    [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO=sudo
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
        say "installing Chromium (Debian's chromium, about 270 MB) with apt-get, for the lab guide's browser test"
        if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >>/tmp/ddp-lab-apt.log 2>&1; then
            $SUDO apt-get update -q >>/tmp/ddp-lab-apt.log 2>&1 || true
            $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >>/tmp/ddp-lab-apt.log 2>&1 || true
        fi
    fi
    if ! command -v chromium >/dev/null; then
        say "NOTE: Chromium could not be installed (no apt-get, not root, or no Debian mirror; log: /tmp/ddp-lab-apt.log)."
        say "      The lab does not need it; the book's browser test fails under scripts/test.sh until 'apt-get install chromium' works."
    fi
fi

# --- 1f. bubblewrap (best effort) ----------------------------------------------------
# `checker grade` and `checker verify step N --crate DIR` build and run handed-in code
# in a bubblewrap sandbox and refuse (exit 2, naming the fix) where there is none;
# checker/tests/hostile.rs proves the sandbox holds and fails under scripts/test.sh
# without it.
if ! command -v bwrap >/dev/null; then
    SUDO=""
    [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && SUDO=sudo
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
        say "installing bubblewrap (Debian's bubblewrap, under 100 kB) with apt-get, the sandbox for grading"
        if ! $SUDO apt-get install -y -q bubblewrap >>/tmp/ddp-lab-apt.log 2>&1; then
            $SUDO apt-get update -q >>/tmp/ddp-lab-apt.log 2>&1 || true
            $SUDO apt-get install -y -q bubblewrap >>/tmp/ddp-lab-apt.log 2>&1 || true
        fi
    fi
    if ! command -v bwrap >/dev/null; then
        say "NOTE: bubblewrap could not be installed (no apt-get, not root, or no Debian mirror; log: /tmp/ddp-lab-apt.log)."
        say "      'checker grade' and '--crate' then refuse unless given --unsandboxed; the sandbox tests fail under scripts/test.sh until 'apt-get install bubblewrap' works."
    fi
fi

# --- 2. the PyTorch venv (cached) --------------------------------------------------
# What the venv must hold; the marker file records it, so adding a package later
# installs just that instead of rebuilding 4.6 GB.
REQUIREMENTS="torch==$TORCH_VERSION cuda-toolkit[crt,cccl] numpy"
venv_ok() {
    [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$REQUIREMENTS" ] &&
        [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null)" = "$TORCH_VERSION" ]
}

mkdir -p "$CACHE" || fail "cache directory" "cannot create $CACHE: set DDP_LAB_CACHE to a writable directory."
# One setup at a time per cache: concurrent clones must not build the venv twice.
exec 9>"$CACHE/.setup.lock"
flock 9

if ! venv_ok; then
    if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        PY=""
        for candidate in python3.12 python3.11 python3.10 python3; do
            if command -v "$candidate" >/dev/null &&
                "$candidate" -c 'import sys, venv; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' 2>/dev/null; then
                PY=$(command -v "$candidate")
                break
            fi
        done
        [ -n "$PY" ] || fail "python" "PyTorch $TORCH_VERSION needs Python 3.10-3.13 with the venv module; none was found on PATH (Debian: apt-get install python3 python3-venv)."
        rm -rf "$VENV"
        "$PY" -m venv "$VENV" || fail "python venv" "'$PY -m venv' failed (Debian: apt-get install python3-venv)."
    fi
    say "installing $REQUIREMENTS into $VENV (about 4.6 GB the first time; reused afterwards)"
    # shellcheck disable=SC2086 # the list is meant to split
    if ! "$VENV/bin/pip" install -q --disable-pip-version-check $REQUIREMENTS; then
        fail "pip install torch" "pip could not install $REQUIREMENTS: check network access to PyPI (or set PIP_INDEX_URL), then run this again."
    fi
    "$VENV/bin/python" -c 'import torch' || fail "torch import" "torch was installed into $VENV but does not import; delete $VENV and run this again."
    echo "$REQUIREMENTS" >"$VENV/.complete"
    venv_ok || fail "torch import" "torch was installed into $VENV but does not import as $TORCH_VERSION; delete $VENV and run this again."
fi

# find_spec locates torch without importing it (an import takes seconds).
TORCH_DIR=$("$VENV/bin/python" -c 'import os, importlib.util as u; print(os.path.dirname(u.find_spec("torch").origin))')
[ -f "$TORCH_DIR/lib/libtorch_cpu.so" ] || fail "libtorch" "$TORCH_DIR/lib/libtorch_cpu.so is missing: delete $VENV and run this again."

# --- 3. the link cargo reads ---------------------------------------------------------
# `.cargo/config.toml` points LIBTORCH and the run-time library path at `.libtorch`.
if [ "$(readlink "$ROOT/.libtorch" 2>/dev/null)" != "$TORCH_DIR" ]; then
    ln -sfn "$TORCH_DIR" "$ROOT/.libtorch.tmp" && mv -T "$ROOT/.libtorch.tmp" "$ROOT/.libtorch"
fi
# The interpreter that benchmarks and fixture generators use for the PyTorch side.
if [ "$(readlink "$ROOT/.venv" 2>/dev/null)" != "$VENV" ]; then
    ln -sfn "$VENV" "$ROOT/.venv.tmp" && mv -T "$ROOT/.venv.tmp" "$ROOT/.venv"
fi

command -v cargo >/dev/null || fail "rust" "cargo is not on PATH: install Rust with rustup (https://rustup.rs), then run this again."

# --- 5. mdBook (cached) ------------------------------------------------------------
# `scripts/book.sh` builds lab-guide/ into target/book with it, and the tests check
# the built book. Compiled once per cache (only the search feature: about 3 minutes on
# 2 cores), then reused. Not needed to do the lab, so a failure here is said plainly
# but does not stop setup; `scripts/book.sh` (and so the tests) then fail, naming this.
MDBOOK_VERSION=0.4.52
MDBOOK_ROOT=$CACHE/mdbook-$MDBOOK_VERSION
if [ "$("$MDBOOK_ROOT/bin/mdbook" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
    say "installing mdBook $MDBOOK_VERSION into $MDBOOK_ROOT (cargo install from crates.io; a few minutes the first time, reused afterwards)"
    rm -rf "$MDBOOK_ROOT.tmp"
    # A temporary target directory of cargo's own, whatever CARGO_TARGET_DIR says.
    if env -u CARGO_TARGET_DIR cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" \
        --no-default-features --features search --root "$MDBOOK_ROOT.tmp" >/tmp/ddp-lab-mdbook.log 2>&1 &&
        [ "$("$MDBOOK_ROOT.tmp/bin/mdbook" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; then
        rm -rf "$MDBOOK_ROOT" && mv -T "$MDBOOK_ROOT.tmp" "$MDBOOK_ROOT"
    else
        rm -rf "$MDBOOK_ROOT.tmp"
        say "NOTE: mdBook $MDBOOK_VERSION could not be installed (log: /tmp/ddp-lab-mdbook.log; crates.io unreachable?)."
        say "      The lab works without it, but 'bash scripts/book.sh' and the tests (which check the book) fail until it is."
    fi
fi
if [ ! -x "$MDBOOK_ROOT/bin/mdbook" ]; then
    rm -f "$ROOT/.mdbook" # never leave it at another version
elif [ "$(readlink "$ROOT/.mdbook" 2>/dev/null)" != "$MDBOOK_ROOT/bin/mdbook" ]; then
    ln -sfn "$MDBOOK_ROOT/bin/mdbook" "$ROOT/.mdbook.tmp" && mv -T "$ROOT/.mdbook.tmp" "$ROOT/.mdbook"
fi

say "ready: libtorch $TORCH_VERSION at $TORCH_DIR"

# Sourced by scripts/setup.sh: libtorch, from a torch of the user's
# (DDP_LAB_PYTHON) or from a venv of setup's own in the cache, linked at `.libtorch`
# (which .cargo/config.toml points LIBTORCH and the run-time library path at), and
# the Python environment at `.venv` (benches, PyTorch peers and fixture generators
# run `.venv/bin/python`).

# The lab's tch (0.24.0) is built against libtorch 2.11.0; a 2.11.x has the same
# interface.
TORCH_VERSION=2.11.0
TORCH_SERIES=${TORCH_VERSION%.*}
VENV=$CACHE/venv

# torch_query PYTHON: prints torch's version and directory, one a line, or nothing
# when PYTHON has no torch; status 1 when PYTHON does not run. Reads torch/version.py
# and never imports torch (which takes seconds).
torch_query() {
    "$1" -c '
import importlib.util, os, runpy
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin is not None:
    torch_dir = os.path.dirname(spec.origin)
    try:
        print(runpy.run_path(os.path.join(torch_dir, "version.py"))["__version__"])
    except Exception:
        print("of unknown version (no torch/version.py)")
    print(torch_dir)
' 2>/dev/null
}

# torch_fits VERSION: a 2.11.x (the build tag, as in 2.11.0+cu130, aside).
torch_fits() {
    [ "${1%%+*}" = "$TORCH_SERIES" ] || [[ ${1%%+*} == "$TORCH_SERIES".* ]]
}

# DDP_LAB_PYTHON is checked before anything is changed: it must run and hold a
# whole torch 2.11.x. Sets TORCH_DIR.
torch_check_input() {
    [ -n "${DDP_LAB_PYTHON:-}" ] || return 0
    local py=$DDP_LAB_PYTHON answer version
    answer=$(torch_query "$py") ||
        refuse "DDP_LAB_PYTHON=$py does not run as a Python interpreter." \
            "Name the python of the environment that holds torch $TORCH_SERIES.x (e.g. \$CONDA_PREFIX/bin/python), or unset it to let setup make its own venv (about 4.6 GB)."
    [ -n "$answer" ] ||
        refuse "DDP_LAB_PYTHON=$py has no torch (the lab needs torch $TORCH_SERIES.x, for libtorch $TORCH_VERSION)." \
            "Install it there ('$py -m pip install torch==$TORCH_VERSION'), or unset DDP_LAB_PYTHON to let setup make its own venv (about 4.6 GB)."
    version=$(sed -n 1p <<<"$answer")
    TORCH_DIR=$(sed -n 2p <<<"$answer")
    torch_fits "$version" ||
        refuse "DDP_LAB_PYTHON=$py has torch $version, but the lab needs torch $TORCH_SERIES.x (the lab's tch is built against libtorch $TORCH_VERSION)." \
            "Install torch==$TORCH_VERSION into that environment, name another python, or unset DDP_LAB_PYTHON to let setup make its own venv (about 4.6 GB)."
    [ -f "$TORCH_DIR/lib/libtorch_cpu.so" ] ||
        refuse "DDP_LAB_PYTHON=$py has torch $version without libtorch ($TORCH_DIR/lib/libtorch_cpu.so is missing)." \
            "Reinstall torch==$TORCH_VERSION from PyPI or conda there, or unset DDP_LAB_PYTHON."
}

torch_setup() {
    if [ -n "${DDP_LAB_PYTHON:-}" ]; then
        torch_use_python "$DDP_LAB_PYTHON"
    elif torch_kept; then
        : # .libtorch already points at a whole torch 2.11.x of the user's
    else
        torch_venv
        link .libtorch "$TORCH_DIR"
        link .venv "$VENV"
    fi
}

# The user's torch: no venv is made.
torch_use_python() {
    local prefix
    link .libtorch "$TORCH_DIR"
    prefix=$("$1" -c 'import sys; print(sys.prefix)')
    # `.venv/bin/python` must be that same environment (a venv or conda env has it).
    if [ -x "$prefix/bin/python" ] && [ "$(torch_query "$prefix/bin/python" | sed -n 2p)" = "$TORCH_DIR" ]; then
        link .venv "$prefix"
    else
        rm -f "$ROOT/.venv"
        say "no .venv: $prefix has no bin/python with that torch; the benches then need --python $1, and the tests that run PyTorch peers skip"
    fi
    # The pip wheel's CUDA/NCCL headers (cuda-toolkit) are what build.rs compiles
    # ProcessGroupNCCL with; a conda env or container often lacks them.
    local site
    site=$(dirname "$TORCH_DIR")
    if [ -f "$TORCH_DIR/lib/libtorch_cuda.so" ] &&
        ! { [ -f "$site/nvidia/cu13/include/cuda_runtime_api.h" ] && [ -f "$site/nvidia/nccl/include/nccl.h" ]; }; then
        say "note: that torch has CUDA but its environment lacks the CUDA/NCCL headers (pip install 'cuda-toolkit[crt,cccl]'): the build goes on without NCCL (a warning says so), so GPU runs cannot use NCCL; Gloo on CPU works"
    fi
}

# Keeps a `.libtorch` that an earlier DDP_LAB_PYTHON made (not setup's own venv,
# which may need a package added), so that the next run without the variable does
# not download 4.6 GB. Remove `.libtorch` to go back to setup's venv.
torch_kept() {
    local dir version
    dir=$(readlink -f "$ROOT/.libtorch" 2>/dev/null) || return 1
    case "$dir" in "$(readlink -f "$VENV" 2>/dev/null || echo "$VENV")"/*) return 1 ;; esac
    [ -f "$dir/lib/libtorch_cpu.so" ] && [ -f "$dir/version.py" ] || return 1
    version=$(sed -n "s/^__version__ *= *['\"]\([^'\"]*\)['\"].*/\1/p" "$dir/version.py")
    torch_fits "$version" || return 1
    TORCH_DIR=$dir
}

# Setup's own venv in the cache, shared by every clone on the machine.
# What the venv must hold; the marker file records it, so adding a package later
# installs just that instead of rebuilding 4.6 GB.
REQUIREMENTS="torch==$TORCH_VERSION cuda-toolkit[crt,cccl] numpy"
venv_ok() {
    [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$REQUIREMENTS" ] &&
        [ "$(torch_query "$VENV/bin/python" | sed -n 1p | cut -d+ -f1)" = "$TORCH_VERSION" ]
}

torch_venv() {
    if ! venv_ok; then
        if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
            local py="" candidate
            for candidate in python3.12 python3.11 python3.10 python3; do
                if command -v "$candidate" >/dev/null &&
                    "$candidate" -c 'import sys, venv; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' 2>/dev/null; then
                    py=$(command -v "$candidate")
                    break
                fi
            done
            [ -n "$py" ] || fail "python" "PyTorch $TORCH_VERSION needs Python 3.10-3.13 with the venv module; none was found on PATH (Debian: apt-get install python3 python3-venv). Or name a python whose torch is $TORCH_SERIES.x with DDP_LAB_PYTHON."
            rm -rf "$VENV"
            "$py" -m venv "$VENV" || fail "python venv" "'$py -m venv' failed (Debian: apt-get install python3-venv)."
        fi
        say "installing $REQUIREMENTS into $VENV (about 4.6 GB the first time; reused afterwards; DDP_LAB_PYTHON names a torch $TORCH_SERIES.x you already have instead)"
        # shellcheck disable=SC2086 # the list is meant to split
        if ! "$VENV/bin/pip" install -q --disable-pip-version-check $REQUIREMENTS; then
            fail "pip install torch" "pip could not install $REQUIREMENTS: check network access to PyPI (or set PIP_INDEX_URL), then run this again."
        fi
        "$VENV/bin/python" -c 'import torch' || fail "torch import" "torch was installed into $VENV but does not import; delete $VENV and run this again."
        echo "$REQUIREMENTS" >"$VENV/.complete"
        venv_ok || fail "torch import" "torch was installed into $VENV but is not $TORCH_VERSION; delete $VENV and run this again."
    fi
    TORCH_DIR=$(torch_query "$VENV/bin/python" | sed -n 2p)
    [ -f "$TORCH_DIR/lib/libtorch_cpu.so" ] || fail "libtorch" "$TORCH_DIR/lib/libtorch_cpu.so is missing: delete $VENV and run this again."
}

#!/usr/bin/env bash
# Builds what a GPU check needs and packs it into one folder to copy to a GPU node
# that has PyTorch but no Rust toolchain and no network; scripts/gpu-check.sh (in the
# bundle too) runs it there. See --help.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: bash scripts/gpu-bundle.sh [--debug] [--solutions N,N,...] [--max-mib M] DIR

Builds, in release, what scripts/gpu-check.sh runs on a GPU node, strips it, and packs
it into DIR (created; a previous bundle there is replaced):

  bin/checker            the checker, for `verify step 15 --prebuilt bin` on the node
  bin/solution_11        the finished lab (also what the demo and `lab` run)
  bin/solution_15        steps 12-15 (checkpoints, pipeline, FSDP, tensor parallelism);
                         `verify step 15` runs it and judges every check of steps 0-15
  bin/solution_16        step 16 (DDP x TP on a 2-D mesh), always packed
  bin/demo               the scaling demo
  bin/lab                the `lab` benchmark (Rust vs bench/python/lab_reference.py)
  bench/python/          the PyTorch side of the benchmarks
  course/, steps/*/src/main.rs, solutions/*/src/main.rs, lab-guide/src/
                         what the checker reads from the course (its root marker, the
                         programs' sources, the guide's hints)
  gpu-check.sh           the script to run on the node
  manifest.txt           commit, course revision, libtorch version, and every file
                         with its size and SHA-256

The binaries link the libtorch of the build machine's torch (2.11.0 for tch 0.24): the
node needs python3 with the same torch (2.11.0+cu130 for CUDA 13); gpu-check.sh points
LD_LIBRARY_PATH at it. Then, on the node:

  bash DIR/gpu-check.sh DIR REPORT_DIR

Options:
  --debug            debug builds (target/debug) instead of release: quicker to build,
                     larger; for tests (no size limit)
  --solutions LIST   the solutions to pack, comma-separated step numbers (default 11,15;
                     11 and 16 are always packed); e.g. 2,11,15 to verify step 2 cheaply
  --max-mib M        refuse a release bundle larger than M MiB (default 60)
  -h, --help         this text

Exit status: 0 when the bundle is written, 1 when a build fails or the bundle is too
large, 2 for bad input.
EOF
}

die_usage() {
    echo "gpu-bundle: $*" >&2
    echo "(bash scripts/gpu-bundle.sh --help for usage)" >&2
    exit 2
}

profile=release
solutions="11,15"
max_mib=60
out=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --debug) profile=debug ;;
        --solutions)
            [[ $# -ge 2 ]] || die_usage "--solutions needs a list, e.g. --solutions 2,11,15"
            solutions="$2"
            shift
            ;;
        --solutions=*) solutions="${1#*=}" ;;
        --max-mib)
            [[ $# -ge 2 ]] || die_usage "--max-mib needs a number of MiB"
            max_mib="$2"
            shift
            ;;
        --max-mib=*) max_mib="${1#*=}" ;;
        -*) die_usage "unknown option $1" ;;
        *)
            [[ -z "$out" ]] || die_usage "one DIR only (got $out and $1)"
            out="$1"
            ;;
    esac
    shift
done
[[ -n "$out" ]] || die_usage "name the folder to write the bundle to: bash scripts/gpu-bundle.sh DIR"
[[ "$max_mib" =~ ^[0-9]+$ ]] || die_usage "--max-mib wants a whole number of MiB, got '$max_mib'"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(solution_11 solution_16)
IFS=',' read -r -a asked <<<"$solutions"
for n in "${asked[@]}"; do
    [[ "$n" =~ ^[0-9]+$ ]] && ((10#$n <= 15)) || die_usage "--solutions: '$n' is not a step from 0 to 15"
    p="$(printf 'solution_%02d' "$((10#$n))")"
    [[ " ${packages[*]} " == *" $p "* ]] || packages+=("$p")
done

if [[ -e "$out" ]]; then
    [[ -d "$out" ]] || die_usage "$out exists and is not a folder"
    if [[ -n "$(ls -A "$out")" && ! -f "$out/manifest.txt" ]]; then
        die_usage "$out is not empty and holds no bundle (no manifest.txt): name a new or empty folder"
    fi
fi

cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
[[ "$target" = /* ]] || target="$root/$target"
release_flag=()
[[ "$profile" == release ]] && release_flag=(--release)

echo "gpu-bundle: building (${profile}): checker ${packages[*]} demo lab" >&2
build_args=(build "${release_flag[@]}" -p checker)
for p in "${packages[@]}"; do build_args+=(-p "$p"); done
cargo "${build_args[@]}" || { echo "gpu-bundle: the build failed" >&2; exit 1; }
cargo build "${release_flag[@]}" -p ddp-demo --bin demo -p ddp-bench --bin lab ||
    { echo "gpu-bundle: the build failed" >&2; exit 1; }

# A fresh folder: what an earlier bundle held does not stay.
rm -rf "$out"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
for bin in checker "${packages[@]}" demo lab; do
    strip -o "$out/bin/$bin" "$target/$profile/$bin" 2>/dev/null || cp "$target/$profile/$bin" "$out/bin/$bin"
    chmod +x "$out/bin/$bin"
done

# What the checker reads from the course (it finds its root by course/lab/main.rs).
mkdir -p "$out/course/lab" "$out/bench"
cp course/lab/main.rs "$out/course/lab/"
for crate_dir in steps/step_* solutions/step_*; do
    mkdir -p "$out/$crate_dir/src"
    cp "$crate_dir/src/main.rs" "$out/$crate_dir/src/"
done
cp -r lab-guide/src "$out/lab-guide-src.tmp"
mkdir -p "$out/lab-guide"
mv "$out/lab-guide-src.tmp" "$out/lab-guide/src"
cp -r bench/python "$out/bench/python"
find "$out/bench/python" -name '__pycache__' -prune -exec rm -rf {} +
cp scripts/gpu-check.sh "$out/gpu-check.sh"

# The manifest: where it came from, and every file.
commit="$(git rev-parse HEAD 2>/dev/null || echo none)"
if [[ "$commit" != none && -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    commit="$commit (with uncommitted changes)"
fi
revision="$("$out/bin/checker" --version | sed -n 's/.*course revision \([0-9a-f]*\).*/\1/p')"
torch_version="$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$root/.libtorch/version.py" 2>/dev/null || true)"
{
    echo "ddp-lab GPU bundle"
    echo "commit: $commit"
    echo "course_revision: $revision"
    echo "libtorch: ${torch_version:-unknown} (the torch the binaries were linked with; the node needs the same)"
    echo "profile: $profile"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) with $(rustc --version 2>/dev/null || echo 'rustc ?')"
    echo "solutions: ${packages[*]}"
    echo "files (bytes, SHA-256, path):"
    (cd "$out" && find . -type f ! -name manifest.txt | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
        printf '  %s %s %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" "$f"
    done)
} >"$out/manifest.txt"

bytes="$(du -sb "$out" | cut -f1)"
mib="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
echo "size: $mib MiB ($bytes bytes)" >>"$out/manifest.txt"
echo "gpu-bundle: wrote $out: $mib MiB (course revision $revision, commit $commit)"
if [[ "$profile" == release ]] && ((bytes > max_mib * 1048576)); then
    echo "gpu-bundle: $out is $mib MiB, over --max-mib $max_mib" >&2
    exit 1
fi

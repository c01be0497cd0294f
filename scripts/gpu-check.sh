#!/usr/bin/env bash
# The lab's GPU check, in one run on a GPU node without Rust or a network: every part
# of the GPU path, from a bundle made by scripts/gpu-bundle.sh. See --help.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: bash gpu-check.sh [--device cuda|cpu] [--budget SECONDS] [--verify-step N]
                         [--python PATH] BUNDLE REPORT_DIR

Runs the GPU check from BUNDLE (a folder scripts/gpu-bundle.sh wrote) and writes
REPORT_DIR/summary.md, a line per part (pass, fail or skip; its time; its key figures),
and each part's whole log beside it (REPORT_DIR/<part>.log). Needs no Rust and no
network: python3 with torch 2.11.0 (+cu130 on a CUDA 13 node), whose libtorch the
binaries link; LD_LIBRARY_PATH is pointed at it. The parts, in order:

  environment          GPU, driver, CUDA, torch, NCCL and cuDNN versions, nvidia-smi
  finished-lab         solution_11 on one GPU over NCCL (the lab's batch of 32); fails on
                       c10d's "Guessing device ID" warning (NCCL not bound to the device)
  verify               checker verify step 15 --solutions --prebuilt: every check of
                       steps 0-15, ranks sharing the GPU over Gloo where they outnumber GPUs
  step-12-checkpoint   solution_15 on 2 ranks: save after epoch 0, resume at epoch 1, each
                       rank loading the checkpoint onto its own device
  step-13-pipeline     solution_15 --pipeline: one stage per rank, 4 micro-batches
  step-14-fsdp         solution_15 --fsdp: the model sharded over 2 ranks
  step-15-tp           solution_15 --tensor-parallel 2: each block split over 2 ranks
  step-16-mesh         solution_16 --tensor-parallel 2 on 4 ranks: a 2 x 2 mesh, DDP over
                       "dp" x TP over "tp", SyncBatchNorm over "dp"
  demo                 the scaling demo at 1 GPU: its table, scaling.json/.svg/.png
  demo-predict         demo --predict for 8 GPUs at 300 GB/s, from the demo's step time
  bench-b512-fp32      `lab` benchmark, Rust vs PyTorch at 1 GPU, lab width, batch 512
  bench-b512-bf16-cl   the same with --amp bf16 --channels-last
  bench-b32-fp32       the same at the lab's batch of 32

Each part has its own time limit and runs even when an earlier one failed; all of them
together stay within --budget (a part that no longer fits is skipped, and says so).
BUNDLE must be writable: the data set and checkpoints go to BUNDLE/.gpu-check-work and
the checker's runs to BUNDLE/.checker, so that REPORT_DIR stays small (logs, charts,
JSON) to bring back.

Options:
  --device cuda|cpu  cuda (default): the GPU check, lab width. cpu: the same parts with
                     small sizes (narrow width, few images and steps) on CPU ranks over
                     Gloo, so that a test proves the script on a machine without a GPU
  --budget SECONDS   time for all parts together (default 470 with cuda: the check must
                     end within 8 minutes; 900 with cpu)
  --verify-step N    the step `verify` judges (default 15); the bundle must hold its
                     solution (gpu-bundle.sh --solutions)
  --python PATH      the Python with torch (default python3)
  -h, --help         this text

Exit status: 0 when every part passed, 1 when one failed or was skipped, 2 for bad input.
EOF
}

die_usage() {
    echo "gpu-check: $*" >&2
    echo "(bash gpu-check.sh --help for usage)" >&2
    exit 2
}

device=cuda
budget=""
verify_step=15
python=python3
positional=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --device | --budget | --verify-step | --python)
            [[ $# -ge 2 ]] || die_usage "$1 needs a value"
            case "$1" in
                --device) device="$2" ;;
                --budget) budget="$2" ;;
                --verify-step) verify_step="$2" ;;
                --python) python="$2" ;;
            esac
            shift
            ;;
        --device=*) device="${1#*=}" ;;
        --budget=*) budget="${1#*=}" ;;
        --verify-step=*) verify_step="${1#*=}" ;;
        --python=*) python="${1#*=}" ;;
        -*) die_usage "unknown option $1" ;;
        *) positional+=("$1") ;;
    esac
    shift
done
[[ ${#positional[@]} -eq 2 ]] || die_usage "name the bundle and the report folder: gpu-check.sh BUNDLE REPORT_DIR"
[[ "$device" == cuda || "$device" == cpu ]] || die_usage "--device is cuda or cpu, not '$device'"
[[ -n "$budget" ]] || budget=$([[ "$device" == cuda ]] && echo 470 || echo 900)
[[ "$budget" =~ ^[0-9]+$ && "$budget" -gt 0 ]] || die_usage "--budget wants whole seconds, got '$budget'"
[[ "$verify_step" =~ ^[0-9]+$ ]] && ((10#$verify_step <= 15)) ||
    die_usage "--verify-step wants a step from 0 to 15, got '$verify_step'"
bundle="${positional[0]}"
report="${positional[1]}"
[[ -d "$bundle" && -f "$bundle/manifest.txt" && -x "$bundle/bin/checker" ]] ||
    die_usage "$bundle is not a bundle (no manifest.txt or bin/checker): make one with scripts/gpu-bundle.sh DIR"
verify_bin="$(printf 'solution_%02d' "$((10#$verify_step))")"
for bin in solution_11 solution_15 solution_16 demo lab "$verify_bin"; do
    [[ -x "$bundle/bin/$bin" ]] ||
        die_usage "$bundle/bin/$bin is missing: make the bundle again (gpu-bundle.sh --solutions for $verify_bin)"
done
command -v timeout >/dev/null || die_usage "no \`timeout\` (GNU coreutils) here"
command -v "$python" >/dev/null || die_usage "no Python '$python' here: pass --python PATH (a Python with torch)"
bundle="$(cd "$bundle" && pwd)"
mkdir -p "$report"
report="$(cd "$report" && pwd)"
# Data and checkpoints beside the bundle (the checker keeps its own in BUNDLE/.checker):
# the report folder holds only what is worth bringing back.
work="$bundle/.gpu-check-work"
mkdir -p "$work"
bin="$bundle/bin"

# The libtorch the binaries link: the node's torch (the binaries' RUNPATH names the build
# machine's venv, which is not here).
torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null || true)"
if [[ -n "$torch_lib" ]]; then
    export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# bench and demo find bench/python and the course under it, not where they were built.
export DDP_LAB_ROOT="$bundle"
# CARGO (set under `cargo run` or `cargo test`) would make demo and lab build the lab
# with cargo first: the bundle's binaries are the ones to run.
unset DDP_LAB_TRACE DDP_LAB_TIMELINE CARGO
# Every job's rendezvous on a free loopback port of its own (MASTER_PORT per run), not
# the lab's fixed localhost:9956, which another job on the node may hold.
export MASTER_ADDR=127.0.0.1

# Sizes: the lab's on a GPU, small ones on CPU ranks (seconds each).
data=(--dataset generated --data-dir "$work/data")
if [[ "$device" == cuda ]]; then
    width=lab
    lab_sizes=(--train-subset 20000 --test-subset 5000 --epochs 2)
    beyond_sizes=(--width lab --batch-size 64 --train-subset 2048 --test-subset 512)
    demo_sizes=(--train-subset 20000 --test-subset 2000)
    bench_common=(--train-subset 20000 --test-subset 2000 --epochs 3)
    bench_small=(--train-subset 8000 --test-subset 2000 --epochs 3)
    b_large=512
    b_small=32
    limits=(env=30 lab=60 verify=200 ckpt=50 pipeline=40 fsdp=40 tp=40 mesh=45 demo=60 predict=20 bench=70)
else
    width=narrow
    lab_sizes=(--width narrow --threads 1 --train-subset 256 --test-subset 64 --epochs 2)
    beyond_sizes=(--width narrow --threads 1 --batch-size 16 --train-subset 128 --test-subset 32)
    demo_sizes=(--width narrow --batch-size 32 --threads 1 --train-subset 256 --test-subset 64)
    bench_common=(--train-subset 192 --test-subset 64 --epochs 2)
    bench_small=(--train-subset 96 --test-subset 64 --epochs 2)
    b_large=32
    b_small=16
    limits=(env=60 lab=120 verify=300 ckpt=120 pipeline=120 fsdp=120 tp=120 mesh=150 demo=120 predict=60 bench=150)
fi
limit_of() {
    local kv
    for kv in "${limits[@]}"; do [[ "${kv%%=*}" == "$1" ]] && echo "${kv#*=}" && return; done
    echo 60
}

started=$(date +%s)
deadline=$((started + budget))
rows=()
passed=0
total=0
manifest_line() { sed -n "s/^$1: //p" "$bundle/manifest.txt" | head -n1; }

write_summary() {
    {
        echo "# GPU check: $(date -u +%Y-%m-%d\ %H:%M\ UTC), --device $device"
        echo
        echo "Bundle: commit $(manifest_line commit); course revision $(manifest_line course_revision);"
        echo "built with libtorch $(manifest_line libtorch | cut -d' ' -f1) ($(manifest_line profile))."
        echo "Budget ${budget} s; $passed of $total parts passed so far; $(($(date +%s) - started)) s in all."
        echo
        echo "| part | result | time | key figures |"
        echo "|---|---|---:|---|"
        local row
        for row in "${rows[@]}"; do echo "$row"; done
        echo
        echo "Logs: each part's in \`<part>.log\` beside this file; the demo's charts in \`demo/\`,"
        echo "the benchmarks' JSON in \`bench-*.json\`."
    } >"$report/summary.md"
}

# run_logged CMD...: runs CMD with what is left of the part's time, its output appended
# to the part's log after the command line; its exit status (124 when it ran out of time).
run_logged() {
    local left=$((part_end - $(date +%s)))
    {
        echo
        echo "\$ $*"
    } >>"$part_log"
    if ((left <= 0)); then
        echo "(not run: the part's time is up)" >>"$part_log"
        return 124
    fi
    local status=0
    timeout --kill-after=5 "$left" "$@" >>"$part_log" 2>&1 || status=$?
    echo "(exit status $status)" >>"$part_log"
    [[ $status -ne 124 ]] || echo "(stopped: the part's time limit was reached)" >>"$part_log"
    return "$status"
}

figure() { figures+="${figures:+; }$*"; }
# fail WHY: the part fails (whatever it returns), WHY among its figures; returns 1, so
# that `cmd || fail WHY || return 1` stops the part there.
fail() {
    part_failed=1
    figure "FAIL: $*"
    return 1
}

# part NAME LIMIT_KEY FUNCTION: runs FUNCTION (which runs its commands with run_logged,
# adds its figures with `figure`, and returns non-zero on failure) within its time and
# what is left of the budget, and records its line.
part() {
    local name="$1" limit
    limit="$(limit_of "$2")"
    local fn="$3"
    local now left
    now=$(date +%s)
    left=$((deadline - now))
    total=$((total + 1))
    part_log="$report/$name.log"
    : >"$part_log"
    if ((left < 5)); then
        rows+=("| $name | skip | 0 s | not run: the ${budget} s budget was spent |")
        echo "gpu-check: $name skipped (budget spent)" >&2
        write_summary
        return
    fi
    ((limit <= left)) || limit=$left
    part_end=$((now + limit))
    figures=""
    part_failed=0
    echo "gpu-check: $name (at most ${limit} s)" >&2
    local status=0
    "$fn" </dev/null || status=$?
    [[ $part_failed -eq 0 ]] || status=1
    local took=$(($(date +%s) - now))
    local result=pass
    if [[ $status -ne 0 ]]; then
        result=fail
        if (($(date +%s) >= part_end)); then figure "stopped at its ${limit} s limit"; fi
    else
        passed=$((passed + 1))
    fi
    figures="${figures//|/\\|}"
    rows+=("| $name | $result | $took s | ${figures:-} |")
    echo "gpu-check: $name: $result in ${took} s${figures:+: $figures}" >&2
    write_summary
}

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The last epoch line's figure `Images/sec` or `Validation Accuracy` in the log.
last_epoch() {
    grep '^Epoch = ' "$part_log" | tail -n1 | sed -n "s|.*$1 = \([0-9.]*\).*|\1|p"
}
rounded() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }

gpus=0
ranks_placement=()
part_environment() {
    run_logged "$python" - "$device" <<'EOF' || return 1
import os, sys
import torch
print("python:", sys.version.split()[0])
print("torch:", torch.__version__, "from", os.path.dirname(torch.__file__))
print("torch.version.cuda:", torch.version.cuda)
print("cuda available:", torch.cuda.is_available())
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print("gpus:", n)
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu {i}: {p.name}, {p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}")
if n:
    print("nccl:", ".".join(map(str, torch.cuda.nccl.version())))
    print("cudnn:", torch.backends.cudnn.version())
import torch.distributed as d
print("gloo:", d.is_gloo_available(), "nccl available:", d.is_nccl_available())
if sys.argv[1] == "cuda" and not n:
    sys.exit("no GPU is visible to torch: the check needs --device cpu here")
EOF
    {
        echo
        echo "## nvidia-smi"
        nvidia-smi 2>&1 || echo "(no nvidia-smi here)"
        echo
        echo "## the bundle"
        cat "$bundle/manifest.txt"
        echo
        echo "## the checker, and the libtorch the binaries load (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
        "$bin/checker" --version 2>&1 || true
        ldd "$bin/solution_11" 2>&1 | grep -E 'torch|c10|nccl|not found' || true
    } >>"$part_log"
    local missing
    missing="$(ldd "$bin/solution_11" 2>&1 | grep 'not found' || true)"
    local torch_version gpu driver nccl
    torch_version="$(sed -n 's/^torch: \([^ ]*\).*/\1/p' "$part_log")"
    gpus="$(sed -n 's/^gpus: //p' "$part_log")"
    gpu="$(sed -n 's/^gpu 0: //p' "$part_log")"
    nccl="$(sed -n 's/^nccl: //p' "$part_log")"
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)"
    figure "${gpus:-0} GPU(s)${gpu:+: $gpu}"
    [[ -z "$driver" ]] || figure "driver $driver"
    figure "torch $torch_version (CUDA $(sed -n 's/^torch.version.cuda: //p' "$part_log"))"
    [[ -z "$nccl" ]] || figure "NCCL $nccl"
    local built
    built="$(manifest_line libtorch | cut -d' ' -f1)"
    if [[ "${built%%+*}" != "${torch_version%%+*}" ]]; then
        fail "the binaries were built with libtorch $built, this torch is $torch_version"
    fi
    if [[ -n "$missing" ]]; then
        fail "the binaries do not find their libraries (ldd: $(echo $missing | tr '\n' ' '))"
    fi
}

part_finished_lab() {
    local port
    port="$(free_port)"
    NCCL_DEBUG=VERSION MASTER_PORT="$port" run_logged "$bin/solution_11" --device "$device" --num-gpus 1 \
        "${lab_sizes[@]}" "${data[@]}" || fail "solution_11 failed" || return 1
    local ips acc
    ips="$(last_epoch Images/sec)"
    acc="$(last_epoch 'Validation Accuracy')"
    [[ -n "$ips" ]] || fail "no epoch line" || return 1
    figure "$(rounded "$ips") images/sec (last epoch), validation accuracy $acc"
    if [[ "$device" == cuda ]]; then
        local nccl
        nccl="$(grep -o 'NCCL version [0-9.]*' "$part_log" | head -n1 || true)"
        [[ -n "$nccl" ]] && figure "over $nccl" || fail "NCCL was not used (no 'NCCL version' line with NCCL_DEBUG=VERSION)"
        if grep -q 'Guessing device ID' "$part_log"; then
            fail "the 'Guessing device ID' warning appeared: NCCL was not bound to the rank's device"
        fi
        figure "no 'Guessing device ID' warning"
    fi
}

part_verify() {
    local status=0
    # From the bundle: the checker finds the course there (course/lab/main.rs).
    (cd "$bundle" && run_logged "$bin/checker" verify step "$verify_step" --solutions --prebuilt "$bin" \
        --seed 1 --color never) || status=$?
    local passed_line header
    passed_line="$(grep -E '^ +[0-9]+/[0-9]+ checks passed' "$part_log" | tail -n1 | sed 's/^ *//' || true)"
    header="$(grep -E '^== step' "$part_log" | head -n1 | sed 's/.*seed [0-9]*: \([^,]*, [A-Za-z]*\).*/\1/' || true)"
    figure "step $verify_step: ${passed_line:-no report}"
    [[ -z "$header" ]] || figure "$header"
    local failed
    failed="$(grep -E '^FAIL ' "$part_log" | sed 's/^FAIL step *[0-9]* \([^:]*\):.*/\1/' | tr '\n' ' ' || true)"
    [[ -z "$failed" ]] || figure "failed: $failed"
    [[ $status -eq 0 ]] || fail "exit status $status"
}

# Two ranks: a GPU each where there are two, else sharing the GPU over Gloo.
two_ranks() {
    ranks_placement=(--device "$device" --num-gpus 2)
    if [[ "$device" == cuda ]] && ((gpus < 2)); then
        ranks_placement+=(--share-gpus)
        placement_text="2 ranks sharing 1 GPU (Gloo)"
    elif [[ "$device" == cuda ]]; then
        placement_text="2 ranks, a GPU each (NCCL)"
    else
        placement_text="2 CPU ranks (Gloo)"
    fi
}

part_checkpoint() {
    two_ranks
    local dir="$work/checkpoints"
    rm -rf "$dir"
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_15" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 1 --save-every 1 --checkpoint-dir "$dir" || fail "the first run failed" || return 1
    local mark
    mark=$(wc -l <"$part_log")
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_15" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 2 --save-every 1 --checkpoint-dir "$dir" --resume || fail "the resumed run failed" || return 1
    local resumed
    resumed="$(tail -n +"$mark" "$part_log")"
    grep -q 'resume: continuing at epoch 1' <<<"$resumed" || fail "the second run did not resume at epoch 1" || return 1
    if grep -q '^Epoch =  0:' <<<"$resumed" || ! grep -q '^Epoch =  1:' <<<"$resumed"; then
        fail "the resumed run did not train epoch 1 only" || return 1
    fi
    figure "saved after epoch 0, resumed at epoch 1 on $placement_text"
    figure "validation accuracy $(last_epoch 'Validation Accuracy')"
}

part_pipeline() {
    two_ranks
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_15" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 2 --pipeline --micro-batches 4 || fail "solution_15 --pipeline failed" || return 1
    local bubble
    bubble="$(grep '^Pipeline:' "$part_log" | tail -n1 | sed 's/^Pipeline: //' || true)"
    [[ -n "$bubble" ]] || fail "no 'Pipeline:' line (the bubble)" || return 1
    figure "$placement_text: $bubble"
    figure "$(rounded "$(last_epoch Images/sec)") images/sec"
}

part_fsdp() {
    two_ranks
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_15" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 2 --fsdp || fail "solution_15 --fsdp failed" || return 1
    local held
    held="$(grep -E '^rank 0 holds' "$part_log" | head -n1 | sed 's/ (\([0-9.]*%\);.*/ (\1)/' || true)"
    [[ -n "$held" ]] || fail "no 'rank 0 holds' line (the shards)" || return 1
    figure "$placement_text: $held"
    figure "$(rounded "$(last_epoch Images/sec)") images/sec, validation accuracy $(last_epoch 'Validation Accuracy')"
}

part_tp() {
    two_ranks
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_15" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 2 --tensor-parallel 2 || fail "solution_15 --tensor-parallel 2 failed" || return 1
    local held
    held="$(grep -E '^tensor parallel over' "$part_log" | head -n1 | sed 's/ (\([0-9.]*%\);.*/ (\1)/' || true)"
    [[ -n "$held" ]] || fail "no 'tensor parallel over' line (the slices)" || return 1
    figure "$placement_text: $held"
    figure "$(rounded "$(last_epoch Images/sec)") images/sec, validation accuracy $(last_epoch 'Validation Accuracy')"
}

# 4 ranks: on fewer GPUs they share them over Gloo, as the checker's runs do.
four_ranks() {
    ranks_placement=(--device "$device" --num-gpus 4)
    if [[ "$device" == cuda ]] && ((gpus < 4)); then
        ranks_placement+=(--share-gpus)
        placement_text="4 ranks sharing $gpus GPU(s) (Gloo)"
    elif [[ "$device" == cuda ]]; then
        placement_text="4 ranks, a GPU each (NCCL)"
    else
        placement_text="4 CPU ranks (Gloo)"
    fi
}

part_mesh() {
    four_ranks
    MASTER_PORT="$(free_port)" run_logged "$bin/solution_16" "${ranks_placement[@]}" "${beyond_sizes[@]}" \
        "${data[@]}" --epochs 2 --tensor-parallel 2 --sync-batch-norm ||
        fail "solution_16 --tensor-parallel 2 on 4 ranks failed" || return 1
    # TP rank 0 of each of the 2 TP groups says what it holds.
    local held
    held="$(grep -cE '^tensor parallel over 2 ranks' "$part_log" || true)"
    [[ "$held" == 2 ]] || fail "$held 'tensor parallel over 2 ranks' line(s), expected one per TP group (2)" || return 1
    figure "$placement_text: 2 DP replicas x 2 TP ranks, SyncBatchNorm over dp"
    figure "$(rounded "$(last_epoch Images/sec)") images/sec, validation accuracy $(last_epoch 'Validation Accuracy')"
}

demo_step_ms=""
part_demo() {
    local out="$report/demo"
    rm -rf "$out"
    run_logged "$bin/demo" --device "$device" --world-sizes 1 --epochs 2 "${demo_sizes[@]}" "${data[@]}" \
        --out-dir "$out" || fail "demo failed" || return 1
    local f
    for f in scaling.json scaling.svg scaling.png; do
        [[ -s "$out/$f" ]] || fail "no $f" || return 1
    done
    local figures_json
    figures_json="$("$python" - "$out/scaling.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"][0]
print(f'{r["images_per_sec"]:.0f} {d["batch_size"]}')
EOF
)" || fail "scaling.json unreadable" || return 1
    local ips batch
    read -r ips batch <<<"$figures_json"
    demo_step_ms="$(awk -v b="$batch" -v i="$ips" 'BEGIN { printf "%.2f", 1000 * b / i }')"
    figure "1 rank: $ips images/sec at batch $batch (a step of $demo_step_ms ms)"
    figure "scaling.json, scaling.svg, scaling.png in demo/"
}

part_predict() {
    [[ -n "$demo_step_ms" ]] || fail "no step time: the demo did not measure one" || return 1
    run_logged "$bin/demo" --predict --gpus 8 --link-gbps 300 --step-ms "$demo_step_ms" --width "$width" \
        --device "$device" --out-dir "$report/demo" || fail "demo --predict failed" || return 1
    local line
    line="$(grep '^expected DDP efficiency' "$part_log" | tail -n1 || true)"
    [[ -n "$line" ]] || fail "no 'expected DDP efficiency' line" || return 1
    figure "8 GPUs at 300 GB/s, step $demo_step_ms ms: ${line#expected }"
}

# bench NAME BATCH SIZES... [-- LAB_ARGS]: Rust vs PyTorch at 1 rank.
bench() {
    local name="$1" batch="$2"
    shift 2
    local json="$report/$name.json"
    rm -f "$json"
    run_logged "$bin/lab" --device "$device" --world-size 1 --width "$width" --batch-size "$batch" \
        --repeats 1 --allreduce-mb 0 --python "$python" "${data[@]}" --timeout "$(limit_of bench)" \
        --json "$json" "$@" || fail "the lab benchmark failed" || return 1
    local line
    line="$("$python" - "$json" <<'EOF'
import json, math, sys
d = json.load(open(sys.argv[1]))
rust, torch, ratio = d["rust"]["images_per_sec_1"], d["pytorch"]["images_per_sec_1"], d["ratio_1"]
if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (rust, torch, ratio)):
    sys.exit("a figure is missing")
print(f"Rust {rust:.0f} images/sec, PyTorch {torch:.0f}: Rust/PyTorch {ratio:.2f}")
EOF
)" || fail "no figures in $name.json" || return 1
    figure "batch $batch, width $width: $line"
}
part_bench_large() { bench bench-b512-fp32 "$b_large" "${bench_common[@]}"; }
part_bench_bf16() {
    bench bench-b512-bf16-cl "$b_large" "${bench_common[@]}" --lab-args=--amp,bf16,--channels-last
}
part_bench_small() { bench bench-b32-fp32 "$b_small" "${bench_small[@]}"; }

echo "gpu-check: $bundle -> $report (--device $device, budget ${budget} s)" >&2
part environment env part_environment
part finished-lab lab part_finished_lab
part verify verify part_verify
part step-12-checkpoint ckpt part_checkpoint
part step-13-pipeline pipeline part_pipeline
part step-14-fsdp fsdp part_fsdp
part step-15-tp tp part_tp
part step-16-mesh mesh part_mesh
part demo demo part_demo
part demo-predict predict part_predict
part bench-b512-fp32 bench part_bench_large
part bench-b512-bf16-cl bench part_bench_bf16
part bench-b32-fp32 bench part_bench_small
write_summary
echo "gpu-check: $passed of $total parts passed in $(($(date +%s) - started)) s; summary: $report/summary.md" >&2
[[ $passed -eq $total ]]

#!/usr/bin/env bash
# The main job: the finished lab's quick evaluation. Sets the machine up for the lab
# (once; scripts/setup.sh without the test tools), builds the finished lab
# (solutions/step_11), and trains the narrow WideResNet on 2 ranks (CPU processes
# over Gloo; one GPU each over NCCL when the node has 2 GPUs) on 30,000 images of the
# real Fashion-MNIST until it reaches the lab's 0.85 validation accuracy twice in a
# row or 8 epochs pass (scripts/quick-evaluation.args; the default --seed 0 makes the
# run repeatable: 5 epochs, about 3 minutes on 2 cores).
#
# Data: the real Fashion-MNIST from data/, else Debian's copy that setup installs
# (/usr/share/datasets/fashion-mnist), else a download; the generated stand-in only
# when none of these works. The "dataset:" line says which.
# Extra arguments go to the program, e.g. `bash scripts/main.sh --dataset generated`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
echo "== building the finished lab (solutions/step_11)" >&2
cargo build -q --release -p solution_11
quick=$(grep -v '^#' scripts/quick-evaluation.args)
echo "== quick evaluation: solution_11 --num-gpus 2 --width narrow --threads 1 $quick $*" >&2
# shellcheck disable=SC2086  # $quick is a list of options
exec target/release/solution_11 --num-gpus 2 --width narrow --threads 1 $quick "$@"

#!/usr/bin/env bash
# The main job. Sets the machine up (once), then runs it. Until the lab itself lands,
# the main job is the c10d smoke run: 4 CPU ranks all-reduce, broadcast and all-gather.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec cargo run -q -p tch-distributed --example hello_ranks -- "$@"

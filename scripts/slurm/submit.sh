#!/usr/bin/env bash
# Grades a class on a Slurm cluster: a job array of TASKS tasks (each grades every
# TASKS-th submission of HANDED_IN, on every check of steps 0-11), then one job that
# merges their reports into RESULTS/gradebook.csv once the array has ended.
#
#   bash scripts/slurm/submit.sh HANDED_IN RESULTS [TASKS] [checker options]
#
# TASKS defaults to one per submission. Run it from the course's root on the cluster's
# login node, after `bash scripts/setup.sh && cargo build -p checker` there (the course
# must be on a filesystem the compute nodes share). Extra sbatch options (a partition,
# an account) go in SBATCH_* variables, which sbatch reads: SBATCH_PARTITION=cpu ...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ $# -ge 2 ] || { echo "usage: $0 HANDED_IN RESULTS [TASKS] [checker options]" >&2; exit 2; }
handed_in=$(cd "$1" && pwd) || { echo "error: $1: no such folder of handed-in crates" >&2; exit 2; }
mkdir -p "$2"
results=$(cd "$2" && pwd)
shift 2
submissions=$(find "$handed_in" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$submissions" -gt 0 ] || { echo "error: $handed_in holds no submission (a folder per student)" >&2; exit 2; }
tasks=$submissions
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
    tasks=$1
    shift
fi
[ "$tasks" -ge 1 ] || { echo "error: TASKS must be at least 1" >&2; exit 2; }
[ -x target/debug/checker ] || { echo "error: build the checker first: bash scripts/setup.sh && cargo build -p checker" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "error: sbatch not found: this is for a Slurm cluster's login node" >&2; exit 2; }
array=$(sbatch --parsable --array="0-$((tasks - 1))" scripts/slurm/grade-class.sbatch "$handed_in" "$results" "$@")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterany:$array" scripts/slurm/gradebook.sbatch "$handed_in" "$results")
echo "submitted: grading array $array ($tasks task(s) for $submissions submission(s)), gradebook job ${merge%%;*}"
echo "the gradebook will be $results/gradebook.csv"

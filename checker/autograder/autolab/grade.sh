#!/usr/bin/env bash
# Grades the handin ($1, a main.rs or a .zip of a crate) as @GRADE@'s program and prints
# Autolab's autoresult as its last line. Packed in autograde.tar by
# `cargo checker autograder autolab`; course commit @COMMIT@.
#
# DDP_LAB_COURSE names the course (default /opt/ddp-lab, in the grading image) and
# DDP_LAB_CHECKER its built checker (default target/debug/checker in the course).
set -uo pipefail
HANDIN=$(realpath "${1:-main.rs}")
COURSE=${DDP_LAB_COURSE:-/opt/ddp-lab}
CHECKER=${DDP_LAB_CHECKER:-$COURSE/target/debug/checker}
RESULT=$(mktemp)
# shellcheck disable=SC1091 # written by rustup
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cd "$COURSE" || exit 1
# In a sandbox where bubblewrap can make one; Tango's container usually forbids the
# namespaces it needs, and the program then runs unconfined inside that container
# (the report above the autoresult says so).
"$CHECKER" grade @GRADE@ --crate "$HANDIN" --unsandboxed-fallback --autolab "$RESULT" 2>&1
if [ ! -s "$RESULT" ]; then
    echo "The autograder could not grade this submission; the checker's error is above."
    echo '{"scores": {@ZEROES@}}'
    exit 0
fi
tail -n 1 "$RESULT"

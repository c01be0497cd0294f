#!/usr/bin/env bash
# CodeGrade's AutoTest runs this as a Unit Test step, in the student's folder: it
# grades the submission as @GRADE@'s program and writes JUnit XML to
# $CG_JUNIT_XML_LOCATION. Written by `cargo checker autograder codegrade`; course
# commit @COMMIT@.
#
# DDP_LAB_COURSE names the course (default $HOME/ddp-lab, where setup.sh put it) and
# DDP_LAB_CHECKER its built checker (default target/debug/checker in the course).
set -uo pipefail
STUDENT=$(pwd)
COURSE=${DDP_LAB_COURSE:-$HOME/ddp-lab}
CHECKER=${DDP_LAB_CHECKER:-$COURSE/target/debug/checker}
: "${CG_JUNIT_XML_LOCATION:?CodeGrade sets it in a Unit Test step; set it to the report path to try this elsewhere}"
# shellcheck disable=SC1091 # written by rustup
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cd "$COURSE" || exit 1
# In a sandbox where bubblewrap can make one; CodeGrade's runner usually forbids the
# namespaces it needs, and the program then runs unconfined on that runner.
"$CHECKER" grade @GRADE@ --crate "$STUDENT" --unsandboxed-fallback --codegrade "$CG_JUNIT_XML_LOCATION"

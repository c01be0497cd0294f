#!/usr/bin/env bash
# Every commit since SINCE (default: the first commit held to this rule) has a one-line
# subject of at most 72 characters, the details in its body: `git log --oneline` and
# GitHub's lists then read whole. Exit 1 naming each subject that is longer, 0 when
# there is no history to read (an exported tree, a shallow clone without SINCE).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
since=${1:-ac752cd7}
limit=72
if ! git rev-parse --git-dir >/dev/null 2>&1 || ! git cat-file -e "$since^{commit}" 2>/dev/null; then
    echo "commit subjects: no history from $since here; nothing to check" >&2
    exit 0
fi
long=$(git log --format='%h %s' "$since..HEAD" | awk -v n="$limit" '{ s = substr($0, index($0, " ") + 1) } length(s) > n { print "  " $1 " (" length(s) " characters): " s }')
if [ -n "$long" ]; then
    echo "commit subjects longer than $limit characters (shorten the subject, move the details into the body: git commit --amend, or git rebase -i before pushing):" >&2
    echo "$long" >&2
    exit 1
fi

#!/usr/bin/env bash
# The lab guide (lab-guide/) as a book: HTML with search, built by mdBook, which
# `scripts/setup.sh --for-tests` installs (the link `.mdbook`; MDBOOK=/path/to/mdbook
# overrides it).
#
#   bash scripts/book.sh build          build into target/book
#   bash scripts/book.sh check          build, then fail on a page missing from SUMMARY.md,
#                                       a broken link (README.md's too) or a missing image
#   bash scripts/book.sh serve [PORT]   build, then serve on http://127.0.0.1:PORT (3000)
#   bash scripts/book.sh open [STEP]    build, then open the book (or step STEP's page)
#                                       in a browser; prints its path when none is found
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BOOK=target/book # lab-guide/book.toml's build-dir

usage() {
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

build() {
    local mdbook=${MDBOOK:-$ROOT/.mdbook}
    if ! [ -x "$mdbook" ]; then
        echo "book: mdBook is not installed ($mdbook is missing): run 'bash scripts/setup.sh --for-tests', which installs it" >&2
        echo "book: (when setup could not, its log is setup-mdbook.log in its cache, \$DDP_LAB_CACHE or ~/.cache/ddp-lab)" >&2
        exit 1
    fi
    # mdBook logs at INFO on success; a WARN (a chapter it could not read, a bad
    # include) is a fault of the book as much as an ERROR is.
    local log
    if ! log=$("$mdbook" build lab-guide 2>&1) || grep -q '\[\(WARN\|ERROR\)\]' <<<"$log"; then
        echo "$log" >&2
        echo "book: mdBook failed to build lab-guide/ (above)" >&2
        exit 1
    fi
    echo "book: built into $BOOK (open $BOOK/index.html)" >&2
}

case "${1:-}" in
    build)
        build
        ;;
    check)
        build
        cargo run -q -p bookcheck -- lab-guide/src "$BOOK" README.md
        ;;
    serve)
        port=${2:-3000}
        build
        python=$(command -v python3 || echo "$ROOT/.venv/bin/python")
        echo "book: serving $BOOK on http://127.0.0.1:$port/ (Ctrl-C stops; after editing lab-guide/, run 'bash scripts/book.sh build' and reload)" >&2
        exec "$python" -m http.server --bind 127.0.0.1 --directory "$BOOK" "$port"
        ;;
    open)
        page=$BOOK/index.html
        if [ -n "${2:-}" ]; then
            [[ $2 =~ ^[0-9]+$ ]] || usage
            page=$(printf '%s/steps/step-%02d.html' "$BOOK" "$((10#$2))")
        fi
        build
        [ -f "$page" ] || { echo "book: there is no page $page" >&2; exit 2; }
        if command -v xdg-open >/dev/null && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
            xdg-open "$page"
        else
            echo "book: no browser here; open file://$ROOT/$page (or: bash scripts/book.sh serve)" >&2
        fi
        ;;
    *)
        usage
        ;;
esac

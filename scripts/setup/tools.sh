# Sourced by scripts/setup.sh: the optional parts. The real data set serves the lab;
# the rest only the tests (setup.sh --for-tests). None is a reason for setup to stop:
# what cannot be installed is skipped with one line saying what is lost.

# The real Fashion-MNIST: Debian packages it, and the lab reads it in place from
# /usr/share/datasets/fashion-mnist (verified by content: Debian recompressed the
# published .gz files).
FMNIST=/usr/share/datasets/fashion-mnist
dataset_setup() {
    [ -f "$FMNIST/train-images-idx3-ubyte.gz" ] && return
    apt_install "the real Fashion-MNIST (dataset-fashion-mnist, about 30 MB)" \
        "the lab downloads it when it can, else trains on a generated stand-in; the tests that need the real data fail under scripts/test.sh" \
        dataset-fashion-mnist || return 0
    if [ -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
        say "the real Fashion-MNIST is in $FMNIST"
    fi
}

# What scripts/test.sh needs beyond the lab.
test_tools_setup() {
    # The two-node reliability test builds network namespaces with `ip`.
    command -v ip >/dev/null ||
        apt_install "iproute2 (ip netns)" "the two-node reliability test is skipped" iproute2 || true
    # The lab guide's browser test (tools/bookcheck/tests/browser.rs) loads every
    # page of the built book in headless Chromium.
    command -v chromium >/dev/null ||
        apt_install "Chromium (Debian's chromium, about 270 MB)" \
            "the book's browser test fails under scripts/test.sh (the lab does not need it)" chromium || true
    # `checker grade` and `--crate` build and run handed-in code in a bubblewrap
    # sandbox; checker/tests/hostile.rs proves it holds.
    command -v bwrap >/dev/null ||
        apt_install "bubblewrap (the grading sandbox, under 100 kB)" \
            "'checker grade' and '--crate' refuse unless given --unsandboxed, and the sandbox tests fail under scripts/test.sh" bubblewrap || true
    # checker/tests/platforms.rs runs each platform's files as the platform does:
    # Autolab's Makefile under make, CodeRunner's template under python3.
    command -v make >/dev/null ||
        apt_install "make (runs Autolab's Makefile, under 1 MB)" \
            "checker/tests/platforms.rs's Autolab test fails under scripts/test.sh" make || true
    command -v python3 >/dev/null ||
        apt_install "python3 (runs CodeRunner's template)" \
            "checker/tests/platforms.rs's CodeRunner test fails under scripts/test.sh" python3 || true
    mdbook_setup
}

# mdBook builds the lab guide into a book (scripts/book.sh), which the tests check.
# Compiled from crates.io once per cache (only the search feature: about 3 minutes
# on 2 cores), linked at `.mdbook`. No root needed.
MDBOOK_VERSION=0.4.52
mdbook_setup() {
    local root=$CACHE/mdbook-$MDBOOK_VERSION log=$CACHE/setup-mdbook.log
    if [ "$("$root/bin/mdbook" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
        say "installing mdBook $MDBOOK_VERSION into $root (cargo install from crates.io; a few minutes the first time, reused afterwards)"
        rm -rf "$root.tmp"
        # A temporary target directory of cargo's own, whatever CARGO_TARGET_DIR says.
        if env -u CARGO_TARGET_DIR cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" \
            --no-default-features --features search --root "$root.tmp" >"$log" 2>&1 &&
            [ "$("$root.tmp/bin/mdbook" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; then
            rm -rf "$root" && mv -T "$root.tmp" "$root"
        else
            rm -rf "$root.tmp"
            say "skipped mdBook $MDBOOK_VERSION: 'cargo install' failed (crates.io unreachable? log: $log). Without it: 'bash scripts/book.sh' and the tests, which check the book, fail (the lab does not need it)"
        fi
    fi
    if [ -x "$root/bin/mdbook" ]; then
        link .mdbook "$root/bin/mdbook"
    else
        rm -f "$ROOT/.mdbook" # never leave it at another version
    fi
}

# Sourced by scripts/setup.sh: the gloo headers. ProcessGroupGloo.hpp (libtorch's)
# includes them, and the torch wheel does not ship them; the gloo code itself is
# inside libtorch. crates/tch-distributed/build.rs looks in $DDP_LAB_GLOO_INCLUDE,
# then at the link `.gloo-include` made here, then in /usr/include.

GLOO_HEADER=gloo/algorithm.h
# Debian's libgloo-dev unpacked without root: its /usr/include lands here.
GLOO_CACHE=$CACHE/gloo-headers
GLOO_CACHED_INCLUDE=$GLOO_CACHE/usr/include

# What to do when there are none, in the words the build's error uses too.
GLOO_WAYS="run 'apt-get install libgloo-dev' as root, or name a directory holding $GLOO_HEADER with DDP_LAB_GLOO_INCLUDE=DIR, then run this again"

# An explicit DDP_LAB_GLOO_INCLUDE is refused before anything is changed when it
# does not hold the headers.
gloo_check_input() {
    if [ -n "${DDP_LAB_GLOO_INCLUDE:-}" ] && [ ! -f "$DDP_LAB_GLOO_INCLUDE/$GLOO_HEADER" ]; then
        refuse "DDP_LAB_GLOO_INCLUDE=$DDP_LAB_GLOO_INCLUDE holds no $GLOO_HEADER." \
            "Name the directory that holds the gloo/ folder of headers (for Debian's libgloo-dev, /usr/include), or unset it to let setup find them."
    fi
}

gloo_setup() {
    if [ -n "${DDP_LAB_GLOO_INCLUDE:-}" ]; then
        # Linked too, so that later builds find them with the variable unset.
        link .gloo-include "$(cd "$DDP_LAB_GLOO_INCLUDE" && pwd -P)"
    elif [ -f "/usr/include/$GLOO_HEADER" ]; then
        rm -f "$ROOT/.gloo-include" # the compiler finds the system's on its own
    elif [ -f "$GLOO_CACHED_INCLUDE/$GLOO_HEADER" ]; then
        link .gloo-include "$GLOO_CACHED_INCLUDE"
    elif gloo_install_system; then
        rm -f "$ROOT/.gloo-include"
    else
        gloo_download
        link .gloo-include "$GLOO_CACHED_INCLUDE"
    fi
}

# As root (or with password-less sudo): Debian's package, system-wide, as before.
gloo_install_system() {
    why_no_apt >/dev/null && return 1
    apt_install "the gloo headers (libgloo-dev)" "setup downloads them into the cache instead" libgloo-dev &&
        [ -f "/usr/include/$GLOO_HEADER" ]
}

# Without root: `apt-get download` fetches the package as any user and `dpkg-deb -x`
# unpacks it anywhere. Only its headers are used.
gloo_download() {
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
        fail "gloo headers" "not Debian or Ubuntu (no apt-get or dpkg-deb), so setup cannot fetch them: $GLOO_WAYS."
    say "downloading the gloo headers (Debian's libgloo-dev, about 50 kB) into $GLOO_CACHE, no root needed"
    local work
    work=$(mktemp -d "$CACHE/gloo-download.XXXXXX")
    # shellcheck disable=SC2064 # expand now: $work is local
    trap "rm -rf '$work'" EXIT
    if ! (cd "$work" && apt-get download libgloo-dev) >>"$APT_LOG" 2>&1; then
        # The system's package lists may be empty (a fresh container) and only root
        # may refresh them: read a private copy instead (about 25 MB, deleted after).
        say "'apt-get download libgloo-dev' failed with the system's package lists (log: $APT_LOG); reading the mirror's own lists into the cache"
        mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
        local private=(-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
        { apt-get -q "${private[@]}" update && (cd "$work" && apt-get "${private[@]}" download libgloo-dev); } >>"$APT_LOG" 2>&1 ||
            fail "gloo headers" "'apt-get download libgloo-dev' failed (log: $APT_LOG): no Debian/Ubuntu mirror reachable, or no such package in this release. Otherwise $GLOO_WAYS."
    fi
    rm -rf "$work/unpacked"
    dpkg-deb -x "$work"/libgloo-dev_*.deb "$work/unpacked" >>"$APT_LOG" 2>&1 &&
        [ -f "$work/unpacked/usr/include/$GLOO_HEADER" ] ||
        fail "gloo headers" "the downloaded libgloo-dev has no usr/include/$GLOO_HEADER (log: $APT_LOG): $GLOO_WAYS."
    rm -rf "$GLOO_CACHE"
    mv -T "$work/unpacked" "$GLOO_CACHE"
    rm -rf "$work"
    trap - EXIT
}

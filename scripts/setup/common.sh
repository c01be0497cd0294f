# Sourced by scripts/setup.sh: how setup speaks, and how it installs Debian packages.
# Needs ROOT and CACHE set.

say() { echo "setup: $*" >&2; }

# A step that could not be done (network, a package index): exit 1.
fail() {
    # $1: the step that failed, $2: what to do about it.
    echo "setup: FAILED at step '$1'" >&2
    echo "setup:   $2" >&2
    exit 1
}

# Something the user gave or has that setup cannot use (an option, DDP_LAB_PYTHON,
# DDP_LAB_GLOO_INCLUDE, too old a Rust): exit 2, before anything is changed.
refuse() {
    echo "setup: $1" >&2
    shift
    for line in "$@"; do echo "setup:   $line" >&2; done
    exit 2
}

# Where apt-get's output goes: in the cache, which this user can always write (a
# fixed file in /tmp may belong to another user of a shared machine).
APT_LOG=$CACHE/setup-apt.log

# The command prefix that runs apt-get as root: empty for root, `sudo -n` with
# password-less sudo. Fails (status 1) when this user cannot install system-wide:
# setup never asks for a password.
as_root() {
    if [ "$(id -u)" = 0 ]; then
        echo ""
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        echo "sudo -n"
    else
        return 1
    fi
}

# Why apt-get cannot install here, or nothing (status 1) when it can.
why_no_apt() {
    if ! command -v apt-get >/dev/null; then
        echo "no apt-get here"
    elif ! as_root >/dev/null; then
        echo "installing it needs root or password-less sudo"
    else
        return 1
    fi
}

# apt_install WHAT LOST PACKAGE...: installs Debian packages system-wide when this
# user may. When it cannot run, or fails, ONE line says what is skipped and what is
# lost without it, and the status is 1: never a reason for setup to stop.
apt_install() {
    local what=$1 lost=$2 why sudo
    shift 2
    if why=$(why_no_apt); then
        say "skipped $what: $why. Without it: $lost"
        return 1
    fi
    sudo=$(as_root)
    say "installing $what with apt-get"
    # A fresh machine may have empty package lists: refresh once and retry.
    # shellcheck disable=SC2086 # $sudo is empty or `sudo -n`
    if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$APT_LOG" 2>&1 ||
        { $sudo apt-get update -q >>"$APT_LOG" 2>&1 || true
          $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$APT_LOG" 2>&1; }; then
        return 0
    fi
    say "skipped $what: 'apt-get install $*' failed (no Debian mirror? log: $APT_LOG). Without it: $lost"
    return 1
}

# link NAME TARGET: points the repository's link NAME at TARGET, atomically (the
# build reads these links at any moment).
link() {
    if [ "$(readlink "$ROOT/$1" 2>/dev/null)" != "$2" ]; then
        ln -sfn "$2" "$ROOT/$1.tmp" && mv -T "$ROOT/$1.tmp" "$ROOT/$1"
    fi
}

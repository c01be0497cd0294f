# Sourced by scripts/setup.sh: the Rust toolchain is new enough for the workspace.

# The workspace's minimum Rust version, as Cargo.toml declares it (the one place it
# is written): `rust-version = "1.85"` under [workspace.package].
rust_needed() {
    sed -n '/^\[workspace\.package\]/,/^\[/s/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml"
}

# version_at_least FOUND NEEDED: compares dotted numbers field by field (1.100 is newer
# than 1.85); missing fields count as 0.
version_at_least() {
    local IFS=.
    # shellcheck disable=SC2206 # splitting on dots is the point
    local found=($1) needed=($2) i
    for i in 0 1 2; do
        if ((10#${found[i]:-0} != 10#${needed[i]:-0})); then
            ((10#${found[i]:-0} > 10#${needed[i]:-0}))
            return
        fi
    done
}

rust_check() {
    local needed rustc=${RUSTC:-rustc} found
    needed=$(rust_needed)
    [ -n "$needed" ] || fail "rust" "no rust-version in $ROOT/Cargo.toml's [workspace.package]: is this the lab's repository?"
    command -v "$rustc" >/dev/null && command -v cargo >/dev/null ||
        refuse "Rust is not installed (no rustc or cargo on PATH); the lab needs Rust $needed or newer." \
            "Install it with rustup (https://rustup.rs), open a new shell, then run this again."
    found=$("$rustc" --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p')
    [ -n "$found" ] || refuse "'$rustc --version' did not say which Rust this is; the lab needs Rust $needed or newer." \
        "Reinstall it with rustup (https://rustup.rs), then run this again."
    version_at_least "$found" "$needed" ||
        refuse "Rust $found is too old: the workspace needs Rust $needed or newer (rust-version in Cargo.toml)." \
            "Update it with 'rustup update' (or install a newer toolchain), then run this again."
}

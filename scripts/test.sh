#!/usr/bin/env bash
# The project's test command (README, CI): formatting, clippy, every crate's
# tests, then the check that the committed ggml bindings match the patched
# headers where a real libclang is installed.
#
# Needs a Rust toolchain and a C compiler. What else it needs (a C++ compiler,
# rustfmt, clippy) it installs where it can (apt-get as root or with sudo,
# brew, rustup), and otherwise names in one line with the command to run.
# cmake and libclang are not needed. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "scripts/test.sh: $*" >&2; }

# Install a system package with whatever this machine offers, or stop with one line.
install_pkg() { # debian-name brew-name what
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else
        say "$3 not found: install it with \`sudo apt-get install $1\`"; exit 2
      fi
    fi
    say "$3 not found: installing $1 with apt-get"
    $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
  elif command -v brew >/dev/null 2>&1 && [ -n "$2" ]; then
    say "$3 not found: installing $2 with brew"
    brew install "$2" >/dev/null
  else
    say "$3 not found: install it (Debian/Ubuntu: \`apt-get install $1\`)"; exit 2
  fi
}

# A cargo subcommand (rustfmt, clippy), through rustup where it is missing.
need_component() { # cargo-subcommand rustup-component
  cargo "$1" --version >/dev/null 2>&1 && return
  if command -v rustup >/dev/null 2>&1 && rustup component add "$2" >/dev/null 2>&1; then return; fi
  say "cargo $1 not found: install it with \`rustup component add $2\`"; exit 2
}

# Whether a real libclang (not libclang-cpp) is where bindgen's clang-sys
# looks: LIBCLANG_PATH, `llvm-config --libdir`, then the usual folders.
have_libclang() {
  local dirs=() d f
  [ -n "${LIBCLANG_PATH:-}" ] && dirs+=("$LIBCLANG_PATH")
  command -v llvm-config >/dev/null 2>&1 && dirs+=("$(llvm-config --libdir)")
  dirs+=(/usr/lib/llvm-*/lib /usr/local/lib /usr/local/lib64 /usr/lib /usr/lib64 /usr/lib/*-linux-gnu
    /usr/local/opt/llvm/lib /Library/Developer/CommandLineTools/usr/lib)
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/libclang.so "$d"/libclang.so.[0-9]* "$d"/libclang-[0-9]*.so "$d"/libclang-[0-9]*.so.[0-9]* "$d"/libclang.dylib; do
      [ -e "$f" ] && return 0
    done
  done
  return 1
}

command -v "${CC:-cc}" >/dev/null 2>&1 || install_pkg gcc "" "a C compiler (cc)"
command -v "${CXX:-c++}" >/dev/null 2>&1 || install_pkg g++ "" "a C++ compiler (c++)"
need_component fmt rustfmt
need_component clippy clippy

# A one-off build gains nothing from incremental caches (they took a quarter of
# the target folder's disk); a developer who wants them sets CARGO_INCREMENTAL=1.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
avail_kb=$(df -Pk . 2>/dev/null | awk 'NR==2 {print $4}')
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt 2500000 ]; then
  say "only $((avail_kb / 1024)) MiB free here; the test build needs about 2 GiB (cargo stops with 'No space left on device' below that)"
fi

cargo fmt --all -- --check || { say "formatting differs from rustfmt's (above): run \`cargo fmt --all\`"; exit 1; }
cargo clippy --workspace --all-targets --locked -- -D warnings || { say "clippy found warnings (above)"; exit 1; }
cargo test --workspace --locked "$@"
if have_libclang; then
  cargo test -p toy-ggml-sys --features generate-bindings --locked bindings_current
else
  say "no libclang found: skipping the bindings freshness check (install libclang-dev to run it)"
fi

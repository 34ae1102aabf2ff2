#!/usr/bin/env bash
# Installs what building and testing moeflow needs on a fresh Debian 12 machine.
# Idempotent: skips apt-get when every package is already present.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      libhwy-dev nlohmann-json3-dev
      coinor-libcbc-dev            # the planner's exact solver (moeflow plan)
      libcpp-httplib-dev           # moeflow serve and bench-serve
      clang libclang-rt-14-dev     # the libFuzzer harnesses (scripts/fuzz.sh)
      unicode-data python3-regex)  # regenerating the tokenizer's Unicode tables and splits (tools/tokenizer)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# The server's tests drive it with the official openai npm client (tests/server, pinned
# by package-lock.json). Any Node.js >= 18 will do; Debian's is installed if none is.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$here/tests/server/node_modules/openai/package.json" ]; then
  npm ci --prefix "$here/tests/server" --no-audit --no-fund --loglevel=error
fi

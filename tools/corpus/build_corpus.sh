#!/usr/bin/env bash
# Installs the Debian text packages and builds build-corpus/<domain>/{train,heldout}.txt.
# usage: bash tools/corpus/build_corpus.sh [OUT_DIR]   (run as root, or with the packages installed)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build-corpus}
PKGS="bible-kjv bible-kjv-text dict-gcide fortunes-de fortunes-es fortunes-it fortunes-ru"
missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi
# The C headers and Python sources come from whatever /usr/include and /usr/lib/python3.*
# hold (libc6-dev and python3.11 here); their file lists are sorted, so the same
# packages give the same corpus.
/usr/bin/python3 tools/corpus/build_corpus.py "$OUT"

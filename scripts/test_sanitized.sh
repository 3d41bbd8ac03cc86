#!/usr/bin/env bash
# The quick test suite (as scripts/test.sh) built with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DHYTRA_SANITIZE=ON: host code, so CUDA is off): any sanitizer report fails its test (CI runs it after the
# normal suite; README: its time). Usage: scripts/test_sanitized.sh [BUILD_DIR]   (default: build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
export HYTRA_CMAKE_ARGS="${HYTRA_CMAKE_ARGS:-} -DHYTRA_SANITIZE=ON -DHYTRA_CUDA=OFF"
bash scripts/test.sh "${1:-build-asan}"

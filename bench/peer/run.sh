#!/usr/bin/env bash
# PyTorch peer benchmark of hytra's dense model, default (Llama-3.2-1B-like) config, eager then compiled.
# On the lent GPU machine PyTorch 2.11 (cu130) lives in /opt/torch/.venv. Extra flags pass through,
# e.g. `bash bench/peer/run.sh --json peer.jsonl`.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
export PYTHONUNBUFFERED=1
exec "$PY" dense_peer.py --mode both --config-name llama3.2-1b-like --probe-sdpa "$@"

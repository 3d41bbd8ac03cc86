#!/usr/bin/env bash
# One call on the lent GPU machine (bench/NOTES.md): the CUDA parity suite, the GPU unit and end-to-end tests,
# `hytra bench` of each config in BENCH (default llama3.2-1b) at each global batch in GBS_LIST
# (default 2 8), and optionally the PyTorch peer (PEER=1) and an ncu per-kernel breakdown of one step
# (NCU=1); CHECKS=0 skips the tests. Binaries come from BIN (a build folder or a copy of its hytra, test_parity,
# test_unit, test_e2e);
# logs go to $OUT.   Usage: [BENCH="a b"] [GBS_LIST="2 8"] [PEER=1] [NCU=1] bench/gpu_run.sh BIN
set -uo pipefail
BIN=${1:-build}
OUT=${OUT:-/tmp/hytra_out}
mkdir -p "$OUT"
bin() { if [ -x "$BIN/$1" ]; then echo "$BIN/$1"; else echo "$BIN/tests/$1"; fi; }  # a copy, or a build folder
P=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$P/cu13/lib:$P/nccl/lib:$P/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
git log -1 --format='commit %h %s' 2>/dev/null
if [ "${CHECKS:-1}" = 1 ]; then
  echo "== parity"; "$(bin test_parity)" ${PARITY_ARGS:-} >"$OUT/parity.log" 2>&1; echo "rc $?"; tail -3 "$OUT/parity.log"
  echo "== unit (GPU)"; "$(bin test_unit)" --gtest_filter='*Cuda*' 2>&1 | tee "$OUT/unit.log" | grep -E "OK|FAIL|PASSED"
  echo "== e2e (GPU)"; "$(bin test_e2e)" --gtest_filter='TrainCuda.*:CheckpointCuda.*' 2>&1 | tee "$OUT/e2e.log" | grep -E "worst|OK|FAIL|PASSED"
fi
for cfg in ${BENCH:-llama3.2-1b}; do
  for gbs in ${GBS_LIST:-2 8}; do
    log="$OUT/bench_$(basename "$(dirname "$cfg")")_$(basename "$cfg" .yaml)_gbs$gbs.log"
    echo "== hytra bench $cfg gbs $gbs"
    "$BIN/hytra" bench "$cfg" --steps ${STEPS:-10} --warmup 3 --global-batch-size "$gbs" --lr-warmup-iters 2 >"$log" 2>&1
    echo "rc $?"; tail -2 "$log"
  done
done
if [ "${PEER:-0}" = 1 ]; then
  for gbs in ${GBS_LIST:-2 8}; do
    echo "== peer gbs $gbs"
    (cd bench/peer && PYTHONUNBUFFERED=1 /opt/torch/.venv/bin/python3 dense_peer.py --mode both \
      --config-name llama3.2-1b --rotary-base 500000 --global-batch-size "$gbs" --steps ${STEPS:-10} >"$OUT/peer_gbs$gbs.log" 2>&1)
    grep "^peer=" "$OUT/peer_gbs$gbs.log" || tail -5 "$OUT/peer_gbs$gbs.log"
  done
fi
if [ "${NCU:-0}" = 1 ]; then
  echo "== ncu, one step"
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.csv" \
    "$BIN/hytra" bench llama3.2-1b --steps 1 --warmup 0 --lr-warmup-iters 0 >"$OUT/ncu_run.log" 2>&1
  python3 bench/kernel_breakdown.py "$OUT/ncu.csv" --top 40 | tee "$OUT/breakdown.txt"
fi

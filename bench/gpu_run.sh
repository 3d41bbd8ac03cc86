#!/usr/bin/env bash
# One call on the lent GPU machine (bench/NOTES.md): the CUDA parity suite, the GPU unit and end-to-end tests,
# `hytra bench` of each config in BENCH (default llama3.2-1b) at each global batch in GBS_LIST
# (default 2 8) (SKEW=1: each also with --skew-routing, a MoE config's tokens sent to one expert), the grouped expert GEMMs against torch._grouped_mm (GROUPED_PEER=1: bench_ops's moe-2b entries
# and bench/peer/grouped_mm_peer.py), and optionally the PyTorch peer of each config in BENCH (PEER=1: bench/peer/dense_peer.py for
# llama3.2-1b, hybrid_peer.py for examples/nemotron-h-1b/config.yaml, moe_peer.py for moe-2b, deepseek_peer.py for
# deepseek-v3-2b; eager and compiled,
# or PEER_MODE=compile or eager alone), the peer timing of
# the Mamba-2 SSD scan alone (SSD_PEER=1: bench/peer/ssd_peer.py) and an ncu per-kernel breakdown of one step
# (the second) of each config in BENCH (NCU=1, at global batch NCU_GBS, default 2: one micro-batch a step);
# CHECKS=0 skips the tests. Binaries come from BIN (a build folder or a copy of its hytra, test_parity,
# test_unit, test_e2e, bench_ops; not needed with CHECKS=0 BENCH_HYTRA=0, which runs the peers alone);
# logs go to $OUT.
# NCCL=1: the one-rank NCCL world's check and overhead (tests/e2e/nccl_one_rank.sh, then each config in BENCH
# plain and as RANK=0 WORLD_SIZE=1).
#   Usage: [BENCH="a b"] [GBS_LIST="2 8"] [SKEW=1] [PEER=1] [GROUPED_PEER=1] [SSD_PEER=1] [NCU=1] [NCCL=1] [BENCH_HYTRA=0] bench/gpu_run.sh BIN
set -uo pipefail
BIN=${1:-build}
OUT=${OUT:-/tmp/hytra_out}
mkdir -p "$OUT"
bin() {  # a copy, or a build folder
  for d in "$BIN" "$BIN/tests" "$BIN/bench"; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; echo "$BIN/$1"
}
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
  [ "${BENCH_HYTRA:-1}" = 1 ] || break
  for gbs in ${GBS_LIST:-2 8}; do
    log="$OUT/bench_$(basename "$(dirname "$cfg")")_$(basename "$cfg" .yaml)_gbs$gbs.log"
    echo "== hytra bench $cfg gbs $gbs"
    "$BIN/hytra" bench "$cfg" --steps ${STEPS:-10} --warmup 3 --global-batch-size "$gbs" --lr-warmup-iters 2 >"$log" 2>&1
    echo "rc $?"; tail -2 "$log"
    [ "${SKEW:-0}" = 1 ] || continue
    echo "== hytra bench $cfg gbs $gbs --skew-routing"
    "$BIN/hytra" bench "$cfg" --steps ${STEPS:-10} --warmup 3 --global-batch-size "$gbs" --lr-warmup-iters 2 \
      --skew-routing --log-jsonl "${log%.log}_skewed.jsonl" >"${log%.log}_skewed.log" 2>&1
    echo "rc $?"; tail -2 "${log%.log}_skewed.log"
    # the last step's routed tokens of the first MoE layer: expert 0 first
    tail -1 "${log%.log}_skewed.jsonl" | grep -o '"tokens_per_expert": \[[0-9, ]*' | head -1
  done
done
PY=/opt/torch/.venv/bin/python3
if [ "${PEER:-0}" = 1 ]; then
  for cfg in ${BENCH:-llama3.2-1b}; do
    # the record name hytra bench gives: the file stem, or the folder of examples/<name>/config.yaml
    name=$(basename "$cfg" .yaml); [ "$name" = config ] && name=$(basename "$(dirname "$cfg")")
    case $name in
      llama3.2-1b) peer="dense_peer.py --rotary-base 500000" ;;
      nemotron-h-1b) peer="hybrid_peer.py" ;;
      moe-2b) peer="moe_peer.py" ;;
      deepseek-v3-2b) peer="deepseek_peer.py" ;;
      *) echo "== peer: none for $cfg"; continue ;;
    esac
    echo "== peer $name ($peer) gbs ${GBS_LIST:-2 8}"
    (cd bench/peer && PYTHONUNBUFFERED=1 $PY $peer --mode ${PEER_MODE:-both} --config-name "$name" \
      --global-batch-size ${GBS_LIST:-2 8} --steps ${STEPS:-10} >"$OUT/peer_$name.log" 2>&1)
    grep -E "^(peer=|# )" "$OUT/peer_$name.log" || tail -5 "$OUT/peer_$name.log"
  done
fi
if [ "${GROUPED_PEER:-0}" = 1 ]; then
  echo "== grouped expert GEMMs at the moe-2b shapes: bench_ops (hytra), then torch._grouped_mm (peer)"
  for o in grouped_gemm_glu grouped_gemm grouped_gemm_wgrad gemm moe_act_bwd moe_router_fwd \
    moe_plan_dropless; do
    "$(bin bench_ops)" -o $o
  done 2>&1 | grep -E "moe-2b|R=49152|error" | tee "$OUT/grouped_hytra.log"
  (cd bench/peer && PYTHONUNBUFFERED=1 $PY grouped_mm_peer.py) 2>&1 | tee "$OUT/grouped_peer.log"
fi
if [ "${SSD_PEER:-0}" = 1 ]; then
  echo "== SSD peer (mamba_ssm Triton chunk scan)"
  (cd bench/peer && PYTHONUNBUFFERED=1 $PY ssd_peer.py) 2>&1 | tee "$OUT/ssd_peer.log"
fi
if [ "${NCCL:-0}" = 1 ]; then
  # The NCCL data-parallel path in a one-rank world (docs/parallelism.md): bitwise the plain run, and its
  # overhead on each config in BENCH at global batch 2 (goal: under 1% of the step).
  echo "== NCCL one-rank world"; bash tests/e2e/nccl_one_rank.sh "$BIN/hytra"; echo "rc $?"
  for cfg in ${BENCH:-llama3.2-1b}; do
    for world in plain nccl; do
      echo "== hytra bench $cfg gbs 2 ($world)"
      if [ $world = plain ]; then "$BIN/hytra" bench "$cfg" --steps ${STEPS:-10} --warmup 3 --global-batch-size 2 \
        --lr-warmup-iters 2 2>&1 | tail -1
      else env RANK=0 WORLD_SIZE=1 MASTER_PORT=29611 "$BIN/hytra" bench "$cfg" --steps ${STEPS:-10} --warmup 3 \
        --global-batch-size 2 --lr-warmup-iters 2 2>&1 | tail -1; fi
    done
  done
fi
if [ "${NCU:-0}" = 1 ]; then
  for cfg in ${BENCH:-llama3.2-1b}; do
    name=$(basename "$cfg" .yaml); [ "$name" = config ] && name=$(basename "$(dirname "$cfg")")
    echo "== ncu, the second step of $cfg (gbs ${NCU_GBS:-2}; the first tunes the GEMMs)"
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu_$name.csv" \
      "$BIN/hytra" bench "$cfg" --steps 2 --warmup 0 --lr-warmup-iters 0 --global-batch-size ${NCU_GBS:-2} \
      >"$OUT/ncu_run_$name.log" 2>&1
    python3 bench/kernel_breakdown.py "$OUT/ncu_$name.csv" --last-step embedding_fwd --top ${NCU_TOP:-40} \
      | tee "$OUT/breakdown_$name.txt"
  done
fi

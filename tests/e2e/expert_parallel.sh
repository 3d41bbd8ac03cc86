#!/usr/bin/env bash
# Expert parallelism on CPUs under mpirun (docs/parallelism.md "Expert parallelism"): a tiny hybrid (M, G, E, *, -,
# MTP with an MoE layer, 4 experts top-2) trained 20 iterations (validation after 10 and 20) on a global batch of 8
# as one process, at EP 2 (twice: bitwise equal), at EP 4, at EP 2 x expert-DP 2 (4 ranks; also with the distributed
# optimizer and both overlaps), at EP 2 x PP 2, and at TP 2 (with sequence parallelism) x EP 2 with the distributed
# optimizer and both overlaps, and with linear biases at TP 2 x EP 2.
# Every logged loss and grad norm and the final weights match the one process within 1e-5 relative. With mHC (2
# streams; the losses) at EP 2 x expert-DP 2. With the grouped expert weights and biases: EP 4 against one process.
# Checkpoints across expert-parallel sizes and layouts: iteration 10 of EP 2 x expert-DP 2 (per-expert tensors)
# resumed at EP 4 and in one process; iteration 10 of EP 4 (grouped tensors) resumed at EP 2 and in one process with
# per-expert tensors; iteration 10 of the one process resumed at EP 4; iteration 10 of the distributed optimizer's
# EP 2 x expert-DP 2 resumed at EP 4 with it; iteration 10 of TP 2 x EP 2 resumed in one process and the one
# process's at TP 2 x EP 2; all under --ckpt-strictness raise_all except the layout changes.
# Padded to capacity (the exchange from the sizes alone): EP 2 against one process, and under the EP-overlap schedule
# bitwise. Every token on one expert (a rank whose experts get no rows). Then the layouts that cannot run yet, each a
# named error.
# Usage: expert_parallel.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
MPI=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1)
W=$(mktemp -d /tmp/hytra-ep.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PATTERN='MGE*E*-*/*E'
M=(--hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 64
   --swiglu --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16
   --mamba-chunk-size 16 --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16
   --linear-value-head-dim 16 --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2
   --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3
   --mtp-loss-scaling-factor 0.3 --position-embedding-type rope --vocab-size 256 --mock-data --seq-length 32
   --normalization RMSNorm --micro-batch-size 2 --global-batch-size 8 --lr 2e-3
   --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --adam-beta2 0.95 --eval-interval 10
   --eval-iters 2 --log-interval 1 --log-params-norm --log-num-zeros-in-grad --device cpu --hybrid-layer-pattern "$PATTERN")
RUN_FLAGS=(--disable-bias-linear)  # but the runs of run_with_bias
ERROR_FLAGS=(--disable-bias-linear)
source "$(dirname "$0")/multi_process.sh"
run_with_bias() {
  local saved=("${RUN_FLAGS[@]}")
  RUN_FLAGS=()
  run "$@"
  RUN_FLAGS=("${saved[@]}")
}
GROUPED=(--moe-single-grouped-weight --moe-single-grouped-bias)
MHC=(--enable-hyper-connections --num-residual-streams 2)
run one 1 --save-interval 10
run ep2 2 --expert-model-parallel-size 2
run ep2_again 2 --expert-model-parallel-size 2
run ep4 4 --expert-model-parallel-size 4
run ep2dp2 4 --expert-model-parallel-size 2 --save-interval 10
run ep2pp2 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
# The distributed optimizer with both overlaps in small buckets: the experts' buckets over their own group.
run ep2dp2_do 4 --expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
  --overlap-param-gather --ddp-bucket-size 3000 --save-interval 10
# With tensor parallelism (the experts' FFN channels split too) and sequence parallelism, 4 ranks.
run tp2ep2 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 3000 --save-interval 10
# Linear biases (the experts' fc2 biases are held whole on every tensor-parallel rank and count once in the norm).
run_with_bias one_bias 1
run_with_bias tp2ep2_bias 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2
run one_mhc 1 "${MHC[@]}"
run ep2dp2_mhc 4 "${MHC[@]}" --expert-model-parallel-size 2
run one_grouped 1 "${GROUPED[@]}"
run ep4_grouped 4 "${GROUPED[@]}" --expert-model-parallel-size 4 --save-interval 10
# Capacity padding: the exchange follows from the sizes (no token counts through the host), also under the EP-overlap
# schedule.
PAD=(--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
run one_pad 1 "${PAD[@]}"
run ep2_pad 2 "${PAD[@]}" --expert-model-parallel-size 2
run ep2_pad_ov 2 "${PAD[@]}" --expert-model-parallel-size 2 --overlap-moe-expert-parallel-comm
at10 ep2dp2
at10 ep2dp2_do
at10 tp2ep2
at10 ep4_grouped
at10 one
run ep2dp2_to_ep4 4 --expert-model-parallel-size 4 --load "$W/ep2dp2@10" --ckpt-strictness raise_all
run ep2dp2_to_one 1 --load "$W/ep2dp2@10" --ckpt-strictness raise_all
run grouped_to_ep2 2 "${GROUPED[@]}" --expert-model-parallel-size 2 --load "$W/ep4_grouped@10" \
  --ckpt-strictness raise_all
run grouped_to_one_indexed 1 --load "$W/ep4_grouped@10"
run one_to_ep4 4 --expert-model-parallel-size 4 --load "$W/one@10" --ckpt-strictness raise_all
run do_to_ep4_do 4 --expert-model-parallel-size 4 --use-distributed-optimizer --load "$W/ep2dp2_do@10" \
  --ckpt-strictness raise_all
run tp2ep2_to_one 1 --load "$W/tp2ep2@10" --ckpt-strictness raise_all
run one_to_tp2ep2 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --load "$W/one@10" \
  --ckpt-strictness raise_all
grep -q "rank 0 holds" "$W/ep4.log" || fail "the EP 4 run does not say what rank 0 holds"
python3 - "$W" "$(dirname "$0")" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[2])
import run_records
w = sys.argv[1]
def losses(name):
    return run_records.losses(w, name)
def close(name, ref, first=1):
    run_records.close(w, name, ref, first)
def weights_close(name, ref):
    run_records.weights_close(w, name, ref)
assert len(losses("one")) >= 80
for name in ("ep2", "ep4", "ep2dp2", "ep2pp2", "ep2dp2_do", "tp2ep2"):
    close(name, "one")
    weights_close(name, "one")
close("tp2ep2_bias", "one_bias")
weights_close("tp2ep2_bias", "one_bias")
close("ep2dp2_mhc", "one_mhc")  # mHC: the losses (docs/parallelism.md: alpha_res's rounding-noise gradients)
close("ep4_grouped", "one_grouped")
weights_close("ep4_grouped", "one_grouped")
close("ep2_pad", "one_pad")
weights_close("ep2_pad", "one_pad")
assert losses("ep2_pad") == losses("ep2_pad_ov"), "EP 2 padded to capacity: the EP-overlap schedule differs"
assert losses("ep2") == losses("ep2_again"), "two runs at EP 2 differ"
for name, base in (("ep2dp2_to_ep4", "ep2dp2"), ("ep2dp2_to_one", "ep2dp2"), ("grouped_to_ep2", "ep4_grouped"),
                   ("grouped_to_one_indexed", "ep4_grouped"), ("one_to_ep4", "one"), ("do_to_ep4_do", "ep2dp2_do"),
                   ("tp2ep2_to_one", "tp2ep2"), ("one_to_tp2ep2", "one")):
    close(name, base, first=11)
print("ok: the expert-parallel layouts within 1e-5 of one process, bitwise repeatable; checkpoints across EP sizes "
      "and expert layouts")
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$W/ep2/iter_0000020/$f" "$W/ep2_again/iter_0000020/$f" || fail "the two EP 2 runs saved different $f"
done

# Every token routed to expert 0 (`hytra bench --skew-routing`, top-1): rank 1's experts receive no rows, and it
# still takes part in every exchange (a rank skipping one would leave the others waiting).
timeout 120 "${MPI[@]}" -np 2 "$H" bench "$(dirname "$0")/../../bench/configs/tiny.yaml" --device cpu --steps 2 \
  --warmup 1 --hybrid-layer-pattern '*E*E' --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 1 \
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias --skew-routing --expert-model-parallel-size 2 \
  --log-jsonl "$W/skew.jsonl" \
  > "$W/skew.log" 2>&1 || fail "EP 2 with every token on expert 0: $(tail -3 "$W/skew.log")"
grep -q '"tokens_per_expert": \[[0-9]*, 0, 0, 0\]' "$W/skew.jsonl" || fail "the skewed run routed tokens to experts 1-3"
echo "ok: an expert-parallel rank whose experts get no rows"

# Layouts that cannot run (yet): every rank stops before any work with a named error.
expect_error 3 "--expert-model-parallel-size 3: --num-experts (4) must be a positive multiple of it" \
  --expert-model-parallel-size 3 --global-batch-size 6
expect_error 4 "--moe-single-grouped-weight / --moe-single-grouped-bias: with both tensor and expert parallelism" \
  --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --moe-single-grouped-weight
echo "ok: the layouts that cannot run yet are named errors"

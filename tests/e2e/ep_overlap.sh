#!/usr/bin/env bash
# The EP-overlap schedule (--overlap-moe-expert-parallel-comm; docs/parallelism.md "The EP-overlap schedule") on CPUs
# under mpirun: a tiny hybrid (M, G, E, *, -, MTP with an MoE layer, 4 experts top-2) trained 20 iterations (4 or 8
# micro-batches a rank and step) with and without the schedule. Without expert parallelism, at EP 2, at EP 2 x
# expert-DP 2 with the distributed optimizer and both overlaps (also with delayed wgrad), at EP 4, with mHC at EP 2 x
# expert-DP 2, and with --delay-wgrad-compute at one process and at EP 2: the schedule's losses, grad norms and saved
# weights are bitwise those of the plain schedule (and delayed weight gradients bitwise the undelayed ones, MTP depths
# included); the expert-parallel runs are within 1e-5 relative of one process; a second EP 2 run is bitwise the
# first. The same inside the interleaved pipeline (PP 2, and EP 2 x PP 2 with delayed weight gradients).
# --log-ep-overlap prints each step's timeline. The combinations the schedule refuses are named errors.
# Usage: ep_overlap.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
MPI=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1)
W=$(mktemp -d /tmp/hytra-epo.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
M=(--hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 64
   --swiglu --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16
   --mamba-chunk-size 16 --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16
   --linear-value-head-dim 16 --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2
   --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3
   --moe-shared-expert-intermediate-size 32 --mtp-loss-scaling-factor 0.3 --position-embedding-type rope
   --vocab-size 256 --mock-data --seq-length 32 --normalization RMSNorm --micro-batch-size 2 --global-batch-size 16
   --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --adam-beta2 0.95 --eval-interval 10
   --eval-iters 2 --log-interval 1 --device cpu --disable-bias-linear --hybrid-layer-pattern 'MGE*E*-*/*E')
ERROR_FLAGS=()
source "$(dirname "$0")/multi_process.sh"
OV=(--overlap-moe-expert-parallel-comm)
MHC=(--enable-hyper-connections --num-residual-streams 2)
DO=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 3000)
run one 1
run one_ov 1 "${OV[@]}" --log-ep-overlap
run one_dw 1 --delay-wgrad-compute
run one_dw_ov 1 --delay-wgrad-compute "${OV[@]}"
run ep2 2 --expert-model-parallel-size 2
run ep2_ov 2 --expert-model-parallel-size 2 "${OV[@]}" --log-ep-overlap
run ep2_ov_again 2 --expert-model-parallel-size 2 "${OV[@]}"
run ep2_dw_ov 2 --expert-model-parallel-size 2 --delay-wgrad-compute "${OV[@]}"
run ep2dp2_do 4 --expert-model-parallel-size 2 "${DO[@]}"
run ep2dp2_do_ov 4 --expert-model-parallel-size 2 "${DO[@]}" "${OV[@]}"
run ep2dp2_do_dw_ov 4 --expert-model-parallel-size 2 "${DO[@]}" --delay-wgrad-compute "${OV[@]}"
run ep4 4 --expert-model-parallel-size 4
run ep4_ov 4 --expert-model-parallel-size 4 "${OV[@]}"
run ep2dp2_mhc 4 --expert-model-parallel-size 2 "${MHC[@]}"
run ep2dp2_mhc_ov 4 --expert-model-parallel-size 2 "${MHC[@]}" "${OV[@]}"
# Inside the interleaved pipeline: 2 ranks x 2 model chunks (one chunk without an MoE layer, the last with the MTP
# depth), then EP 2 x PP 2 with delayed weight gradients.
VPP=(--hybrid-layer-pattern 'MGE|*E|*-|*/*E' --pipeline-model-parallel-size 2)
run pp2i 2 "${VPP[@]}"
run pp2i_ov 2 "${VPP[@]}" "${OV[@]}" --log-ep-overlap
run ep2pp2i_dw 4 "${VPP[@]}" --expert-model-parallel-size 2 --delay-wgrad-compute
run ep2pp2i_dw_ov 4 "${VPP[@]}" --expert-model-parallel-size 2 --delay-wgrad-compute "${OV[@]}"
PAIRS="one:one_ov one:one_dw one_dw:one_dw_ov ep2:ep2_ov ep2_ov:ep2_ov_again ep2:ep2_dw_ov ep2dp2_do:ep2dp2_do_ov
       ep2dp2_do:ep2dp2_do_dw_ov ep4:ep4_ov
       ep2dp2_mhc:ep2dp2_mhc_ov pp2i:pp2i_ov ep2pp2i_dw:ep2pp2i_dw_ov"
for pair in $PAIRS; do  # the same saved weights, bit for bit (the losses: below)
  cmp -s "$W/${pair%:*}/iter_0000020/model.safetensors" "$W/${pair#*:}/iter_0000020/model.safetensors" ||
    fail "${pair%:*} and ${pair#*:} saved different weights"
done
python3 - "$W" "$(dirname "$0")" "$PAIRS" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[2])
import run_records
w = sys.argv[1]
for pair in sys.argv[3].split():
    a, b = pair.split(":")
    assert run_records.losses(w, a) == run_records.losses(w, b), f"{a} and {b} logged different losses"
assert len(run_records.losses(w, "one")) >= 40
print("ok: the EP-overlap schedule is bitwise the plain schedule (one process, EP 2, EP 2 x DP 2, EP 4, mHC, "
      "delayed wgrad, interleaved PP 2 and EP 2 x PP 2)")
for name in ("ep2_ov", "ep2dp2_do_ov", "ep4_ov", "pp2i_ov", "ep2pp2i_dw_ov"):
    run_records.close(w, name, "one")
    run_records.weights_close(w, name, "one")
print("ok: the EP-overlap runs within 1e-5 of one process")
PY
for name in one_ov ep2_ov pp2i_ov; do
  n=$(grep -c "hytra: EP-overlap iteration [0-9]*: step .* ms; computation busy .* transfers busy" "$W/$name.log")
  [ "$n" = 20 ] || fail "$name: $n timeline lines for 20 iterations: $(grep -m1 'EP-overlap iteration' "$W/$name.log")"
done
grep -q "EP-overlap iteration 20: .* 0 expert-parallel transfers" "$W/one_ov.log" ||
  fail "one process timed transfers: $(grep -m1 'EP-overlap iteration' "$W/one_ov.log")"
grep -q "EP-overlap iteration 20: .* [1-9][0-9]* expert-parallel transfers busy .* ([0-9.]*[1-9][0-9.]* MB sent" \
  "$W/ep2_ov.log" ||
  fail "EP 2 timed no transfers: $(grep -m1 'EP-overlap iteration' "$W/ep2_ov.log")"
echo "ok: --log-ep-overlap logs each step's timeline"

expect_error 2 "--pipeline-model-parallel-size 2 without virtual pipeline stages: the EP-overlap schedule runs inside \
the interleaved 1F1B only" "${OV[@]}" --pipeline-model-parallel-size 2
expect_error 2 "--recompute-granularity full: not with the EP-overlap schedule" "${OV[@]}" \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
expect_error 2 "--recompute-modules moe: not with the EP-overlap schedule" "${OV[@]}" \
  --recompute-granularity selective --recompute-modules moe
expect_error 2 "the model has no MoE layers (E)" "${OV[@]}" --hybrid-layer-pattern 'M*-*'
expect_error 2 "--log-ep-overlap: needs --overlap-moe-expert-parallel-comm" --log-ep-overlap
echo "ok: the combinations the EP-overlap schedule refuses are named errors"

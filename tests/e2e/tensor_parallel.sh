#!/usr/bin/env bash
# Tensor and sequence parallelism on CPUs under mpirun (docs/parallelism.md "Tensor parallelism"): a tiny hybrid
# (M, G, E, *, -, MTP, tied embeddings) trained 20 iterations (validation after 10 and 20) on a global batch of 8 as
# one process, at TP 2 and at TP 2 with sequence parallelism (each twice: bitwise equal; also one sequence a
# micro-batch), at TP 2 x PP 2 (plain, and interleaved with sequence parallelism), at DP 2 x TP 2 with sequence
# parallelism, the distributed optimizer and both overlaps, and at DP 2 x TP 2 x PP 2 (8 ranks). Every logged loss
# and grad norm and the final weights match the one process within 1e-5 relative. With mHC (2 streams, selective
# recompute; the losses) and a variant with LayerNorm, linear biases, QK-norm, learned positions and gated shared
# experts in the grouped layout (no MTP: it needs RoPE), each at TP 2 with sequence parallelism against one process
# of that model.
# Checkpoints across layouts: iteration 10 of TP 2 x PP 2 resumed in one process and at DP 4, and iteration 10 of the
# one process resumed at TP 2 x PP 2 under --ckpt-strictness raise_all.
# Memory: rank 0 at TP 2 holds exactly the parameters the rule below gives (the split tensors halved), and at
# sequence length 128 its activations are at most 65% of one process's with sequence parallelism.
# Then the layouts that cannot work, each a named error.
# Usage: tensor_parallel.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
MPI=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1)
W=$(mktemp -d /tmp/hytra-tp.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PATTERN='MGE*E*-*/*-'
M=(--hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 64
   --swiglu --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16
   --mamba-chunk-size 16 --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16
   --linear-value-head-dim 16 --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2
   --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3
   --mtp-loss-scaling-factor 0.3 --position-embedding-type rope --vocab-size 256 --mock-data
   --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2
   --weight-decay 0.1 --adam-beta2 0.95 --eval-interval 10 --eval-iters 2 --log-interval 1
   --log-params-norm --log-num-zeros-in-grad --device cpu)
BASE=(--normalization RMSNorm --disable-bias-linear --seq-length 32)
ERROR_FLAGS=("${BASE[@]}")
source "$(dirname "$0")/multi_process.sh"
TP=(--tensor-model-parallel-size 2)
SP=(--tensor-model-parallel-size 2 --sequence-parallel)
run one 1 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" --save-interval 10
run tp2 2 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${TP[@]}"
run tp2_again 2 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${TP[@]}"
run tp2_sp 2 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${SP[@]}"
run tp2_sp_again 2 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${SP[@]}"
run tp2pp2 4 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${TP[@]}" --pipeline-model-parallel-size 2 \
  --save-interval 10
run dp2tp2_sp 4 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${SP[@]}" --use-distributed-optimizer \
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 3000
run dp2tp2pp2 8 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${SP[@]}" --pipeline-model-parallel-size 2 \
  --use-distributed-optimizer
# One sequence a micro-batch: the sequence gathers and scatters without the batch's reordering.
run one_mbs1 1 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" --micro-batch-size 1
run tp2_sp_mbs1 2 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${SP[@]}" --micro-batch-size 1
run tp2_sp_pp2_interleaved 4 "${BASE[@]}" --hybrid-layer-pattern 'MG|E*|E*|-*/*-' "${SP[@]}" \
  --pipeline-model-parallel-size 2
MHC=("${BASE[@]}" --hybrid-layer-pattern "$PATTERN" --enable-hyper-connections --num-residual-streams 2
     --recompute-granularity selective --recompute-modules mhc core_attn moe_act layernorm)
run one_mhc 1 "${MHC[@]}"
run tp2_sp_mhc 2 "${MHC[@]}" "${SP[@]}"
VARIANT=(--hybrid-layer-pattern 'M*-E*E' --seq-length 32 --normalization LayerNorm --qk-layernorm
         --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --moe-single-grouped-weight
         --moe-single-grouped-bias --position-embedding-type learned_absolute --max-position-embeddings 32)
run one_variant 1 "${VARIANT[@]}"
run tp2_sp_variant 2 "${VARIANT[@]}" "${SP[@]}"
at10 tp2pp2
at10 one
run resume_one 1 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" --load "$W/tp2pp2@10"
run resume_dp4 4 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" --use-distributed-optimizer --load "$W/tp2pp2@10"
run reverse_tp2pp2 4 "${BASE[@]}" --hybrid-layer-pattern "$PATTERN" "${TP[@]}" --pipeline-model-parallel-size 2 \
  --load "$W/one@10" --ckpt-strictness raise_all
LONG=(--normalization RMSNorm --disable-bias-linear --hybrid-layer-pattern "$PATTERN" --seq-length 128 --eval-iters 0)
ITERS=3 run long_one 1 "${LONG[@]}"
ITERS=3 run long_tp2_sp 2 "${LONG[@]}" "${SP[@]}"
grep -q "hytra: tensor-parallel: 2 ranks split each layer's weights, the activations between them split along the" \
  "$W/tp2_sp.log" || fail "the sequence-parallel run does not say so"
python3 - "$W" "$(dirname "$0")" <<'PY' || exit 1
import re
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
for name in ("tp2", "tp2_sp", "tp2pp2", "dp2tp2_sp", "tp2_sp_pp2_interleaved", "dp2tp2pp2"):
    close(name, "one")
    weights_close(name, "one")
# mHC: the losses (its alpha_res gradients are rounding noise that Adam turns into full steps, docs/parallelism.md).
close("tp2_sp_mhc", "one_mhc")
close("tp2_sp_variant", "one_variant")
close("tp2_sp_mbs1", "one_mbs1")
weights_close("tp2_sp_variant", "one_variant")
assert losses("tp2") == losses("tp2_again"), "two runs at TP 2 differ"
assert losses("tp2_sp") == losses("tp2_sp_again"), "two runs at TP 2 with sequence parallelism differ"
for name, base in (("resume_one", "tp2pp2"), ("resume_dp4", "tp2pp2"), ("reverse_tp2pp2", "one")):
    close(name, base, first=11)
# What one tensor-parallel rank holds: the tensors Megatron splits, halved; the rest whole (norms, routers, the MTP
# projection, row-parallel biases, learned positions).
whole = re.compile(r"(norm\.(weight|bias)$|layer_norm_|layernorm|eh_proj|router\.|gate_weight|linear_proj\.bias|"
                   r"linear_fc2\.bias|out_proj\.bias|position_embeddings)")
def held_at_tp2(ref):
    n = 0
    for k, a in run_records.tensors(w, ref).items():
        split = not whole.search(k) or k.endswith("mixer.norm.weight")
        n += len(a) // 2 if split else len(a)
    return n
for name, ref in (("tp2", "one"), ("tp2_sp_variant", "one_variant")):
    held = int(re.search(r"rank 0 holds (\d+) parameters", open(f"{w}/{name}.log").read()).group(1))
    assert held == held_at_tp2(ref), f"{name}: rank 0 holds {held} parameters, expected {held_at_tp2(ref)}"
    print(f"{name}: rank 0 holds {held} parameters, the split tensors halved")
def activations(name):
    return float(re.search(r"\(([0-9.]+) MiB of activations", open(f"{w}/{name}.log").read()).group(1))
a1, a2 = activations("long_one"), activations("long_tp2_sp")
assert a2 <= 0.65 * a1, f"activations at TP 2 with sequence parallelism: {a2} MiB against one process's {a1} MiB"
print(f"activations at sequence 128: {a1} MiB in one process, {a2} MiB a rank at TP 2 with sequence parallelism")
print("ok: the tensor-parallel layouts within 1e-5 of one process, bitwise repeatable; checkpoints across layouts")
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$W/tp2/iter_0000020/$f" "$W/tp2_again/iter_0000020/$f" || fail "the two TP 2 runs saved different $f"
done

# Layouts that cannot run: every rank stops before any work with a named error.
expect_error 4 "--num-query-groups: the KV groups (2) must be divisible by --tensor-model-parallel-size (4)" \
  --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 4
expect_error 4 "--mamba-num-groups (2) must be divisible by --tensor-model-parallel-size (4)" \
  --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 4
expect_error 4 "--linear-num-key-heads (2) must be divisible by --tensor-model-parallel-size (4)" \
  --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 4
expect_error 2 "--moe-ffn-hidden-size: each expert's FFN width (33) must be divisible" \
  --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 2 --moe-ffn-hidden-size 33
expect_error 2 "the padded vocabulary (--vocab-size rounded up to it) (255) must be divisible" \
  --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 2 --vocab-size 255 --make-vocab-size-divisible-by 1
expect_error 1 "--sequence-parallel: needs --tensor-model-parallel-size above 1" --hybrid-layer-pattern "$PATTERN" \
  --sequence-parallel
expect_error 2 "--sequence-parallel: --seq-length (33) must be divisible by --tensor-model-parallel-size (2)" \
  --hybrid-layer-pattern "$PATTERN" "${SP[@]}" --seq-length 33
expect_error 3 "--tensor-model-parallel-size" --hybrid-layer-pattern "$PATTERN" --tensor-model-parallel-size 2
echo "ok: the layouts that cannot run are named errors"

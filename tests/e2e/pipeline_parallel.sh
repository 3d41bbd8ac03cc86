#!/usr/bin/env bash
# Pipeline parallelism on CPUs under mpirun (docs/parallelism.md): a tiny hybrid (M, G, E, *, -, MTP, tied
# embeddings) trained 20 iterations (validation after 10 and 20) on a global batch of 8 as one process, at 2
# stages (twice: bitwise equal; once with the stages cut by the pattern's pipe, once with 2 layers on the last
# stage by --decoder-last-pipeline-num-layers), at 4 stages, at 2 stages
# with full recompute, and at 2 data-parallel x 2 pipeline ranks with the distributed optimizer (also with both
# overlaps in small buckets: the word embedding's bucket waits for the stages' sum). Every logged
# loss and grad norm and the final weights match the one process within 1e-5 relative. With mHC (2 streams,
# selective mhc recompute), and untied without MTP (the last stage holds no word embedding), at 2 stages against
# one process of the same model: the losses within 1e-5.
# The interleaved schedule (the pipes give each rank several model chunks): 2 ranks x 2 chunks (twice: bitwise), 4 x 2
# over 8 micro-batches, 2 x 3 with as many micro-batches as stages.
# Checkpoints across layouts: iteration 10 of the DP 2 x PP 2 run resumed in one process, at DP 4 and at DP 2 x
# PP 2 again (bitwise); iteration 10 of the one process resumed at PP 2 under --ckpt-strictness raise_all and at 4
# interleaved stages; iteration 10 of the interleaved 2 stages resumed in one process.
# Then the layouts that cannot work yet or at all, each a named error.
# Usage: pipeline_parallel.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
MPI=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1)
W=$(mktemp -d /tmp/hytra-pp.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PATTERN='MGE*E*-*/*-'
M=(--hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 64
   --swiglu --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16
   --mamba-chunk-size 16 --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16
   --linear-value-head-dim 16 --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2
   --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3
   --mtp-loss-scaling-factor 0.3 --normalization RMSNorm --position-embedding-type rope --disable-bias-linear
   --seq-length 32 --vocab-size 256 --mock-data --micro-batch-size 2 --global-batch-size 8 --lr 2e-3
   --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --adam-beta2 0.95 --eval-interval 10
   --eval-iters 2 --log-interval 1 --log-params-norm --log-num-zeros-in-grad --device cpu)
source "$(dirname "$0")/multi_process.sh"
run one 1 --hybrid-layer-pattern "$PATTERN" --save-interval 10
run pp2 2 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2
run pp2_again 2 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2
run pp2_pipe 2 --hybrid-layer-pattern 'MGE*E|*-*/*-' --pipeline-model-parallel-size 2
run pp4 4 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 4
run pp2_last2 2 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 2
run pp2_recompute 2 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
run dp2pp2 4 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --use-distributed-optimizer \
  --save-interval 10
run one_untied 1 --hybrid-layer-pattern 'MGE*E*-*' --untie-embeddings-and-output-weights
run pp2_untied 2 --hybrid-layer-pattern 'MGE*E*-*' --untie-embeddings-and-output-weights --pipeline-model-parallel-size 2
MHC=(--hybrid-layer-pattern "$PATTERN" --enable-hyper-connections --num-residual-streams 2)
run one_mhc 1 "${MHC[@]}"
run pp2_mhc 2 "${MHC[@]}" --pipeline-model-parallel-size 2 --recompute-granularity selective --recompute-modules mhc
run dp2pp2_overlap 4 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --use-distributed-optimizer \
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 3000
# The interleaved schedule: the pipes give each of 2 ranks 2 model chunks (twice: bitwise), each of 4 ranks 2 chunks
# over 8 micro-batches, and each of 2 ranks 3 chunks with as many micro-batches as stages (all forwards first). The
# pipes do not change the model: each run compares with the one process of its global batch.
run pp2_interleaved 2 --hybrid-layer-pattern 'MG|E*|E*|-*/*-' --pipeline-model-parallel-size 2 --save-interval 10
run pp2_interleaved_again 2 --hybrid-layer-pattern 'MG|E*|E*|-*/*-' --pipeline-model-parallel-size 2
run one_gbs16 1 --hybrid-layer-pattern "$PATTERN" --global-batch-size 16
run pp4_interleaved 4 --hybrid-layer-pattern 'M|G|E|*|E|*|-|*/*-' --pipeline-model-parallel-size 4 \
  --global-batch-size 16
run one_gbs4 1 --hybrid-layer-pattern "$PATTERN" --global-batch-size 4
run pp2_interleaved3 2 --hybrid-layer-pattern 'MG|E*|E|*|-|*/*-' --pipeline-model-parallel-size 2 \
  --global-batch-size 4
at10 dp2pp2
at10 one
at10 pp2_interleaved
run resume_one 1 --hybrid-layer-pattern "$PATTERN" --load "$W/dp2pp2@10"
run resume_dp4 4 --hybrid-layer-pattern "$PATTERN" --use-distributed-optimizer --load "$W/dp2pp2@10"
run resume_dp2pp2 4 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --use-distributed-optimizer \
  --load "$W/dp2pp2@10"
run reverse_pp2 2 --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2 --load "$W/one@10" \
  --ckpt-strictness raise_all
run interleaved_to_one 1 --hybrid-layer-pattern "$PATTERN" --load "$W/pp2_interleaved@10"
run one_to_interleaved 4 --hybrid-layer-pattern 'M|G|E|*|E|*|-|*/*-' --pipeline-model-parallel-size 4 \
  --load "$W/one@10"
grep -q "hytra: pipeline: 4 stages, 1F1B over 4 micro-batches a step" "$W/pp4.log" || fail "the 4-stage run does not say so"
grep -q "hytra: pipeline: 4 stages, interleaved 1F1B (2 model chunks a rank) over 8 micro-batches a step" \
  "$W/pp4_interleaved.log" || fail "the interleaved 4-stage run does not say so"
python3 - "$W" "$(dirname "$0")" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[2])
import run_records
w = sys.argv[1]
def losses(name):
    return run_records.losses(w, name)
def tensors(name):
    return run_records.tensors(w, name)
def close(name, ref, first=1):
    run_records.close(w, name, ref, first)
ref_w = tensors("one")
assert len(losses("one")) >= 80
for name in ("pp2", "pp2_pipe", "pp2_last2", "pp4", "pp2_recompute", "dp2pp2", "dp2pp2_overlap", "pp2_interleaved"):
    close(name, "one")
    run_records.weights_close(w, name, "one")
close("pp4_interleaved", "one_gbs16")
close("pp2_interleaved3", "one_gbs4")
close("pp2_mhc", "one_mhc")  # the n streams cross the stages
close("pp2_untied", "one_untied")  # no word embedding on the last stage
# What rank 0 holds at 2 stages: the embedding and layers 0-3 of the one process's checkpoint, to the element.
import re
stage0 = sum(len(a) for k, a in ref_w.items() if k.startswith("embedding.") or re.match(r"decoder\.layers\.[0-3]\.", k))
held = int(re.search(r"rank 0 holds (\d+) parameters", open(f"{w}/pp2.log").read()).group(1))
assert held == stage0, f"rank 0 holds {held} parameters at 2 stages, its stage has {stage0}"
print(f"pp2: rank 0 holds {held} of {sum(len(a) for a in ref_w.values())} parameters, as its stage's tensors")
assert losses("pp2") == losses("pp2_again"), "two runs at 2 stages differ"
assert losses("pp2_interleaved") == losses("pp2_interleaved_again"), "two interleaved runs differ"
for name, base in (("resume_one", "dp2pp2"), ("resume_dp4", "dp2pp2"), ("resume_dp2pp2", "dp2pp2"),
                   ("reverse_pp2", "one"), ("interleaved_to_one", "pp2_interleaved"), ("one_to_interleaved", "one")):
    close(name, base, first=11)
assert losses("resume_dp2pp2") == [x for x in losses("dp2pp2") if x[0] > 10], "resumed on the same layout: not bitwise"
print("ok: the pipeline layouts within 1e-5 of one process, bitwise repeatable; checkpoints across layouts")
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$W/pp2/iter_0000020/$f" "$W/pp2_again/iter_0000020/$f" || fail "the two 2-stage runs saved different $f"
done

# Layouts that cannot run (yet): every rank stops before any work with a named error.
expect_error 2 "Number of layers (7) must be evenly divisible by pipeline-model-parallel-size (2)" \
  --hybrid-layer-pattern 'MGE*E*-/*-' --pipeline-model-parallel-size 2
expect_error 2 "the interleaved pipeline schedule runs a multiple of --pipeline-model-parallel-size (2) micro-batches" \
  --hybrid-layer-pattern 'MG|E*|E*|-*/*-' --pipeline-model-parallel-size 2 --global-batch-size 6
expect_error 3 "--pipeline-model-parallel-size" --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 2
expect_error 4 "Middle layers (5) must be evenly divisible by middle pipeline stages (3)." \
  --hybrid-layer-pattern "$PATTERN" --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3
expect_error 1 "--decoder-first/last-pipeline-num-layers: need --pipeline-model-parallel-size above 1" \
  --hybrid-layer-pattern "$PATTERN" --decoder-last-pipeline-num-layers 2
echo "ok: the layouts that cannot run are named errors"

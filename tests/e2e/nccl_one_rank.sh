#!/usr/bin/env bash
# The NCCL data-parallel path in a one-rank world (a torchrun-style launch: RANK=0 WORLD_SIZE=1) trains bitwise
# like the plain one-process run on the GPU, bf16, 8 iterations of a tiny MoE + Mamba hybrid (every gradient,
# loss and routing statistic goes through NCCL, which sums over one rank; the logged params norm and zero-gradient
# count too). Skipped (exit 77) without a GPU.
# Usage: nccl_one_rank.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
"$H" ops | grep -q '^gemm .* yes$' || { echo "no GPU visible: skipped"; exit 77; }
W=$(mktemp -d /tmp/hytra-nccl.XXXXXX)
trap 'rm -rf "$W"' EXIT
M=(train --hybrid-layer-pattern 'M*E*E' --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 --swiglu
   --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16 --mamba-chunk-size 32
   --num-experts 8 --moe-ffn-hidden-size 64 --moe-router-topk 2 --moe-router-score-function sigmoid
   --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3 --normalization RMSNorm --position-embedding-type rope
   --disable-bias-linear --seq-length 64 --vocab-size 512 --mock-data --micro-batch-size 2 --global-batch-size 4
   --train-iters 8 --lr 1e-3 --eval-iters 0 --log-interval 1 --device cuda --bf16 --log-params-norm
   --log-num-zeros-in-grad)
fail() { echo "FAIL: $*"; exit 1; }
"$H" "${M[@]}" --log-jsonl "$W/plain.jsonl" > "$W/plain.log" 2>&1 || fail "plain: $(tail -5 "$W/plain.log")"
env RANK=0 WORLD_SIZE=1 MASTER_PORT=$((20000 + RANDOM % 20000)) "$H" "${M[@]}" --log-jsonl "$W/nccl.jsonl" \
  > "$W/nccl.log" 2>&1 || fail "one-rank NCCL world: $(tail -5 "$W/nccl.log")"
values() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["iteration"], *[f"{k}={v!r}" for k, v in sorted(r.items())
                            if "loss" in k or k in ("grad_norm", "params_norm", "num_zeros")])' "$1"; }
diff <(values "$W/plain.jsonl") <(values "$W/nccl.jsonl") > "$W/diff" || fail "the runs differ: $(cat "$W/diff")"
echo "ok: 8 iterations bitwise equal with and without the one-rank NCCL world"

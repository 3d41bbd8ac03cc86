#!/usr/bin/env bash
# Data parallelism on the GPUs of one machine, in one call (bench/NOTES.md, docs/parallelism.md):
#  1. the NCCL path in a one-rank world: bitwise the plain run (tests/e2e/nccl_one_rank.sh) and its overhead
#     on llama3.2-1b at global batch 2 (plain against RANK=0 WORLD_SIZE=1, goal: under 1%);
#  2. correctness at 2 (and 4) GPUs under mpirun: a tiny hybrid (M, G, E, *, -, mHC, MTP) 50 iterations in fp32
#     (within 1e-4 of one GPU) and in bf16 (the largest relative loss difference printed; two runs bitwise
#     equal), replicated and with the distributed optimizer + both overlaps; a checkpoint of 2 GPUs resumed on 1;
#  3. scaling: `hytra bench` of each config in SCALE (default llama3.2-1b and nemotron-h-1b) at 1, 2 (and 4)
#     GPUs with the distributed optimizer, the global batch PER_GPU x GPUs, with and without the overlap;
#  4. pipeline parallelism: a tiny hybrid with mHC and MTP at 2 stages against one GPU (fp32 and bf16, bf16
#     twice: bitwise), DP 2 x PP 2 with the distributed optimizer (4 GPUs), and llama3.2-1b at 1, 2 and 4
#     stages (global batch 8: 4 micro-batches of 2);
#  5. tensor parallelism and the interleaved schedule: the tiny hybrid at TP 2 (fp32; bf16 twice: bitwise), TP 2
#     with sequence parallelism, PP 2 interleaved (2 chunks a rank) and on 4 GPUs TP 2 + SP x interleaved PP 2
#     (saved at iteration 15 and resumed on one GPU) and DP 2 x TP 2 with the distributed optimizer, against one
#     GPU; then `hytra bench` of nemotron-h-1b and llama3.2-1b at TP 1 and 2 (with and without sequence
#     parallelism) and nemotron-h-1b at PP 2 (13 + 12 layers), global batch 8;
#  6. expert parallelism: the tiny hybrid (an MoE layer in its MTP depth too) at EP 2 (fp32; bf16 twice: bitwise)
#     and on 4 GPUs EP 4 and EP 2 x expert-DP 2 with the distributed optimizer and both overlaps (saved at
#     iteration 15, resumed on one GPU), against one GPU; then `hytra bench moe-2b` on 1 GPU (global batch 2) and on
#     4 (global batch 8, distributed optimizer): DP 4, EP 4, and EP 4 with 4x the experts (128).
#  7. the EP-overlap schedule (--overlap-moe-expert-parallel-comm): the tiny hybrid in bf16 with and without it
#     (bitwise equal; with --delay-wgrad-compute too), on one GPU, at EP G (below) and with 4 GPUs inside the
#     interleaved pipeline (PP 2 x EP 2); `hytra bench moe-2b` on one
#     GPU at global batch 8 (4 micro-batches) plain (CUDA graphs and eager) against the schedule, which costs only its
#     machinery there; then on G = 4 (or 2) GPUs moe-2b with 32 G experts at EP G (each GPU holds moe-2b's 32),
#     global batch 8 G (4 micro-batches a rank), plain against the schedule (with and without delayed wgrad), its
#     --log-ep-overlap lines giving the hidden share of the all-to-alls.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, the machine's rule).
#   Usage: [PARTS="1 2 3 4 5 6 7"] [SCALE="cfg ..."] [PER_GPU=4] [STEPS=10] [CORR_ITERS=30] [BENCHES=0]
#          bench/multi_gpu.sh BIN
#   (CORR_ITERS: the iterations of parts 4-6's correctness runs; BENCHES=0: parts 4-6 without their benchmarks)
#   (BIN: a folder with hytra)
set -uo pipefail
H=$(realpath "${1:-build}/hytra")
OUT=${OUT:-/tmp/hytra_out}
W=$(mktemp -d /tmp/hytra-mgpu.XXXXXX)
mkdir -p "$OUT"
P=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$P/cu13/lib:$P/nccl/lib:$P/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
git log -1 --format='commit %h %s' 2>/dev/null
gpus_list() { for n in 1 2 4 8; do [ "$n" -le "$N" ] && echo "$n"; done; }
launch() {  # launch NP CMD...: NP ranks under mpirun, one GPU each
  local np=$1
  shift
  if [ "$np" = 1 ]; then "$@"; else
    mpirun --allow-run-as-root --bind-to none -np "$np" -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$@"; fi
}

part() { [[ " ${PARTS:-1 2 3 4 5 6 7} " == *" $1 "* ]]; }
# The tiny hybrid of parts 2, 4 and 5 (M, G, E, *, -, mHC, MTP); each part sets M: its pattern and length.
TINY=(--enable-hyper-connections --num-residual-streams 2 --hidden-size 64 --num-attention-heads 4
      --group-query-attention --num-query-groups 2 --ffn-hidden-size 128 --swiglu --mamba-num-heads 4
      --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16 --mamba-chunk-size 32 --num-experts 4
      --moe-ffn-hidden-size 64 --moe-router-topk 2 --moe-router-score-function sigmoid
      --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3 --mtp-loss-scaling-factor 0.3
      --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --seq-length 64
      --vocab-size 512 --mock-data --micro-batch-size 2 --global-batch-size 16 --lr 2e-3 --lr-warmup-iters 2
      --eval-iters 0 --log-interval 1 --device cuda)
run() {  # run NAME NP [flags]
  local name=$1 np=$2
  shift 2
  launch "$np" "$H" "${M[@]}" --log-jsonl "$W/$name.jsonl" "$@" > "$W/$name.log" 2>&1 ||
    echo "FAIL $name: $(tail -3 "$W/$name.log")"
}

if part 1; then
echo "== 1. NCCL one-rank world"
bash tests/e2e/nccl_one_rank.sh "$H"; echo "rc $?"
for world in plain nccl plain nccl; do  # twice, interleaved: the clocks drift
  if [ $world = plain ]; then "$H" bench llama3.2-1b --steps "${STEPS:-10}" --warmup 3 2>&1 | tail -1
  else env RANK=0 WORLD_SIZE=1 MASTER_PORT=29611 "$H" bench llama3.2-1b --steps "${STEPS:-10}" --warmup 3 2>&1 |
    tail -1; fi | sed "s/^/$world: /"
done
fi

if part 2; then
echo "== 2. correctness on $N GPUs"
M=(train --hybrid-layer-pattern 'MGE*E/*-' "${TINY[@]}" --train-iters 50)
OV=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000)
big=$([ "$N" -ge 4 ] && echo 4 || echo 2)
run f1 1
run f2 2
run f_ov 2 "${OV[@]}"
run f_big "$big" "${OV[@]}"
run b1 1 --bf16
run b2 2 --bf16
run b2_again 2 --bf16
run b_ov 2 --bf16 "${OV[@]}" --save "$W/ck" --save-interval 25
run b_ov_again 2 --bf16 "${OV[@]}"
run b_big "$big" --bf16 "${OV[@]}"
mkdir -p "$W/ck25" && cp -r "$W/ck/iter_0000025" "$W/ck25/" && echo 25 > "$W/ck25/latest_checkpointed_iteration.txt"
run b_resume1 1 --bf16 --load "$W/ck25"
grep -h "data-parallel:" "$W"/*.log | sort | uniq -c
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
def losses(n):
    return [(r["iteration"], k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if "loss" in k and isinstance(v, float)]
def worst(a, b, first=1):
    a = [x for x in losses(a) if x[0] >= first]
    b = losses(b)
    assert [x[:2] for x in a] == [x[:2] for x in b], "different iterations"
    return max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(a, b))
ok = True
for n in ("f2", "f_ov", "f_big"):
    d = worst("f1", n); ok &= d <= 1e-4
    print(f"fp32 {n}: largest relative loss difference from one GPU {d:.2e} (limit 1e-4)")
for n in ("b2", "b_ov", "b_big"):
    print(f"bf16 {n}: largest relative loss difference from one GPU {worst('b1', n):.2e}")
for a, b in (("b2", "b2_again"), ("b_ov", "b_ov_again")):
    same = losses(a) == losses(b); ok &= same
    print(f"bf16 {a} twice: {'bitwise equal' if same else 'DIFFERENT'}")
print(f"bf16 resumed at iteration 25 on one GPU: largest relative loss difference from the 2-GPU run "
      f"{worst('b_ov', 'b_resume1', 26):.2e}")
print("correctness:", "ok" if ok else "FAILED")
PY
fi

part 3 && {
echo "== 3. scaling (global batch ${PER_GPU:-4} a GPU, distributed optimizer)"
for cfg in ${SCALE:-llama3.2-1b examples/nemotron-h-1b/config.yaml}; do
  for n in $(gpus_list); do
    for mode in plain overlap; do
      [ "$n" = 1 ] && [ $mode = overlap ] && continue
      flags=(--global-batch-size $(( ${PER_GPU:-4} * n )) --lr-warmup-iters 2)
      [ "$n" -gt 1 ] && flags+=(--use-distributed-optimizer)
      [ $mode = overlap ] && flags+=(--overlap-grad-reduce --overlap-param-gather)
      echo "-- $cfg gpus $n $mode: ${flags[*]}"
      launch "$n" "$H" bench "$cfg" --steps "${STEPS:-10}" --warmup 3 "${flags[@]}" > "$W/bench.log" 2>&1
      grep -E "^hytra config=|data-parallel:|rror" "$W/bench.log" | tail -3
    done
  done
done
}
part 4 && {
echo "== 4. pipeline parallelism on $N GPUs"
M=(train --hybrid-layer-pattern 'MGE*E*-*/*-' "${TINY[@]}" --train-iters "${CORR_ITERS:-30}")
run pf1 1
run pf2 2 --pipeline-model-parallel-size 2
run pb1 1 --bf16
run pb2 2 --bf16 --pipeline-model-parallel-size 2
run pb2_again 2 --bf16 --pipeline-model-parallel-size 2
[ "$N" -ge 4 ] && run pb4 4 --bf16 --pipeline-model-parallel-size 2 --use-distributed-optimizer
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
def losses(n):
    return [(r["iteration"], k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if "loss" in k and isinstance(v, float)]
def worst(a, b):
    return max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(losses(a), losses(b)))
print(f"fp32 PP 2: largest relative loss difference from one GPU {worst('pf1', 'pf2'):.2e}")
print(f"bf16 PP 2: {worst('pb1', 'pb2'):.2e}; twice: {'bitwise equal' if losses('pb2') == losses('pb2_again') else 'DIFFERENT'}")
if os.path.exists(f"{w}/pb4.jsonl"):
    print(f"bf16 DP 2 x PP 2, distributed optimizer: {worst('pb1', 'pb4'):.2e}")
PY
for n in 1 2 4; do
  [ "$n" -le "$N" ] && [ "${BENCHES:-1}" = 1 ] || continue
  echo "-- llama3.2-1b pipeline $n, global batch 8"
  launch "$n" "$H" bench llama3.2-1b --steps "${STEPS:-10}" --warmup 3 --global-batch-size 8 --lr-warmup-iters 2 \
    --pipeline-model-parallel-size "$n" > "$W/bench.log" 2>&1
  grep -E "^hytra config=|holds|rror" "$W/bench.log" | tail -3
done
}
part 5 && {
echo "== 5. tensor parallelism and the interleaved schedule on $N GPUs"
M=(train --hybrid-layer-pattern 'MGE*E*-*/*-' "${TINY[@]}" --train-iters "${CORR_ITERS:-30}")
SP=(--tensor-model-parallel-size 2 --sequence-parallel)
run tf1 1
run tf2 2 --tensor-model-parallel-size 2
run tf2_sp 2 "${SP[@]}"
run tb1 1 --bf16
run tb2 2 --bf16 --tensor-model-parallel-size 2
run tb2_again 2 --bf16 --tensor-model-parallel-size 2
run tb2_sp 2 --bf16 "${SP[@]}"
run tb_ipp 2 --bf16 --hybrid-layer-pattern 'MG|E*|E*|-*/*-' --pipeline-model-parallel-size 2
if [ "$N" -ge 4 ]; then
  run tb_sp_ipp 4 --bf16 --hybrid-layer-pattern 'MG|E*|E*|-*/*-' "${SP[@]}" --pipeline-model-parallel-size 2 \
    --save "$W/tck" --save-interval 15
  run tb_dp_tp 4 --bf16 --tensor-model-parallel-size 2 --use-distributed-optimizer
  mkdir -p "$W/tck15" && cp -r "$W/tck/iter_0000015" "$W/tck15/" &&
    echo 15 > "$W/tck15/latest_checkpointed_iteration.txt"
  run tb_resume1 1 --bf16 --load "$W/tck15"
fi
grep -h "holds\|memory:" "$W"/tb2_sp.log "$W"/tb1.log
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
def losses(n):
    return [(r["iteration"], k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if "loss" in k and isinstance(v, float)]
def worst(a, b, first=1):
    a = [x for x in losses(a) if x[0] >= first]
    return max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(a, losses(b)))
print(f"fp32 TP 2: largest relative loss difference from one GPU {worst('tf1', 'tf2'):.2e}; with SP "
      f"{worst('tf1', 'tf2_sp'):.2e}")
same = "bitwise equal" if losses("tb2") == losses("tb2_again") else "DIFFERENT"
print(f"bf16 TP 2: {worst('tb1', 'tb2'):.2e}; twice: {same}; with SP {worst('tb1', 'tb2_sp'):.2e}; "
      f"PP 2 interleaved {worst('tb1', 'tb_ipp'):.2e}")
if os.path.exists(f"{w}/tb_sp_ipp.jsonl"):
    print(f"bf16 TP 2 + SP x PP 2 interleaved: {worst('tb1', 'tb_sp_ipp'):.2e}; "
          f"DP 2 x TP 2: {worst('tb1', 'tb_dp_tp'):.2e}; "
          f"its iteration 15 resumed on one GPU: {worst('tb_sp_ipp', 'tb_resume1', 16):.2e}")
PY
[ "${BENCHES:-1}" = 1 ] && for cfg in examples/nemotron-h-1b/config.yaml llama3.2-1b; do
  for layout in "1" "2 --tensor-model-parallel-size 2" "2 --tensor-model-parallel-size 2 --sequence-parallel"; do
    set -- $layout
    n=$1; shift
    [ "$n" -le "$N" ] || continue
    echo "-- $cfg gpus $n $*, global batch 8"
    launch "$n" "$H" bench "$cfg" --steps "${STEPS:-10}" --warmup 3 --global-batch-size 8 --lr-warmup-iters 2 "$@" \
      > "$W/bench.log" 2>&1
    grep -E "^hytra config=|holds|memory:|rror" "$W/bench.log" | tail -4
  done
done
[ "${BENCHES:-1}" = 1 ] && {
  echo "-- nemotron-h-1b pipeline 2 (13 + 12 layers), global batch 8"
  launch 2 "$H" bench examples/nemotron-h-1b/config.yaml --steps "${STEPS:-10}" --warmup 3 --global-batch-size 8 \
    --lr-warmup-iters 2 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 13 > "$W/bench.log" 2>&1
  grep -E "^hytra config=|holds|memory:|rror" "$W/bench.log" | tail -4
}
}
part 6 && {
echo "== 6. expert parallelism on $N GPUs"
M=(train --hybrid-layer-pattern 'MGE*E*-*/*E' "${TINY[@]}" --train-iters "${CORR_ITERS:-30}")
EPO=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000)
run ef1 1
run ef2 2 --expert-model-parallel-size 2
run eb1 1 --bf16
run eb2 2 --bf16 --expert-model-parallel-size 2
run eb2_again 2 --bf16 --expert-model-parallel-size 2
if [ "$N" -ge 4 ]; then
  run eb4 4 --bf16 --expert-model-parallel-size 4
  run eb_do 4 --bf16 --expert-model-parallel-size 2 "${EPO[@]}" --save "$W/eck" --save-interval 15
  mkdir -p "$W/eck15" && cp -r "$W/eck/iter_0000015" "$W/eck15/" &&
    echo 15 > "$W/eck15/latest_checkpointed_iteration.txt"
  run eb_resume1 1 --bf16 --load "$W/eck15"
fi
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
def losses(n):
    return [(r["iteration"], k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if "loss" in k and isinstance(v, float)]
def worst(a, b, first=1):
    a = [x for x in losses(a) if x[0] >= first]
    return max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(a, losses(b)))
same = "bitwise equal" if losses("eb2") == losses("eb2_again") else "DIFFERENT"
print(f"fp32 EP 2: largest relative loss difference from one GPU {worst('ef1', 'ef2'):.2e}")
print(f"bf16 EP 2: {worst('eb1', 'eb2'):.2e}; twice: {same}")
if os.path.exists(f"{w}/eb4.jsonl"):
    print(f"bf16 EP 4: {worst('eb1', 'eb4'):.2e}; EP 2 x expert-DP 2, distributed optimizer and overlaps: "
          f"{worst('eb1', 'eb_do'):.2e}; its iteration 15 resumed on one GPU: {worst('eb_do', 'eb_resume1', 16):.2e}")
PY
[ "${BENCHES:-1}" = 1 ] && {
  echo "-- moe-2b on 1 GPU, global batch 2"
  "$H" bench moe-2b --steps "${STEPS:-10}" --warmup 3 --global-batch-size 2 --lr-warmup-iters 2 > "$W/bench.log" 2>&1
  grep -E "^hytra config=|memory:|rror" "$W/bench.log" | tail -3
}
if [ "$N" -ge 4 ] && [ "${BENCHES:-1}" = 1 ]; then
  for layout in "" "--expert-model-parallel-size 4" "--expert-model-parallel-size 4 --num-experts 128"; do
    echo "-- moe-2b on 4 GPUs, global batch 8, distributed optimizer $layout"
    launch 4 "$H" bench moe-2b --steps "${STEPS:-10}" --warmup 3 --global-batch-size 8 --lr-warmup-iters 2 \
      --use-distributed-optimizer $layout > "$W/bench.log" 2>&1
    grep -E "^hytra config=|holds|memory:|rror" "$W/bench.log" | tail -4
  done
fi
}
part 7 && {
echo "== 7. the EP-overlap schedule on $N GPUs"
M=(train --hybrid-layer-pattern 'MGE*E*-*/*E' "${TINY[@]}" --train-iters 30 --global-batch-size 16 --bf16)
OV=(--overlap-moe-expert-parallel-comm)
run ov_plain 1
run ov_on 1 "${OV[@]}"
run ov_dw 1 --delay-wgrad-compute
run ov_dw_on 1 --delay-wgrad-compute "${OV[@]}"
G=$(( N >= 4 ? 4 : (N >= 2 ? 2 : 1) ))  # the expert-parallel size of the multi-GPU runs
if [ "$G" -gt 1 ]; then
  run ov_epg_dw "$G" --expert-model-parallel-size "$G" --delay-wgrad-compute
  run ov_epg_on "$G" --expert-model-parallel-size "$G" "${OV[@]}" --delay-wgrad-compute
fi
if [ "$G" -ge 4 ]; then  # inside the interleaved pipeline: PP 2 (2 model chunks a rank) x EP 2
  M=(train --hybrid-layer-pattern 'MGE|*E|*-|*/*E' "${TINY[@]}" --train-iters 30 --global-batch-size 16 --bf16
     --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --delay-wgrad-compute)
  run ov_pp_dw 4
  run ov_pp_on 4 "${OV[@]}"
fi
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
def losses(n):
    return [(r["iteration"], k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if ("loss" in k or k == "grad_norm") and isinstance(v, float)]
for a, b in (("ov_plain", "ov_on"), ("ov_dw", "ov_dw_on"), ("ov_epg_dw", "ov_epg_on"), ("ov_pp_dw", "ov_pp_on")):
    if os.path.exists(f"{w}/{b}.jsonl"):
        print(f"bf16 {a} against {b}: {'bitwise equal' if losses(a) == losses(b) else 'DIFFERENT'}")
PY
B=(bench moe-2b --steps "${STEPS:-10}" --warmup 3 --lr-warmup-iters 2)
for flags in "" "--no-cuda-graph" "${OV[*]}" "${OV[*]} --delay-wgrad-compute" "${OV[*]} --log-ep-overlap"; do
  echo "-- moe-2b on 1 GPU (a one-rank NCCL world), global batch 8 $flags"
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 "$H" "${B[@]}" --global-batch-size 8 \
    $flags > "$W/bench.log" 2>&1
  grep -E "^hytra config=|memory:|rror" "$W/bench.log" | tail -3
  grep -m3 "EP-overlap iteration" "$W/bench.log"
done
if [ "$G" -gt 1 ]; then
  for flags in "" "${OV[*]} --log-ep-overlap" "${OV[*]} --delay-wgrad-compute --log-ep-overlap"; do
    echo "-- moe-2b, $((32 * G)) experts at EP $G on $G GPUs, global batch $((8 * G)) $flags"
    launch "$G" "$H" "${B[@]}" --global-batch-size $((8 * G)) --num-experts $((32 * G)) \
      --expert-model-parallel-size "$G" --use-distributed-optimizer $flags > "$W/bench.log" 2>&1
    grep -E "^hytra config=|memory:|rror" "$W/bench.log" | tail -3
    grep "EP-overlap iteration" "$W/bench.log" | tail -3
  done
fi
}
cp "$W"/*.log "$OUT"/ 2>/dev/null
rm -rf "$W"

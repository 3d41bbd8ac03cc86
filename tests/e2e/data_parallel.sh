#!/usr/bin/env bash
# Data parallelism on CPUs under mpirun (docs/parallelism.md): a tiny hybrid (M, G, E, *, -, mHC, MTP) trained
# 20 iterations (validation after 10 and 20) on one global batch of 8 as one process, as 2 ranks (twice) and as
# 4 ranks, as 2 and 4 ranks with the distributed optimizer, and with the communication overlapped in buckets. The losses, validation losses and grad norms of
# every iteration and the final weights (the L2 distance of all weights over their norm) match the one process
# within 1e-5 relative (the gradients are summed in another order); the two runs at 2 ranks are bitwise identical
# (losses and checkpoint files).
# Checkpoints across layouts: iteration 10 of the 4-rank distributed-optimizer run resumed at 2 ranks (the
# distributed optimizer), in one process and at 4 ranks again; iteration 10 of the one process resumed at 4
# ranks: the losses of iterations 11-20 within 1e-5 of the uninterrupted run, bitwise on the same layout.
# Then the failure paths: a layout the batch does not divide is one named error, a rank killed mid-step
# ends the job within 60 s, naming it, and the writing rank killed while saving leaves a loadable checkpoint.
# Usage: data_parallel.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
MPI=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1)
W=$(mktemp -d /tmp/hytra-dp.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
M=(--hybrid-layer-pattern 'MGE*E/*-' --enable-mhc-connections --mhc-num-residual-streams 2 --hidden-size 32
   --num-attention-heads 4 --group-query-attention --num-query-groups 2 --ffn-hidden-size 64 --swiglu
   --mamba-num-heads 4 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16 --mamba-chunk-size 16
   --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16 --linear-value-head-dim 16
   --num-experts 4 --moe-ffn-hidden-size 32 --moe-router-topk 2 --moe-router-score-function sigmoid
   --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3 --mtp-loss-scaling-factor 0.3 --normalization RMSNorm
   --position-embedding-type rope --disable-bias-linear --seq-length 32 --vocab-size 256 --mock-data
   --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2
   --weight-decay 0.1 --adam-beta2 0.95 --eval-interval 10 --eval-iters 2 --log-interval 1
   --log-params-norm --log-num-zeros-in-grad --device cpu)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NAME NP [extra flags]: trains 20 iterations, saving into $W/NAME
  local name=$1 np=$2
  shift 2
  local cmd=("$H" train "${M[@]}" --train-iters 20 --save "$W/$name" --log-jsonl "$W/$name.jsonl" "$@")
  if [ "$np" = 1 ]; then HYTRA_NUM_THREADS=1 "${cmd[@]}" > "$W/$name.log" 2>&1; else "${MPI[@]}" -np "$np" "${cmd[@]}" > "$W/$name.log" 2>&1; fi ||
    fail "$name: $(tail -5 "$W/$name.log")"
}
run one 1 --save-interval 10
run two 2
run two_again 2
run four 4
run two_do 2 --use-distributed-optimizer
run four_do 4 --use-distributed-optimizer --save-interval 10
# The overlap in small buckets (more than ten): reductions started by the backward (replicated: bitwise the 2-rank
# run, MPI sums each element in rank order whatever the buckets), then the sharded optimizer's gathers waited
# for by the forward, and the reductions started by the delayed weight gradients (bitwise the same run without
# the overlap).
run two_ov 2 --overlap-grad-reduce --ddp-bucket-size 2000
run four_ov 4 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 3000 \
  --save-interval 10
run two_dw 2 --delay-wgrad-compute
run two_ov_dw 2 --overlap-grad-reduce --ddp-bucket-size 2000 --delay-wgrad-compute
at10() {  # at10 RUN: a checkpoint directory whose latest checkpoint is RUN's iteration 10
  mkdir -p "$W/$1@10" && cp -r "$W/$1/iter_0000010" "$W/$1@10/" && echo 10 > "$W/$1@10/latest_checkpointed_iteration.txt"
}
at10 four_do
at10 one
at10 four_ov
run resume_two 2 --use-distributed-optimizer --load "$W/four_do@10"
run resume_one 1 --load "$W/four_do@10"
run resume_four 4 --use-distributed-optimizer --load "$W/four_do@10"
run reverse_four 4 --use-distributed-optimizer --load "$W/one@10"
run resume_ov_one 1 --load "$W/four_ov@10"
grep -q "on each of 2 data-parallel ranks" "$W/two.log" || fail "the 2-rank run does not say it is data-parallel"
grep -qE "reduce-scattered in [0-9]{2} buckets as the backward completes them, parameters gathered during" \
  "$W/four_ov.log" || fail "the overlapped run does not log ten buckets or more: $(grep data-parallel: "$W/four_ov.log")"
[ "$(grep -c 'iteration .*/ *20 |' "$W/four.log")" = 20 ] || fail "the 4-rank run logged other than 20 iteration lines (rank 0 logs)"
python3 - "$W" "$(dirname "$0")" <<'PY' || exit 1
import sys
sys.path.insert(0, sys.argv[2])
import run_records
w = sys.argv[1]
def losses(name):
    return run_records.losses(w, name)
def tensors(name):
    return run_records.tensors(w, name)
ref, ref_w = losses("one"), tensors("one")
worst = (0.0, "")  # the tensor farthest from one process's, relatively
for name in ("two", "four", "two_do", "four_do", "two_ov", "four_ov"):
    got = losses(name)
    assert len(got) == len(ref) and len(ref) >= 60, (name, len(got), len(ref))
    for (i, k, a), (j, k2, b) in zip(ref, got):
        assert (i, k) == (j, k2), (name, i, k, j, k2)
        run_records.agree(name, "one process", i, k, a, b)
    gw = tensors(name)
    assert gw.keys() == ref_w.keys(), name
    d2 = n2 = 0.0
    for k, a in ref_w.items():
        dk = sum((x - y) ** 2 for x, y in zip(a, gw[k]))
        nk = sum(x * x for x in a)
        d2, n2 = d2 + dk, n2 + nk
        if nk > 0 and (dk / nk) ** 0.5 > worst[0]:
            worst = ((dk / nk) ** 0.5, k)
    rel = (d2 / n2) ** 0.5
    assert rel <= 1e-5, f"{name}: the final weights differ from one process's by {rel:.2e} relative"
    print(f"{name}: final weights {rel:.2e} relative to one process's")
assert losses("two") == losses("two_again"), "two runs at 2 ranks differ"
assert losses("two") == losses("two_ov"), "the overlapped bucket reductions differ from the 2-rank run"
assert losses("two_dw") == losses("two_ov_dw"), "the reductions started by the delayed wgrads differ"
# Resumed at iteration 10: iterations 11..20 against the uninterrupted run of the saving layout.
for name, base in (("resume_two", "four_do"), ("resume_one", "four_do"), ("resume_four", "four_do"),
                   ("reverse_four", "one"), ("resume_ov_one", "four_ov")):
    got, want = losses(name), [x for x in losses(base) if x[0] > 10]
    assert [x[:2] for x in got] == [x[:2] for x in want], (name, got[:3], want[:3])
    for (i, k, a), (_, _, b) in zip(want, got):
        run_records.agree(name, base, i, k, a, b)
assert losses("resume_four") == [x for x in losses("four_do") if x[0] > 10], "resumed on the same layout: not bitwise"
print(f"ok: {len(ref)} logged values within 1e-5 at 2 and 4 ranks, with and without the distributed optimizer "
      f"and the overlap in buckets (replicated: bitwise); "
      f"resumed across layouts within 1e-5, on the same layout bitwise; the tensor farthest off: {worst[1]} "
      f"({worst[0]:.2e}: a parameter whose gradient is rounding noise, which Adam turns into full steps)")

PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$W/two/iter_0000020/$f" "$W/two_again/iter_0000020/$f" || fail "the two 2-rank runs saved different $f"
done

# A global batch of 8 does not split over 3 ranks of 2 samples: every rank stops before any work, naming it.
"${MPI[@]}" -np 3 "$H" train "${M[@]}" --train-iters 2 > "$W/three.log" 2>&1 && fail "3 ranks trained"
grep -q "data-parallel size (3)" "$W/three.log" || fail "no named error for 3 ranks: $(tail -5 "$W/three.log")"
grep -q "iteration " "$W/three.log" && fail "3 ranks trained an iteration before the error"

# Rank 1 killed mid-run: the job ends within 60 s with an error naming rank 1.
"${MPI[@]}" -np 2 "$H" train "${M[@]}" --train-iters 100000 --save "$W/killed" > "$W/kill.log" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "iteration  *2/" "$W/kill.log" && break; sleep 0.1; done
grep -q "iteration  *2/" "$W/kill.log" || { kill $job; fail "the 2-rank job did not start: $(tail -5 "$W/kill.log")"; }
find_rank() {  # find_rank PATTERN RANK: the pid of that rank's process (retried: a loaded machine is slow)
  for _ in $(seq 100); do
    for p in $(pgrep -f "$1"); do
      tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
    sleep 0.1
  done
}
victim=$(find_rank "$W/killed" 1)
[ -n "$victim" ] || { kill $job; fail "no process of rank 1 found"; }
start=$(date +%s)
kill -9 "$victim"
for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { kill -9 $job; fail "the job still runs 60 s after rank 1 was killed"; }
wait $job && fail "the job exited with status 0 after rank 1 was killed"
grep -qiE "rank 1|process rank 1" "$W/kill.log" || fail "the error does not name rank 1: $(tail -8 "$W/kill.log")"
echo "ok: rank 1 killed, the job ended after $(( $(date +%s) - start )) s naming it"

# Rank 0 (the writer) killed while the job saves every iteration: the latest checkpoint it names still loads
# (the run resumes from it in one process), whatever the kill interrupted.
"${MPI[@]}" -np 2 "$H" train "${M[@]}" --train-iters 100000 --save "$W/cut" --save-interval 1 > "$W/cut.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -f "$W/cut/latest_checkpointed_iteration.txt" ] && grep -q "iteration  *3/" "$W/cut.log" &&
  break; sleep 0.05; done
writer=$(find_rank "$W/cut" 0)
[ -n "$writer" ] || { kill $job; fail "no process of rank 0 found"; }
sleep 0.$((RANDOM % 10))
kill -9 "$writer"
wait $job 2>/dev/null
latest=$(cat "$W/cut/latest_checkpointed_iteration.txt")
HYTRA_NUM_THREADS=1 "$H" train "${M[@]}" --load "$W/cut" --train-iters $((latest + 1)) > "$W/cut_resume.log" 2>&1 ||
  fail "the checkpoint of iteration $latest left by the killed writer does not load: $(tail -3 "$W/cut_resume.log")"
grep -q "resumed from .* at iteration $latest" "$W/cut_resume.log" || fail "no resume from iteration $latest"
echo "ok: the writer killed during the saves, iteration $latest's checkpoint resumed"

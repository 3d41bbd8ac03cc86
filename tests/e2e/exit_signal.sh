#!/usr/bin/env bash
# --exit-signal-handler (train/exit_signal.h): SIGTERM during training ends the run after the iteration in progress
# with a checkpoint of that iteration and exit status 0, and the checkpoint resumes as the uninterrupted run continues
# (bitwise for one process, within 1e-5 for two). One process, then two (the signal sent to one rank alone: both
# ranks agree, save and stop together).
# Without the flag SIGTERM still ends the run (its default action), with no new checkpoint. A constant learning rate
# makes the 100,000-iteration runs and the 300-iteration reference train alike.
# Usage: exit_signal.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
W=$(mktemp -d /tmp/hytra-sig.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
M=(train --hybrid-layer-pattern '*-*-' --hidden-size 32 --num-attention-heads 4 --vocab-size 256 --mock-data
   --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-decay-style constant --log-interval 1
   --device cpu --eval-interval 0)
wait_for_iteration() {  # wait_for_iteration LOG N: until LOG shows iteration N (at most 60 s)
  for _ in $(seq 600); do grep -q "iteration *$2/" "$1" && return 0; sleep 0.1; done
  fail "no iteration $2 in $1: $(tail -3 "$1")"
}
# The reference: 300 uninterrupted iterations.
HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --train-iters 300 --log-jsonl "$W/ref.jsonl" > "$W/ref.log" 2>&1 || fail "reference run"
for np in 1 2; do
  run=(env HYTRA_NUM_THREADS=1 "$H")
  [ "$np" = 2 ] && run=(mpirun --allow-run-as-root --oversubscribe -x HYTRA_NUM_THREADS=1 -np 2 "$H")
  "${run[@]}" "${M[@]}" --train-iters 100000 --save "$W/ck$np" --save-interval 100000 --exit-signal-handler \
    --log-jsonl "$W/sig$np.jsonl" > "$W/sig$np.log" 2>&1 &
  pid=$!
  wait_for_iteration "$W/sig$np.log" 3
  if [ "$np" = 1 ]; then kill -TERM "$pid"; else
    victim=$(pgrep -f "^$H train .*--save $W/ck2" | sort -n | tail -1)  # a rank, not mpirun
    [ -n "$victim" ] || fail "no rank process found"
    kill -TERM "$victim"
  fi
  wait "$pid"; rc=$?
  [ "$rc" = 0 ] || fail "$np process(es): exit status $rc after SIGTERM: $(tail -3 "$W/sig$np.log")"
  grep -q "exiting at iteration [0-9]* (SIGTERM received, --exit-signal-handler), saved in" "$W/sig$np.log" ||
    fail "$np process(es): no exit line: $(tail -3 "$W/sig$np.log")"
  n=$(cat "$W/ck$np/latest_checkpointed_iteration.txt")
  [ "$n" -ge 3 ] && [ "$n" -lt 298 ] || fail "$np process(es): saved iteration $n"
  HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --train-iters $((n + 2)) --load "$W/ck$np" --log-jsonl "$W/resume$np.jsonl" \
    > "$W/resume$np.log" 2>&1 || fail "resume of $np: $(tail -3 "$W/resume$np.log")"
  python3 - "$W" "$np" "$n" <<'PY' || exit 1
import json, sys
w, np_, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def losses(name):
    return {r["iteration"]: r["lm loss"] for r in map(json.loads, open(f"{w}/{name}.jsonl")) if "iteration" in r}
ref, sig, res = losses("ref"), losses(f"sig{np_}"), losses(f"resume{np_}")
assert max(sig) == n, (max(sig), n)
tol = 0 if np_ == "1" else 1e-5  # two data-parallel ranks sum the gradients in another order
def same(a, b):
    return abs(a - b) <= tol * abs(b)
assert all(same(sig[i], ref[i]) for i in sig), "the signalled run differs from the reference"
assert sorted(res) == [n + 1, n + 2] and all(same(res[i], ref[i]) for i in res), "the resume differs"
PY
  echo "ok: $np process(es): SIGTERM at iteration $n saved it, exited 0, and the resume continues as the reference"
done
# Without the flag: SIGTERM ends the run as before (no checkpoint written at the signal).
HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --train-iters 100000 --save "$W/plain" --save-interval 100000 \
  > "$W/plain.log" 2>&1 &
pid=$!
wait_for_iteration "$W/plain.log" 2
kill -TERM "$pid"
wait "$pid"; rc=$?
[ "$rc" = 143 ] || fail "without --exit-signal-handler: exit status $rc (expected 143, SIGTERM)"
[ -e "$W/plain/latest_checkpointed_iteration.txt" ] && fail "without --exit-signal-handler a checkpoint was saved"
echo "ok: without --exit-signal-handler SIGTERM ends the run unsaved"

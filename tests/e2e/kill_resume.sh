#!/usr/bin/env bash
# Killed at any moment, a run leaves a checkpoint to resume from (docs/checkpoints.md): a tiny model trains 12
# iterations saving after every one; 100 runs like it are killed with SIGKILL at random moments: a random save k is
# waited for, then a random delay of up to two iterations (seeded), so the kills fall inside saves and between them. After each kill the
# tracker is absent (killed before the first save completed) or names an iteration whose checkpoint
# `hytra inspect-checkpoint` verifies; resumed from it to iteration 12, the run saves exactly the weights and
# optimizer state of the uninterrupted run.
# Usage: kill_resume.sh HYTRA_BINARY [KILLS]
set -uo pipefail
H=$(realpath "$1")
KILLS=${2:-100}
W=$(mktemp -d /tmp/hytra-kill.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
M=(train --hybrid-layer-pattern '*-*-' --hidden-size 32 --num-attention-heads 4 --vocab-size 256 --mock-data
   --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --lr-warmup-iters 2 --train-iters 12
   --save-interval 1 --eval-interval 0 --log-interval 1 --device cpu)
# The reference, timed: the span from its first completed checkpoint (the tracker appears) to its end gives the time
# of one iteration with its save.
start=$(date +%s%N)
HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --save "$W/ref" > "$W/ref.log" 2>&1 &
ref=$!
first_ms=""
while kill -0 "$ref" 2>/dev/null; do
  [ -z "$first_ms" ] && [ -f "$W/ref/latest_checkpointed_iteration.txt" ] &&
    first_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  sleep 0.002
done
wait "$ref" || fail "reference run: $(tail -3 "$W/ref.log")"
end_ms=$(( ($(date +%s%N) - start) / 1000000 ))
step_ms=$(( (end_ms - ${first_ms:-0}) / 11 + 1 ))
# Each kill: a random iteration k; once save k has begun (its temporary directory or the finished one appears), a
# random delay of up to two iterations, then SIGKILL.
RANDOM=20261127
none=0
inside=0
declare -A at
for i in $(seq "$KILLS"); do
  d="$W/run"
  rm -rf "$d"
  k=$(( RANDOM % 12 + 1 ))
  HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --save "$d" > "$W/run.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && ! compgen -G "$d/iter_$(printf '%07d' "$k")*" > /dev/null; do sleep 0.001; done
  ms=$(( RANDOM % (2 * step_ms + 1) ))
  sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  compgen -G "$d/*.tmp*" > /dev/null && inside=$((inside + 1))  # a save's temporaries left: killed inside it
  if [ ! -f "$d/latest_checkpointed_iteration.txt" ]; then
    none=$((none + 1))
    continue
  fi
  it=$(cat "$d/latest_checkpointed_iteration.txt")
  at[$it]=$(( ${at[$it]:-0} + 1 ))
  "$H" inspect-checkpoint "$d" > "$W/inspect.log" 2>&1 ||
    fail "kill $i ($ms ms into save $k): the tracker names iteration $it, which does not verify: $(tail -3 "$W/inspect.log")"
  if [ "$it" -lt 12 ]; then
    HYTRA_NUM_THREADS=1 "$H" "${M[@]}" --save "$d" --load "$d" > "$W/resume.log" 2>&1 ||
      fail "kill $i ($ms ms into save $k): resuming from iteration $it: $(tail -3 "$W/resume.log")"
  fi
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$d/iter_0000012/$f" "$W/ref/iter_0000012/$f" ||
      fail "kill $i ($ms ms into save $k): resumed from iteration $it, the final $f differs from the uninterrupted run's"
  done
done
summary=""
for it in $(printf '%s\n' "${!at[@]}" | sort -n); do summary+=" $it:${at[$it]}"; done
echo "ok: $KILLS kills 0-$((2 * step_ms)) ms after a save began, $inside of them inside a save;" \
  "$none before the first save completed; trackers at iteration:count$summary;" \
  "every one verified and resumed to the uninterrupted run's final checkpoint bit for bit"

#!/usr/bin/env bash
# Every CPU example, shortened to a fixed recipe (6 iterations, validation after 3 and 6), must give
# bitwise the losses (and gradient norms) recorded in tests/assets/example_losses.txt: refactors and fixes must not change
# training numerics. The record holds each logged training loss and validation loss as %.17g text.
# Usage: example_losses.sh HYTRA_BINARY [--record]   (--record rewrites the file: only for a change
# that is meant to alter numerics, and say so in the commit).
# Skipped (exit 77) when the Brown corpus is not prepared (scripts/setup.sh prepares it).
set -uo pipefail
H=$(realpath "$1")
cd "$(dirname "$0")/../.."
RECORD=tests/assets/example_losses.txt
EXAMPLES=(nemotron-h-tiny tiny-brown moe-tiny moe-mhc-mtp-tiny tiny-dense)  # nemotron-h-1b is a GPU (bf16) job
[ -f data/brown/brown_text_document.idx ] || { echo "data/brown not prepared (run scripts/setup.sh)"; exit 77; }
W=$(mktemp -d /tmp/hytra-example-losses.XXXXXX)
trap 'rm -rf "$W"' EXIT
for ex in "${EXAMPLES[@]}"; do
  HYTRA_NUM_THREADS=2 "$H" train --config "examples/$ex/config.yaml" --device cpu --train-iters 6 --lr-warmup-iters 2 --lr-decay-iters 6 --log-interval 1 \
    --eval-interval 3 --eval-iters 1 --log-jsonl "$W/$ex.jsonl" --data-cache-path "$W/cache" > "$W/$ex.log" 2>&1 ||
    { echo "FAIL: $ex: $(tail -3 "$W/$ex.log")"; exit 1; }
  python3 - "$ex" "$W/$ex.jsonl" >> "$W/losses.txt" <<'PY'
import json, sys
for line in open(sys.argv[2]):
    r = json.loads(line)
    for k, v in sorted(r.items()):
        if ("loss" in k or k == "grad_norm") and isinstance(v, (int, float)):
            print(sys.argv[1], r.get("iteration", r.get("validation_iteration")), k, repr(v))
PY
done
if [ "${2:-}" = "--record" ]; then
  cp "$W/losses.txt" "$RECORD"
  echo "recorded $(wc -l < "$RECORD") losses into $RECORD"
  exit 0
fi
if ! diff "$RECORD" "$W/losses.txt" > "$W/diff"; then
  echo "FAIL: losses differ from $RECORD:"
  cat "$W/diff"
  exit 1
fi
echo "ok: $(wc -l < "$RECORD") losses bitwise as recorded"

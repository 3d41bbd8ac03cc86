#!/usr/bin/env bash
# `hytra generate` end to end: a tiny Mamba + attention + MLP model trained a few steps on mock data and saved; the
# command then reads its model and tokenizer flags from the checkpoint's run_config.yaml. Greedy and seeded sampling
# repeat exactly, the continuation has the asked length and starts with the prompt, a text prompt goes through the
# tokenizer, the rates are printed, and bad requests end in named errors.
# Usage: generate.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$H" train --hybrid-layer-pattern 'M*-' --hidden-size 32 --num-attention-heads 4 --mamba-num-heads 4 \
  --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 8 --mamba-chunk-size 8 --tokenizer-type NullTokenizer \
  --vocab-size 99 --mock-data --seq-length 32 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 3 \
  --eval-interval 0 --log-interval 1 --device cpu --save "$W/ckpt" > "$W/train.log" 2>&1 ||
  { echo "FAIL: training: $(tail -3 "$W/train.log")"; exit 1; }

gen() { "$H" generate --load "$W/ckpt" --device cpu "$@" 2> "$W/err"; }

a=$(gen --prompt-ids "5, 6 7" --max-new-tokens 9 --temperature 0) || fail "greedy: $(cat "$W/err")"
b=$(gen --prompt-ids "5 6 7" --max-new-tokens 9 --top-k 1) || fail "top-k 1: $(cat "$W/err")"
[ "$a" = "$b" ] || fail "greedy and top-k 1 differ: '$a' / '$b'"
read -ra toks <<<"$a"
[ "${#toks[@]}" -eq 12 ] || fail "greedy: expected 3 prompt + 9 new ids, got '$a'"
[ "${toks[*]:0:3}" = "5 6 7" ] || fail "greedy: the output does not start with the prompt: '$a'"
for t in "${toks[@]}"; do [ "$t" -ge 0 ] && [ "$t" -lt 100 ] || fail "greedy: id '$t' outside the vocabulary"; done
grep -q "prompt 3 tokens in .* tokens/s); new 9 tokens in .* tokens/s) on the CPU" "$W/err" ||
  fail "no rates: $(cat "$W/err")"

s1=$(gen --prompt-ids "1 2" --max-new-tokens 20 --temperature 1.3 --top-p 0.95 --seed 11) || fail "sampling: $(cat "$W/err")"
s2=$(gen --prompt-ids "1 2" --max-new-tokens 20 --temperature 1.3 --top-p 0.95 --seed 11) || fail "sampling again"
[ "$s1" = "$s2" ] || fail "the same seed sampled differently: '$s1' / '$s2'"

# NullTokenizer text: space-separated ids in and out; its end of document (99) would end the output early.
t=$(gen --prompt "5 6 7" --max-new-tokens 9 --temperature 0) || fail "text prompt: $(cat "$W/err")"
[ "$t" = "$a" ] || [ "${t:0:5}" = "5 6 7" ] || fail "text prompt: '$t' (ids gave '$a')"
printf '5 6 7' > "$W/prompt.txt"
f=$(gen --prompt-file "$W/prompt.txt" --max-new-tokens 9 --temperature 0) || fail "prompt file: $(cat "$W/err")"
[ "$f" = "$t" ] || fail "--prompt-file and --prompt differ: '$f' / '$t'"

# expect NEEDLE ARGS...: generate ARGS fails with status 1 and a message holding NEEDLE.
expect() {
  local needle=$1 out rc
  shift
  out=$(timeout 60 "$H" generate "$@" 2>&1)
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$needle" <<<"$out" || grep -q "internal error" <<<"$out"; then
    fail "hytra generate $* -> status $rc (expected 1 with '$needle'): $out"
  fi
}
expect "give exactly one of --prompt" --load "$W/ckpt" --device cpu
expect "give exactly one of --prompt" --load "$W/ckpt" --device cpu --prompt "1" --prompt-ids 1
expect "--top-p: expected a probability in (0, 1]" --load "$W/ckpt" --device cpu --prompt-ids 1 --top-p 0
expect "--temperature: expected a number >= 0" --load "$W/ckpt" --device cpu --prompt-ids 1 --temperature -1
expect "--max-new-tokens: expected at least 1" --load "$W/ckpt" --device cpu --prompt-ids 1 --max-new-tokens 0
expect "--prompt-ids: token id 100 is outside the vocabulary [0, 100)" --load "$W/ckpt" --device cpu --prompt-ids 100
expect "--prompt-ids: expected an integer, got 'x'" --load "$W/ckpt" --device cpu --prompt-ids "1 x"
expect "exceed the model's 32 learned positions" --load "$W/ckpt" --device cpu --prompt-ids "1 2" --max-new-tokens 31
expect "--prompt-file: cannot open" --load "$W/ckpt" --device cpu --prompt-file "$W/none.txt"
expect "--load: required" --prompt-ids 1 --hybrid-layer-pattern '*-' --hidden-size 32 --num-attention-heads 4 \
  --vocab-size 99 --seq-length 32 --device cpu

[ $fails -eq 0 ] && echo "generate: all checks passed"
exit $((fails > 0))

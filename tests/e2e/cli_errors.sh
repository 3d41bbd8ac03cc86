#!/usr/bin/env bash
# Bad command lines and files that only the subcommands' own parsers see (tools/cmd_*.cpp) end in a
# named error: exit status 1 (2 for usage), the expected message, no "internal error", no signal and
# no hang. The library-level checks have unit tests; these are the CLI's.
# Usage: cli_errors.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

# expect STATUS NEEDLE ARGS...: hytra ARGS exits with STATUS and its output holds NEEDLE.
expect() {
  local want=$1 needle=$2 out rc
  shift 2
  out=$(timeout 20 "$H" "$@" 2>&1)
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$needle" <<<"$out" || grep -q "internal error" <<<"$out"; then
    echo "FAIL: hytra $* -> status $rc (expected $want with '$needle'): $out"
    fails=$((fails + 1))
  fi
}

printf '{"text": "hello world"}\n' > "$T/in.jsonl"
printf '{"text": "hello world"}\n' > "$T/vocab.json"
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$T/vocab.json" --merge-file "$T/vocab.json")
expect 1 "--workers: expected 0 (all cores) to 4096, got 100000" preprocess --input "$T/in.jsonl" --output-prefix "$T/o" \
  --workers 100000 "${TOK[@]}"
expect 1 "--workers: expected 0 (all cores) to 4096, got -1" preprocess --input "$T/in.jsonl" --output-prefix "$T/o" \
  --workers -1 "${TOK[@]}"
expect 1 "--json-keys: a key is given twice" preprocess --input "$T/in.jsonl" --output-prefix "$T/o" \
  --json-keys text text "${TOK[@]}"
expect 1 "--num-samples: expected counts >= 0, got -1" inspect-data --data-path "$T/none" --seq-length 8 \
  --num-samples -1 1 1
expect 1 "--seed: expected 0..4294967295" inspect-data --data-path "$T/none" --seq-length 8 --seed 4294967296
expect 1 "--out: expected a file name" eval-step --batch "$T/in.jsonl" --out
expect 1 "--warmup + --steps" bench "$T/in.jsonl" --warmup 9223372036854775807 --steps 1
expect 1 "--warmup: expected a count >= 0, got -1" bench "$T/in.jsonl" --warmup -1
M=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 256 --seq-length 32)
expect 1 "--save: required" convert --from-megatron "$T/none.safetensors" "${M[@]}"
expect 1 "$T/none.safetensors: cannot open" convert --from-megatron "$T/none.safetensors" "${M[@]}" --save "$T/c"
expect 1 "give one of --to-hf OUT_DIR, --from-hf HF_DIR and --from-megatron FILE" convert --from-megatron "$T/a" \
  --from-hf "$T/b"
expect 2 "usage: hytra ops" ops --foo
expect 0 "usage: hytra ops" ops --help
[ $fails -eq 0 ] && echo ok
exit $((fails > 0))

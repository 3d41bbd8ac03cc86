#!/usr/bin/env python3
"""hytra's tokenizers against their reference implementations, token for token (issue 26; run on the GPU machine,
where tiktoken, tokenizers and sentencepiece are installed). Usage: tokenizer_exactness.py HYTRA_BINARY GPT2_DIR BROWN_JSONL WORKDIR

TikTokenizer: a NeMo-style ranks file made from GPT-2's merges (ranks 0-255 the bytes, then each merge's token, as
tests/unit/test_tiktoken.cpp makes it), 1000 special tokens; the reference is tiktoken.Encoding with Megatron's
CustomTikTokenizer setup (ranks shifted by the special-token count, encode_ordinary), for patterns v1 and v2. The
texts: a torture text (one document per line, and whole) and every document of the Brown corpus; hytra encodes them
with `hytra preprocess` and the ids are read back from the .bin/.idx. Prints the mismatching documents per tokenizer
and exits non-zero when there is any.
HuggingFaceTokenizer with a Llama-3 style tokenizer.json (a Split by Llama-3's regex, then ByteLevel without its
regex; GPT-2's vocabulary and merges; ignore_merges on and off): the reference is the `tokenizers` package's
Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids, on the same texts.
GPTSentencePieceTokenizer with models the `sentencepiece` package trains here (SP_MODELS): the reference is its
SentencePieceProcessor.encode_as_ids, on the same texts (those with at least one token)."""
import json
import os
import subprocess
import sys

import numpy
import tiktoken

from tiktoken_ranks import ranks_file

# Megatron's PATTERN_TIKTOKEN and PATTERN_TIKTOKEN_V2.
PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
          r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
NUM_SPECIAL = 1000
# SentencePiece models trained on 150 Brown documents: BPE and Unigram with the default nmt_nfkc normalizer, byte
# fallback, and the identity normalizer without whitespace removal (Llama's settings).
SP_MODELS = {
    "sp_bpe": {"model_type": "bpe"},
    "sp_unigram_bytes": {"model_type": "unigram", "byte_fallback": True, "split_digits": True},
    "sp_bpe_llama_style": {"model_type": "bpe", "byte_fallback": True, "normalization_rule_name": "identity",
                           "remove_extra_whitespaces": False, "add_dummy_prefix": True},
}
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

TORTURE = (
    "Hello world! It's, isn't, we're, they've, I'm, you'll, he'd. IT'S ISN'T WE'RE THEY'VE I'M YOU'LL HE'D\n"
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x ''s ``quoted'' \"double\" \u2019curly\u2019 'll'll\n"
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442, "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629, \u05e2\u05d1\u05e8\u05d9\u05ea, \u0939\u093f\u0928\u094d\u0926\u0940, "
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22, \u4e2d\u6587\u6587\u672c, \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8, "
    "\ud55c\uad6d\uc5b4\n"
    "\u00dcn\u00efc\u00f6d\u00e9 \u00e7\u00e0f\u00e9 Stra\u00dfe \u0152UVRE \u01c5emal \u0130stanbul \ufb01ne "
    "CamelCaseWord HTTPServer iPhone McDonald's e\u0301te\u0301 A\u0300B\u0301C\n"
    "emoji: \U0001F600\U0001F603 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1FA\U0001F1F8 "
    "\u2764\ufe0f #\ufe0f\u20e3\n"
    "numbers: 0 12 345 6789 12345678901234567890 3.14159 -42 1e10 \u0663\u0664\u0665 \uff11\uff12\uff13 \u216b \u00b2 "
    "\u00bd\n"
    "spaces:  two   three\tTab\t\ttabs \t mixed\r\ncrlf\u00a0nbsp\u3000ideo\u2028ls\u2029ps\u2003em\ufeffbom "
    "\u0085nel\u0085\u0085x\n"
    "\n\n\n   leading spaces after blank lines\n \n \t \n"
    "symbols: @#$%^&*()_+-=[]{}|;:<>?/\\~` ... --- !!! ??? a/b//c\n/ \u2022\u00b7\u2026 \u2211\u222b \u20ac\u00a3\n"
    "literal <|endoftext|> <s> </s> stay text\n"
    "trailing whitespace   \t\n\n  "
)


def read_indexed(prefix):
    """Megatron's .idx/.bin: the token ids of each document."""
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    dtype = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64, 6: numpy.float64,
             7: numpy.float32, 8: numpy.uint16}[idx[17]]
    n_seq, n_doc = numpy.frombuffer(idx, numpy.int64, 2, 18)
    sizes = numpy.frombuffer(idx, numpy.int32, n_seq, 34)
    ptrs = numpy.frombuffer(idx, numpy.int64, n_seq, 34 + 4 * n_seq)
    docs = numpy.frombuffer(idx, numpy.int64, n_doc, 34 + 12 * n_seq)
    data = numpy.fromfile(prefix + ".bin", dtype)
    item = numpy.dtype(dtype).itemsize
    seqs = [data[p // item: p // item + s].tolist() for p, s in zip(ptrs, sizes)]
    return [sum(seqs[docs[d]:docs[d + 1]], []) for d in range(n_doc - 1)]


def compare(label, hytra, work, texts, flags, encode, decode, n_torture):
    """hytra preprocess's ids of every text (documents with no token dropped, as preprocess drops them) against
    encode(text); prints the first differences and a summary; returns the mismatching documents."""
    kept = [i for i, t in enumerate(texts) if encode(t)]
    n_torture = sum(i < n_torture for i in kept)
    texts = [texts[i] for i in kept]
    docs = os.path.join(work, "docs_" + label.replace(" ", "_").replace("=", "") + ".jsonl")
    with open(docs, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    prefix = docs[:-6]
    subprocess.run([hytra, "preprocess", "--input", docs, "--output-prefix", prefix] + flags, check=True,
                   stdout=subprocess.DEVNULL)
    got = read_indexed(prefix + "_text_document")
    assert len(got) == len(texts), (label, len(got), len(texts))
    bad, tokens = 0, 0
    for i, t in enumerate(texts):
        want = encode(t)
        tokens += len(want)
        if got[i] != want:
            bad += 1
            if bad <= 3:
                k = next((j for j, (a, b) in enumerate(zip(got[i], want)) if a != b), min(len(got[i]), len(want)))
                print(f"  {label} document {i}: first difference at token {k}: hytra {got[i][k:k + 5]} "
                      f"reference {want[k:k + 5]} ({decode(want[max(0, k - 3):k + 3])!r})")
    print(f"{label}: {len(texts)} documents ({n_torture} of the torture text, {len(texts) - n_torture} of the Brown "
          f"corpus), {tokens} tokens: {bad} mismatching documents")
    return bad


def main():
    hytra, gpt2_dir, brown, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    texts = [line for line in TORTURE.split("\n") if line] + [TORTURE]
    n_torture = len(texts)
    brown_texts = [json.loads(line)["text"] for line in open(brown, encoding="utf-8") if line.strip()]
    texts += brown_texts
    ranks_path = os.path.join(work, "gpt2_ranks.json")
    ranks = ranks_file(gpt2_dir, ranks_path)
    failed = 0
    for name, pattern in PATTERNS.items():
        specials = ["<unk>", "<s>", "</s>"] + [f"<SPECIAL_{i}>" for i in range(3, NUM_SPECIAL)]
        ref = tiktoken.Encoding(name=f"megatron-{name}", pat_str=pattern,
                                mergeable_ranks={t: r + NUM_SPECIAL for t, r in ranks.items()},
                                special_tokens={t: i for i, t in enumerate(specials)})
        failed += compare(f"TikTokenizer {name}", hytra, work, texts,
                          ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", ranks_path, "--tiktoken-pattern",
                           name, "--vocab-size", str(len(ranks) + NUM_SPECIAL), "--tiktoken-num-special-tokens",
                           str(NUM_SPECIAL)], ref.encode_ordinary, ref.decode, n_torture)
    from tokenizers import Tokenizer
    vocab = json.load(open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8"))
    merges = [m for m in open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if m]
    for ignore_merges in (False, True):
        path = os.path.join(work, f"llama3_style_{int(ignore_merges)}.json")
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
               "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
                   {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
               "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                                                   "trim_offsets": True, "use_regex": True},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                         "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}}
        with open(path, "w") as f:
            json.dump(doc, f)
        ref = Tokenizer.from_file(path)
        failed += compare(f"HuggingFaceTokenizer Llama-3 style ignore_merges={ignore_merges}", hytra, work, texts,
                          ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", path],
                          lambda t: ref.encode(t, add_special_tokens=False).ids, ref.decode, n_torture)
    import sentencepiece as spm
    corpus = os.path.join(work, "sp_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for t in brown_texts[:150]:  # one line each (SentencePiece's trainer skips lines over 4192 bytes)
            f.writelines(line + "\n" for line in t.split("\n") if line.strip())
    for name, options in SP_MODELS.items():
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(work, name), vocab_size=4000,
                                       num_threads=1, minloglevel=2, **options)
        model = os.path.join(work, name + ".model")
        ref = spm.SentencePieceProcessor(model_file=model)
        failed += compare(f"GPTSentencePieceTokenizer {name}", hytra, work, texts,
                          ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", model],
                          ref.encode_as_ids, ref.decode_ids, n_torture)
    # A hand-made Unigram model whose segmentations tie in float and not in double (0.2 sums in float: "abc" is
    # "▁a bc"; 0.1 summed in double: "▁ab c"), with a user-defined piece and an UNUSED one.
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    for text, score, kind in [("<unk>", 0, 2), ("<s>", 0, 3), ("</s>", 0, 3), ("\u2581a", -1, 1), ("bc", -2e-9, 1),
                              ("\u2581ab", -1, 1), ("c", 1e-9, 1), ("a", -3, 1), ("b", -3, 1), ("\u2581", -2, 1),
                              ("cab", -0.5, 4), ("ab", -1, 5), ("x", -4, 1), ("y", -4, 1)]:
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = text, score, kind
    proto.trainer_spec.model_type = 1
    proto.normalizer_spec.name = "identity"
    model = os.path.join(work, "sp_quirk.model")
    with open(model, "wb") as f:
        f.write(proto.SerializeToString())
    ref = spm.SentencePieceProcessor(model_file=model)
    quirk_texts = ["abc", "ab abc", "abcabc", "cab xyab", "ba cab", "xyz abcab c"]
    print("hand-made Unigram 'abc':", [ref.id_to_piece(i) for i in ref.encode_as_ids("abc")])
    failed += compare("GPTSentencePieceTokenizer sp_quirk", hytra, work, quirk_texts,
                      ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", model],
                      ref.encode_as_ids, ref.decode_ids, len(quirk_texts))
    print(f"sentencepiece {spm.__version__}, tokenizers {__import__('tokenizers').__version__}, "
          f"tiktoken {tiktoken.__version__}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

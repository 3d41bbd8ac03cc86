#!/usr/bin/env python3
"""GPT-2's merges as a NeMo-style ranks file, the vocabulary Megatron's TikTokenizer reads (tests/interop/
tokenizer_exactness.py, tests/e2e/megatron_flags.sh). Usage: tiktoken_ranks.py GPT2_DIR OUT.json (standard library
only)."""
import base64
import json
import os
import sys


def ranks_file(gpt2_dir, path):
    """GPT-2's merges as a ranks list: bytes 0-255, then each merge's token in order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    to_bytes = lambda s: bytes(byte_of[ch] for ch in s)
    tokens = [bytes([b]) for b in range(256)]
    lines = open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:]
    for line in lines:
        if line:
            a, b = line.split(" ")
            tokens.append(to_bytes(a) + to_bytes(b))
    with open(path, "w") as f:
        json.dump([{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": ""}
                   for i, t in enumerate(tokens)], f)
    return {t: i for i, t in enumerate(tokens)}


if __name__ == "__main__":
    print(len(ranks_file(sys.argv[1], sys.argv[2])))

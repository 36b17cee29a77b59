"""SentencePiece-style BPE tokenizer.json fixtures for tests/unit/test_spm_tokenizer.cpp.

Trains two small SentencePiece BPE models (Llama 2's and Gemma's trainer settings, byte fallback
on) and converts them with transformers' converters, as the hub's Llama 2, Mistral and Gemma files
were made:
  llama_legacy     LlamaConverter, legacy: normalizer Prepend("▁") + Replace(" ", "▁"), no
                   pre-tokenizer (Llama 2, Mistral 7B v0.1)
  llama_metaspace  LlamaConverter, legacy = False: Metaspace pre-tokenizer (prepend_scheme
                   "first", split false), no normalizer (newer conversions)
  gemma            GemmaConverter: normalizer Replace(" ", "▁"), pre-tokenizer Split(" ",
                   MergedWithPrevious), <start_of_turn>/<end_of_turn> user symbols
Each folder gets tokenizer.json and tokenizer_config.json (bos, eos, add_bos_token).

sentencepiece is not a project dependency; run it from a venv of its own:
  python3 -m venv /tmp/spvenv
  /tmp/spvenv/bin/pip install sentencepiece protobuf transformers tokenizers
  /tmp/spvenv/bin/python tests/tokenizer/make_spm_fixtures.py [--out tests/fixtures/tokenizers]
Training runs on one thread over a fixed corpus, so the files come out the same each time.
"""
import argparse
import gzip
import json
import random
import tempfile
import types
from pathlib import Path

import sentencepiece as spm
from transformers.convert_slow_tokenizer import (
    GemmaConverter,
    GemmaSentencePieceExtractor,
    LlamaConverter,
)
from transformers.tokenization_utils_base import generate_merges

ROOT = Path(__file__).resolve().parents[2]

# Syllables of a few scripts, so that the vocabulary holds multi-byte characters and merges of them;
# characters outside these (most emoji, most CJK, Thai) are left to byte fallback.
SYLLABLES = {
    "latin": ["ca", "fé", "ré", "su", "mé", "ü", "ber", "straß", "e", "ñan", "a", "ça", "ön"],
    "greek": ["κα", "λη", "μέ", "ρα", "σο", "υ", "φί", "α"],
    "cyrillic": ["при", "вет", "мир", "до", "бро", "ут", "ро", "я"],
    "cjk": ["中", "文", "日", "本", "語", "人", "大", "学"],
    "arabic": ["مر", "حبا", "سلا", "م", "عا", "لم"],
}


def corpus(seed=0):
    """The KJV's first 300 kB and a few thousand lines of made-up words in other scripts, code and numbers."""
    kjv = gzip.open(ROOT / "data" / "kjv.txt.gz", "rt", encoding="utf-8").read()[:300000]
    rng = random.Random(seed)
    lines = kjv.splitlines()
    for _ in range(3000):
        script = rng.choice(list(SYLLABLES))
        words = ["".join(rng.choices(SYLLABLES[script], k=rng.randint(1, 4))) for _ in range(rng.randint(3, 12))]
        lines.append(" ".join(words))
    for i in range(500):
        indent = rng.choice(["", "  ", "    ", "\t"])
        lines.append(f"{indent}x_{i} = f({rng.randint(0, 99999)}, {rng.random():.4f})  # {rng.choice(['ok', 'todo'])}")
    rng.shuffle(lines)
    return "\n".join(lines) + "\n"


def train(corpus_file, prefix, **options):
    spm.SentencePieceTrainer.train(
        input=str(corpus_file),
        model_prefix=str(prefix),
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        character_coverage=0.9995,
        num_threads=1,
        minloglevel=2,
        **options,
    )
    return str(prefix) + ".model"


class LlamaExtractor(GemmaSentencePieceExtractor):
    """transformers 5.25's SpmConverter still calls extract(vocab_scores) -> (vocab, merges), the
    signature the base extractor had in 4.x; Gemma's keeps it. Llama's is Gemma's without the tab
    fix."""

    def __init__(self, model):
        super().__init__(model)
        self.sp = spm.SentencePieceProcessor(model_file=model)

    def extract(self, vocab_scores=None):
        vocab = {self.sp.id_to_piece(i): i for i in range(self.sp.get_piece_size())}
        return vocab, generate_merges(vocab, vocab_scores)


class GemmaExtractor(GemmaSentencePieceExtractor):
    def __init__(self, model):
        super().__init__(model)
        self.sp = spm.SentencePieceProcessor(model_file=model)


class Llama(LlamaConverter):
    SpmExtractor = LlamaExtractor


class Gemma(GemmaConverter):
    SpmExtractor = GemmaExtractor


def save(tokenizer, out, config):
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    vocab = tokenizer.get_vocab_size()
    print(f"{out}: {vocab} ids, {(out / 'tokenizer.json').stat().st_size} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "tokenizers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "corpus.txt").write_text(corpus(), encoding="utf-8")

        # Llama 2's ids: <unk> 0, <s> 1, </s> 2.
        llama_model = train(tmp / "corpus.txt", tmp / "llama", vocab_size=1500)
        sp = spm.SentencePieceProcessor(model_file=llama_model)
        llama_config = {
            "tokenizer_class": "LlamaTokenizer",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "add_bos_token": True,
            "add_eos_token": False,
        }
        for name, legacy in [("llama_legacy", True), ("llama_metaspace", False)]:
            original = types.SimpleNamespace(
                vocab_file=llama_model, legacy=legacy, add_prefix_space=True, convert_ids_to_tokens=sp.id_to_piece
            )
            save(Llama(original).converted(), args.out / name, dict(llama_config, legacy=legacy))

        # Gemma's ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3, then its turn markers.
        gemma_model = train(
            tmp / "corpus.txt",
            tmp / "gemma",
            vocab_size=1200,
            pad_id=0,
            eos_id=1,
            bos_id=2,
            unk_id=3,
            pad_piece="<pad>",
            eos_piece="<eos>",
            bos_piece="<bos>",
            unk_piece="<unk>",
            user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        )
        original = types.SimpleNamespace(
            vocab_file=gemma_model, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", add_prefix_space=False
        )
        gemma_config = {
            "tokenizer_class": "GemmaTokenizer",
            "bos_token": "<bos>",
            "eos_token": "<eos>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "add_bos_token": True,
            "add_eos_token": False,
        }
        save(Gemma(original).converted(), args.out / "gemma", gemma_config)


if __name__ == "__main__":
    main()

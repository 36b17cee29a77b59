#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from the repository's own files:
configs, the bundled KJV tokenizer, the SentencePiece-style tokenizer fixtures, the HF config
fixtures, and small files in the formats titan writes (safetensors, token shards, checkpoint
metadata), and small PNG, JPEG (through Pillow: run it with the reference venv's Python) and
webdataset shards. Run from anywhere; commit what it writes.
The Llama 3 and Qwen 3 tokenizers are cut down from /work/shared/tokenizers when it is there
(their normalizers and pre-tokenizers are what the seeds are for, not their vocabularies)."""
import io
import json
import pathlib
import shutil
import struct
import tarfile
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
SHARED_TOKENIZERS = pathlib.Path("/work/shared/tokenizers")


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def put(target: str, name: str, data) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def job_config() -> None:
    for path in sorted((ROOT / "configs").glob("*/*.toml")):
        put("job_config", f"{path.parent.name}_{path.stem}.toml", path.read_bytes())
    debug = (ROOT / "configs/llama3/debug.toml").read_bytes()
    overrides = ["--training.steps=5", "--model.flavor", "debugmodel", "--lr_scheduler.decay_ratio=none",
                 "--activation_checkpoint.mode=selective", "--training.deterministic"]
    put("job_config", "llama3_debug_overrides", debug + b"\0" + "\0".join(overrides).encode())


def safetensors_bytes(tensors: dict, metadata=None) -> bytes:
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors() -> None:
    put("safetensors", "f32_bf16_i64", safetensors_bytes({
        "model.norm.weight": ("F32", [2, 3], struct.pack("<6f", *range(6))),
        "model.embed.weight": ("BF16", [4], b"\x80\x3f" * 4),
        "step": ("I64", [], struct.pack("<q", 7)),
    }, {"format": "pt"}))
    put("safetensors", "empty", safetensors_bytes({}))
    put("safetensors", "f64_i32_zero_size", safetensors_bytes({
        "x": ("F64", [1], struct.pack("<d", 1.5)), "ids": ("I32", [2], struct.pack("<2i", 1, 2)),
        "none": ("F32", [0, 5], b"")}))


def checkpoint_metadata() -> None:
    def meta(tensors, files, state):
        return json.dumps({"format": "titan-checkpoint", "version": 1, "tensors": tensors, "files": files,
                           "state": state}, indent=1)
    one = "shard-00000-of-00001.safetensors"
    put("checkpoint_metadata", "whole", meta(
        {"model.norm.weight": {"dtype": "F32", "shape": [64],
                               "shards": [{"file": one, "key": "model.norm.weight", "offsets": [0], "sizes": [64]}]},
         "model.tok_embeddings.weight": {"dtype": "BF16", "shape": [256, 64], "shards": [
             {"file": one, "key": "model.tok_embeddings.weight", "offsets": [0, 0], "sizes": [256, 64]}]}},
        {one: {"bytes": 123456, "crc32c": 305419896}},
        {"step": 10, "model_only": False, "config": {"model": {"name": "llama3", "flavor": "debugmodel"}}}))
    files = [f"shard-0000{r}-of-00002.safetensors" for r in range(2)]
    put("checkpoint_metadata", "sharded", meta(
        {"model.output.weight": {"dtype": "F32", "shape": [8, 4], "shards": [
            {"file": files[r], "key": "model.output.weight", "offsets": [4 * r, 0], "sizes": [4, 4]}
            for r in range(2)]}},
        {f: {"bytes": 200, "crc32c": 1} for f in files},
        {"step": 0, "hf_config": {"model_type": "llama"}}))


def token_shard() -> None:
    def shard(ids, vocab, bos, eos, fingerprint):
        head = b"TITANTOK" + struct.pack("<IIQiiI", 1, vocab, len(ids), bos, eos, fingerprint)
        head += struct.pack("<I", crc32c(head))
        return head + b"\0" * (64 - len(head)) + struct.pack(f"<{len(ids)}I", *ids)
    # The first byte is the target's: odd, it corrects the CRC of what follows.
    put("token_shard", "bos_eos", b"\0" + shard([2046, 5, 6, 7, 2047], 2048, 2046, 2047, 0xDEADBEEF))
    put("token_shard", "no_bos", b"\1" + shard([1, 2, 255], 256, -1, 255, 0))
    put("token_shard", "empty", b"\1" + shard([], 256, -1, 0, 7))


def trimmed_tokenizer(path: pathlib.Path, keep: int) -> str:
    """The tokenizer with its first `keep` ids, the merges among them, and its first few added
    tokens renumbered after them."""
    j = json.loads(path.read_text())
    model = j["model"]
    model["vocab"] = {t: i for t, i in model["vocab"].items() if i < keep}
    def parts(m):
        return m.split(" ", 1) if isinstance(m, str) else m
    model["merges"] = [m for m in model["merges"]
                       if all(p in model["vocab"] for p in parts(m)) and "".join(parts(m)) in model["vocab"]]
    j["added_tokens"] = j["added_tokens"][:4]
    for n, t in enumerate(j["added_tokens"]):
        t["id"] = keep + n
    return json.dumps(j, ensure_ascii=False, indent=1)


def tokenizers() -> None:
    kjv = ROOT / "data/kjv_tokenizer"
    put("tokenizer_json", "kjv_small", trimmed_tokenizer(kjv / "tokenizer.json", 300))
    put("tokenizer_config", "kjv", (kjv / "tokenizer_config.json").read_bytes())
    put("tokenizer_config", "objects", json.dumps({
        "bos_token": {"content": "<|begin_of_text|>", "lstrip": False}, "eos_token": None,
        "add_bos_token": False, "add_eos_token": True}))
    for name in ("llama_legacy", "llama_metaspace", "gemma"):
        fixture = ROOT / "tests/fixtures/tokenizers" / name / "tokenizer.json"
        put("tokenizer_json", f"spm_{name}_small", trimmed_tokenizer(fixture, 400))
    for family in ("llama3", "qwen3"):
        folder = SHARED_TOKENIZERS / family
        if (folder / "tokenizer.json").exists():
            put("tokenizer_json", f"{family}_small", trimmed_tokenizer(folder / "tokenizer.json", 400))
            config = json.loads((folder / "tokenizer_config.json").read_text())
            config.pop("added_tokens_decoder", None)
            config.pop("chat_template", None)
            put("tokenizer_config", family, json.dumps(config, indent=1))


def hf() -> None:
    for path in sorted((ROOT / "tests/fixtures/hf_config").glob("*/*.json")):
        put("hf_config", f"{path.parent.name}_{path.stem}.json", path.read_bytes())
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    put("hf_index", "two_shards", json.dumps({"metadata": {"total_size": 12},
                                              "weight_map": {"a": files[0], "b": files[0], "c": files[1]}}, indent=2))
    put("hf_index", "misplaced", json.dumps({"weight_map": {"a": files[1], "b": "../b.safetensors", "c": 3}}))


def jsonl() -> None:
    lines = [json.dumps({"text": "In the beginning God created the heaven and the earth.", "id": 1}),
             json.dumps({"text": "caf\u00e9 \u4e2d\u6587 \U0001F600", "meta": {"source": "kjv", "n": [1, 2.5, None]}},
                        ensure_ascii=False),
             json.dumps({"text": "escaped \\u00e9 \"quotes\"\n"}),
             "", "   ", json.dumps({"title": "no text field"}), json.dumps({"text": ""}), "[1, 2]", "{not json"]
    body = "\n".join(lines) + "\n"
    put("jsonl", "errors", "\0" + body)
    put("jsonl", "skip", "\1" + body)
    put("jsonl", "crlf_no_final_newline", "\1" + "\r\n".join(lines[:3]))


def png_bytes(width: int, height: int, depth: int, colour: int, rows: list, extra: bytes = b"") -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\0" + r for r in rows))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def image() -> None:
    rgb = png_bytes(3, 2, 8, 2, [bytes(range(9)), bytes(range(9, 18))])
    put("image", "rgb8.png", b"\0" + rgb)
    put("image", "grey1.png", b"\0" + png_bytes(9, 2, 1, 0, [b"\xa5\x80", b"\x5a\x00"]))
    put("image", "rgba16.png", b"\0" + png_bytes(2, 1, 16, 6, [bytes(range(16))]))
    put("image", "palette_trns.png", b"\0" + png_bytes(4, 1, 2, 3, [b"\x1b"],
        struct.pack(">I", 9) + b"PLTE" + bytes(range(9)) + struct.pack(">I", zlib.crc32(b"PLTE" + bytes(range(9))))
        + struct.pack(">I", 1) + b"tRNS\x80" + struct.pack(">I", zlib.crc32(b"tRNS\x80"))))
    from PIL import Image  # the reference venv's; nothing else here needs more than the stdlib
    photo = Image.frombytes("RGB", (16, 8), bytes((x * 16 + y * 7) % 256 for y in range(8) for x in range(48)))
    for name, img, options in (("baseline.jpg", photo, {"quality": 75}),
                               ("progressive.jpg", photo, {"quality": 75, "progressive": True}),
                               ("grey.jpg", photo.convert("L"), {"quality": 75}),
                               ("cmyk.jpg", photo.convert("CMYK"), {"quality": 75})):
        out = io.BytesIO()
        img.save(out, format="JPEG", **options)
        put("image", name, b"\0" + out.getvalue())
    shard = io.BytesIO()
    with tarfile.open(fileobj=shard, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (("a/s0.png", rgb), ("a/s0.txt", b"a caption"), ("d" * 120 + "/s1.png", rgb),
                           ("d" * 120 + "/s1.txt", b"long name")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    put("image", "shard_gnu.tar", b"\1" + shard.getvalue())
    put("image", "shard_truncated.tar", b"\1" + shard.getvalue()[:1500])


def main() -> None:
    shutil.rmtree(CORPUS, ignore_errors=True)
    for write in (job_config, safetensors, checkpoint_metadata, token_shard, tokenizers, hf, jsonl, image):
        write()


if __name__ == "__main__":
    main()

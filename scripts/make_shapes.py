#!/usr/bin/env python3
"""The bundled, verifiable text-to-image data set: coloured shapes on plain backgrounds, each with
its exact caption ("a red circle at the top left on a blue background"), and a scorer that checks a
generated image against its caption by simple image analysis. numpy and Pillow only.

  make_shapes.py make --out DIR [--count 256] [--seed 0] [--size 64] [--shards K] [--format png|jpg]
                      [--held-out-from TRAIN_DIR]
      N image-caption pairs, a pure function of the seed: DIR/000000.png + DIR/000000.txt, ... or,
      with --shards K, K webdataset shards DIR/shapes-0000K.tar holding the same members.
      --held-out-from: only captions that none of TRAIN_DIR's x.txt holds (a draw whose caption
      is there is drawn again), for checking a model on captions it was not trained on.
  make_shapes.py score DIR [--shuffle-captions SEED] [--json]
      For every x.png/x.jpg with x.txt in DIR: whether the shape's colour, its kind and the
      background colour are those the caption names. Prints the fraction right and chance level.

The scorer: the background is the named colour most of the border pixels are nearest to; the
foreground is every pixel far from the border's mean colour; its colour is the named colour
nearest its median; its kind comes from how much of its bounding box it fills (square ~1, circle
~pi/4, triangle and diamond ~1/2) and, for the last two, whether the top half of the box holds as
much as the bottom (diamond) or about a third of it (triangle, apex up)."""
import argparse
import io
import json
import pathlib
import re
import sys
import tarfile

import numpy as np
from PIL import Image, ImageDraw

COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 40),
    "purple": (140, 40, 180),
    "orange": (250, 140, 20),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPES = ["circle", "square", "triangle", "diamond"]
# Where the shape's centre sits, as fractions of the side (x, y).
POSITIONS = {
    "top left": (0.3, 0.3),
    "top right": (0.7, 0.3),
    "bottom left": (0.3, 0.7),
    "bottom right": (0.7, 0.7),
    "center": (0.5, 0.5),
}
CAPTION = re.compile(r"^an? (\w+) (\w+) (?:at|in) the (.+?) on an? (\w+) background$")
# Chance of guessing right with a caption drawn as the generator draws them, when it is unrelated
# to the image: colour 1/8, kind 1/4, background 1/8 (it is uniform over the 7 colours that are not
# the shape's, hence 1/8 overall), all three together 1/8 * 1/4 * 1/7 (the background differs from
# the shape's colour in both image and caption).
CHANCE = {"colour": 1 / 8, "shape": 1 / 4, "background": 1 / 8, "all": 1 / (8 * 4 * 7)}


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def caption_of(colour: str, shape: str, position: str, background: str) -> str:
    where = "in the center" if position == "center" else f"at the {position}"
    return f"{article(colour)} {colour} {shape} {where} on {article(background)} {background} background"


def draw_attributes(rng: np.random.Generator):
    """A caption's (colour, shape, position, background), drawn as draw() draws them."""
    names = list(COLOURS)
    colour = names[rng.integers(len(names))]
    background = [n for n in names if n != colour][rng.integers(len(names) - 1)]
    shape = SHAPES[rng.integers(len(SHAPES))]
    position = list(POSITIONS)[rng.integers(len(POSITIONS))]
    return colour, shape, position, background


def draw(rng: np.random.Generator, size: int):
    colour, shape, position, background = draw_attributes(rng)
    cx, cy = (np.array(POSITIONS[position]) + rng.uniform(-0.03, 0.03, 2)) * size
    r = size * rng.uniform(0.16, 0.2)
    img = Image.new("RGB", (size, size), COLOURS[background])
    d = ImageDraw.Draw(img)
    fill = COLOURS[colour]
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        d.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "triangle":
        d.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=fill)
    else:
        d.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
    return img, caption_of(colour, shape, position, background)


def encode(img: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    if fmt == "png":
        img.save(out, format="PNG")
    else:
        img.save(out, format="JPEG", quality=95)
    return out.getvalue()


def make(args) -> None:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    seen = set()
    if args.held_out_from:
        seen = {p.read_text().strip() for p in pathlib.Path(args.held_out_from).glob("*.txt")}
        if not seen:
            sys.exit(f"{args.held_out_from}: no x.txt captions to hold out")
    samples = []
    for i in range(args.count):
        img, caption = draw(rng, args.size)
        while caption in seen:
            img, caption = draw(rng, args.size)
        samples.append((f"{i:06d}", encode(img, args.format), caption.encode()))
    if not args.shards:
        for key, image, caption in samples:
            (out / f"{key}.{args.format}").write_bytes(image)
            (out / f"{key}.txt").write_bytes(caption)
        return
    per_shard = -(-len(samples) // args.shards)
    for s in range(args.shards):
        with tarfile.open(out / f"shapes-{s:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for key, image, caption in samples[s * per_shard:(s + 1) * per_shard]:
                for name, data in ((f"{key}.{args.format}", image), (f"{key}.txt", caption)):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))


PALETTE = np.array(list(COLOURS.values()), dtype=float)


def nearest_colours(rgb: np.ndarray) -> np.ndarray:
    """Index into COLOURS of the named colour nearest each row of `rgb` [n, 3]."""
    return np.argmin(((rgb[:, None, :] - PALETTE[None]) ** 2).sum(axis=2), axis=1)


def analyse(img: Image.Image) -> dict:
    names = list(COLOURS)
    a = np.asarray(img.convert("RGB"), dtype=float)
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    nearest = nearest_colours(border)
    dominant = np.bincount(nearest, minlength=len(names)).argmax()
    background = names[dominant]
    bg_mean = border[nearest == dominant].mean(axis=0)
    mask = np.sqrt(((a - bg_mean) ** 2).sum(axis=2)) > 60
    if mask.sum() < 4:
        return {"background": background, "colour": None, "shape": None}
    colour = names[nearest_colours(np.median(a[mask], axis=0)[None])[0]]
    ys, xs = np.nonzero(mask)
    box = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    fill = box.mean()
    if fill > 0.9:
        shape = "square"
    elif fill > 0.65:
        shape = "circle"
    else:
        half = box.shape[0] // 2
        top, bottom = box[:half].sum(), box[box.shape[0] - half:].sum()
        shape = "triangle" if top < 0.6 * bottom else "diamond"
    return {"background": background, "colour": colour, "shape": shape}


def score(args) -> None:
    folder = pathlib.Path(args.dir)
    images = sorted(p for p in folder.iterdir() if p.suffix in (".png", ".jpg", ".jpeg"))
    captions = [p.with_suffix(".txt").read_text().strip() for p in images]
    if args.shuffle_captions is not None:
        np.random.default_rng(args.shuffle_captions).shuffle(captions)
    right = {k: 0 for k in CHANCE}
    for path, caption in zip(images, captions):
        m = CAPTION.match(caption)
        if not m:
            sys.exit(f"{path}: caption '{caption}' is not of the form the generator writes")
        colour, shape, _, background = m.groups()
        got = analyse(Image.open(path))
        ok = {"colour": got["colour"] == colour, "shape": got["shape"] == shape,
              "background": got["background"] == background}
        ok["all"] = all(ok.values())
        for k, v in ok.items():
            right[k] += v
    n = len(images)
    if n == 0:
        sys.exit(f"{folder}: no x.png or x.jpg with x.txt")
    result = {"images": n, **{k: right[k] / n for k in right}, "chance": CHANCE}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{right['all']}/{n} right ({right['all'] / n:.3f}; chance {CHANCE['all']:.4f}); "
              f"colour {result['colour']:.3f} (chance {CHANCE['colour']:.3f}), shape {result['shape']:.3f} "
              f"(chance {CHANCE['shape']:.3f}), background {result['background']:.3f} "
              f"(chance {CHANCE['background']:.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--count", type=int, default=256)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--size", type=int, default=64, choices=range(64, 129), metavar="64..128")
    m.add_argument("--shards", type=int, default=0)
    m.add_argument("--format", choices=["png", "jpg"], default="png")
    m.add_argument("--held-out-from", default=None, metavar="TRAIN_DIR")
    s = sub.add_parser("score")
    s.add_argument("dir")
    s.add_argument("--shuffle-captions", type=int, default=None, metavar="SEED")
    s.add_argument("--json", action="store_true")
    args = p.parse_args()
    make(args) if args.command == "make" else score(args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden fixtures for the image data layer (crates/roformer/src/images/).

Run with the peers virtualenv (torch 2.15, transformers 5.23, Pillow) plus torchvision, which
transformers' DINOv3 image processor needs and the virtualenv lacks; install it beside, not
into, the virtualenv:

    ~/.cache/roformer-peers/venv/bin/pip install --no-deps --target /tmp/tvpkgs torchvision==0.29.2
    PYTHONPATH=/tmp/tvpkgs ~/.cache/roformer-peers/venv/bin/python scripts/make_image_fixtures.py

Writes crates/roformer/tests/fixtures/images/:
  resize.json         PyTorch's F.interpolate(mode="bilinear", align_corners=False) with
                      antialias False and True, on seeded random f32 planes [c, h, w]: each
                      case's input, output size and output.
  rgb.png, grey.png,  small images made here with Pillow (RGB 24 x 32, grey 30 x 20 with a
  rgba.png            gradient, RGBA 6 x 5 with varied alpha), and rgb.jpg (the RGB one at
  rgb.jpg             quality 90), with what Pillow decodes from each in decoded.json.
  processor/NAME/     a preprocessor_config.json saved by transformers' DINOv3ViTImageProcessor
                      and pixel_values.json: what the processor makes of one of the images.
All numbers are float32 values written as decimals that read back to the same float32.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from transformers import DINOv3ViTImageProcessor

OUT = Path(__file__).resolve().parent.parent / "crates/roformer/tests/fixtures/images"


def floats(t):
    """Float32 values as decimals that read back exactly."""
    return [float(f"{x:.9g}") for x in np.asarray(t, dtype=np.float32).flatten().tolist()]


def resize_cases():
    """Bilinear resizes of random planes to sizes that enlarge, shrink by less and more than
    2, mix the two, and reach one pixel."""
    gen = torch.Generator().manual_seed(3)
    inputs = {
        "small": torch.rand(2, 7, 9, generator=gen),
        "mnist": torch.rand(1, 28, 28, generator=gen),
    }
    sizes = {
        "small": [(7, 9), (13, 17), (5, 4), (2, 3), (1, 1), (11, 3), (3, 30)],
        "mnist": [(20, 20), (8, 8), (30, 33)],
    }
    cases = []
    for name, x in inputs.items():
        for h, w in sizes[name]:
            for antialias in (False, True):
                y = F.interpolate(
                    x[None], size=(h, w), mode="bilinear", align_corners=False, antialias=antialias
                )[0]
                cases.append(
                    {
                        "input": name,
                        "height": h,
                        "width": w,
                        "antialias": antialias,
                        "output": floats(y),
                    }
                )
    return {
        "inputs": {k: {"shape": list(v.shape), "values": floats(v)} for k, v in inputs.items()},
        "cases": cases,
    }


def make_images():
    """Small test images from fixed arrays (no randomness in their bytes across versions of
    numpy: arithmetic patterns only)."""
    y, x = np.mgrid[0:24, 0:32]
    rgb = np.stack([(x * 8 + y * 5) % 256, (x * y * 3) % 256, (255 - x * 7 - y * 4) % 256], axis=-1)
    Image.fromarray(rgb.astype(np.uint8), "RGB").save(OUT / "rgb.png")
    Image.fromarray(rgb.astype(np.uint8), "RGB").save(OUT / "rgb.jpg", quality=90)
    gy, gx = np.mgrid[0:30, 0:20]
    grey = (gx * 12 + gy * 3) % 256
    Image.fromarray(grey.astype(np.uint8), "L").save(OUT / "grey.png")
    ay, ax = np.mgrid[0:6, 0:5]
    rgba = np.stack([ax * 60, ay * 50, 255 - ax * 50, (ax * 60 + ay * 7) % 256], axis=-1)
    Image.fromarray(rgba.astype(np.uint8), "RGBA").save(OUT / "rgba.png")
    decoded = {}
    for name in ("rgb.png", "rgb.jpg", "grey.png", "rgba.png"):
        image = Image.open(OUT / name)
        if image.mode == "RGBA":
            # transformers' convert_to_rgb: composited onto white.
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            image = Image.alpha_composite(white, image).convert("RGB")
        array = np.asarray(image)
        planes = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        decoded[name] = {"shape": list(planes.shape), "values": planes.flatten().tolist()}
    (OUT / "decoded.json").write_text(json.dumps(decoded) + "\n")


PROCESSOR_CASES = {
    # DINOv3's shipped settings but a size that shrinks both axes (antialiasing matters).
    "shrink": ("rgb.png", {"size": {"height": 10, "width": 13}}),
    # Enlarging, as the shipped 224 x 224 does for small images.
    "enlarge": ("rgb.png", {"size": {"height": 29, "width": 35}}),
    # A grey image, the shorter edge resized to 16 (the other by the aspect ratio, truncated),
    # then a centre crop, RGB conversion and other statistics.
    "grey_crop": (
        "grey.png",
        {
            "size": {"shortest_edge": 16},
            "do_center_crop": True,
            "crop_size": {"height": 12, "width": 14},
            "do_convert_rgb": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.25, 0.5, 1.0],
        },
    ),
    # Transparent pixels composited onto white; no resize; rescale without normalising.
    "rgba_plain": (
        "rgba.png",
        {"do_resize": False, "do_normalize": False, "do_convert_rgb": True},
    ),
}


def processor_cases():
    root = OUT / "processor"
    shutil.rmtree(root, ignore_errors=True)
    for name, (image_name, overrides) in PROCESSOR_CASES.items():
        processor = DINOv3ViTImageProcessor(**overrides)
        folder = root / name
        processor.save_pretrained(folder)
        with Image.open(OUT / image_name) as image:
            pixels = processor(image, return_tensors="pt")["pixel_values"][0]
        record = {"image": image_name, "shape": list(pixels.shape), "values": floats(pixels)}
        (folder / "pixel_values.json").write_text(json.dumps(record) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "resize.json").write_text(json.dumps(resize_cases()) + "\n")
    make_images()
    processor_cases()
    for path in sorted(OUT.rglob("*")):
        if path.is_file() and "fashion-mnist" not in path.parts:
            print(f"{path.relative_to(OUT)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()

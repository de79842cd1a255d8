#!/usr/bin/env python3
"""Trains a Fashion-MNIST classifier on transformers' DINOv3 ViT (2D RoPE) with PyTorch.

The model is exactly the one `roformer vision` runs: `DINOv3ViTModel` (axial RoPE on patch
centres normalised to [-1, 1], CLS and register tokens unrotated) with a linear head on the
concatenation of the normed CLS token and the mean of the normed patch tokens. The weights are
written as one Hugging Face directory that `roformer vision eval --model DIR` loads: the
backbone's tensors under DINOv3ViTModel's own names with the prefix `dinov3_vit.`, the head as `classifier.weight` and
`classifier.bias`, and the labels in `config.json` (`id2label`).

This is the GPU path for a model larger than two CPU cores train in useful time; the same
architecture trains in Rust with `roformer vision train`, and continues from these weights with
`--init`. It is also the PyTorch run that `BENCHMARKS.md` sets beside ours (`--bench-steps`).

Augmentation, one draw per image, done on the device in one resampling:
  - a horizontal flip (p = 1/2), a scale in [0.9, 1.1] and a shift of up to 2 pixels each way,
    all as one affine map sampled bilinearly with zero padding (the background is black);
  - the output size S is shared by the batch: 28 with probability `--p-native`, else drawn
    uniformly from `--sizes`; with the identity map this is exactly `F.interpolate(bilinear,
    align_corners=False)`, the resize `roformer vision eval --size S` applies;
  - random erasing (p = 0.25) of one rectangle of 2-20 % of the image, set to black.
Then `(x - mean) / std` with the training split's statistics.

The validation split is the last `--val` images of a fixed permutation of the 60,000 training
images (seed 0); the test set is never read here.

Usage (a GPU):
  python3 scripts/train_vit_pytorch.py --images .gpu/fmnist/train-images-idx3-ubyte.xz \
      --labels data/fashion-mnist/train-labels-idx1-ubyte.gz --time-budget-s 180 --out $OUT/vit
"""

import argparse
import gzip
import json
import lzma
import math
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import DINOv3ViTConfig, DINOv3ViTModel

CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def read_idx(path):
    """An unsigned-byte IDX array from a plain, .gz or .xz file, with its header checked."""
    opener = lzma.open if path.endswith(".xz") else gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * rank, data[4 : 4 + 4 * rank])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank)
    if body.size != math.prod(dims):
        sys.exit(f"{path}: header says {dims}, body holds {body.size} bytes")
    return body.reshape(dims)


class Classifier(nn.Module):
    """DINOv3ViTModel and a linear head on concat(normed CLS, mean of normed patch tokens)."""

    def __init__(self, config):
        super().__init__()
        self.backbone = DINOv3ViTModel(config)
        self.prefix = 1 + config.num_register_tokens
        self.classifier = nn.Linear(2 * config.hidden_size, config.num_labels)

    def forward(self, pixel_values):
        hidden = self.backbone(pixel_values=pixel_values).last_hidden_state  # (B, T, H)
        cls = hidden[:, 0]
        patches = hidden[:, self.prefix :].mean(dim=1)
        return self.classifier(torch.cat([cls, patches], dim=-1))  # (B, labels)


def augment(x, size, gen):
    """Flip, scale, shift and resize `x` (B, 1, 28, 28 in [0, 1]) to (B, 1, size, size)."""
    b = x.shape[0]
    dev = x.device
    flip = torch.where(torch.rand(b, device=dev, generator=gen) < 0.5, -1.0, 1.0)
    scale = torch.empty(b, device=dev).uniform_(0.9, 1.1, generator=gen)
    shift = torch.empty(b, 2, device=dev).uniform_(-2 / 14, 2 / 14, generator=gen)
    theta = torch.zeros(b, 2, 3, device=dev)
    theta[:, 0, 0] = flip / scale
    theta[:, 1, 1] = 1 / scale
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta, [b, 1, size, size], align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    # random erasing: one rectangle per chosen image
    erase = torch.rand(b, device=dev, generator=gen) < 0.25
    area = torch.empty(b, device=dev).uniform_(0.02, 0.2, generator=gen) * size * size
    ratio = torch.exp(torch.empty(b, device=dev).uniform_(math.log(0.3), math.log(3.3), generator=gen))
    h = torch.sqrt(area * ratio).clamp(1, size - 1)
    w = torch.sqrt(area / ratio).clamp(1, size - 1)
    top = torch.rand(b, device=dev, generator=gen) * (size - h)
    left = torch.rand(b, device=dev, generator=gen) * (size - w)
    idx = torch.arange(size, device=dev, dtype=torch.float32)
    rows = (idx[None, :] >= top[:, None]) & (idx[None, :] < (top + h)[:, None])
    cols = (idx[None, :] >= left[:, None]) & (idx[None, :] < (left + w)[:, None])
    mask = rows[:, :, None] & cols[:, None, :] & erase[:, None, None]
    return out.masked_fill(mask[:, None], 0.0)


def resize(x, size):
    """The evaluation resize: bilinear, half-pixel centres, no antialiasing."""
    if x.shape[-1] == size:
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


@torch.no_grad()
def accuracy(model, images, labels, size, mean, std, batch, autocast):
    model.eval()
    correct = 0
    for i in range(0, images.shape[0], batch):
        x = resize(images[i : i + batch].float()[:, None] / 255, size)
        with autocast():
            logits = model((x - mean) / std)
        correct += (logits.argmax(-1) == labels[i : i + batch]).sum().item()
    model.train()
    return correct / images.shape[0]


def save(model, config, out, mean, std, log):
    """The Hugging Face directory: config.json, model.safetensors (f32), preprocessor_config.json."""
    out.mkdir(parents=True, exist_ok=True)
    # The backbone under transformers' `base_model_prefix` of DINOv3, as a task model saves it,
    # and its layers under the names save_pretrained writes (`layer.N`; in memory some
    # transformers versions hold them as `model.layer.N`).
    backbone = model.backbone.state_dict()
    tensors = {
        "dinov3_vit." + k.replace("model.layer.", "layer.", 1): v.detach().float().cpu().contiguous()
        for k, v in backbone.items()
    }
    tensors["classifier.weight"] = model.classifier.weight.detach().float().cpu().contiguous()
    tensors["classifier.bias"] = model.classifier.bias.detach().float().cpu().contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = config.to_dict()
    cfg["architectures"] = ["DINOv3ViTForImageClassification"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    pre = {
        "do_convert_rgb": False,
        "do_resize": True,
        "size": {"height": 28, "width": 28},
        "resample": 2,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [mean],
        "image_std": [std],
    }
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    log(event="saved", dir=str(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", required=True)
    p.add_argument("--labels", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--mlp-ratio", type=int, default=4)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--registers", type=int, default=4)
    p.add_argument("--layerscale", type=float, default=0.1)
    p.add_argument("--drop-path", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=3)
    p.add_argument("--epochs", type=int, default=200, help="the most; the time budget may cut it")
    p.add_argument("--time-budget-s", type=float, default=180)
    p.add_argument("--sizes", default="20,24,32,36,40,44,48,52,56")
    p.add_argument("--p-native", type=float, default=0.4)
    p.add_argument("--val", type=int, default=5000)
    p.add_argument("--train-limit", type=int, default=0, help="use only this many training images (a smoke test)")
    p.add_argument("--eval-sizes", default="20,28,36,44,56")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--bench-steps", type=int, default=0, help="time this many steps at 28x28, then stop")
    args = p.parse_args()

    t0 = time.time()

    def log(**kv):
        kv["t"] = round(time.time() - t0, 2)
        print(json.dumps(kv), flush=True)

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    images = read_idx(args.images)
    labels = read_idx(args.labels)
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        sys.exit(f"images {images.shape} and labels {labels.shape} do not match")
    perm = np.random.default_rng(0).permutation(images.shape[0])
    train_idx, val_idx = perm[: -args.val], perm[-args.val :]
    if args.train_limit:
        train_idx, val_idx = train_idx[: args.train_limit], val_idx[: args.train_limit]
    mean = float(images[train_idx].mean() / 255)
    std = float(images[train_idx].std() / 255)
    xs = torch.from_numpy(images[train_idx]).to(dev)
    ys = torch.from_numpy(labels[train_idx].astype(np.int64)).to(dev)
    xv = torch.from_numpy(images[val_idx]).to(dev)
    yv = torch.from_numpy(labels[val_idx].astype(np.int64)).to(dev)
    log(event="data", train=len(train_idx), val=len(val_idx), mean=mean, std=std, device=str(dev))

    config = DINOv3ViTConfig(
        patch_size=args.patch,
        hidden_size=args.hidden,
        intermediate_size=args.mlp_ratio * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        image_size=28,
        num_channels=1,
        layerscale_value=args.layerscale,
        drop_path_rate=args.drop_path,
        num_register_tokens=args.registers,
        pos_embed_rescale=None,
        num_labels=len(CLASSES),
        id2label={i: c for i, c in enumerate(CLASSES)},
        label2id={c: i for i, c in enumerate(CLASSES)},
    )
    model = Classifier(config).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "token" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.999),
        fused=dev.type == "cuda",
    )
    if args.bf16:
        autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = lambda: torch.autocast(device_type=dev.type, enabled=False)  # noqa: E731
    log(event="model", params=n_params, config=config.to_dict())

    sizes = [int(s) for s in args.sizes.split(",")]
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    steps_per_epoch = len(train_idx) // args.batch
    warmup = int(args.warmup_epochs * steps_per_epoch)
    total = args.epochs * steps_per_epoch
    step = 0

    def lr_at(s):
        if s < warmup:
            return args.lr * (s + 1) / warmup
        return 0.5 * args.lr * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))

    if args.bench_steps:
        x = xs[: args.batch].float()[:, None] / 255
        y = ys[: args.batch]
        for i in range(args.bench_steps + 3):
            if i == 3:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
            with autocast():
                loss = F.cross_entropy(model((x - mean) / std), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - start
        log(event="bench", steps=args.bench_steps, batch=args.batch, images_per_s=args.bench_steps * args.batch / secs)
        return

    model.train()
    epoch_start = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_idx), device=dev, generator=gen)
        loss_sum = torch.zeros((), device=dev)
        for i in range(steps_per_epoch):
            idx = order[i * args.batch : (i + 1) * args.batch]
            native = torch.rand((), generator=gen, device=dev).item() < args.p_native
            size = 28 if native else sizes[int(torch.randint(len(sizes), (1,), generator=gen, device=dev).item())]
            x = augment(xs[idx].float()[:, None] / 255, size, gen)
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            with autocast():
                logits = model((x - mean) / std)
            loss = F.cross_entropy(logits.float(), ys[idx], label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_sum += loss.detach()
            step += 1
        elapsed = time.time() - t0
        if epoch == 0:
            # The schedule is fitted to the time: as many epochs as the budget holds at this speed.
            per_epoch = time.time() - epoch_start
            epochs = max(2, min(args.epochs, int(args.time_budget_s / (per_epoch * 1.08))))
            total = epochs * steps_per_epoch
            log(event="schedule", seconds_per_epoch=per_epoch, epochs=epochs, steps=total)
        else:
            epochs = total // steps_per_epoch
        line = dict(event="epoch", epoch=epoch + 1, step=step, lr=lr_at(step - 1), loss=loss_sum.item() / steps_per_epoch)
        if (epoch + 1) % 5 == 0 or epoch + 1 == epochs:
            line["val_acc_28"] = accuracy(model, xv, yv, 28, mean, std, 1000, autocast)
        log(**line)
        if epoch + 1 >= epochs or elapsed > args.time_budget_s * 1.25:
            break
    final = {f"val_acc_{s}": accuracy(model, xv, yv, s, mean, std, 500, autocast) for s in map(int, args.eval_sizes.split(","))}
    log(event="final", epochs=epoch + 1, steps=step, **final)
    save(model, config, args.out, mean, std, log)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cuts the small Fashion-MNIST subset committed for the tests (they never use the network).

    scripts/fetch_fashion_mnist.sh                  # the full release in data/fashion-mnist/
    scripts/cut_fashion_mnist_subset.py [--train-per-class N] [--test-per-class M]

Writes crates/roformer/tests/fixtures/images/fashion-mnist/ with the release's four file names
(gzipped IDX, so the tests read them through the same loader as the full set):
  train-*: the first N training images of each class, in file order (10 N images);
  t10k-*:  the first M test images of each class, in file order (10 M images).
Within a file the examples keep their release order. The gzip streams carry no name and a zero
time stamp, so rerunning the script gives the same bytes. Python's standard library only.
"""

import argparse
import gzip
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data/fashion-mnist"
OUT = ROOT / "crates/roformer/tests/fixtures/images/fashion-mnist"
PIXELS = 28 * 28


def read_idx(path):
    """The dims and data of a gzipped IDX file of unsigned bytes."""
    raw = gzip.decompress(path.read_bytes())
    zero, code, rank = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and code == 0x08, path
    dims = struct.unpack(f">{rank}I", raw[4 : 4 + 4 * rank])
    data = raw[4 + 4 * rank :]
    count = 1
    for d in dims:
        count *= d
    assert len(data) == count, path
    return dims, data


def write_idx(path, dims, data):
    """Writes `data` as a gzipped IDX file of unsigned bytes, reproducibly."""
    header = struct.pack(">HBB", 0, 0x08, len(dims)) + struct.pack(f">{len(dims)}I", *dims)
    with open(path, "wb") as raw, gzip.GzipFile(
        filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0
    ) as out:
        out.write(header + bytes(data))


def cut(prefix, per_class):
    """The first `per_class` examples of each class of one part, in file order."""
    _, images = read_idx(SOURCE / f"{prefix}-images-idx3-ubyte.gz")
    _, labels = read_idx(SOURCE / f"{prefix}-labels-idx1-ubyte.gz")
    taken = [0] * 10
    chosen = []
    for i, label in enumerate(labels):
        if taken[label] < per_class:
            taken[label] += 1
            chosen.append(i)
    assert taken == [per_class] * 10, taken
    n = len(chosen)
    write_idx(
        OUT / f"{prefix}-images-idx3-ubyte.gz",
        (n, 28, 28),
        b"".join(images[i * PIXELS : (i + 1) * PIXELS] for i in chosen),
    )
    write_idx(OUT / f"{prefix}-labels-idx1-ubyte.gz", (n,), bytes(labels[i] for i in chosen))
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-per-class", type=int, default=25)
    parser.add_argument("--test-per-class", type=int, default=10)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    n_train = cut("train", args.train_per_class)
    n_test = cut("t10k", args.test_per_class)
    size = sum(p.stat().st_size for p in OUT.glob("*.gz"))
    print(f"{n_train} training and {n_test} test images in {OUT} ({size} bytes)")


if __name__ == "__main__":
    main()

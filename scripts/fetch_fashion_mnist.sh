#!/usr/bin/env bash
# Installs Fashion-MNIST (Zalando, MIT licence) into data/fashion-mnist/ at the repository root
# (git-ignored), from Debian's package dataset-fashion-mnist:
#   - if the package is installed, links its files from /usr/share/datasets/fashion-mnist/;
#   - otherwise downloads it with `apt-get download` (no root needed; apt checks the archive
#     against the signed package index) and unpacks it with `dpkg -x`.
# Set FASHION_MNIST_DEB=/path/to/dataset-fashion-mnist_*.deb to unpack a package already
# downloaded instead.
#
# Afterwards data/fashion-mnist/ holds the four gzipped IDX files:
#   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   60,000 training images
#   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    10,000 test images
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/data/fashion-mnist"
system=/usr/share/datasets/fashion-mnist
files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
       t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

mkdir -p "$out"
if [[ -z "${FASHION_MNIST_DEB:-}" && -f "$system/${files[0]}" ]]; then
    for f in "${files[@]}"; do
        ln -sf "$system/$f" "$out/$f"
    done
    echo "linked the installed package's files from $system"
else
    deb="${FASHION_MNIST_DEB:-}"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    if [[ -z "$deb" ]]; then
        (cd "$work" && apt-get download dataset-fashion-mnist)
        deb="$(ls "$work"/dataset-fashion-mnist_*.deb)"
    fi
    dpkg -x "$deb" "$work/root"
    for f in "${files[@]}"; do
        cp "$work/root$system/$f" "$out/$f"
    done
    echo "unpacked $(basename "$deb")"
fi

for f in "${files[@]}"; do
    echo "  $out/$f: $(stat -L -c %s "$out/$f") bytes"
done

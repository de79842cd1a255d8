#!/usr/bin/env bash
# The Python package's tests: the wheel built once (`pip wheel ./python`: maturin, release, into
# target/python-wheels), then pytest over python/tests in two fresh virtualenvs:
# 1. `python3` with the newest numpy, pytest and ml_dtypes (bfloat16 arrays) from PyPI;
# 2. Debian's /usr/bin/python3 seeing Debian's CPU build of torch (python3-torch, and its numpy),
#    so that the torch tests run. PyPI's torch wheel is the CUDA build (gigabytes) and no CPU
#    index is reachable, so torch comes from Debian; `.ci/run` installs it. Without it the
#    second pass is skipped with a note, and the torch tests skip in the first.
# The live rotary-embedding-torch test needs torch 2 and skips in both; its parity runs on the
# committed fixtures (scripts/make_rotary_torch_fixtures.py).
#
#   bash scripts/python_tests.sh            # venvs in target/python-venv and target/python-venv-torch
#   PYTHON=python3.12 bash scripts/python_tests.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
venv="${PY_VENV:-$root/target/python-venv}"
wheels="$root/target/python-wheels"

"$python" -m venv --clear "$venv"
rm -rf "$wheels"
"$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$wheels" "$root/python"
wheel=("$wheels"/roformer_rs-*.whl)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wheel[0]}[test]" ml_dtypes
cd "$root/python"
# From python/ with the installed package (not the source tree) on the path.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests

if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    "/usr/bin/python3" -m venv --clear --system-site-packages "$venv-torch"
    # Debian's numpy satisfies the package's `numpy>=1.21`, so pip keeps the one torch was built
    # against.
    "$venv-torch/bin/python" -m pip install --quiet --disable-pip-version-check "${wheel[0]}" pytest
    "$venv-torch/bin/python" -m pytest -q -p no:cacheprovider tests
else
    echo "note: /usr/bin/python3 has no torch (Debian's python3-torch): the torch tests were skipped" >&2
fi

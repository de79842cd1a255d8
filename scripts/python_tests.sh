#!/usr/bin/env bash
# The Python package's tests: a fresh virtualenv, `pip install ./python` (maturin builds the
# extension module in release, into python/target), then pytest over python/tests.
#
#   bash scripts/python_tests.sh            # venv in target/python-venv
#   PYTHON=python3.12 bash scripts/python_tests.sh
#
# Installs from PyPI: maturin (the build backend, in pip's isolated build environment), numpy,
# pytest and ml_dtypes (bfloat16 arrays). torch is not installed (its PyPI wheel brings the CUDA
# libraries, gigabytes): the torch tests skip, and parity with rotary-embedding-torch and
# transformers runs on committed fixtures (scripts/make_rotary_torch_fixtures.py).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
venv="${PY_VENV:-$root/target/python-venv}"

"$python" -m venv --clear "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$root/python[test]" ml_dtypes
cd "$root/python"
# From python/ with the installed package (not the source tree) on the path.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests

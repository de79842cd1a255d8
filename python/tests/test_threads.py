"""bf16_products_on_openmp and the OMP_WAIT_POLICY the import sets from it, each case in a fresh
interpreter (libgomp and the environment are per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = (
    "import json, os, roformer_rs; "
    "print(json.dumps([roformer_rs.bf16_products_on_openmp(), os.environ.get('OMP_WAIT_POLICY')]))"
)


def imported_with(**env: str) -> tuple[bool, str | None]:
    """(bf16_products_on_openmp(), OMP_WAIT_POLICY) after `import roformer_rs` under `env`."""
    base = {k: v for k, v in os.environ.items() if k not in ("ROFORMER_ONEDNN", "OMP_WAIT_POLICY")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, check=True
    )
    on_openmp, policy = json.loads(done.stdout)
    return on_openmp, policy


def test_asked_for_onednn_the_openmp_threads_sleep() -> None:
    assert imported_with(ROFORMER_ONEDNN="1") == (True, "passive")


def test_a_policy_already_set_is_kept() -> None:
    assert imported_with(ROFORMER_ONEDNN="1", OMP_WAIT_POLICY="active") == (True, "active")


def test_without_onednn_nothing_is_set() -> None:
    assert imported_with(ROFORMER_ONEDNN="0") == (False, None)


def cpu_may_have_amx() -> bool:
    """True where /proc/cpuinfo lists AMX-BF16, or cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return "amx_bf16" in info.read()
    except OSError:
        return True


@pytest.mark.skipif(cpu_may_have_amx(), reason="the default asks for oneDNN on an AMX CPU")
def test_by_default_a_cpu_without_amx_sets_nothing() -> None:
    assert imported_with() == (False, None)

"""The ingest keeps numpy's OpenBLAS to one thread (gpuscope.ingest sets it before numpy loads)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import gpuscope.ingest.json_stream, numpy, os, sys;"
    "print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)"
)


def _probe(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_one_blas_thread_once_the_ingest_is_imported() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _probe(env) == "1 True"


def test_a_users_blas_threads_stay() -> None:
    assert _probe({**os.environ, "OPENBLAS_NUM_THREADS": "3"}) == "3 True"

"""``gpuscope analyze RUN`` (text) of a stored run, in a fresh process, imports only what renders
the stored document: the verdict's types and view model (gpuscope.analysis.verdict), the fixes'
words (gpuscope.analysis.recommendation), never the analyses that compute them, nor pandas, numpy
or pyarrow. The text is the one rendered from the analyses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_analyze_stored_text import _stored

pytestmark = pytest.mark.slow  # ingests a sample run; fresh processes

#: ``gpuscope ARGS`` in a fresh interpreter; the modules loaded when it exits go to stderr, last
#: line (the handler registered first runs last, after every other one).
PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
from gpuscope.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
sys.exit(code)
"""

#: What the stored text must not import: the libraries the analyses compute with, and the
#: analyses themselves.
HEAVY = ("pandas", "numpy", "pyarrow", "plotly", "streamlit")
COMPUTING = (
    "gpuscope.analysis.job",
    "gpuscope.analysis.report",
    "gpuscope.analysis.fixes",
    "gpuscope.analysis.gains",
    "gpuscope.analysis.run_views",
)


def _fresh(*args: str) -> tuple[str, set[str]]:
    """(stdout, the modules loaded at exit) of ``gpuscope ARGS`` in a fresh process."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    return p.stdout, set(json.loads(p.stderr.strip().splitlines()[-1]))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m in HEAVY or m in COMPUTING)


def test_the_text_of_a_stored_run_imports_no_analysis_nor_pandas_numpy(tmp_path: Path) -> None:
    db, run_id, want = _stored(tmp_path, "ddp (sample)")
    assert "recommendations: " in want and "top kernels" in want  # every section renders
    out, loaded = _fresh("analyze", run_id, "--db", str(db))
    assert out == want
    assert _heavy(loaded) == []
    assert "gpuscope.analysis.verdict" in loaded  # the verdict was rebuilt, from the light module
    # the pace-setter's view (rank 1) is stored too and imports none of them either
    _, pace = _fresh("analyze", run_id, "--rank", "1", "--db", str(db))
    assert _heavy(pace) == [] and "gpuscope.analysis.verdict" in pace
    # the same probe sees them where the run is analysed from its events (another option)
    _, computed = _fresh("analyze", run_id, "--peak-tflops", "500", "--db", str(db))
    assert {"pandas", "numpy", "gpuscope.analysis.job"} <= set(_heavy(computed))

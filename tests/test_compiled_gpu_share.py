"""benchmarks/compiled_gpu_share.py on real traces of one model eager and compiled (v46, a gMLP;
v122, a RetinaNet with BatchNorms: sample_traces/validation/README.md, "What compiling leaves of
the GPU's work"): the matrix kernels take the same time compiled; the other kernels fall to the
measured share, which lies between what kernel_fusion's re-timing leaves at its top and at its
mid level on v46 and above both on v122 (its training BatchNorms are no link of a chain). On
v157 and v146, whose BatchNorms are PyTorch's channels-last kernels (``kernel_fusion.
CHANNELS_LAST_BATCH_NORM_RE``), compiling halves the other kernels' time, which the re-timing's
top (0.82-0.84) does not reach either: the same README, "What torch.compile left of five
channels-last BatchNorm nets"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VAL = REPO / "sample_traces" / "validation"
sys.path.insert(0, str(REPO / "benchmarks"))

import compiled_gpu_share as cgs  # noqa: E402


@pytest.mark.parametrize(
    ("case", "share", "top_below"),
    [
        ("v46", (0.15, 0.22), True),
        ("v122", (0.50, 0.62), False),
        ("v157", (0.40, 0.50), False),
        ("v146", (0.40, 0.50), False),
    ],
)
def test_compiling_keeps_the_matrix_work_and_cuts_the_rest_to_its_measured_share(
    case: str, share: tuple[float, float], top_below: bool
) -> None:
    r = cgs.row(VAL / case, VAL / "compiled_steps" / f"{case}_compile_rank0.pt.trace.json.gz")
    assert r["compiled_matrix_ms"] == pytest.approx(r["eager_matrix_ms"], rel=0.02)
    assert share[0] <= r["measured_share"] <= share[1], r
    assert r["measured_share"] < r["fusion_mid_share"], r
    assert (r["fusion_top_share"] < r["measured_share"]) is top_below, r


def test_an_odd_number_of_traces_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cgs.main([str(VAL / "v46")]) == 2
    assert "EAGER COMPILED" in capsys.readouterr().err

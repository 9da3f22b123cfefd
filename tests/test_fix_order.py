"""The fix list's order on hand-built recommendations: a fix that changes the training (a larger
batch) comes after the fixes that keep the training identical and are estimated at
``fixes.SIGNIFICANT_PCT`` or more, its title then reads "Then, ..."; with no such fix it keeps its
place by estimate. The job verdict's first fix follows the same order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gpuscope.analysis import fixes as R
from gpuscope.analysis.gains import Estimate
from gpuscope.analysis.job import _findings

BATCH_TITLE = R.BY_ID["batch_size"].words.title


def rec(fix: str, gain: float | None) -> R.Recommendation:
    """A recommendation of unit ``fix`` with its words and an estimate of ``gain`` % (None: none)."""
    w = R.BY_ID[fix].words
    r = R.Recommendation(fix, w.title, w.why, {"summary": f"{fix} evidence"}, w.code, 1.0)
    if gain is not None:
        r.estimate = Estimate(gain, max(0.0, gain - 5), gain + 5, None)
    return r


def ids(recs: list[R.Recommendation]) -> list[str]:
    return [r.id for r in recs]


def test_only_the_batch_fix_changes_the_training() -> None:
    assert {u.id for u in R.UNITS if u.changes_training} == {"batch_size"}


def test_the_batch_fix_follows_a_significant_fix_that_keeps_the_training() -> None:
    """v09's shape: a 4x batch estimated at 72 % per sample, the optimizer's loop at 30 %."""
    recs = [rec("host_sync", 2.0), rec("batch_size", 72.0), rec("optimizer_fused", 30.0)]
    R.order(recs)
    assert ids(recs) == ["optimizer_fused", "batch_size", "host_sync"]
    assert recs[1].title == "Then, " + BATCH_TITLE[0].lower() + BATCH_TITLE[1:]
    assert recs[0].title == R.BY_ID["optimizer_fused"].words.title
    # ordered again (the job orders a report's list once more): "Then, " said once
    R.order(recs)
    assert recs[1].title.startswith("Then, use a larger batch") and recs[1].title.count("Then") == 1


def test_the_batch_fix_stays_first_where_it_is_the_only_real_fix() -> None:
    """v06 / v12 / v23's shape: the others are estimated below 5 %, or not at all."""
    recs = [rec("host_sync", 4.9), rec("kernel_fusion", None), rec("batch_size", 86.0)]
    R.order(recs)
    assert ids(recs) == ["batch_size", "host_sync", "kernel_fusion"]
    assert recs[0].title == BATCH_TITLE
    # the threshold itself is significant
    recs = [rec("batch_size", 86.0), rec("host_sync", R.SIGNIFICANT_PCT)]
    R.order(recs)
    assert ids(recs) == ["host_sync", "batch_size"] and recs[1].title.startswith("Then, ")
    # the significant fix gone (a later analysis): the batch fix first again, in its own words
    del recs[0]
    R.order(recs)
    assert ids(recs) == ["batch_size"] and recs[0].title == BATCH_TITLE


def test_with_a_cause_and_its_general_remedy_the_batch_fix_comes_last() -> None:
    """The cause first, the general remedy after every fix that is not one (pin_memory's 1 %
    too), then the batch: it follows the last significant fix that keeps the training."""
    recs = [
        rec("batch_size", 75.0),
        rec("kernel_fusion", 45.0),
        rec("activation_checkpointing", 18.0),
        rec("pin_memory", 1.0),
    ]
    R.order(recs)
    assert ids(recs) == ["activation_checkpointing", "pin_memory", "kernel_fusion", "batch_size"]
    # a smaller batch estimate than the others': its place by estimate, and it follows them
    recs = [rec("batch_size", 3.0), rec("dataloader_workers", 40.0)]
    R.order(recs)
    assert ids(recs) == ["dataloader_workers", "batch_size"]
    assert recs[1].title.startswith("Then, use a larger batch")


def ordered(*fixes: tuple[str, float]) -> list[str]:
    """The ids of these (fix, estimate %) recommendations once :func:`R.order` has ordered them."""
    recs = [rec(fix, gain) for fix, gain in fixes]
    R.order(recs)
    return ids(recs)


def test_cuda_graphs_take_their_place_by_estimate_beside_the_recompute_alone() -> None:
    """CUDA graphs replay the recompute (``FixUnit.replays``): beside the checkpointing fix alone
    they are ordered by their estimate, before it or after it, where torch.compile still follows
    it; beside the optimizer's loop, which a graph does not replay, they follow that fix."""
    ac, kf, cg, of = "activation_checkpointing", "kernel_fusion", "cuda_graphs", "optimizer_fused"
    assert ordered((ac, 28.0), (kf, 40.0), (cg, 73.0)) == [cg, ac, kf]
    assert ordered((cg, 13.0), (ac, 28.0)) == [ac, cg]
    assert ordered((cg, 73.0), (ac, 28.0), (of, 10.0)) == [ac, of, cg]


def test_cuda_graphs_are_estimated_alone_beside_the_recompute_only() -> None:
    """What each fix's estimate takes as applied first: CUDA graphs beside the checkpointing
    alone, nothing; beside it and the optimizer's loop (which they do not replay, so they follow
    both), both; torch.compile, every cause fix; a cause fix, none."""
    from gpuscope.analysis.fixes import _before

    ac, of = R.BY_ID["activation_checkpointing"], R.BY_ID["optimizer_fused"]
    assert _before(R.BY_ID["cuda_graphs"], (ac, of)) == (ac, of)
    assert _before(R.BY_ID["cuda_graphs"], (of,)) == (of,)
    assert _before(R.BY_ID["cuda_graphs"], (ac,)) == ()
    assert _before(R.BY_ID["kernel_fusion"], (ac, of)) == (ac, of)
    assert _before(ac, (ac, of)) == ()


@pytest.mark.parametrize("gain", [30.0, 2.0])
def test_the_jobs_first_fix_follows_the_order(gain: float) -> None:
    """The verdict's first fix is the first of the pace-setter's ordered list: the fused
    optimizer at 30 %, the batch ("Then, ...") after it; at 2 % the batch first."""
    recs = [rec("batch_size", 72.0), rec("optimizer_fused", gain)]
    R.order(recs)
    found = _findings(SimpleNamespace(recommendations=recs, rank=1), None)  # type: ignore[arg-type]
    fixes = [f for f in found if f.kind == "fix"]
    if gain >= R.SIGNIFICANT_PCT:
        assert [f.id for f in fixes] == ["optimizer_fused", "batch_size"]
        assert fixes[1].title.startswith("Then, use a larger batch")
    else:
        assert [f.id for f in fixes] == ["batch_size", "optimizer_fused"]
        assert fixes[0].title == BATCH_TITLE
    assert all(f.rank == 1 for f in fixes)

"""The job's fix for the pace-setter's own cause, estimated with a range by the replay every fix
uses (gpuscope.analysis.job.cause_fix; gpuscope.analysis.fixes.load_imbalance.equal_work_fix;
docs/metrics.md, "Gains from the path"): hand-built graphs and a hand-made 2-rank job, the
answers computed by hand in the docstrings."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent as G
from gpuscope.analysis.critical_path import HostEvent as H
from gpuscope.analysis.critical_path import critical_path_of
from gpuscope.analysis.fixes import load_imbalance as LI

US = 1_000


def test_equal_work_factors_by_hand() -> None:
    """Rank 1 computes 7.5 ms per step, the others 5.0: with 2 ranks the extra 2.5 ms is shared,
    every rank at (7.5 + 5.0) / 2 = 6.25 ms, × 6.25 / 7.5 = 0.8333 on rank 1; removed, × 5 / 7.5
    = 0.6667. With 4 ranks the extra spreads over 4: (7.5 + 3 × 5) / 4 / 7.5 = 0.75. A rank that
    does not compute more keeps its compute."""
    assert LI.equal_work_factors(7.5, 5.0, 2) == pytest.approx((6.25 / 7.5, 5.0 / 7.5))
    assert LI.equal_work_factors(7.5, 5.0, 4) == pytest.approx((0.75, 5.0 / 7.5))
    assert LI.equal_work_factors(5.0, 5.0, 2) == (1.0, 1.0)
    assert LI.equal_work_factors(0.0, 5.0, 2) == (1.0, 1.0)


def _gpu_bound_step():
    """One step 0..7600 µs: aten::mm 0..10 launches (call 4..6) a 7500 µs GEMM 100..7600, then
    the host idles in the step. The GEMM is the step."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 7600 * US, 1),
        H("aten::mm", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4 * US, 6 * US, 1, 1),
    ]
    gpu = [G("sm90_xmma_gemm_f32f32", "kernel", 100 * US, 7600 * US, 7, 1)]
    return critical_path_of(host, gpu, 1, [(0, 7600 * US)], [1])


def test_equal_work_is_replayed_on_the_pace_setters_graph() -> None:
    """The GPU-bound step above on the pace-setter (7.5 ms of compute against 5.0 on the other
    rank), untraced step 7.6 ms. Balanced (low, mid): the GEMM × 0.8333 = 6250 µs ends at 6350:
    1 − 6350 / 7600 = 16.45 % (the point, at the prior's host scale 0.55: no host speed is
    fitted on a GPU-bound step); removed (high): 5000 µs, ends at 5100: 1 − 5100 / 7600 =
    32.89 %. The low end is the balanced step on the slowest host the range allows, the prior's
    0.72 (against a known untraced step no host variation is stacked on the prior): the step's
    own host time (the annotation's 7,590 µs and aten::mm's 10, host work to the replay) takes
    7600 × 0.72 = 5,472 µs there and does not bind, so the low end is the point. No proven bound:
    the estimate is the replay's, with its range."""
    cp = _gpu_bound_step()
    ctx = GN.Context(n_steps=1, step_ms=7.6, untraced_step_ms=7.6)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    rec = LI.equal_work_fix(1, 7.5, 5.0, 2, cp, ctx)
    assert rec.id == "load_imbalance" and rec.bound_pct is None
    assert rec.title == "Give rank 1 equal work: it computes 50.0 % more per step"
    est = rec.estimate
    assert est is not None and est.method == "critical_path"
    assert est.gain_pct == pytest.approx(100 * (1 - 6350 / 7600), abs=0.1)
    assert GN.HOST_SCALE_PRIOR[2] * 7600 < 6350  # the slowest host the range allows: no bind
    assert est.low_pct == pytest.approx(100 * (1 - 6350 / 7600), abs=0.2)
    assert est.high_pct == pytest.approx(100 * (1 - 5100 / 7600), abs=0.2)
    assert rec.evidence["balanced_factor"] == pytest.approx(6.25 / 7.5)
    assert "computes 50.0 % more per step" in rec.evidence["summary"]


def test_a_wait_inside_the_ranks_collectives_is_not_the_fixs() -> None:
    """The step above followed, on the same stream, by an all-reduce kernel 7600..8600 µs that is
    200 µs of transfer and 800 µs of waiting for another rank (the profiler made that rank late):
    its collectives keep 200 / 1000 = 0.2 of their time. Untraced step 8.6 ms. The waits gone
    alone: the kernel ends at 7800, 1 − 7800 / 8600 = 9.30 %; with equal work too (balanced, the
    GEMM 6250 µs): 6350 + 200 = 6550, 23.84 %; the fix adds 23.84 − 9.30 = 14.53 % = 1250 / 8600
    (the GEMM's 1250 µs less, on the step as it is), not the 23.8 % the waits would lend it.
    Removed (high): GEMM 5000 µs, 1 − 5300 / 8600 − 9.30 % = 29.07 % = 2500 / 8600. On the
    slowest host the range allows (0.72, as above) the step's host time, 8,600 × 0.72 = 6,192 µs,
    stays under the balanced step's 6,550: the low end is the point."""
    host = [
        H("ProfilerStep#1", "user_annotation", 0, 8600 * US, 1),
        H("aten::mm", "cpu_op", 0, 10 * US, 1),
        H("cudaLaunchKernel", "cuda_runtime", 4 * US, 6 * US, 1, 1),
        H("cudaLaunchKernel", "cuda_runtime", 20 * US, 22 * US, 1, 2),
    ]
    gpu = [
        G("sm90_xmma_gemm_f32f32", "kernel", 100 * US, 7600 * US, 7, 1),
        G("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 7600 * US, 8600 * US, 7, 2),
    ]
    cp = critical_path_of(host, gpu, 1, [(0, 8600 * US)], [1])
    ctx = GN.Context(n_steps=1, step_ms=8.6, untraced_step_ms=8.6)
    ctx.host_scale_cal = GN.calibrated_scale(cp, ctx)
    rec = LI.equal_work_fix(1, 7.5, 5.0, 2, cp, ctx, comm_keep=0.2)
    est = rec.estimate
    assert est is not None
    assert est.gain_pct == pytest.approx(100 * 1250 / 8600, abs=0.1)
    assert est.low_pct == pytest.approx(100 * 1250 / 8600, abs=0.2)
    assert est.high_pct == pytest.approx(100 * 2500 / 8600, abs=0.2)
    assert rec.evidence["comm_kept_factor"] == 0.2


@pytest.mark.slow
@pytest.mark.memory_store
def test_the_jobs_cause_fix_is_listed_with_its_range(con, tmp_path: Path) -> None:
    """tests/test_straggler_chain.py's longer-compute job: rank 1's kernel 7,500 µs, rank 0's
    5,000, a step of 7.9 ms (untraced 7.9 ms). The verdict names rank 1's compute; its fix
    (load_imbalance, "give it equal work") is estimated on rank 1's graph: balanced, the GEMM 7.5
    → 6.25 ms, 1 − 6.65 / 7.9 = 15.82 % (the point); removed, 5.0 ms, 1 − 5.4 / 7.9 = 31.65 %,
    and up to 36.1 % with the untraced time the replay at host scale 0.3 leaves unexplained gone
    with the fix (every fix's range has that variant). The low end: on the slowest host the range
    allows (the prior's 0.72, no host variation stacked against a known untraced step) the
    step's own host time (its annotation, 7,900 µs a step) takes 5,688 µs and does not bind the
    balanced step: the low end is the point. Every face reads the same finding (the
    First fix row says the range); ``analyze --json``'s ``job.recommendations`` lists the fix
    first, with that estimate."""
    from gpuscope.analysis.job import diagnose, headline_rows, memo
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from test_straggler_chain import write_pair

    d = tmp_path / "run"
    d.mkdir()
    write_pair(d, (5000.0, 7500.0))
    [res] = ingest_paths(con, [d])
    job = diagnose(
        con, res.run_id, memo(lambda r: analyze_run(con, res.run_id, rank=r, untraced_step_ms=7.9))
    )
    fix = job.first_fix
    assert fix is not None and fix.id == "load_imbalance" and fix.rank == 1
    assert fix.gain_pct == pytest.approx(100 * (1 - 6.65 / 7.9), abs=0.05)
    assert fix.low_pct == pytest.approx(100 * (1 - 6.65 / 7.9), abs=0.1)
    assert 100 * (1 - 5.4 / 7.9) <= fix.high_pct <= 36.5
    rec = job.fixes[0]
    assert rec.id == "load_imbalance" and rec.estimate is not None
    assert (fix.gain_pct, fix.low_pct, fix.high_pct) == (
        rec.estimate.gain_pct,
        rec.estimate.low_pct,
        rec.estimate.high_pct,
    )
    doc = job.to_json()
    assert doc["recommendations"][0]["id"] == "load_imbalance"
    assert doc["recommendations"][0]["estimate"]["low_pct"] == fix.low_pct
    first = next(f for f in doc["findings"] if f["kind"] == "fix")
    assert first["low_pct"] == fix.low_pct and first["high_pct"] == fix.high_pct
    row = next(r for r in headline_rows(job) if r.label == "First fix")
    assert row.value == "Give rank 1 equal work: it computes 50.0 % more per step"
    assert row.note.startswith("step time down 15.8 % (range 15.8 to ")
    # the cause's own re-timing (the extra removed) is the top of the range, not its point
    assert job.retimed_step_ms == pytest.approx(5.4)
    assert doc["first_fix"] == "load_imbalance"
    # where the best estimated fix leaves the step no shorter, no fix leads the verdict: every
    # face's First fix row says so and names it; without an estimate the fix still leads
    import dataclasses

    for gain, led in ((-3.0, False), (0.0, False), (None, True), (0.5, True)):
        f2 = dataclasses.replace(fix, gain_pct=gain, low_pct=None, high_pct=None)
        j2 = dataclasses.replace(job, findings=(*job.findings[:1], f2, *job.findings[2:]))
        assert job.findings[1] is fix  # the pace-setter's cause, then its fix
        row = next(r for r in headline_rows(j2) if r.label == "First fix")
        assert (j2.first_fix is f2) is led and j2.best_fix is f2
        assert j2.to_json()["first_fix"] == ("load_imbalance" if led else None)
        if led:
            assert row.value == fix.title
        else:
            assert row.value == "none expected to help"
            assert row.note.startswith(f"best estimated: {fix.title}; ")
            assert ("not expected to help: step time up 3.00 %" in row.note) is (gain == -3.0)


def test_a_candidate_fix_goes_before_the_first_fix_it_outgains() -> None:
    """The rank's fixes 30 %, 5 %, 1 % and one without an estimate: a candidate at 6 % goes
    second, one at 0.5 % after the 1 % (before the one without an estimate), one without an
    estimate last; a fix of the candidate's id in the list is not listed twice."""
    from gpuscope.analysis import recommendation as R
    from gpuscope.analysis.job import with_candidate

    def rec(rid: str, gain: float | None) -> R.Recommendation:
        r = R.Recommendation(rid, "t", "w", {}, "c", 1.0)
        r.estimate = None if gain is None else R.Estimate(gain, gain - 1, gain + 1, None)
        return r

    a, b, c, d = rec("a", 30.0), rec("b", 5.0), rec("c", 1.0), rec("d", None)
    ids = lambda rs: [r.id for r in rs]  # noqa: E731
    assert ids(with_candidate([a, b, c, d], rec("x", 6.0))) == ["a", "x", "b", "c", "d"]
    assert ids(with_candidate([a, b, c, d], rec("x", 0.5))) == ["a", "b", "c", "x", "d"]
    assert ids(with_candidate([a, b, c, d], rec("x", None))) == ["a", "b", "c", "d", "x"]
    assert ids(with_candidate([a, rec("x", 2.0), c], rec("x", 6.0))) == ["a", "x", "c"]
    assert ids(with_candidate([a, b], None)) == ["a", "b"]


@pytest.mark.slow
@pytest.mark.memory_store
def test_an_abstained_verdict_still_estimates_equal_work_when_compute_leads(
    con, tmp_path: Path
) -> None:
    """The longer-compute job above (rank 1's kernel 7,500 µs, rank 0's 5,000): its named cause
    (rank 1 computes more) made abstained, as the verdict does when the largest excess explains
    under half the wait: "give it equal work" is still estimated, the same re-timing as for the
    named cause (15.82 % at the point). Not where the straggler moves between ranks, nor where
    another figure leads."""
    from dataclasses import replace

    from gpuscope.analysis.job import _pace_cause, abstained_fix, cause_fix, diagnose, memo
    from gpuscope.analysis.report import analyze_run
    from gpuscope.analysis.straggler_cause import ABSTAINED, COMPUTE, HOST, CauseFigure
    from gpuscope.ingest.loader import ingest_paths
    from test_straggler_chain import write_pair

    d = tmp_path / "run"
    d.mkdir()
    write_pair(d, (5000.0, 7500.0))
    [res] = ingest_paths(con, [d])
    report_of = memo(lambda r: analyze_run(con, res.run_id, rank=r, untraced_step_ms=7.9))
    job = diagnose(con, res.run_id, report_of)
    cause = _pace_cause(report_of(1), job.step, con)
    assert cause is not None and cause.cause == COMPUTE
    named = cause_fix(cause, report_of, con)
    abstained = replace(cause, cause=ABSTAINED, fix_id=None)
    got = abstained_fix(abstained, report_of, con)
    assert got is not None and named is not None and got.id == "load_imbalance"
    assert got.estimate == named.estimate
    assert got.estimate.gain_pct == pytest.approx(100 * (1 - 6.65 / 7.9), abs=0.05)
    assert abstained_fix(replace(abstained, pattern="moving"), report_of, con) is None
    host_first = (CauseFigure(HOST, 9.0, 0.0), *abstained.candidates)
    assert abstained_fix(replace(abstained, candidates=host_first), report_of, con) is None
    assert abstained_fix(cause, report_of, con) is None  # a named cause has its own fix


@pytest.mark.slow
def test_the_uneven_batch_pair_s_job_lists_equal_work_first(tmp_path: Path) -> None:
    """v172 (the tenth blind part: a Mistral-style decoder under DDP, rank 1 given 12 sequences
    to rank 0's 8, measured 14.3 % with them split evenly): the verdict abstains (rank 1's extra
    compute, 8.2 ms per step, explains under half the 61.4 ms wait the profiler's host cost
    stretches), yet its first fix is equal work, estimated on rank 1's graph, its range holding
    the gain; DDP's overlap (0.6 %) had been first."""
    import json

    from clitools import analysis_spec
    from gpuscope.analysis.job import diagnose, memo
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    root = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
    case = {c["case"]: c for c in json.loads((root / "truth.json").read_text())["cases"]}["v172"]
    con = connect(analysis_spec(tmp_path))  # the analysis, not the store
    [res] = ingest_paths(con, [root / "v172"])
    job = diagnose(con, res.run_id, memo(lambda r: analyze_run(con, res.run_id, rank=r)))
    con.close()
    fix = job.first_fix
    assert fix is not None and fix.id == "load_imbalance" and fix.rank == 1
    assert fix.low_pct is not None and fix.high_pct is not None
    assert fix.low_pct <= case["gain_pct"] <= fix.high_pct, fix
    assert "abstained" in next(f for f in job.findings if f.kind == "pace_cause").detail


def test_a_host_bound_pace_setter_takes_its_own_first_host_dispatch_fix() -> None:
    """A pace-setter named for host dispatch takes the first fix of its own list that cuts host
    dispatch and is estimated above 0 %: its list [overlap 8.6, dtensor 59.1, CUDA graphs 16.9]
    gives dtensor_dispatch (the overlap cuts no dispatch), its words naming it; with the dtensor
    fix at 0 % the next, CUDA graphs; with none above 0 % the cause keeps its own fix. Another
    cause, or host work of its own (load_imbalance), keeps its fix."""
    from types import SimpleNamespace

    from gpuscope.analysis import recommendation as R
    from gpuscope.analysis.job import host_dispatch_fix
    from gpuscope.analysis.straggler_cause import (
        COMPUTE,
        HOST,
        PaceSetterCause,
        fix_title,
    )

    def rec(rid: str, gain: float) -> R.Recommendation:
        r = R.Recommendation(rid, "t", "w", {}, "c", 1.0)
        r.estimate = R.Estimate(gain, gain - 5, gain + 5, None)
        return r

    words = f"rank 1 dispatches; first fix: {fix_title('cuda_graphs')} (cuda_graphs)."
    cause = PaceSetterCause(1, HOST, words, 50.0, "cuda_graphs", 63.0, 74.0, 27.4)

    def of(*recs: R.Recommendation, sharded_by: str | None = None):  # type: ignore[no-untyped-def]
        return lambda rank: SimpleNamespace(
            rank=rank, recommendations=list(recs), sharded_by=sharded_by
        )

    got = host_dispatch_fix(
        cause,
        of(
            rec("overlap_communication", 8.6),
            rec("dtensor_dispatch", 59.1),
            rec("cuda_graphs", 16.9),
        ),
    )
    assert got is not None and got.fix_id == "dtensor_dispatch"
    assert (
        got.words
        == f"rank 1 dispatches; first fix: {fix_title('dtensor_dispatch')} (dtensor_dispatch)."
    )
    got = host_dispatch_fix(
        cause, of(rec("dtensor_dispatch", 0.0), rec("kernel_fusion", 3.0), rec("cuda_graphs", 2.0))
    )
    assert got is not None and got.fix_id == "kernel_fusion"
    assert host_dispatch_fix(cause, of(rec("cuda_graphs", -1.0), rec("batch_size", 70.0))) is cause
    # a sharded pace-setter whose list offers no dispatch fix: no fix, and the words say why
    got = host_dispatch_fix(cause, of(rec("batch_size", 70.0), sharded_by="compiled collectives"))
    assert got is not None and got.fix_id is None
    assert got.words == (
        "rank 1 dispatches; no fix named: rank 1's parameters are sharded (compiled collectives), "
        "where CUDA graphs were timed slower or never finished, and no other fix that cuts "
        "dispatch is estimated to help."
    )
    sharded = of(rec("kernel_fusion", 3.0), sharded_by="FSDP")
    assert host_dispatch_fix(cause, sharded).fix_id == "kernel_fusion"  # type: ignore[union-attr]
    other = PaceSetterCause(1, COMPUTE, "w", 5.0, "load_imbalance", 9.0, 70.0, 60.0)
    assert host_dispatch_fix(other, of(rec("cuda_graphs", 20.0))) is other
    own = PaceSetterCause(1, HOST, "w", 5.0, "load_imbalance", 9.0, 70.0, 60.0)
    assert host_dispatch_fix(own, of(rec("cuda_graphs", 20.0))) is own


@pytest.mark.slow
@pytest.mark.parametrize("case", ["v27", "v171"])
def test_eager_tensor_parallel_jobs_lead_with_compiling_the_tp_model(
    tmp_path: Path, case: str
) -> None:
    """v27 and v171 (tensor parallel on 2 GPUs, eager DTensor; compiling the TP model measured
    58.5 and 62.1 %): the pace-setter is named for host dispatch and its own list leads with the
    dtensor fix (59.1 and 56.1 %); the job's first fix is that one, its range holding the gain,
    where CUDA graphs (16.9 and 16.7 %) had been."""
    import json

    from clitools import analysis_spec
    from gpuscope.analysis.job import diagnose, memo
    from gpuscope.analysis.report import analyze_run
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    root = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"
    truth = {c["case"]: c for c in json.loads((root / "truth.json").read_text())["cases"]}[case]
    con = connect(analysis_spec(tmp_path))  # the analysis, not the store
    [res] = ingest_paths(con, [root / case])
    job = diagnose(con, res.run_id, memo(lambda r: analyze_run(con, res.run_id, rank=r)))
    con.close()
    fix = job.first_fix
    assert fix is not None and fix.id == "dtensor_dispatch" and fix.rank == job.pace_setter
    assert fix.low_pct is not None and fix.high_pct is not None
    assert fix.low_pct <= truth["gain_pct"] <= fix.high_pct, fix
    cause = next(f for f in job.findings if f.kind == "pace_cause")
    assert cause.detail.endswith("(dtensor_dispatch).")

"""The regression gate (issue 24): `gpuscope check RUN --baseline RUN|TAG` and `gpuscope tag`.

Pure comparisons with answers computed by hand, hypothesis properties (identical runs never fail;
a planted 2x slowdown always fails), and the CLI on hand-built traces in a real store.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from clitools import cli_in_process, run_cli
from gpuscope.analysis.gate import Series, compare_metric, gate, spread
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_analysis import documented, key_paths
from tracegen import TraceBuilder

SE1 = 1.2533 * 1.4826  # the standard error of a median of n steps whose MAD is 1, times sqrt(n)


def test_spread_by_hand():
    s = spread([4, 1, 100, 3, 2])
    # sorted 1 2 3 4 100: median 3; |x - 3| = 0 1 1 2 97 -> MAD 1; p25 2, p75 4 (linear)
    assert (s.n, s.median, s.mad, s.p25, s.p75, s.iqr) == (5, 3, 1, 2, 4, 2)
    assert s.se == pytest.approx(SE1 / math.sqrt(5))
    assert spread([7.0]).se == 0.0  # one step: no noise estimate
    with pytest.raises(ValueError):
        spread([])


def _s(values, metric="step time", unit="ms", better="lower"):
    return Series(metric, unit, better, list(values))


def test_a_change_without_noise_is_judged_by_the_threshold():
    a, b = _s([10, 10, 10, 10]), _s([11, 11, 11, 11])
    v = compare_metric(a, b, max_regression_pct=5)
    assert (v.change_pct, v.noise, v.beyond_noise) == (pytest.approx(10), 0, True)
    assert v.regressed and v.status == "regressed"
    v = compare_metric(a, b, max_regression_pct=20)  # +10% is inside a 20% threshold
    assert not v.regressed and v.status == "within threshold"
    v = compare_metric(b, a, max_regression_pct=5)  # faster: improved, never a failure
    assert not v.regressed and v.status == "improved"


def test_noise_of_both_runs_by_hand():
    # A 9 10 11 and B 10 11 12: medians 10 and 11, MAD 1 each, n 3 each;
    # SE = 1.2533 * 1.4826 / sqrt(3) = 1.0728 each; noise = 2 * sqrt(2) * 1.0728 = 3.034 ms
    a = _s([9, 10, 11])
    v = compare_metric(a, _s([10, 11, 12]), max_regression_pct=5)
    assert v.noise == pytest.approx(2 * math.sqrt(2) * SE1 / math.sqrt(3))
    assert v.noise == pytest.approx(3.0343, abs=1e-4)
    assert v.change_pct == pytest.approx(10)  # beyond the 5% threshold ...
    assert v.status == "within noise" and not v.regressed  # ... but not beyond the noise
    v = compare_metric(a, _s([13, 14, 15]), max_regression_pct=5)  # 4 ms > 3.034 ms
    assert v.regressed and v.change_pct == pytest.approx(40)


def test_higher_is_better_metrics_regress_downwards():
    a = _s([100, 100], "throughput", "samples/s", "higher")
    v = compare_metric(a, _s([80, 80], "throughput", "samples/s", "higher"))
    assert v.regression_pct == pytest.approx(20) and v.regressed
    v = compare_metric(a, _s([120, 120], "throughput", "samples/s", "higher"))
    assert v.regression_pct == pytest.approx(-20) and v.status == "improved"


def test_gate_lists_every_metric_and_states_what_is_missing():
    base = {
        "step time": _s([10, 10]),
        "MFU": None,
        "GPU busy": _s([50, 50], "GPU busy", "%", "higher"),
    }
    cand = {
        "step time": _s([10, 10]),
        "MFU": _s([40, 40], "MFU", "%", "higher"),
        "GPU busy": _s([30, 30], "GPU busy", "%", "higher"),
    }
    r = gate(
        base,
        cand,
        baseline_run={"id": "a", "name": "A", "rank": 0},
        candidate_run={"id": "b", "name": "B", "rank": 0},
    )
    by = {m.metric: m for m in r.metrics}
    assert by["MFU"].status == "unknown" and by["MFU"].note == "the baseline run has no MFU"
    assert by["GPU busy"].regressed and r.failed
    assert r.summary().startswith("regressed: GPU busy -40.0%")
    md = r.markdown()
    assert md.startswith("### gpuscope check: ❌ regression")
    assert "| GPU busy (%) | 50.0 (0 · 0, 2) | 30.0 (0 · 0, 2) | -40.0% | 0% | ❌ regressed |" in md
    with pytest.raises(ValueError):
        gate(base, cand, max_regression_pct=-1)


def test_a_faster_run_whose_gpu_is_less_busy_does_not_fail():
    """The sample 'after' run: 4x the tokens per step in the same step time, with a less busy GPU.
    Busy is reported as worse, but it is a diagnosis: it gates only when the run is not faster."""
    base = {
        "step time": _s([15, 16, 15]),
        "throughput": _s([100, 100, 100], "throughput", "tokens/s", "higher"),
        "GPU busy": _s([43, 44, 43], "GPU busy", "%", "higher"),
    }
    cand = {
        "step time": _s([15, 16, 15]),
        "throughput": _s([400, 400, 400], "throughput", "tokens/s", "higher"),
        "GPU busy": _s([35, 35, 34], "GPU busy", "%", "higher"),
    }
    r = gate(base, cand)
    by = {m.metric: m for m in r.metrics}
    assert by["throughput"].status == "improved"
    assert by["GPU busy"].status == "worse, not gating" and not by["GPU busy"].regressed
    assert "throughput improved" in (by["GPU busy"].note or "")
    assert not r.failed and r.summary().startswith("ok:")
    assert "worse, not gating (the run is faster)" in r.markdown()
    # the same busy drop with no speed gain still fails
    cand["throughput"] = base["throughput"]
    assert gate(base, cand).failed


def test_markdown_cells_cannot_break_the_table():
    r = gate(
        {"step time": _s([1])},
        {"step time": _s([1])},
        baseline_run={"id": "x", "name": "a|b<script>", "rank": 0},
        candidate_run={"id": "y", "name": "c", "rank": 0},
    )
    md = r.markdown()
    assert "a\\|b\\<script\\>" in md and "<script>" not in md
    assert "the baseline run has 1 step(s)" in md  # noise unknown, said


step_times = st.lists(st.floats(1.0, 1e4, allow_nan=False), min_size=1, max_size=40)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(step_times, st.floats(0, 50), st.floats(0.1, 5))
def test_identical_runs_never_fail(values, threshold, z):
    series = {
        "step time": _s(values),
        "throughput": _s([1e3 / v for v in values], "throughput", "samples/s", "higher"),
        "GPU busy": _s([min(100.0, v / 100) for v in values], "GPU busy", "%", "higher"),
    }
    r = gate(series, dict(series), max_regression_pct=threshold, z=z)
    assert not r.failed and all(m.status == "within noise" for m in r.metrics)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.5, 1e4, allow_nan=False),
    st.lists(st.floats(0, 0.2), min_size=3, max_size=60),
    st.floats(0, 45),
)
@pytest.mark.slow
def test_a_planted_2x_slowdown_always_fails(m, jitter, threshold):
    """Per-step jitter up to 20% of the fastest step, 3+ steps, any threshold up to 45%: twice
    the step time (half the throughput) is always a regression, for both metrics."""
    a = [m * (1 + j) for j in jitter]
    b = [2 * v for v in a]
    base = {
        "step time": _s(a),
        "throughput": _s([64 / v for v in a], "throughput", "samples/s", "higher"),
    }
    cand = {
        "step time": _s(b),
        "throughput": _s([64 / v for v in b], "throughput", "samples/s", "higher"),
    }
    r = gate(base, cand, max_regression_pct=threshold)
    assert r.failed and {m.metric for m in r.regressions} == {"step time", "throughput"}


# -- the CLI on hand-built traces -----------------------------------------------------------------


def stepped(durations_us: list[float], busy_us: float, samples: int = 16) -> TraceBuilder:
    """One ProfilerStep per duration, back to back; in each, one kernel of ``busy_us`` launched
    at the step's start + 10 µs, running from + 20 µs."""
    t = TraceBuilder(extra_meta={"samples_per_step": samples})
    start = 0.0
    for i, d in enumerate(durations_us):
        t.step(i, start, d)
        t.launch("void gemm_kernel<float>()", start + 10, start + 20, busy_us)
        start += d
    return t


def _gate_traces(folder: Path) -> dict[str, Path]:
    """base, slow (2x) and same, written under ``folder``: name -> path."""
    return {
        "base": stepped([1000, 1010, 990, 1000, 1005], 500).write(folder / "base.json"),
        "slow": stepped([2000, 2020, 1980, 2000, 2010], 500).write(folder / "slow.json"),
        "same": stepped([1000, 1012, 988, 1001, 1004], 500).write(folder / "same.json"),
    }


def _ingest(traces: dict[str, Path], names: tuple[str, ...], db: list[str]) -> list[str]:
    """``gpuscope ingest PATH --name NAME --db ...`` for each of ``names``; the CLI's ``--db``."""
    for name in names:
        done = cli_in_process("ingest", str(traces[name]), "--name", name, *db)
        assert done.returncode == 0, done.stderr
    return db


@pytest.fixture(scope="module")
def gate_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base, slow and same ingested once for the module (by the CLI) into a single-process DuckDB
    file, closed: each test copies the file (:func:`gate_store`) and works on its own copy."""
    folder = tmp_path_factory.mktemp("gate")
    _ingest(_gate_traces(folder), ("base", "slow", "same"), ["--db", f"duckdb:{folder / 'store'}"])
    return folder / "store"


@pytest.fixture
def gate_store(gate_template: Path, db_path: Path) -> list[str]:
    """The test's own store: a single-process DuckDB file holding base, slow and same (a copy of
    :func:`gate_template`'s; a closed DuckDB database is the one file). The gate's logic, not the
    store, is under test (the analysis is the lake's: tests/test_store_equivalence.py)."""
    assert [f.name for f in gate_template.parent.iterdir() if f.suffix != ".json"] == ["store"]
    shutil.copyfile(gate_template, db_path)
    return ["--db", f"duckdb:{db_path}"]


@pytest.fixture
def gate_lake(tmp_path: Path, db_path: Path) -> list[str]:
    """The lake: moving a tag is a store transaction. base and same (the runs the tag test
    names; an ingest into the lake is 1.3 CPU s, a third of it for slow, which it never reads)."""
    return _ingest(_gate_traces(tmp_path), ("base", "same"), ["--db", str(db_path)])


@pytest.mark.slow
def test_check_against_a_tagged_baseline(gate_store, capsys):
    db = gate_store
    code, out, err = run_cli(capsys, "tag", "base", "baseline/main", *db)
    assert code == 0 and "tagged baseline/main" in out, err
    # a 2x slower candidate: exit 1, one line on stderr naming the metric and the noise
    code, out, err = run_cli(capsys, "check", "slow", "--baseline", "baseline/main", *db)
    assert code == 1 and err.count("\n") == 1
    assert "step time +100.0% (median 1.00 → 2.00 ms; noise ±1.86%" in err and "noise ±" in err
    assert "throughput -50.0%" in err
    assert "GPU busy" in err  # 500 of 1000 µs busy -> 500 of 2000 µs
    assert "tag baseline/main" in out and "regressed" in out
    # a candidate that differs by a few µs per step: ok
    code, out, err = run_cli(capsys, "check", "same", "--baseline", "baseline/main", *db)
    assert code == 0 and err == "" and "ok: no metric worse" in out
    # the baseline against itself: ok
    assert run_cli(capsys, "check", "base", "--baseline", "base", *db)[0] == 0
    # a threshold of 150%: the 2x slowdown is beyond noise but tolerated
    code, out, _ = run_cli(
        capsys, "check", "slow", "--baseline", "base", "--max-regression", "150", *db
    )
    assert code == 0 and "within threshold" in out
    # Markdown for a pull request
    code, out, _ = run_cli(capsys, "check", "slow", "--baseline", "base", "--markdown", *db)
    assert code == 1 and out.startswith("### gpuscope check: ❌ regression")
    # MAD and IQR of 1.000 1.010 0.990 1.000 1.005 ms: 0.005 and 0.005; noise
    # 2 × √((1.8581 × 0.005/√5)² + (1.8581 × 0.01/√5)²) = 0.0186 ms = 1.86% of 1 ms
    row = "| step time (ms) | 1.00 (0.00500 · 0.00500, 5) | 2.00 (0.0100 · 0.0100, 5) | +100.0% | 1.86% |"
    assert row + " ❌ regressed |" in out


@pytest.mark.slow
def test_check_json_matches_docs_and_bad_input(gate_store, capsys):
    db = gate_store
    code, out, err = run_cli(capsys, "check", "slow", "--baseline", "base", "--json", *db)
    assert code == 1, err
    doc = json.loads(out)
    keys, leaves = documented("check --baseline")
    got = key_paths(doc, leaves)
    assert got - keys == set() and keys - got == set()
    st_ = next(m for m in doc["metrics"] if m["metric"] == "step time")
    assert st_["baseline"]["median"] == pytest.approx(1.0) and st_["candidate"][
        "median"
    ] == pytest.approx(2.0)
    assert st_["baseline"]["mad"] == pytest.approx(0.005) and st_["status"] == "regressed"
    assert doc["failed"] is True and doc["broken_bounds"] == []
    # an absolute bound beside the baseline still holds the candidate
    code, out, err = run_cli(
        capsys, "check", "same", "--baseline", "base", "--max-step-ms", "0.5", *db
    )
    assert code == 1 and "--max-step-ms 0.5" in err
    # bad input: exit 2, one line
    code, _, err = run_cli(capsys, "check", "slow", "--baseline", "nothing-here", *db)
    assert code == 2 and err == "gpuscope: nothing-here: no such run or tag (see `gpuscope runs`)\n"
    code, _, err = run_cli(
        capsys, "check", "slow", "--baseline", "base", "--max-regression", "-3", *db
    )
    assert code == 2 and "--max-regression" in err


@pytest.mark.slow
def test_tag_names_one_run(gate_lake, capsys):
    db = gate_lake
    from gpuscope.store import connect, runs_with_tag

    assert run_cli(capsys, "tag", "base", "baseline/main", *db)[0] == 0
    code, out, _ = run_cli(capsys, "tag", "same", "baseline/main", *db)
    assert code == 0 and "taken from" in out
    con = connect(db[1])
    try:
        holders = runs_with_tag(con, "baseline/main")
        same = con.execute("SELECT run_id FROM runs WHERE name = 'same'").fetchone()[0]
    finally:
        con.close()
    assert holders == [same]
    # the gate now reads 'same' as the baseline
    code, out, _ = run_cli(capsys, "check", "base", "--baseline", "baseline/main", "--json", *db)
    assert json.loads(out)["baseline"]["id"] == same and code == 0
    assert run_cli(capsys, "tag", "same", "baseline/main", "--remove", *db)[0] == 0
    code, _, err = run_cli(capsys, "check", "base", "--baseline", "baseline/main", *db)
    assert code == 2 and "no such run or tag" in err
    code, _, err = run_cli(capsys, "tag", "base", "two words", *db)
    assert code == 2 and "without spaces" in err
    code, _, err = run_cli(capsys, "tag", "nope", "x", *db)
    assert code == 2 and "nope: no such run" in err

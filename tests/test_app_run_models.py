"""AppTest: the Run page's sections show the typed page models and dataclasses analysis builds
(``run_views.Headline``, ``.Banners``, ``.Breakdowns``, ``.TopKernels``, the Recommendations and
the MemoryResult), on hand-built traces whose answers are computed by hand, and on a sample."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, card_lines, cards, ingest, open_app, texts
from tracegen import TraceBuilder

RUN = "screens/run.py"
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def four_steps(**meta: float) -> TraceBuilder:
    """Four steps of 1000 µs. In each: the DataLoader 0..300 µs, then one 500 µs kernel launched
    at 300 and run 310..810. GPU busy 4 × 500 of 4000 µs = 50 %. Idle 2000 µs: data loading
    4 × 300 = 1200 (0.30 ms per step, 30 % of the window, the top cause); the rest is host time
    in the steps (cpu_overhead 800: 10 before each kernel, 190 after it)."""
    t = TraceBuilder(extra_meta=dict(meta))
    for i in range(4):
        s = 1000 * i
        t.step(i + 1, s, 1000)
        t.annotation(DL, s, 300)
        t.launch("elementwise_kernel", s + 300, s + 310, 500)
    return t


@pytest.mark.slow
def test_headline_cards_show_the_page_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = app_store(tmp_path, monkeypatch, lake=False)
    (rid,) = ingest(db, four_steps().write(tmp_path / "four.json"))
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    shown = {m.label: m for m in cards(at)}
    # the job's verdict (one rank: the job is that rank), then the rank's two other cards
    assert list(shown)[:5] == [
        "Job step time",
        "GPU busy",
        "MFU",
        "Tensor-core share",
        "Top idle cause",
    ]
    step = shown["Job step time"]
    assert step.value == "1.00 ms" and step.beside == "p90 1.00 · max 1.00 ms"
    assert "median of 3 step periods" in step.help  # 4 steps: 3 periods between them
    busy = shown["GPU busy"]
    assert busy.value == "50.0 %" and "compute 50.0 %" in busy.help
    assert shown["MFU"].value == "—"  # no FLOPs from a kernel without shapes: no figure
    assert shown["Tensor-core share"].value == "0.0 %"
    top = shown["Top idle cause"]
    assert top.value == "0.30 ms" and top.beside == "Data loading · 30.0 %"
    # the verdict's first finding, a line under the cards (the same block)
    assert card_lines(at)[0].startswith("First fix: Load batches in background workers")

    # the breakdowns (ms per step): idle 0.30 data loading + 0.20 CPU overhead; 0.50 elementwise
    bars = {}
    for c in at.get("plotly_chart"):
        for d in json.loads(c.proto.spec)["data"]:
            if d.get("type") == "bar" and d.get("orientation") == "h":
                bars.update(zip(d["y"], d["x"], strict=True))
    assert bars["Data loading"] == pytest.approx(0.3) and bars["CPU overhead"] == pytest.approx(0.2)
    assert sum(bars[c] for c in ("Launch overhead", "Host sync", "Other", "Communication")) == 0
    assert bars["elementwise"] == pytest.approx(0.5) and bars["gemm"] == 0
    # the top kernels: one kernel, 4 launches of 500 µs, all the kernel time, no tensor cores
    [table] = [h.proto.body for h in at.get("html") if "gs-top" in h.proto.body]
    [row] = re.findall(r"<tr><td.*?</tr>", table)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[:9] == [
        "elementwise_kernel",
        "elementwise",
        "4",
        "500.0 µs",
        "100.0 %",
        "500.0 µs",
        "500.0 µs",
        "500.0 µs",
        "no",
    ]
    assert any("over the 4 step(s) of the window" in c for c in texts(at, "caption"))
    # the fixes (typed Recommendations): removing the data loading
    # (30 % of the window) bounds dataloader_workers at 30 %, the high end of its range
    # the fix list's heads (the verdict's "First fix:" line above them is the job's), read as
    # shown: Markdown's escapes of "(" and ")" dropped
    heads = [
        str(m.value).replace("\\", "")
        for m in at.markdown
        if str(m.value).startswith("**") and "** — **" in str(m.value)
    ]
    ids = [c for c in texts(at, "caption") if c.startswith("id ")]
    # the batch fix changes the training: after dataloader_workers (29.3 % at the host-scale
    # prior's point, no untraced step; a fix that keeps it)
    assert ids == ["id `dataloader_workers`", "id `batch_size`"]
    assert heads[0] == (
        "**Load batches in background workers** — "
        "**step time down 29.3% (range 7.9 to 30%); at most 30%**"
    )
    assert heads[1].startswith("**Then, use a larger batch")
    assert "at most" not in heads[1]  # batch size: no proven bound
    assert any("num_workers" in str(c.value) for c in at.code)

    from gpuscope.analysis import run_views
    from gpuscope.web import data

    h = data.headline(str(db), rid, None)  # what the cards were drawn from
    assert isinstance(h, run_views.Headline)
    assert (h.step_p50_ms, h.busy_pct, h.n_steps) == (pytest.approx(1.0), pytest.approx(50.0), 4)
    assert h.top_idle == run_views.TopIdleCause(
        "data_loading", pytest.approx(0.3), pytest.approx(30.0)
    )


@pytest.mark.slow
def test_the_profiler_note_shows_the_page_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The four steps recorded 0.8 ms a step without the profiler: traced 1.0 ms is +25 %, and
    host-side figures are capped at 0.8 - 0.5 (the median GPU busy per step) = 0.30 ms."""
    db = app_store(tmp_path, monkeypatch, lake=False)
    trace = four_steps(**{"gpuscope.untraced_step_ms": 0.8})
    (rid,) = ingest(db, trace.write(tmp_path / "four.json"))
    at = open_app(RUN, {"run": rid}, timeout=120)
    assert not at.exception, at.exception
    [note] = [str(i.value) for i in at.info if "Without the profiler" in str(i.value)]
    assert note.startswith(
        "Without the profiler a step takes 0.80 ms (median, recorded by gpuscope.capture); "
        "traced it takes 1.00 ms: the profiler adds 25.0 %. Host-side idle and fixes are capped "
        "at 0.30 ms per step"
    )
    assert not at.warning  # GPU activity: no warning leads the page

    from gpuscope.analysis import run_views
    from gpuscope.web import data

    b = data.banners(str(db), rid, None)
    assert isinstance(b, run_views.Banners) and b.lead is None and b.notes == ()
    assert b.profiler is not None and b.profiler.inflation_pct == pytest.approx(25.0)


@pytest.mark.slow
def test_the_memory_section_shows_the_typed_memory_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory section reads the report's MemoryResult: its cards and tables say what the
    ``memory`` part of ``analyze --json`` says."""
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store import connect

    db = app_store(tmp_path, monkeypatch, lake=False)
    (rid,) = ingest(db, SAMPLES / "memory" / "gpt_mem.pt.trace.json.gz")
    con = connect(db)
    try:
        m = analyze_run(con, rid, with_path=False).to_json()["memory"]
    finally:
        con.close()
    at = open_app(RUN, {"run": rid}, timeout=120)
    assert not at.exception, at.exception
    cards = {c.label: c for c in at.metric}

    def gib(b: float) -> str:
        return f"{b / 2**30:,.3f} GiB"

    assert cards["Peak allocated"].value == gib(m["peak_allocated_bytes"])
    reserved = cards["Peak reserved"]
    assert reserved.value == gib(m["peak_reserved_bytes"])
    assert reserved.proto.delta == (
        f"{m['peak_reserved_pct']:.1f}% of {gib(m['device_total_bytes'])}"
    )
    gap = m["reserved_minus_allocated_at_peak_bytes"]
    assert cards["Reserved − allocated at the peak"].value == gib(gap)
    assert cards["cudaMalloc/cudaFree in steps"].value == f"{m['malloc'].get('calls', 0):,}"
    tables = [d.value for d in at.dataframe]
    phases = next(t for t in tables if "allocated per step (GiB)" in t.columns and "phase" in t)
    assert list(phases["phase"]) == list(m["by_phase"])
    assert list(phases["allocations per step"]) == [
        v["allocations_per_step"] for v in m["by_phase"].values()
    ]
    ops = next(t for t in tables if "op" in t.columns and "allocations per step" in t.columns)
    assert list(ops["op"]) == [o["op"] for o in m["top_ops"]]


@pytest.mark.slow
def test_a_host_side_top_idle_cause_is_shown_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: the four steps recorded 0.6 ms a step without the profiler: host-side figures
    are capped at 0.6 - 0.5 (GPU busy per step) = 0.10 ms, so the top idle cause (data loading,
    0.30 ms per step in the trace) reads "≤ 0.10 ms" with its profiled 0.30 ms beside it, as the
    profiler's note below says (never 0.30 ms above a note capping it at 0.10)."""
    db = app_store(tmp_path, monkeypatch, lake=False)
    trace = four_steps(**{"gpuscope.untraced_step_ms": 0.6})
    (rid,) = ingest(db, trace.write(tmp_path / "four.json"))
    at = open_app(RUN, {"run": rid}, timeout=120)
    assert not at.exception, at.exception
    top = [m for m in cards(at) if m.label == "Top idle cause"][-1]
    assert top.value == "≤ 0.10 ms"
    assert top.beside == "Data loading · 0.30 ms profiled"
    assert "at most 0.10 ms without the profiler" in top.help
    [note] = [str(i.value) for i in at.info if "Without the profiler" in str(i.value)]
    assert "capped at 0.10 ms per step" in note

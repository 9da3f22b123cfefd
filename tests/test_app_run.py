"""AppTest: the Run page (query params, ranks, the sawtooth and its zoom, error paths)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, cards, ingest, open_app, texts
from synth import nvml_series, training_trace

RUN = "screens/run.py"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return app_store(tmp_path, monkeypatch, lake=False)


@pytest.fixture
def run_id(db: Path, tmp_path: Path) -> str:
    """A six-step "before" run in the test's own store: for a test that changes the store."""
    (rid,) = ingest(
        db, training_trace("before", steps=6).write(tmp_path / "before.pt.trace.json.gz")
    )
    return rid


@pytest.fixture(scope="module")
def before_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same run ingested once for the module's pages that only read it: (store, run id). A
    DuckDB file, as :func:`db` gives; the pages' caches (keyed by store) are shared by the tests
    that open it, as by a user's reloads."""
    tmp = tmp_path_factory.mktemp("before")
    spec = f"duckdb:{tmp / 'store.duckdb'}"
    trace = training_trace("before", steps=6).write(tmp / "before.pt.trace.json.gz")
    (rid,) = ingest(spec, trace)  # type: ignore[arg-type]
    return spec, rid


@pytest.fixture
def before_run(before_store: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """:func:`before_store` as the test's store (``$GPUSCOPE_DB``): its run id."""
    monkeypatch.setenv("GPUSCOPE_DB", before_store[0])
    return before_store[1]


def _sawtooth(at):
    charts = at.get("plotly_chart")
    assert charts, "no plotly chart on the page"
    return charts[0]


@pytest.mark.slow
def test_run_page_shows_the_sawtooth(before_run: str) -> None:
    at = open_app(RUN, {"run": before_run})
    assert not at.exception, at.exception
    assert texts(at, "title") == ["before"]
    assert "GPU busy over time" in texts(at, "subheader")
    spec = _sawtooth(at).proto.spec
    assert (
        ("GPU busy" in spec or "busy: gemm" in spec)
        and "Data loading" in spec
        and "step start" in spec
    )
    caption = next(c for c in texts(at, "caption") if "drag across the plot" in c)
    assert "GPU 0" in caption
    labels = [m.label for m in cards(at)]
    assert labels[:5] == [  # the job's verdict (one rank: the job is that rank), then its own
        "Job step time",
        "GPU busy",
        "MFU",
        "Tensor-core share",
        "Top idle cause",
    ]
    assert cards(at)[0].value.endswith(" ms") and cards(at)[1].value.endswith(" %")
    assert cards(at)[4].beside.startswith("Data loading")
    assert "Fixes" in texts(at, "subheader")
    fixes = [c.value for c in at.code]
    assert any("num_workers" in c for c in fixes)  # the data-loading fix, copyable
    assert any("Load batches in background workers" in m for m in texts(at, "markdown"))


@pytest.mark.slow
def test_run_id_prefix_is_canonicalised(before_run: str) -> None:
    at = open_app(RUN, {"run": before_run[:6]})
    assert not at.exception
    assert at.query_params["run"] == before_run


@pytest.mark.slow
def test_unknown_run_id_is_a_clear_message(before_run: str) -> None:
    at = open_app(RUN, {"run": "doesnotexist"})
    assert not at.exception
    (err,) = texts(at, "error")
    assert "doesnotexist" in err and "No run" in err
    assert not at.get("plotly_chart")


@pytest.mark.slow
def test_no_run_in_the_url_offers_a_picker(before_run: str) -> None:
    at = open_app(RUN, {})
    assert not at.exception
    at.selectbox[0].set_value(before_run).run()
    assert at.query_params["run"] == before_run
    assert texts(at, "title") == ["before"]


@pytest.mark.slow
def test_empty_store_run_page(db: Path) -> None:
    at = open_app(RUN, {})
    assert not at.exception
    assert any("No run chosen" in t for t in texts(at, "info"))


@pytest.mark.slow
def test_zoom_to_steps_requeries_at_finer_resolution(before_run: str) -> None:
    at = open_app(RUN, {"run": before_run})
    whole = next(c for c in texts(at, "caption") if "drag across" in c)
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    slider.set_value((3, 3)).run()
    assert not at.exception
    one = next(c for c in texts(at, "caption") if "drag across" in c)
    assert whole != one
    # a step's 40 tiny optimizer kernels share pixels: still the busy share per (finer) bucket
    bucket = lambda c: float(c.split("buckets of ")[1].split(" µs")[0])  # noqa: E731
    assert bucket(one) < bucket(whole) / 4 and "min–max band" in one
    start, end = (float(x.replace(",", "")) for x in one.split(" ms of")[0].split("–"))
    assert 0 < end - start < 40  # one step (~23 ms), not the whole window (~140 ms)


def test_box_selection_gives_the_new_range() -> None:
    from gpuscope.web.views import MIN_VIEW_NS, clamp_view, range_from_selection

    sel = {"selection": {"points": [], "box": [{"x": [12.5, 10.0], "y": [0, 100]}], "lasso": []}}
    assert range_from_selection(sel, 1_000) == (1_000 + 10_000_000, 1_000 + 12_500_000)
    assert range_from_selection({"selection": {"box": []}}, 0) is None
    assert range_from_selection(None, 0) is None
    assert clamp_view(-50_000, 100_000, 0, 1_000_000) == (0, 150_000)  # moved inside, width kept
    assert clamp_view(500, 500, 0, 1_000_000) == (500, 500 + MIN_VIEW_NS)  # never empty
    assert clamp_view(0, 10**9, 0, 1_000_000) == (0, 1_000_000)  # never wider than the window


@pytest.mark.slow
def test_multi_rank_run_has_a_rank_selector(db: Path, tmp_path: Path) -> None:
    d = tmp_path / "ddp"
    d.mkdir()
    for r in (0, 1):
        training_trace("after", rank=r, world_size=2, seed=r).write(
            d / f"ddp_rank{r}.pt.trace.json.gz"
        )
    (rid,) = ingest(db, d)
    at = open_app(RUN, {"run": rid})
    assert not at.exception
    seg = at.segmented_control[0]
    assert seg.options == ["rank 0", "rank 1"] or list(seg.proto.options) == ["rank 0", "rank 1"]
    at.query_params["rank"] = "1"
    at.run()
    assert not at.exception and at.query_params["rank"] == "1"
    at.query_params["rank"] = "7"
    at.run()
    assert not at.exception
    from gpuscope.web import data, views

    opened, _ = views.opening_rank(data.job(str(db), rid))  # the rank a URL without one opens
    assert any(
        "Rank “7” is not in this run" in w and f"showing rank {opened}" in w
        for w in texts(at, "warning")
    )
    assert at.query_params["rank"] == str(opened)


@pytest.mark.slow
def test_nvml_overlay(db: Path, run_id: str, tmp_path: Path) -> None:
    from gpuscope.ingest.nvml import ingest_series
    from gpuscope.store import connect, transaction
    from tracegen import BASE_NS

    # one sample every 100 ms (NVML's usual rate): a one-step zoom (~23 ms) falls between two
    series = nvml_series(
        tmp_path / "gpu.nvml.jsonl", start_ns=BASE_NS, seconds=0.3, interval_ms=100.0
    )
    con = connect(db)
    with transaction(con):
        ingest_series(con, series, run_id=run_id)
    con.close()
    at = open_app(RUN, {"run": run_id})
    assert not at.exception
    assert "NVML GPU util" in _sawtooth(at).proto.spec
    assert any("NVML utilization overlaid" in c for c in texts(at, "caption"))
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    slider.set_value((3, 3)).run()
    assert not at.exception
    assert "NVML GPU util" in _sawtooth(at).proto.spec  # still on after the zoom
    assert any("NVML utilization overlaid" in c for c in texts(at, "caption"))


@pytest.mark.slow
def test_nvml_only_run(db: Path, tmp_path: Path) -> None:
    from gpuscope.ingest.nvml import ingest_series
    from gpuscope.store import connect, transaction

    con = connect(db)
    with transaction(con):
        rid = ingest_series(con, nvml_series(tmp_path / "solo.nvml.jsonl")).run_id
    con.close()
    at = open_app(RUN, {"run": rid})
    assert not at.exception
    assert len(at.get("plotly_chart")) >= 1
    assert any("NVML series without a trace" in c for c in texts(at, "caption"))


@pytest.mark.slow
def test_steps_slider_stays_a_range_across_reruns_and_follows_the_zoom(before_run: str) -> None:
    """The crash of issue 10: on the page's second run (the below-the-fold rerun, a zoom) the
    slider came back single-valued and ``on_steps`` died unpacking an int."""
    at = open_app(RUN, {"run": before_run})
    at.run()  # a second run of the same page, as the browser makes after painting
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    assert isinstance(slider.value, tuple) and len(slider.value) == 2
    first, last = slider.value
    assert first < last
    slider.set_value((3, 3)).run()
    at.run()
    assert not at.exception, at.exception
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    assert slider.value == (3, 3)  # the slider shows the zoomed view
    one = next(c for c in texts(at, "caption") if "drag across" in c)
    start, end = (float(x.replace(",", "")) for x in one.split(" ms of")[0].split("–"))
    assert 0 < end - start < 40
    at.button(key=next(b.key for b in at.button if b.proto.help == "Show the whole window"))
    next(b for b in at.button if b.proto.help == "Show the whole window").click().run()
    assert not at.exception, at.exception
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    assert slider.value == (first, last)  # back to every step with the whole window


def test_step_pair_accepts_every_shape() -> None:
    from gpuscope.web.views import step_pair

    nums = [1, 2, 3, 4]
    assert step_pair((3, 2), nums) == (2, 3)
    assert step_pair(3, nums) == (3, 3)  # a single step (what crashed the page)
    assert step_pair([9], nums) is None and step_pair(None, nums) is None


@pytest.mark.slow
def test_a_failing_section_shows_one_plain_line_and_the_rest_of_the_page(
    before_run: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in one section: that section says what could not be shown, without a traceback;
    the sections around it still show their content; the traceback goes to the server log."""
    from gpuscope.web import figures

    def broken(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(figures, "idle_by_cause", broken)
    with caplog.at_level("ERROR", logger="gpuscope.web"):
        at = open_app(RUN, {"run": before_run})
    assert not at.exception
    (err,) = texts(at, "error")
    assert err.startswith("Breakdowns could not be shown: an internal error (RuntimeError).")
    assert "secret internals" not in err and "Traceback" not in err
    assert not at.get("expander") or all("Details" not in e.label for e in at.expander)
    heads = texts(at, "subheader")
    assert "GPU busy over time" in heads and "Top kernels" in heads and "Fixes" in heads
    assert any(c.value and "num_workers" in c.value for c in at.code)  # the fixes still show
    assert [m.label for m in cards(at)][:2] == ["Job step time", "GPU busy"]
    assert "secret internals" in caplog.text and "Traceback" in caplog.text


HOSTILE = "![b](http://beacon.invalid/x.png) [click](http://evil.invalid) :red[x] $x$ \u202eevil"


@pytest.mark.slow
def test_text_from_data_is_rendered_as_text(db: Path, run_id: str) -> None:
    """A run name, tags, the URL's id and rank reach the page as text: escaped Markdown, no
    image or link syntax left, bidi controls removed, long names cut with the full one on hover."""
    from gpuscope.store import connect, set_name, set_tags
    from gpuscope.web import ui

    con = connect(db)
    set_name(con, run_id, HOSTILE)
    set_tags(con, run_id, ["![t](http://beacon.invalid/t.png)"])
    con.close()
    at = open_app(RUN, {"run": run_id, "rank": "![r](http://beacon.invalid/r.png)"})
    assert not at.exception
    (title,) = texts(at, "title")
    assert title == ui.md(HOSTILE)
    assert "![" not in title and "](" not in title and "\u202e" not in title
    assert "\\!\\[b\\]\\(http\\:\u2060//beacon" in title and ":red[" not in title
    cap = next(c for c in texts(at, "caption") if "events" in c)
    assert "![t]" not in cap and "\\!\\[t\\]" in cap
    (warn,) = [w for w in texts(at, "warning") if "not in this run" in w]
    assert "![r]" not in warn and "showing rank 0" in warn

    import streamlit as st

    long = "x" * 10_000
    con = connect(db)
    set_name(con, run_id, long)
    con.close()
    st.cache_data.clear()  # renamed outside the app: its cached run row is stale
    at = open_app(RUN, {"run": run_id})
    (title,) = texts(at, "title")
    assert len(title) == ui.NAME_MAX and title.endswith("…")
    assert at.title[0].proto.help == long  # the full value on hover

    at = open_app(RUN, {"run": "![i](http://beacon.invalid/id.png)"})
    (err,) = texts(at, "error")
    assert "No run" in err and "![i]" not in err and "\\!\\[i\\]" in err


def test_md_helper() -> None:
    from gpuscope.web import ui

    assert ui.plain("a\nb\tc\u202e") == "a b c"
    assert ui.md("a_b*c") == "a\\_b\\*c"
    assert ui.md("- x") == "\\- x" and ui.md("1. x") == "1\\. x"  # no list
    # bare URLs, www. and e-mail addresses: a word joiner stops GFM's autolinking
    assert ui.md("http://h/x") == "http\\:\u2060//h/x" and ui.md("www.h.x") == "www\u2060.h.x"
    assert ui.md("a@h.x") == "a\u2060\\@h.x"
    assert ui.md_code("x`y") == "`x'y`"
    assert ui.plot_text("<a href='x'>y</a>") == "&lt;a href='x'&gt;y&lt;/a&gt;"
    assert ui.hover("short") is None and ui.hover("y" * 200) == "y" * 200


def test_kernels_are_bars_only_when_each_has_a_pixel() -> None:
    import pandas as pd
    from gpuscope.web.views import one_per_pixel

    # 1,000 ns drawn 10 px wide: 100 ns per pixel
    apart = pd.DataFrame({"start_ns": [0, 300, 700], "end_ns": [150, 450, 900]})
    assert one_per_pixel(apart, 0, 1_000, 10)
    crowded = pd.DataFrame({"start_ns": [0, 120, 150], "end_ns": [100, 140, 190]})
    assert not one_per_pixel(crowded, 0, 1_000, 10)  # two kernels inside pixel 1
    long_then_short = pd.DataFrame({"start_ns": [0, 500], "end_ns": [560, 520]})
    assert not one_per_pixel(long_then_short, 0, 1_000, 10)  # nested: same pixels
    assert one_per_pixel(apart.iloc[:0], 0, 1_000, 10)


@pytest.mark.slow
def test_breakdowns_per_step_and_the_top_kernels_table(before_run: str) -> None:
    """Both breakdown charts per step and labelled so; the top-kernels table has every column
    (max included) and each kernel's full name on hover; readable units."""
    import json

    at = open_app(RUN, {"run": before_run})
    heads = texts(at, "subheader")
    assert "Idle time per step, by cause" in heads
    assert "Kernel time per step, by category" in heads
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")[1:3]]
    titles = [s["layout"]["xaxis"]["title"]["text"] for s in specs]
    assert titles == ["idle per step", "kernel time per step"]
    table = next(h.proto.body for h in at.get("html") if "gs-top" in h.proto.body)
    for col in ("Kernel", "Count", "Total / step", "Share", "Mean", "Min", "Max", "TC", "Dtype"):
        assert f">{col}</th>" in table
    assert 'title="sm90_xmma_gemm_bf16bf16' in table or 'title="ampere_sgemm' in table
    assert "None" not in table and "e+0" not in table
    assert "&lt;" in table or "<4," not in table  # kernel templates escaped, never tags


def test_evidence_values_read_as_a_person_writes_them() -> None:
    from gpuscope.web.views import _fmt_value, _rows_frame

    assert _fmt_value("launches_per_step", 1920.4) == "1,920/step"  # was 1.92e+03/step
    assert _fmt_value("gap_us", 42659) == "42.66 ms"  # was 42659 µs
    assert _fmt_value("tokens_per_s", 12345.2) == "12,345 tokens/s"  # was 1/s
    assert _fmt_value("x", None) == "—"
    df = _rows_frame([{"name": "a", "dur_us": 1200, "stream": None}, {"name": None}])
    assert "None" not in df.astype(str).to_string() and "—" in df["stream"].tolist()


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.fixture(scope="module")
def ddp_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The real DDP pair ingested once for the module's pages that only read it: (store, run id).
    A DuckDB file, as ``app_store(..., lake=False)`` gives; the pages' caches (keyed by store and
    generation) are shared by the tests that open it, as by a user's reloads."""
    spec = f"duckdb:{tmp_path_factory.mktemp('ddp') / 'store.duckdb'}"
    (rid,) = ingest(spec, SAMPLES / "ddp")  # type: ignore[arg-type]
    return spec, rid


@pytest.fixture
def ddp(ddp_store: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """:func:`ddp_store` as the test's store (``$GPUSCOPE_DB``): (store, run id). Its tests ask for
    ``kept_analyses`` (tests/conftest.py): each analysis of a rank is made once for the module and
    handed to every page and check that asks for it with the same options (only ``ddp_store``
    writes the store), and a page that changes one it was handed fails the test."""
    monkeypatch.setenv("GPUSCOPE_DB", ddp_store[0])
    return ddp_store


@pytest.mark.slow
def test_many_ranks_show_the_rank_table_and_the_straggler(
    ddp: tuple[str, str], kept_analyses: None
) -> None:
    """The real 2×H200 DDP sample: rank 1 arrives last at the collectives; the page says so with
    the evidence, lists both ranks per step and draws each rank's busy time aligned on a step."""
    db, rid = ddp
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    assert "Ranks" in texts(at, "subheader")
    [pace] = [w for w in texts(at, "warning") if "sets the pace" in w]
    assert pace.startswith("Rank 1 sets the pace") and "ms per step" in pace
    table = next(d.value for d in at.dataframe if "communication only / step" in d.value.columns)
    assert list(table["rank"]) == [1, 0]  # by the wait each rank causes: the pace-setter first
    assert table["caused wait / step"][0] > 15 and table["caused wait / step"][1] == 0
    at = open_app(RUN, {"run": rid, "rank": "0"})  # rank 0, which waits for it
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "communication only / step" in d.value.columns)
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("rank 0" in s and "rank 1" in s for s in specs)  # the small multiples
    # issue 20: rank 0 waits for rank 1 in the all-reduces: the wait is beside busy in the
    # headline, in its own colour in the sawtooth, and in the rank table
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store import connect
    from gpuscope.web import palette, ui

    con = connect(db)
    try:
        doc = analyze_run(con, rid, rank=0).to_json()
    finally:
        con.close()
    # the job's verdict first (the same whichever rank: the job step, the pace-setter), then the
    # shown rank's own cards
    job_step = next(m for m in cards(at) if m.label == "Job step time")
    assert job_step.value == "25.4 ms"
    assert next(m for m in cards(at) if m.label == "Pace-setter").value == "rank 1"
    busy = [m for m in cards(at) if m.label == "GPU busy"][-1]
    assert busy.value == ui.fmt_pct(doc["gpu_busy_pct"])
    assert busy.beside == f"of it waiting {ui.fmt_pct(doc['gpu_wait_pct'])}"
    assert doc["gpu_wait_pct"] > 50  # 65.7 % of rank 0's window
    step = next(m for m in cards(at) if m.label == "Step time")
    assert step.value == ui.fmt_ms(doc["step_time_ms"]["p50"])
    assert step.beside == (
        f"p90 {doc['step_time_ms']['p90']:.1f} · max {ui.fmt_ms(doc['step_time_ms']['max'])}"
    )
    [saw] = [c.proto.spec for c in at.get("plotly_chart") if "busy min" in c.proto.spec]
    assert "communication wait" in saw and palette.WAIT_FILL in saw
    assert list(table.sort_values("rank")["of it waiting"]) == pytest.approx(
        [r["comm_wait_pct"] for r in doc["ranks"]]
    )


@pytest.mark.slow
def test_the_run_page_opens_on_the_pace_setter_and_says_why(
    ddp: tuple[str, str], kept_analyses: None
) -> None:
    """The real DDP sample (rank 1 sets the pace, rank 0 waits for it): without a rank in the URL
    the page opens on rank 1 and says why, and keeps saying so over its reruns; the URL's rank
    wins (no sentence); a rank the run lacks falls back to the pace-setter."""
    import dataclasses

    from gpuscope.web import data, views

    db, rid = ddp
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    assert at.query_params["rank"] in ("1", ["1"])
    said = "Opened on rank 1, the pace-setter: the other ranks wait for it."
    assert said in texts(at, "caption")
    busy = [m for m in cards(at) if m.label == "GPU busy"][-1]  # rank 1's own card: no wait
    assert busy.beside == "of it waiting 0.0 %", busy.beside
    at.run()  # a rerun (the URL now names rank 1): still opened there, still said
    assert at.query_params["rank"] in ("1", ["1"]) and said in texts(at, "caption")
    at = open_app(RUN, {"run": rid, "rank": "0"})
    assert not at.exception and at.query_params["rank"] in ("0", ["0"])
    assert not [c for c in texts(at, "caption") if c.startswith("Opened on rank")]
    at = open_app(RUN, {"run": rid, "rank": "9"})
    assert any("showing rank 1" in w for w in texts(at, "warning")), texts(at, "warning")
    # the rule: the pace-setter where others wait for it, else the lowest rank, one rank silent
    job = data.job(str(db), rid)
    assert views.opening_rank(job) == (1, said)
    calm = dataclasses.replace(job, waiting_rank=None, wait_ms_per_step=None)
    assert views.opening_rank(calm) == (
        0,
        "Opened on rank 0, the lowest: no rank waits for another.",
    )
    assert views.opening_rank(dataclasses.replace(job, ranks=(3,), pace_setter=3)) == (3, "")
    # late under the profiler only: the page opens on the rank that sets the pace without it
    # (sample_traces/multi_gpu/ddp_uneven: traced pace-setter 0, cause on rank 1)
    hidden = dataclasses.replace(job, pace_setter=0, cause_rank=1)
    assert views.opening_rank(hidden) == (
        1,
        "Opened on rank 1, which sets the pace once the profiler's cost is gone "
        "(under the profiler the others wait for rank 0).",
    )


@pytest.mark.slow
def test_profiler_cost_and_no_evidence_banners(db: Path, tmp_path: Path) -> None:
    """A trace that carries its untraced step time says what the profiler added; a trace with no
    GPU activity says so first, and shows no busy figure."""
    from tracegen import TraceBuilder

    (rid,) = ingest(db, SAMPLES / "wild" / "gpt_compiled")
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    [note] = [i for i in texts(at, "info") if "Without the profiler" in i]
    assert "15.04 ms" in note and "the profiler adds" in note  # gpuscope.untraced_step_ms 15.037

    b = TraceBuilder()
    b.cpu_op("aten::mm", 1000, 50)  # CPU ops only: nothing ran on a GPU
    (cpu_only,) = ingest(db, b.write(tmp_path / "cpu.json"))
    at = open_app(RUN, {"run": cpu_only})
    assert not at.exception, at.exception
    warnings = texts(at, "warning")
    assert warnings and "GPU" in warnings[0]
    busy = next(m for m in cards(at) if m.label == "GPU busy")
    assert busy.value in ("—", "-")


@pytest.mark.slow
def test_a_bug_outside_every_section_is_one_line(
    before_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page-level catch-all (app/web/main.py): a failure outside every section shows one plain
    line naming no internals, and no exception element."""
    from gpuscope.web import views

    def broken(*a, **k):
        raise ValueError("internals")

    monkeypatch.setattr(views, "run_caption", broken)
    at = open_app(RUN, {"run": before_run})
    assert not at.exception
    [err] = texts(at, "error")
    assert err.startswith("This page could not be shown: an internal error (ValueError).")
    assert "internals" not in err


@pytest.mark.slow
def test_many_ranks_heatmap_and_never_a_sawtooth_per_rank(
    ddp: tuple[str, str], kept_analyses: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, part 4: the DDP pair's Run page has the rank × step heatmap (one trace) and the
    spread of step time per step; with the report of a 256-rank run (built from the pair) the page
    draws the heatmap of 256 rows and no busy plot per rank."""
    import json

    from gpuscope.analysis import run_views
    from gpuscope.web import data, views

    db, rid = ddp
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    [heat] = [s for s in specs if s["data"][0].get("type") == "heatmap"]
    assert len(heat["data"][0]["y"]) == 2
    spread = next(d.value for d in at.dataframe if "slowest rank" in d.value.columns)
    assert list(spread["step"]) == ["#241", "#242", "#243", "#244", "#245"]
    assert any(len(s["data"]) and "rank 1" in json.dumps(s["layout"]) for s in specs)  # multiples
    # open a cell: rank 1, step 243 -> the page shows rank 1, its busy plot zoomed to that step
    at.selectbox(key=f"cell_rank_{rid}").set_value(1)
    at.selectbox(key=f"cell_step_{rid}").set_value(243)
    at.run()
    at.button(key=f"cell_open_{rid}").click()
    at.run()
    assert not at.exception, at.exception
    assert at.query_params["rank"] in ("1", ["1"])
    w = data.window(str(db), rid, 1)
    row = w.steps[w.steps["number"] == 243]
    view = at.session_state[f"view_run_{rid}_1"]
    assert tuple(view) == (int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0]))

    import dataclasses

    real = data.rank_overview

    def big(path: str, run_id: str, rank: int | None) -> run_views.RankOverview:
        ov = real(path, run_id, rank)
        lines = [dataclasses.replace(ov.lines[r % 2], rank=r) for r in range(256)]
        return dataclasses.replace(ov, lines=tuple(lines))

    drawn: list[object] = []

    def no_panels(*a: object, **k: object) -> list:  # type: ignore[type-arg]
        drawn.append(a)  # (a section's failure would show as one line, not an exception)
        return []

    monkeypatch.setattr(data, "rank_overview", big)
    monkeypatch.setattr(data, "rank_panels", no_panels)
    data.rank_step_matrix.clear()
    views._heatmap_figure.clear()  # the 2-rank page's heatmap and small multiples are cached
    views._rank_figure.clear()
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    [heat] = [s for s in specs if s["data"][0].get("type") == "heatmap"]
    assert len(heat["data"][0]["y"]) == 256
    assert drawn == []  # no busy plot per rank
    assert not [e for e in texts(at, "error")], texts(at, "error")
    data.rank_step_matrix.clear()
    views._heatmap_figure.clear()

"""AppTest: the Compare page (?a=…&b=…, copy link, aligned plots, deltas, fixes, errors)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts
from synth import write_pair

COMPARE = "screens/compare.py"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return app_store(tmp_path, monkeypatch, lake=False)


@pytest.fixture
def pair(db: Path, tmp_path: Path) -> tuple[str, str]:
    """A before/after pair in the test's own store: for a test that changes the runs."""
    a, b = write_pair(tmp_path / "t")
    ida, idb = ingest(db, a, b)
    return ida, idb


@pytest.fixture(scope="module")
def pair_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """The before/after pair ingested once for the module's pages that only read it: (store, A,
    B). A DuckDB file, as :func:`db` gives; the pages' caches (keyed by store) are shared by the
    tests that open it, as by a user's reloads."""
    tmp = tmp_path_factory.mktemp("pair")
    spec = f"duckdb:{tmp / 'store.duckdb'}"
    ida, idb = ingest(spec, *write_pair(tmp / "t"))  # type: ignore[arg-type]
    return spec, ida, idb


@pytest.fixture
def shared(pair_store: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """:func:`pair_store` as the test's store (``$GPUSCOPE_DB``): (A, B), for tests that only
    read them."""
    monkeypatch.setenv("GPUSCOPE_DB", pair_store[0])
    return pair_store[1], pair_store[2]


@pytest.mark.slow
def test_query_params_give_the_comparison(shared: tuple[str, str]) -> None:
    a, b = shared
    at = open_app(COMPARE, {"a": a, "b": b})
    assert not at.exception, at.exception
    head = " ".join(texts(at, "markdown"))
    assert a in head and b in head and "before" in head and "after" in head
    # the copy-link control shows the URL with both ids
    link = next(c.value for c in at.code if "a=" in c.value)
    assert link.endswith(f"/compare?a={a}&b={b}")
    # both runs' busy plots, aligned on a step, in one figure
    # (decoded: plotly escapes non-ASCII text or not, depending on whether orjson is installed)
    spec = json.dumps(json.loads(at.get("plotly_chart")[0].proto.spec), ensure_ascii=False)
    assert "A · before" in spec and "B · after" in spec
    labels = [m.label for m in at.metric]
    # each card says once whether it is profiled (these traces carry no unprofiled step time)
    assert labels[:3] == [
        "Throughput · profiled",
        "Step time · profiled",
        "Achieved TFLOP/s · profiled",
    ]
    assert labels[3] in ("MFU · profiled", "MFU (different peaks) · profiled")
    assert "GPU busy · profiled" in labels
    assert "All metrics" in texts(at, "subheader") and "Fixes" in texts(at, "subheader")
    table = at.dataframe[0].value
    assert {"A", "B", "Δ (B − A)"} <= set(table.columns)


@pytest.mark.slow
def test_same_link_in_a_fresh_session(shared: tuple[str, str]) -> None:
    a, b = shared
    first = open_app(COMPARE, {"a": a, "b": b})
    second = open_app(COMPARE, {"a": a, "b": b})  # a new session: nothing carried over
    assert texts(first, "markdown")[:1] == texts(second, "markdown")[:1]


@pytest.mark.slow
def test_prefixes_are_canonicalised(shared: tuple[str, str]) -> None:
    a, b = shared
    at = open_app(COMPARE, {"a": a[:5], "b": b[:5]})
    assert not at.exception
    assert at.query_params["a"] == a and at.query_params["b"] == b


@pytest.mark.slow
def test_unknown_ids_are_a_clear_message(shared: tuple[str, str]) -> None:
    a, _ = shared
    at = open_app(COMPARE, {"a": a, "b": "nosuchrun"})
    assert not at.exception
    (err,) = texts(at, "error")
    assert "nosuchrun" in err and "b=" in err
    assert not at.get("plotly_chart")
    # the page offers to pick instead, keeping the known one
    assert at.selectbox[0].value == a


@pytest.mark.slow
def test_missing_params_then_pick(shared: tuple[str, str]) -> None:
    a, b = shared
    at = open_app(COMPARE, {})
    assert not at.exception
    assert not texts(at, "error")
    assert at.selectbox[0].value == a and at.selectbox[1].value == b  # before -> after
    at.button[0].click().run()
    assert at.query_params["a"] == a and at.query_params["b"] == b
    assert at.get("plotly_chart")


def test_compare_needs_two_runs(db: Path) -> None:
    at = open_app(COMPARE, {"a": "x", "b": "y"})
    assert not at.exception
    assert any("needs two trace runs" in t for t in texts(at, "info"))


@pytest.mark.slow
def test_align_on_a_later_step(shared: tuple[str, str]) -> None:
    a, b = shared
    at = open_app(COMPARE, {"a": a, "b": b})
    at.number_input(key=f"align_{a}_{b}_1").set_value(4).run()
    assert not at.exception
    assert any("start of step 4" in c for c in texts(at, "caption"))


@pytest.mark.slow
def test_run_names_and_link_ids_are_shown_as_text(db: Path, pair: tuple[str, str]) -> None:
    """A run named like Markdown/HTML: the header, the plots' labels and the not-found message
    (the id from the URL) carry it as text, never as an image, a link or a tag."""
    from gpuscope.store import connect, set_name
    from gpuscope.web import ui

    a, b = pair
    evil = "![b](http://beacon.invalid/x.png) <a href='http://beacon.invalid'>x</a>"
    con = connect(db)
    set_name(con, a, evil)
    con.close()
    at = open_app(COMPARE, {"a": a, "b": b})
    assert not at.exception
    head = next(m for m in texts(at, "markdown") if "→" in m)
    assert ui.md(evil) in head and "![b](" not in head
    assert "<a" not in head.replace("\\<", "")  # only escaped: shown as typed
    spec = json.dumps(json.loads(at.get("plotly_chart")[0].proto.spec), ensure_ascii=False)
    assert "<a href" not in spec and "&lt;a href" in spec
    at = open_app(COMPARE, {"a": "![i](http://beacon.invalid/i.png)", "b": b})
    (err,) = texts(at, "error")
    assert "![i](" not in err and "\\!\\[i\\]" in err


def test_cards_show_throughput_and_tflops_and_flag_different_peaks() -> None:
    """The MFU card says so when A and B are measured against different peaks (not dtypes); the
    throughput card is by tokens when a run knows them, and its unit is never "1/s"."""
    from types import SimpleNamespace as NS

    from gpuscope.analysis.compare import Delta, display_delta, peak_difference, throughput_key
    from gpuscope.analysis.throughput import Throughput
    from gpuscope.web import ui

    def report(peak: float, dtype: str, tokens_per_s: float | None) -> NS:
        tp = Throughput(None, None, None, None, tokens_per_s, None, None)
        return NS(peak_tflops=peak, peak=NS(dtype=dtype), throughput=tp)

    a, b = report(989.4, "bf16", 12345.6), report(494.7, "tf32", 23456.0)
    note = peak_difference(a, b)  # type: ignore[arg-type]
    assert note and "A 989.4 TFLOP/s (bf16) vs B 494.7 TFLOP/s (tf32)" in note
    assert peak_difference(a, report(989.4, "bf16", None)) is None  # type: ignore[arg-type]
    # the same GPU's dense peak for an fp32 and a bf16 run: their MFUs compare (issue 9)
    assert peak_difference(a, report(989.4, "fp32", None)) is None  # type: ignore[arg-type]
    assert throughput_key(a, b) == "tokens_per_s"  # type: ignore[arg-type]
    no_tokens = report(1.0, "bf16", None)
    assert throughput_key(no_tokens, no_tokens) == "samples_per_s"  # type: ignore[arg-type]
    assert ui.fmt_rate(12345.6, "tokens/s") == "12,346 tokens/s"
    assert ui.delta_pct(100.0, 150.0) == "+50.0 %"
    row = display_delta(Delta("tokens_per_s", "1/s", 1.0, 2.0, "higher"))
    assert (row.metric, row.unit) == ("Throughput (tokens)", "tokens/s")  # never "1/s"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "attr", "line", "headline_shown"),
    [
        ("figures", "idle_compare", "Idle time by cause could not be shown", True),
        # the comparison itself (cards, deltas, speed-up, fixes all come from it): said, not only
        # logged, and the aligned plot (its own data) still shows
        ("data", "comparison", "The comparison of A and B could not be shown", False),
    ],
)
def test_a_failing_section_leaves_the_rest_of_the_comparison(
    shared: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    attr: str,
    line: str,
    headline_shown: bool,
) -> None:
    import importlib

    def broken(*a, **k):
        raise ValueError("internals")

    monkeypatch.setattr(importlib.import_module(f"gpuscope.web.{module}"), attr, broken)
    a, b = shared
    at = open_app(COMPARE, {"a": a, "b": b})
    assert not at.exception
    (err,) = texts(at, "error")
    assert err.startswith(f"{line}: an internal error (ValueError)")
    assert "internals" not in err
    spec = json.dumps(json.loads(at.get("plotly_chart")[0].proto.spec), ensure_ascii=False)
    assert "A · before" in spec and "B · after" in spec  # the aligned plot
    labels = [m.label for m in at.metric]
    if headline_shown:
        assert labels[0] == "Throughput · profiled" and "All metrics" in texts(at, "subheader")
        assert any("Resolved in B" in m for m in texts(at, "markdown"))  # the fixes still show
    else:
        assert labels == [] and "All metrics" not in texts(at, "subheader")

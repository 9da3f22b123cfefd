"""AppTest: the URL holds the whole view (issue 23): the Compare page's A/B order (Swap writes
it), its aligned step and count; the Run page's zoom. A fresh session on the same URL shows the
same view (the browser tests check the address bar, reload and Back: tests/e2e/test_browser_url.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts
from synth import write_pair

COMPARE = "screens/compare.py"
RUN = "screens/run.py"


def test_zoom_param_round_trips_to_the_nanosecond() -> None:
    from gpuscope.web.views import parse_zoom, zoom_param

    ws, we = 1_000_000_000, 1_140_000_000
    s, e = ws + 12_345_678, ws + 23_456_789
    assert zoom_param(s, e, ws) == "12.345678-23.456789"
    assert parse_zoom(zoom_param(s, e, ws), ws, we) == (s, e)
    assert parse_zoom(None, ws, we) is None and parse_zoom("", ws, we) is None
    for bad in ("x", "5-3", "nan-1", "1-inf", "3", "-"):
        assert parse_zoom(bad, ws, we) is None, bad
    assert parse_zoom("0-999999", ws, we) == (ws, we)  # clamped into the window


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    db = app_store(tmp_path, monkeypatch, lake=False)
    a, b = write_pair(tmp_path / "t")
    ida, idb = ingest(db, a, b)
    return ida, idb


@pytest.mark.slow
def test_swap_and_aligned_steps_live_in_the_url(pair: tuple[str, str]) -> None:
    a, b = pair
    at = open_app(COMPARE, {"a": a, "b": b})
    at.button(key="swap_ab").click().run()
    assert not at.exception, at.exception
    assert (at.query_params["a"], at.query_params["b"]) == ([b], [a]) or (
        at.query_params["a"],
        at.query_params["b"],
    ) == (b, a)
    head = next(m for m in texts(at, "markdown") if "→" in m)
    assert head.index("after") < head.index("before")  # B is now "before"
    at.number_input(key=f"align_{b}_{a}_1").set_value(4).run()
    assert str(at.query_params["step"]).strip("[]'") == "4"
    link = next(c.value for c in at.code if "a=" in c.value)
    assert link.endswith(f"/compare?a={b}&b={a}&step=4")
    # the same URL in a fresh session: the same order and the same aligned step
    again = open_app(COMPARE, {"a": b, "b": a, "step": "4", "steps": "2"})
    assert any("start of step 4" in c for c in texts(again, "caption"))
    assert again.number_input(key=f"align_{b}_{a}_4").value == 4
    assert again.number_input(key=f"count_{b}_{a}_4_2").value == 2
    # a step the runs do not have: the default, no error
    odd = open_app(COMPARE, {"a": b, "b": a, "step": "999"})
    assert not odd.exception and any("start of step 1" in c for c in texts(odd, "caption"))


@pytest.mark.slow
def test_run_zoom_lives_in_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = app_store(tmp_path, monkeypatch, lake=False)
    a, _ = write_pair(tmp_path / "t")
    (rid,) = ingest(db, a)
    at = open_app(RUN, {"run": rid})
    assert "zoom" not in at.query_params
    slider = next(s for s in at.select_slider if s.label == "Steps shown")
    slider.set_value((3, 3)).run()
    zoom = str(at.query_params["zoom"]).strip("[]'")
    caption = next(c for c in texts(at, "caption") if "drag across" in c)
    # a fresh session on that URL shows the same range
    again = open_app(RUN, {"run": rid, "zoom": zoom})
    assert next(c for c in texts(again, "caption") if "drag across" in c) == caption
    assert next(s for s in again.select_slider if s.label == "Steps shown").value == (3, 3)
    # the whole window again: no zoom in the URL
    next(b for b in again.button if b.proto.help == "Show the whole window").click().run()
    assert "zoom" not in again.query_params

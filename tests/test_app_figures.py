"""Unit tests of the app's pure parts: figures (they draw what they are given), palette, upload
helpers. What the figures are given is computed and tested in analysis (test_analysis_sawtooth)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from gpuscope.web import figures, palette
from gpuscope.web.uploads import run_name_for, safe_name


def _busy(edges: list[int], frac: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": edges[:-1], "end_ns": edges[1:], "busy_frac": frac})


def test_sawtooth_coarse_stacks_busy_and_causes() -> None:
    busy = _busy([0, 100, 200, 300], [1.0, 0.5, 0.0])
    shares = {"host_sync": np.array([0.0, 50.0, 0.0]), "data_loading": np.array([0.0, 0.0, 100.0])}
    steps = pd.DataFrame({"number": [1, 2], "start_ns": [0, 200]})
    nvml = pd.DataFrame({"t_ns": [0, 100, 200], "gpu_util_pct": [100.0, 100.0, 0.0]})
    fig = figures.sawtooth(busy, origin_ns=0, shares=shares, steps=steps, nvml=nvml)
    names = [t.name for t in fig.data]
    assert names[0] == "GPU busy" and {
        "Host sync",
        "Data loading",
        "NVML GPU util",
        "step start",
    } <= set(names)
    assert fig.layout.showlegend is False
    stack = [t for t in fig.data if getattr(t, "stackgroup", None) == "share"]
    total = np.sum([np.asarray(t.y[:-1], dtype=float) for t in stack], axis=0)
    np.testing.assert_allclose(total, [100, 100, 100])  # busy + idle causes fill every bucket
    assert fig.layout.dragmode == "select" and list(fig.layout.xaxis.range) == [0, 0.0003]
    busy_trace = fig.data[0]
    assert busy_trace.line.color == palette.BUSY


def test_sawtooth_fine_draws_each_kernel() -> None:
    busy = _busy([0, 1000], [0.5])
    kernels = pd.DataFrame(
        {
            "start_ns": [0, 600],
            "end_ns": [300, 800],
            "name": ["gemm_k", "relu_k"],
            "category": ["gemm", "elementwise"],
        }
    )
    idle = pd.DataFrame(
        {
            "start_ns": [300],
            "end_ns": [600],
            "cause": ["launch_overhead"],
            "detail": ["Launch overhead 0.000 ms"],
        }
    )
    fig = figures.sawtooth(busy, origin_ns=0, kernels=kernels, idle=idle)
    (bars,) = [t for t in fig.data if t.type == "bar"]  # ONE trace, a colour per bar
    assert list(bars.marker.color) == [
        palette.category_color("gemm"),
        palette.category_color("elementwise"),
        palette.rgba(palette.cause_color("launch_overhead"), 0.6),
    ]
    np.testing.assert_allclose(bars.width, [0.0003, 0.0002, 0.0003])
    hover = list(bars.customdata)
    assert hover[0].startswith("gemm_k<br>gemm · ")
    # a one-cause gap says its cause once (no "idle: X / X" repetition)
    assert hover[2] == "idle: Launch overhead · 0.000 ms"
    assert fig.layout.showlegend is False  # the page's HTML legend is the only one


def test_sawtooth_escapes_kernel_names_and_draws_the_envelope() -> None:
    busy = _busy([0, 50, 100], [0.5, 0.5]).assign(busy_min=[0.0, 0.5], busy_max=[1.0, 0.5])
    fig = figures.sawtooth(busy, origin_ns=0)
    env = next(t for t in fig.data if t.name == "busy min–max")
    # a closed band: the max from left to right, then the min back
    assert list(env.x) == [0, 50e-6, 50e-6, 100e-6, 100e-6, 50e-6, 50e-6, 0]
    assert list(env.y) == [100.0, 100.0, 50.0, 50.0, 50.0, 50.0, 0.0, 0.0]
    assert env.fill == "toself"
    kernels = pd.DataFrame(
        {"start_ns": [0], "end_ns": [10], "name": ["k<4, Op>"], "category": ["elementwise"]}
    )
    fig = figures.sawtooth(_busy([0, 100], [0.1]), origin_ns=0, kernels=kernels)
    assert fig.data[0].customdata[0].startswith("k&lt;4, Op&gt;")


def test_nvml_overlay_holds_the_sample_before_a_zoom() -> None:
    """Zoomed between two samples (100 ms apart): the line still shows, at the earlier value."""
    busy = _busy([50_000_000, 60_000_000], [1.0])
    nvml = pd.DataFrame({"t_ns": [0], "gpu_util_pct": [73.0]})
    fig = figures.sawtooth(busy, origin_ns=0, nvml=nvml)
    line = next(t for t in fig.data if t.name == "NVML GPU util")
    assert list(line.x) == [50.0, 60.0] and list(line.y) == [73.0, 73.0]


def test_sawtooth_empty() -> None:
    fig = figures.sawtooth(_busy([0], []).iloc[:0], origin_ns=0)
    assert len(fig.data) == 0


def test_aligned_sawtooth_has_one_row_per_run() -> None:
    from gpuscope.analysis.sawtooth import BusyPanel

    panels = [
        BusyPanel(
            label=f"{k} · run",
            busy=_busy([t, t + 50, t + 100], [1.0, 0.2]),
            origin_ns=t,
            steps=pd.DataFrame({"number": [1], "start_ns": [t]}),
        )
        for k, t in (("A", 0), ("B", 5000))
    ]
    fig = figures.aligned_sawtooth(panels)
    assert [a.text for a in fig.layout.annotations[:2]] == ["A · run", "B · run"]
    xs = [t.x[0] for t in fig.data if t.name == "GPU busy"]
    assert xs == [0, 0]  # both start at their step


def test_breakdown_figures() -> None:
    f = figures.idle_by_cause({"data_loading": 2000.0, "host_sync": 500.0}, per_steps=2)
    assert list(f.data[0].x) == [0.25, 1.0]  # ms per step, ascending
    assert list(f.data[0].marker.color) == [
        palette.cause_color("host_sync"),
        palette.cause_color("data_loading"),
    ]
    k = figures.kernel_categories({"gemm": 3000.0, "other": 1000.0})  # Breakdowns' µs
    assert list(k.data[0].y) == ["other", "gemm"] and list(k.data[0].text) == ["25.0 %", "75.0 %"]
    c = figures.idle_compare(
        {"data_loading": 0.5, "host_sync": 1.0}, {"host_sync": 0.1}, labels=("A", "B")
    )
    assert [t.name for t in c.data] == ["A", "B"]
    # ms per step as given, the causes in order of A's time, a missing cause drawn as 0
    assert list(c.data[0].y) == ["Host sync", "Data loading"]
    assert list(c.data[0].x) == [1.0, 0.5] and list(c.data[1].x) == [0.1, 0.0]


def test_palette_is_stable_and_shared() -> None:
    assert palette.cause_color("data_loading") == palette.cause_color("Data loading") == "#e69f00"
    assert palette.cause_label("cpu_overhead") == "CPU overhead"
    assert palette.cause_color("brand_new_cause") == palette.cause_color("brand_new_cause")
    assert palette.cause_color("brand_new_cause") in palette.EXTRA
    cause_colors = set(palette.CAUSES.values())
    assert not cause_colors & {palette.BUSY, palette.NVML}
    assert palette.rgba("#ff0080", 0.5) == "rgba(255,0,128,0.5)"


def test_upload_names() -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\traces\\my run.json") == "my run.json"
    assert safe_name("..json") == "json"
    f = [io.BytesIO(b"") for _ in range(2)]
    f[0].name, f[1].name = "llama_rank0.pt.trace.json.gz", "llama_rank1.pt.trace.json.gz"  # type: ignore[attr-defined]
    assert run_name_for(f) == "llama"  # type: ignore[arg-type]


@pytest.mark.parametrize("text,tags", [("a, b ,a", ["a", "b"]), ("", []), ("x\ny", ["x", "y"])])
def test_parse_tags(text: str, tags: list[str]) -> None:
    from gpuscope.web.ui import parse_tags

    assert parse_tags(text) == tags


def test_nvml_lines_keep_the_legend_off_the_title() -> None:
    two = pd.DataFrame(
        {"t_ns": [0, 10**9, 0, 10**9], "gpu": [0, 0, 1, 1], "gpu_util_pct": [1.0, 2.0, 3.0, 4.0]}
    )
    fig = figures.nvml_lines(two, "gpu_util_pct", origin_ns=0, title="GPU utilization")
    assert fig.layout.title.text == "GPU utilization" and fig.layout.showlegend
    assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"  # below the plot
    one = figures.nvml_lines(two[two.gpu == 0], "gpu_util_pct", origin_ns=0, title="x")
    assert one.layout.showlegend is False  # one GPU: nothing to tell apart


def test_sawtooth_draws_the_wait_in_its_own_colour() -> None:
    """Issue 20: communication wait is busy time, drawn stacked on the work in its own colour:
    work = busy - wait, the wait area on it, then the idle causes; the three fill every bucket."""
    busy = _busy([0, 100, 200, 300], [1.0, 0.8, 0.2])
    shares = {"other": np.array([0.0, 20.0, 80.0])}
    wait = np.array([0.6, 0.3, 0.0])
    fig = figures.sawtooth(busy, origin_ns=0, shares=shares, wait=wait)
    stack = {t.name: t for t in fig.data if getattr(t, "stackgroup", None) == "share"}
    np.testing.assert_allclose(stack["GPU busy"].y[:-1], [40, 50, 20])
    np.testing.assert_allclose(stack["communication wait"].y[:-1], [60, 30, 0])
    assert stack["communication wait"].fillcolor == palette.WAIT_FILL
    assert stack["GPU busy"].line.color == palette.BUSY
    total = np.sum([np.asarray(t.y[:-1], dtype=float) for t in stack.values()], axis=0)
    np.testing.assert_allclose(total, [100, 100, 100])
    # without a wait: busy as before, no wait trace
    plain = figures.sawtooth(busy, origin_ns=0, shares=shares)
    assert "communication wait" not in [t.name for t in plain.data]
    # zoomed in (kernels drawn one by one): the waits are bars of their own colour, on top
    kernels = pd.DataFrame(
        {
            "start_ns": [0],
            "end_ns": [300],
            "name": ["ncclDevKernel_AllReduce"],
            "category": ["communication"],
        }
    )
    waits = pd.DataFrame({"start_ns": [0], "end_ns": [200], "last_rank": [1]})
    fine = figures.sawtooth(busy, origin_ns=0, kernels=kernels, waits=waits)
    [bar] = [t for t in fine.data if t.name == "communication wait"]
    assert bar.marker.color == palette.WAIT and "waiting for rank 1" in bar.customdata[0]
    names = [t.name for t in fine.data]
    assert names.index("communication wait") > names.index("activities")  # drawn over kernels
    assert palette.WAIT not in palette.CAUSES.values() and palette.WAIT != palette.BUSY

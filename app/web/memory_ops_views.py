"""The Run page's memory, roofline and module sections: the memory line under the sawtooth (on its
time axis), memory figures and tables, each op against its roofline, GPU time by module and phase.

Everything shown is computed by :mod:`gpuscope.analysis.memory`, ``.roofline`` and ``.modules``
(the report's typed ``MemoryResult``, ``RooflineView`` and ``ModulesView``, the page models of
:mod:`gpuscope.analysis.run_views`); nothing is computed here.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st
from gpuscope.analysis import run_views
from gpuscope.web import data, db, figures, ui

GIB = float(2**30)


def _gib(b: Any) -> str:
    return "—" if b is None else f"{float(b) / GIB:,.3f} GiB"


def memory_line(run_id: str, rank: int, *, view_key: str) -> None:
    """The allocator's memory over the sawtooth's current view (``view_<key>_<run>_<rank>``)."""
    path = db.db_path()
    mem = data.report_obj(path, run_id, rank).memory
    if mem is None or not mem.recorded or mem.series.empty:
        return
    w = data.window(path, run_id, rank)
    ws, we = w.start_ns, w.end_ns
    s, e = st.session_state.get(f"view_{view_key}_{run_id}_{rank}", (ws, we))
    s, e = max(ws, int(s)), min(we, int(e))
    fig = figures.memory_line(
        mem.series,
        origin_ns=ws,
        x_range_ns=(s, e),
        nvml=mem.nvml,
        total_bytes=mem.device_total_bytes,
    )
    st.markdown("**GPU memory over time** (the caching allocator; same time axis as above)")
    st.plotly_chart(fig, key=f"mem_{view_key}_{run_id}_{rank}_{s}_{e}")


def memory(m: run_views.MemoryResult | None) -> None:
    """Peak allocated / reserved against the device, by phase, by op, allocator calls, snapshot
    (the report's :class:`run_views.MemoryResult`)."""
    st.subheader("Memory")
    if m is None or not m.recorded:
        notes = (m.notes if m is not None else None) or ["memory was not recorded"]
        st.info(" ".join(notes), icon=":material/memory:")
        if m is not None and m.snapshot:
            _snapshot(m.snapshot)
        return
    total = m.device_total_bytes
    c = st.columns(4)
    c[0].metric("Peak allocated", _gib(m.peak_allocated_bytes), help="max Total Allocated")
    frac = m.peak_reserved_frac
    c[1].metric(
        "Peak reserved",
        _gib(m.peak_reserved_bytes),
        f"{100.0 * frac:.1f}% of {_gib(total)}" if frac is not None else None,
        delta_color="inverse" if m.near_full else "off",
    )
    c[2].metric("Reserved − allocated at the peak", _gib(m.reserved_minus_allocated_at_peak_bytes))
    calls = m.malloc.calls if m.malloc is not None else 0
    c[3].metric(
        "cudaMalloc/cudaFree in steps",
        f"{calls:,}",
        f"{m.malloc.us_per_step:,.1f} µs per step" if m.malloc is not None and calls else None,
        delta_color="inverse",
    )
    if m.nvml_peak_bytes:
        st.caption(
            f"NVML memory.used peaked at {_gib(m.nvml_peak_bytes)} (the CUDA context and "
            "other processes count there, not in the allocator's figures)."
        )
    left, right = st.columns(2)
    ph = m.by_phase_per_step
    if ph:
        left.markdown("**By phase**")
        left.dataframe(
            pd.DataFrame(
                [
                    {
                        "phase": p,
                        "peak allocated (GiB)": v["peak_allocated_bytes"] / GIB,
                        "allocated per step (GiB)": v["allocated_bytes_per_step"] / GIB,
                        "allocations per step": v["allocations_per_step"],
                    }
                    for p, v in ph.items()
                ]
            ),
            hide_index=True,
            key="mem_by_phase",
        )
    held = m.held_at_peak
    if held:
        right.markdown("**Held at the peak, by the op that allocated it**")
        right.dataframe(
            pd.DataFrame([{"op": h.op, "GiB": h.bytes / GIB} for h in held]),
            hide_index=True,
            key="mem_held",
        )
    top = m.top_ops
    if top:
        st.markdown("**Top allocating ops** (per step)")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "op": o.op,
                        "allocated per step (GiB)": o.allocated_bytes_per_step / GIB,
                        "allocations per step": o.allocations_per_step,
                    }
                    for o in top
                ]
            ),
            hide_index=True,
            key="mem_top_ops",
        )
    if m.snapshot:
        _snapshot(m.snapshot)


def _snapshot(s: run_views.SnapshotSummary) -> None:
    st.markdown(f"**Memory snapshot** ({ui.md(str(s.file))})")
    rows = [
        {"device": d, "segments": v.segments, "reserved (GiB)": v.reserved_bytes / GIB,
         "allocated (GiB)": v.allocated_bytes / GIB,
         "largest free block (GiB)": v.largest_free_block_bytes / GIB}
        for d, v in s.devices.items()
    ]  # fmt: skip
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, key="mem_snapshot")


def roofline(r: run_views.RooflineView | None) -> None:
    """Each op against the GPU's compute and memory roofs, sorted by time lost."""
    st.subheader("Ops against the roofline")
    if r is None or not r.ops:
        st.info(
            " ".join(
                (r.notes if r is not None else ())
                or ["no modelled ops (record with record_shapes=True)"]
            )
        )
        return
    st.caption(
        f"{ui.md(str(r.gpu_model))}: memory roof {r.memory_tbs} TB/s. Time lost "
        f"against the roofs: {r.lost_us_per_step:,.1f} µs per step of "
        f"{r.modelled_us_per_step:,.1f} µs in modelled ops "
        f"({r.unmodelled_us_per_step:,.1f} µs in kernels no model covers). The top rows are "
        "the candidates for fusion or a better kernel."
    )
    rows = [
        {
            "op": o.op, "shapes": o.shapes, "dtype": o.dtype, "bound": o.bound,
            "µs per step": o.gpu_us_per_step, "lost µs per step": o.lost_us_per_step,
            "% of roof": o.roof_pct, "TFLOP/s": o.achieved_tflops, "TB/s": o.achieved_tbs,
            "FLOP/byte": o.intensity_flop_per_byte, "calls per step": o.calls_per_step,
        }
        for o in r.ops
    ]  # fmt: skip
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        key="roofline_table",
        column_config={
            "% of roof": st.column_config.NumberColumn(format="%.1f"),
            "µs per step": st.column_config.NumberColumn(format="%.1f"),
            "lost µs per step": st.column_config.NumberColumn(format="%.1f"),
            "TFLOP/s": st.column_config.NumberColumn(format="%.2f"),
            "TB/s": st.column_config.NumberColumn(format="%.3f"),
            "FLOP/byte": st.column_config.NumberColumn(format="%.1f"),
        },
    )


def _sig3(v: float) -> str:
    """``v`` with three significant figures and thousands separators (``2.10``, ``0.0481``,
    ``1,230``), as the CLI writes its figures."""
    if v == 0:
        return "0"
    r = round(v, 2 - math.floor(math.log10(abs(v))))  # 99.96 -> 100.0: one more digit left
    return f"{r:,.{max(0, 2 - math.floor(math.log10(abs(r))))}f}"


def _ms3(us: float | None) -> str:
    """µs as ms with three significant figures (``2,098.86`` µs → ``2.10 ms``); "—" for none."""
    return f"{_sig3(us / 1e3)} ms" if us is not None and us == us else "—"


def _count(v: float | None) -> str:
    return _sig3(v) if v is not None and v == v else "—"


#: How the modules section names its special rows (the analysis's keys: a phase it could not tell,
#: the idle after the window's last kernel, which no module or phase ends).
MODULE_ROW_NAMES = {
    "None": "(no phase)",
    "(end of window)": "(idle after the last kernel)",
}


def modules(m: run_views.ModulesView | None) -> None:
    """GPU time and idle by nn.Module and by phase; kernel sequences that repeat in every step."""
    st.subheader("Modules and phases")
    if m is None:
        return
    for note in m.notes:
        st.caption(ui.md(note, None))
    if m.by_phase:
        st.markdown("**By phase** (GPU time of the work launched in it; idle that ended with it)")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "phase": MODULE_ROW_NAMES.get(str(p), str(p)),
                        "GPU per step": _ms3(v.gpu_us_per_step),
                        "% of GPU time": ui.fmt_pct(v.gpu_pct),
                        "idle per step": _ms3(v.idle_us_per_step),
                        "kernels per step": _count(v.kernels_per_step),
                    }
                    for p, v in m.by_phase.items()
                ]
            ),
            hide_index=True,
            key="modules_by_phase",
        )
    if m.modules:
        st.markdown(
            "**By module** (inclusive of its children; backward work charged to its module)"
        )
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "module": "  " * x.depth
                        + MODULE_ROW_NAMES.get(x.module, x.module.rsplit("/", 1)[-1]),
                        "path": "" if x.module in MODULE_ROW_NAMES else x.module,
                        "GPU per step": _ms3(x.gpu_us_per_step),
                        "% of GPU time": ui.fmt_pct(x.gpu_pct),
                        "self per step": _ms3(x.self_gpu_us_per_step),
                        "idle per step": _ms3(x.idle_us_per_step),
                    }
                    for x in m.modules[:60]
                ]
            ),
            hide_index=True,
            key="modules_table",
        )
    if m.repeats:
        st.markdown(
            f"**Kernel sequences that repeat** ({m.same_sequence_steps} steps launch the "
            f"same {m.kernels_per_step} kernels)"
        )
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "kernels": r.length,
                        "times per step": r.times,
                        "in steps": r.steps,
                        "GPU per step": _ms3(r.gpu_us_per_step),
                        "% of step kernel time": ui.fmt_pct(r.share_pct),
                        "module": r.module or "—",
                        "starts with": " → ".join(r.first_kernels),
                    }
                    for r in m.repeats
                ]
            ),
            hide_index=True,
            key="modules_repeats",
        )

"""`gpuscope analyze` text: the memory, roofline and modules sections (the JSON's ``memory``,
``roofline`` and ``modules`` keys, docs/cli-json.md), a few lines each; nothing is computed here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuscope.analysis.fmt import sig3

GIB = float(2**30)
TOP_OPS = 5
TOP_ROOFLINE = 8
TOP_MODULES = 8
OP_CHARS = 44


def _gib(b: float | None) -> str:
    """Bytes as GiB with three significant figures (the Run page's unit)."""
    return "-" if b is None else f"{sig3(float(b) / GIB)} GiB"


def _mib(b: float | None) -> str:
    return "-" if b is None else f"{sig3(float(b) / 2**20)} MiB"


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{sig3(us / 1e3)} ms"


def _by_phase(doc_part: dict[str, Any], key: str, fmt: Callable[[dict[str, Any]], str]) -> str:
    """``phase value, ...`` over the phases whose ``key`` is set (in the JSON's order)."""
    ph = doc_part.get("by_phase") or {}
    return ", ".join(f"{p} {fmt(v)}" for p, v in ph.items() if v.get(key))


def render_memory(doc: dict[str, Any]) -> list[str]:
    """Peak allocated and reserved against the device, reserved - allocated at the peak, memory by
    phase, the top allocating ops and cudaMalloc/cudaFree inside steps; one line when the trace
    holds no memory events."""
    m = doc.get("memory")
    if not m:
        return []
    if not m.get("recorded"):
        notes = " ".join(m.get("notes") or []) or "memory was not recorded"
        return ["", f"memory: {notes}"]
    pct = m.get("peak_reserved_pct")
    out = [
        "",
        f"memory: peak allocated {_gib(m.get('peak_allocated_bytes'))}, reserved "
        f"{_gib(m.get('peak_reserved_bytes'))}"
        + (f" ({sig3(pct)}% of {_gib(m.get('device_total_bytes'))})" if pct is not None else "")
        + f", reserved - allocated at the peak {_gib(m.get('reserved_minus_allocated_at_peak_bytes'))}"
        + ("  NEAR FULL" if m.get("near_full") else ""),
    ]
    parts = _by_phase(m, "peak_allocated_bytes", lambda v: _gib(v["peak_allocated_bytes"]))
    if parts:
        out.append("  peak allocated by phase: " + parts)
    ma = m.get("malloc") or {}
    out.append(
        f"  cudaMalloc/cudaFree inside steps: {ma.get('calls', 0)} calls"
        + (f", {sig3(ma.get('us_per_step'))} us per step" if ma.get("calls") else "")
    )
    if m.get("nvml_peak_used_bytes"):
        out.append(f"  NVML memory.used peak {_gib(m['nvml_peak_used_bytes'])}")
    top = (m.get("top_ops") or [])[:TOP_OPS]
    if top:
        out.append(
            "  top allocating ops (per step): "
            + ", ".join(f"{t['op']} {_mib(t.get('allocated_bytes_per_step'))}" for t in top)
        )
    for note in m.get("notes") or []:
        out.append(f"  note: {note}")
    return out


def render_roofline(doc: dict[str, Any]) -> list[str]:
    """The ops that lose the most time against the GPU's roofline (per step), with the total."""
    r = doc.get("roofline")
    if not r or not r.get("ops"):
        return []
    out = [
        "",
        f"roofline ({r.get('gpu_model') or 'GPU'}): {_ms(r.get('lost_us_per_step'))} per step lost "
        f"against the roofs, of {_ms(r.get('modelled_us_per_step'))} modelled GPU time "
        f"({_ms(r.get('unmodelled_us_per_step'))} not modelled)",
        f"  {'op':{OP_CHARS}} {'dtype':>5} {'bound':>7} {'time/step':>10} {'% of roof':>9} "
        f"{'lost/step':>10}",
    ]
    for o in r["ops"][:TOP_ROOFLINE]:
        name = str(o["op"])
        name = name if len(name) <= OP_CHARS else name[: OP_CHARS - 1] + "…"
        out.append(
            f"  {name:{OP_CHARS}} {o.get('dtype') or '-':>5} {o.get('bound') or '-':>7} "
            f"{_ms(o.get('gpu_us_per_step')):>10} {sig3(o.get('roof_pct')):>8}% "
            f"{_ms(o.get('lost_us_per_step')):>10}"
        )
    for note in r.get("notes") or []:
        out.append(f"  note: {note}")
    return out


def render_modules(doc: dict[str, Any]) -> list[str]:
    """GPU time by phase and by module (per step), and the kernel sequences that repeat."""
    md = doc.get("modules")
    if not md:
        return []
    out: list[str] = []
    parts = _by_phase(
        md, "gpu_us_per_step", lambda v: f"{_ms(v['gpu_us_per_step'])} ({sig3(v.get('gpu_pct'))}%)"
    )
    if parts:
        out += ["", "GPU time per step by phase: " + parts]
    mods = [
        m for m in md.get("modules") or [] if m.get("gpu_us_per_step") and m.get("depth", 0) <= 1
    ]
    if mods:
        src = md.get("source") or "modules"
        out.append(f"GPU time per step by module ({src}; top levels)")
        for m in mods[:TOP_MODULES]:
            name = str(m["module"])
            out.append(
                f"  {name:{OP_CHARS}} {_ms(m['gpu_us_per_step']):>10} "
                f"{sig3(m.get('gpu_pct')):>6}%  idle {_ms(m.get('idle_us_per_step'))}"
            )
    for rp in (md.get("repeats") or [])[:3]:
        out.append(
            f"  repeats: {rp['kernels']} kernels x {sig3(rp['times_per_step'])} per step"
            + (f" in {rp['module']}" if rp.get("module") else "")
            + f", {sig3(rp.get('share_pct'))}% of GPU time"
        )
    for note in md.get("notes") or []:
        out.append(f"  note: {note}")
    return out

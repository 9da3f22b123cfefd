"""The tests' FLOPs oracle: a recursive, readable reference of the nest rule that
:func:`gpuscope.analysis.flops.nest_select` vectorises (innermost counted op wins; a trace ``flops``
arg covers its subtree). test_analysis_flops compares the two on generated op nests (hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.analysis.flops import OPS, _dtype_of_types, _is_causal, op_flops


@dataclass
class _Node:
    idx: int
    name: str
    ts: int
    end: int
    pid: int
    tid: int
    shape: int | None
    approx: bool
    trace: float | None
    dtype: str | None
    causal: bool
    kids: list[_Node] = field(default_factory=list)
    has_trace: bool = False


@dataclass(frozen=True)
class Counted:
    """One op whose FLOPs were counted (an innermost counted op, or an op whose ``flops`` arg covers its subtree)."""

    name: str
    pid: int
    tid: int
    ts_ns: int
    end_ns: int
    flops: float
    source: str  # 'trace_flops' or 'shapes'
    dtype: str | None
    family: str
    approx: bool


def _contains(p: _Node, c: _Node) -> bool:
    """``c`` (starting at or after ``p``) is nested in ``p``."""
    return c.ts < p.end or (c.ts == p.ts and c.end <= p.end)


def build_nests(ops: Sequence[Sequence[Any]]) -> list[_Node]:
    """Roots of the per-thread nests of counted ops. ``ops`` rows are (pid, tid, ts_ns, dur_ns, name,
    input_dims, input_types, concrete_inputs, flops), sorted by pid, tid, ts_ns, -dur_ns."""
    roots: list[_Node] = []
    stack: list[_Node] = []
    last_thread = None
    for i, (pid, tid, ts, dur, name, dims, types, conc, trace) in enumerate(ops):
        if (pid, tid) != last_thread:
            stack, last_thread = [], (pid, tid)
        shape, approx = op_flops(name, dims, conc)
        node = _Node(
            i,
            name,
            ts,
            ts + max(dur or 0, 0),
            pid,
            tid,
            shape,
            approx,
            float(trace) if trace and trace > 0 else None,
            _dtype_of_types(types, name),
            _is_causal(name, conc),
        )
        while stack and not _contains(stack[-1], node):
            stack.pop()
        if stack:
            stack[-1].kids.append(node)
        else:
            roots.append(node)
        stack.append(node)
    return roots


def _mark_trace(n: _Node) -> bool:
    n.has_trace = n.trace is not None
    for k in n.kids:
        if _mark_trace(k):
            n.has_trace = True
    return n.has_trace


def _first_dtype(n: _Node) -> str | None:
    for k in n.kids:
        d = _first_dtype(k)
        if d:
            return d
    return n.dtype


def resolve(n: _Node, out: list[Counted], unknown: dict[str, int]) -> bool:
    """Append what ``n``'s subtree counts to ``out``; unknown ops go to ``unknown``. True if anything counted."""
    fam = OPS[n.name].family
    if n.trace is not None and not any(k.has_trace for k in n.kids):
        out.append(
            Counted(
                n.name,
                n.pid,
                n.tid,
                n.ts,
                n.end,
                n.trace,
                "trace_flops",
                _first_dtype(n),
                fam,
                False,
            )
        )
        return True
    if n.kids:
        mark = len(out)
        sub_unknown: dict[str, int] = {}
        got = [resolve(k, out, sub_unknown) for k in n.kids]
        if not any(got) and n.shape is not None:
            del out[mark:]
            out.append(
                Counted(
                    n.name,
                    n.pid,
                    n.tid,
                    n.ts,
                    n.end,
                    float(n.shape),
                    "shapes",
                    _first_dtype(n),
                    fam,
                    n.approx,
                )
            )
            return True
        for k, v in sub_unknown.items():
            unknown[k] = unknown.get(k, 0) + v
        return any(got)
    if n.shape is not None:
        out.append(
            Counted(
                n.name, n.pid, n.tid, n.ts, n.end, float(n.shape), "shapes", n.dtype, fam, n.approx
            )
        )
        return True
    unknown[n.name] = unknown.get(n.name, 0) + 1
    return False


def count_ops_reference(ops: Sequence[Sequence[Any]]) -> tuple[list[Counted], dict[str, int], int]:
    """Recursive reference of :func:`nest_select` (tests compare the two): (counted ops, unknown op
    names -> count, causal attention ops) for rows of counted-op events."""
    roots = build_nests(ops)
    out: list[Counted] = []
    unknown: dict[str, int] = {}
    causal = 0
    for r in roots:
        _mark_trace(r)
        resolve(r, out, unknown)
    for r in roots:
        stack = [r]
        while stack:
            n = stack.pop()
            if n.causal:
                causal += 1
                break
            stack.extend(n.kids)
    return out, unknown, causal

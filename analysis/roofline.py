"""Each op against its roofline: FLOPs and bytes moved from shapes and dtypes, achieved TFLOP/s and
TB/s, compute- or memory-bound, time lost against the roof. Definitions: docs/metrics.md, "Roofline".

A kernel belongs to the innermost *modelled* CPU op (one of :data:`MODELS`) of the thread that
launched it; the op's kernels' GPU time is its time. Ops with the same name, input shapes and types
form one row. FLOPs of matmul, convolution and attention come from :mod:`gpuscope.analysis.flops`
(one count for MFU and the roofline); bytes moved are the smallest traffic the op needs: every
tensor input read once, every output written once (no re-reads; so the memory roof is a floor).
Times are ns inside; JSON per step in µs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from gpuscope.analysis import flops as F
from gpuscope.analysis import kernels as K
from gpuscope.analysis import peaks as P
from gpuscope.analysis.event_classes import GRAPH_LAUNCH_APIS
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.memory import recorded_allocator
from gpuscope.analysis.rank_index import RankIndex, ids_param, in_ids, rank_index
from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import execute, sql_list
from gpuscope.analysis.tensor_cores import dtype_of

if TYPE_CHECKING:
    from gpuscope.store import Connection

ES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
_OTHER_ES = {
    "long int": 8, "long": 8, "int64_t": 8, "int": 4, "unsigned int": 4, "short int": 2,
    "bool": 1, "unsigned char": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip
#: c10::ScalarType numbers (``dtype`` arguments in Concrete Inputs) -> bytes per element
SCALAR_TYPE_ES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1}
TOP_ROWS = 40

Model = tuple[float, float, str]  # (FLOPs, bytes, family)


# -- shapes -> bytes --------------------------------------------------------------------------------


def elem_size(type_name: Any) -> int | None:
    """Bytes per element of a Kineto ``Input type`` entry; None for scalars, lists, unknown."""
    if not isinstance(type_name, str) or not type_name:
        return None
    d = dtype_of(type_name)
    if d is not None:
        return ES[d]
    return _OTHER_ES.get(type_name.strip().lower())


def _numel(d: Any) -> int | None:
    if not isinstance(d, list) or not all(isinstance(x, int) for x in d):
        return None
    return math.prod(d)  # [] is a 0-dim tensor: 1 element


def tensors(dims: list[Any], types: list[Any]) -> list[tuple[int, int, int]]:
    """(index, elements, bytes per element) of each tensor input with a known shape and dtype."""
    out = []
    for i, (d, t) in enumerate(zip(dims, types, strict=False)):
        es = elem_size(t)
        n = _numel(d)
        if es is not None and n is not None:
            out.append((i, n, es))
    return out


def _in_bytes(ts: list[tuple[int, int, int]]) -> int:
    return sum(n * es for _, n, es in ts)


# -- op models --------------------------------------------------------------------------------------

_MAT_A = {"aten::addmm": 1, "aten::baddbmm": 1, "aten::addbmm": 1, "aten::_addmm_activation": 1,
          "aten::addmv": 1}  # fmt: skip


def _flops_family(name: str, dims: list[Any], types: list[Any], ts: list[tuple[int, int, int]],
                  dims_text: str | None, conc: str | None) -> Model | None:  # fmt: skip
    spec = F.OPS[name]
    fl, _ = F.op_flops(name, dims_text, conc)
    if fl is None or fl <= 0:
        return None
    inb = _in_bytes(ts)
    es = {i: e for i, _, e in ts}
    if spec.family == "matmul":
        ia = _MAT_A.get(name, 0)
        a = dims[ia] if ia < len(dims) else None
        if not isinstance(a, list) or not a or not a[-1]:
            return None
        out = fl / (2 * a[-1])
        return float(fl), float(inb + out * es.get(ia, 2)), "matmul"
    if spec.family == "conv":
        if spec.backward:  # reads grad_out, input, weight; writes grad_input and grad_weight
            return float(fl), float(inb + sum(n * e for i, n, e in ts if i in (1, 2))), "conv"
        w = dims[1] if len(dims) > 1 else None
        if not isinstance(w, list) or len(w) < 3:
            return None
        out = fl / (2 * w[1] * math.prod(w[2:]))
        return float(fl), float(inb + out * es.get(0, 2)), "conv"
    # attention: forward writes O (Sq x Dv per head), backward writes dQ, dK, dV
    if spec.backward:
        qkv = [n * e for i, n, e in ts if i in (1, 2, 3)]
        return float(fl), float(inb + sum(qkv)), "attention"
    q, v = (dims[0] if dims else None), (dims[2] if len(dims) > 2 else None)
    if not isinstance(q, list) or not isinstance(v, list) or not q or not v or not q[-1]:
        return None
    out = math.prod(q) // q[-1] * v[-1]
    return float(fl), float(inb + out * es.get(0, 2)), "attention"


def _first(ts: list[tuple[int, int, int]]) -> tuple[int, int, int] | None:
    return ts[0] if ts else None


def _per_element(flops_per: int, family: str) -> Callable[..., Model | None]:
    """An op that does ``flops_per`` FLOPs per element of its first input, reads its inputs and
    writes one output of that size (norms, softmax)."""

    def f(
        name: str, dims: list[Any], types: list[Any], ts: list[tuple[int, int, int]], *_: Any
    ) -> Model | None:
        x = _first(ts)
        if x is None:
            return None
        n, es = x[1], x[2]
        return float(flops_per * n), float(_in_bytes(ts) + n * es), family

    return f


def _reduction(
    name: str, dims: list[Any], types: list[Any], ts: list[tuple[int, int, int]], *_: Any
) -> Model | None:
    x = _first(ts)
    if x is None:
        return None
    return float(x[1]), float(_in_bytes(ts)), "reduction"


def _elementwise(name: str, dims: list[Any], types: list[Any], ts: list[tuple[int, int, int]],
                 dims_text: str | None, conc: str | None) -> Model | None:  # fmt: skip
    x = _first(ts)
    if x is None:
        return None
    n_out = max(n for _, n, _ in ts)
    inb = _in_bytes(ts)
    if name in ("aten::copy_",):  # reads src, writes dst: both are inputs
        return 0.0, float(inb), "copy"
    if name in ("aten::fill_", "aten::zero_"):
        return 0.0, float(x[1] * x[2]), "elementwise"
    if name == "aten::_to_copy":
        c = F._parse_concrete(conc)
        st = c[1] if len(c) > 1 and isinstance(c[1], int) else None
        es_out = SCALAR_TYPE_ES.get(st, x[2]) if st is not None else x[2]
        return 0.0, float(inb + x[1] * es_out), "copy"
    if name.endswith("_"):  # in place: writes its first input
        return float(n_out), float(inb + x[1] * x[2]), "elementwise"
    return float(n_out), float(inb + n_out * x[2]), "elementwise"


def _nll_loss(
    name: str, dims: list[Any], types: list[Any], ts: list[tuple[int, int, int]], *_: Any
) -> Model | None:
    """``nll_loss_forward(self, target, weight, ...)`` gathers one element of ``self`` per target
    (it does not read the whole input: on the DDP sample 268 MB of logits were "read" in 17 µs, at
    196 % of the HBM): reads the targets, one ``self`` (and weight) element each, writes the loss.
    ``nll_loss_backward(grad_out, self, target, weight, ..., total_weight)`` writes a gradient of
    ``self``'s size (zeros, one value per target) and reads the targets and the small inputs,
    not ``self``'s values. 1 FLOP per target."""
    by = {i: (n, e) for i, n, e in ts}
    back = name.endswith("_backward")
    si, ti = (1, 2) if back else (0, 1)
    if si not in by or ti not in by:
        return None
    (n_self, es_self), (n_t, es_t) = by[si], by[ti]
    w = by.get(ti + 1)
    if back:
        small = sum(n * e for i, n, e in ts if i not in (si, ti))
        return float(n_t), float(n_self * es_self + n_t * es_t + small), "reduction"
    gathered = n_t * (es_self + (w[1] if w else 0))
    return float(n_t), float(n_t * es_t + gathered + 2 * es_self), "reduction"


MODELS: dict[str, Callable[..., Model | None]] = {name: _flops_family for name in F.OPS}
for _n in ("native_layer_norm", "native_group_norm", "native_batch_norm", "_fused_rms_norm",
           "cudnn_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"):  # fmt: skip
    MODELS[f"aten::{_n}"] = _per_element(5, "norm")
for _n in ("native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward",
           "_fused_rms_norm_backward", "cudnn_batch_norm_backward"):  # fmt: skip
    MODELS[f"aten::{_n}"] = _per_element(8, "norm")
for _n in ("_softmax", "_log_softmax", "_safe_softmax"):
    MODELS[f"aten::{_n}"] = _per_element(5, "softmax")
for _n in ("_softmax_backward_data", "_log_softmax_backward_data"):
    MODELS[f"aten::{_n}"] = _per_element(3, "softmax")
for _n in ("sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var", "std",
           "var_mean", "std_mean", "argmax", "argmin", "prod", "any", "all", "logsumexp", "cumsum"):  # fmt: skip
    MODELS[f"aten::{_n}"] = _reduction
for _n in ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "exp", "log", "sqrt",
           "rsqrt", "pow", "pow_", "gelu", "gelu_backward", "relu", "relu_", "threshold_backward",
           "silu", "silu_", "silu_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward",
           "where", "masked_fill", "masked_fill_", "copy_", "fill_", "zero_", "clamp", "clamp_",
           "clamp_min", "clamp_min_", "native_dropout", "native_dropout_backward", "addcmul",
           "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_", "_to_copy",
           "reciprocal", "abs", "sign", "eq", "ne", "lt", "gt", "le", "ge", "mish", "hardswish",
           "leaky_relu", "elu", "softplus", "logical_not", "bitwise_and", "maximum", "minimum",
           "square", "cos", "sin", "erf", "_fused_dropout"):  # fmt: skip
    MODELS[f"aten::{_n}"] = _elementwise
for _n in ("nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward"):
    MODELS[f"aten::{_n}"] = _nll_loss
COMPUTE_FAMILIES = ("matmul", "conv", "attention")
MIB = 2**20
L2_BYTES: dict[str, float] = {
    "V100 SXM2": 6 * MIB, "V100 PCIe": 6 * MIB, "V100S PCIe": 6 * MIB, "T4": 4 * MIB,
    "A100": 40 * MIB, "A10": 6 * MIB, "A10G": 6 * MIB, "L4": 48 * MIB, "L40S": 96 * MIB,
    "L40": 96 * MIB, "H100 SXM": 50 * MIB, "H100 PCIe": 50 * MIB, "H100 NVL": 50 * MIB,
    "H200": 50 * MIB, "H200 NVL": 50 * MIB, "GH200": 60 * MIB, "B200": 126 * MIB,
    "GB200": 126 * MIB, "RTX 4090": 72 * MIB, "MI250X": 8 * MIB, "MI250": 8 * MIB,
    "MI300X": 256 * MIB, "MI325X": 256 * MIB, "MI300A": 256 * MIB,
}  # fmt: skip
"""The last cache before the GPU's memory, bytes, by model (the vendors' architecture whitepapers
and datasheets, MB read as MiB; AMD's CDNA3: the 256 MB Infinity Cache in front of the HBM; the
GH100 die's 60 MB for GH200; Blackwell's two dies' 126 MB): what the memory roof's floor of HBM
traffic subtracts (:attr:`RoofRow.hbm_bytes`). Every model with a memory roof has one."""
_FEWER_FLOPS = re.compile(r"fft\d?d_|fft_|winograd|pointwise_mult_and_sum_complex", re.I)
"""Convolution kernels of an algorithm that does fewer multiplies than the direct convolution the
FLOP count assumes (FFT, Winograd): the count is not what ran, so such an op has no compute roof."""


def roof_dtype(dtype: str | None, family: str, kernels: list[str]) -> tuple[str | None, bool]:
    """The precision whose peak is the op's compute roof, and whether its FLOPs count holds.

    Matmul, convolution and attention run at their dtype's tensor-core peak, except an fp32 op
    whose kernels run on tensor cores (TF32: cuDNN's default for convolutions,
    ``set_float32_matmul_precision("high")`` for matmuls), held against the TF32 peak; other ops
    against the fp32 (vector) peak. The count does not hold where a kernel is an FFT or Winograd
    convolution (:data:`_FEWER_FLOPS`)."""
    if family not in COMPUTE_FAMILIES:
        return "fp32", True
    held = not (family == "conv" and any(_FEWER_FLOPS.search(k) for k in kernels))
    if dtype == "fp32":
        tcs = [K.classify(k).tc for k in kernels]
        if any(t.tensor_core or t.precision in ("tf32", "3xtf32") for t in tcs):
            return "tf32", held
    return dtype, held


FOREACH = "aten::_foreach_"


def _n_lists(types_text: Any) -> int:
    types = F._parse_json(types_text) if isinstance(types_text, str) else None
    return sum(1 for t in types or [] if t == "TensorList")


def foreach_model(name: str, list_bytes: Any, types_text: Any) -> Model | None:
    """A ``_foreach_*`` op over k TensorLists of ``list_bytes`` each: reads the k lists, writes one
    (in place: its first): (k + 1) × list bytes; 1 FLOP per element of each list read, elements =
    list bytes / 4 (fp32 optimizer state). None when the list's bytes are unknown."""
    k = _n_lists(types_text)
    if not list_bytes or k == 0:
        return None
    lb = float(list_bytes)
    return k * lb / 4, (k + 1) * lb, "optimizer"


#: The names of :data:`MODELS` and every ``_foreach_*`` op, as a condition on ``names.name``.
MODELLED_NAMES_SQL = f"name IN {sql_list(tuple(MODELS))} OR starts_with(name, '{FOREACH}')"

Sig = tuple[str, str | None, str | None, str | None]


class OpCalls:
    """The modelled CPU ops of a rank's range (:func:`modelled_ops`), in a DuckDB working table:
    one row per call, its row number its id, ``sigs`` the distinct (name, input dims, input
    types, concrete inputs) as stored (JSON text, None where absent). Python reads the calls of
    one time range at a time, as numbers (:meth:`overlapping`): a 2 GB rank has ~0.5 M calls of
    a few dozen signatures."""

    def __init__(self, con: Connection, table: str, sigs: list[Sig]) -> None:
        self.con, self.table, self.sigs = con, table, sigs

    def __len__(self) -> int:
        row = self.con.execute(f"SELECT count(*) FROM {self.table}").fetchone()
        return int(row[0]) if row else 0

    def overlapping(
        self, start_ns: int, end_ns: int, tids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(id, tid, s, e, sig) of the calls holding a time of ``[start_ns, end_ns]`` (of the
        threads ``tids``; None: every thread), int64, in the table's order."""
        where = "" if tids is None else "AND list_contains($tids, tid)"
        p: dict[str, Any] = {"a": int(start_ns), "b": int(end_ns)}
        if tids is not None:
            p["tids"] = [int(t) for t in np.unique(tids)] or [-1]
        d = execute(
            self.con,
            f"""SELECT rowid AS id, tid, s, e, sig FROM {self.table}
                WHERE s <= $b AND e > $a {where} ORDER BY rowid""",
            p,
        ).fetchnumpy()
        return tuple(np.asarray(d[c], dtype=np.int64) for c in ("id", "tid", "s", "e", "sig"))  # type: ignore[return-value]

    def foreach_frame(self) -> pd.DataFrame:
        """The ``_foreach_*`` calls (columns ``tid``, ``s``, ``e``, ``name``), indexed by id."""
        fe = [i for i, g in enumerate(self.sigs) if str(g[0]).startswith(FOREACH)] or [-1]
        d = execute(
            self.con,
            f"""SELECT rowid AS id, tid, s, e, sig FROM {self.table}
                WHERE list_contains($fe, sig) ORDER BY rowid""",
            {"fe": fe},
        ).fetchnumpy()
        names = [self.sigs[k][0] for k in np.asarray(d["sig"], dtype=np.int64).tolist()]
        return pd.DataFrame(
            {
                "tid": np.asarray(d["tid"], dtype=np.int64),
                "s": np.asarray(d["s"], dtype=np.int64),
                "e": np.asarray(d["e"], dtype=np.int64),
                "name": pd.Series(names, dtype=object).values,
            },
            index=np.asarray(d["id"], dtype=np.int64),
        )


@contextmanager
def modelled_ops(
    con: Connection, run_id: str, rank: int, start_ns: int, end_ns: int
) -> Iterator[OpCalls]:
    """The rank's complete CPU ops (``cpu_op``, ``Operator``) of :data:`MODELLED_NAMES_SQL` that
    overlap ``[start_ns, end_ns)``, for one block: their working tables are dropped when it
    ends."""
    ix = RankIndex.shared(con, run_id, rank)
    ids = ix.name_ids(MODELLED_NAMES_SQL)
    p = ix.params(ids=ids_param(ids), ws=int(start_ns), we=int(end_ns))
    cols = "name_id, input_dims, input_types, concrete_inputs"
    ops_sql = f"""
        SELECT tid, ts_ns AS s, ts_ns + dur_ns AS e, {cols}
        FROM events
        WHERE run_id = $run AND rank = $rank AND ph = 'X' AND cat IN ('cpu_op', 'Operator')
          AND dur_ns IS NOT NULL AND {in_ids("name_id", "ids", ids)}
          AND ts_ns < $we AND ts_ns + dur_ns > $ws"""
    same = " AND ".join(f"o.{c} IS NOT DISTINCT FROM g.{c}" for c in cols.split(", "))
    with rank_index(con, run_id, rank) as rx:
        t = rx.table(("roofops",), ops_sql, p)
        g = rx.table(
            ("roofsigs",),
            f"SELECT {cols}, row_number() OVER (ORDER BY {cols}) - 1 AS sig "
            f"FROM (SELECT DISTINCT {cols} FROM {t})",
        )
        sigs = execute(
            con,
            f"""SELECT n.name, g.input_dims, g.input_types, g.concrete_inputs
                FROM {g} g JOIN names n ON n.run_id = $run AND n.name_id = g.name_id
                ORDER BY g.sig""",
            p,
        ).fetchall()
        calls = rx.table(
            ("roofcalls",),
            f"SELECT o.tid, o.s, o.e, g.sig FROM {t} o JOIN {g} g ON {same}",
        )
        rx.drop(("roofops",))  # the calls hold what the roofline reads of it
        yield OpCalls(con, calls, [(str(r[0]), r[1], r[2], r[3]) for r in sigs])


#: Kernel launches that :func:`roofline` finds the ops of at a time (with the op calls that hold
#: one of their times: what Python holds of the rank's ops).
LAUNCH_BATCH_ROWS = 1 << 16


def parents(tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each span's parent (the row of the nearest earlier span of its thread that still holds its
    start: ``max{j < i, tids[j] == tids[i]: ends[j] > starts[i]}``), -1 where none, for spans
    sorted by thread then start (int64 arrays, ns). What a stack of the open spans gives (pop the
    ended ones, the top is the parent), found by pointer jumping in numpy: each span's candidate
    starts at the span before it and jumps to that one's candidate while the candidate ended at
    or before its start (every span skipped ended before it too). Rounds: about the nesting depth
    plus log2 of the longest run of siblings; memory: two int64 arrays of the spans' length."""
    n = len(starts)
    cand = np.arange(-1, n - 1, dtype=np.int64)
    if n:
        cand[1:][tids[1:] != tids[:-1]] = -1  # a thread's first span has none before it
    todo = np.flatnonzero(cand >= 0)
    todo = todo[ends[cand[todo]] <= starts[todo]]
    while len(todo):
        c = cand[cand[todo]]  # read before written: every jump of a round from the last round's
        cand[todo] = c
        todo = todo[c >= 0]
        todo = todo[ends[cand[todo]] <= starts[todo]]
    return cand


def innermost_rows(
    tids: np.ndarray, starts: np.ndarray, ends: np.ndarray, qtid: np.ndarray, qt: np.ndarray
) -> np.ndarray:
    """For each query (thread ``qtid``, time ``qt``), the row of the innermost span of that
    thread holding ``qt`` (``[start, end)``), -1 where none: spans taken as nested (each span's
    parent is the nearest earlier span of its thread that still holds its start; sorted by
    thread, start, longest first, a tie in input order), the query climbing from the last span
    that began at or before it to the first one still open. Int64 arrays only (what
    ``modules.innermost`` gives with ``join=None``, as row numbers)."""
    out = np.full(len(qt), -1, dtype=np.int64)
    n = len(starts)
    if n == 0 or len(qt) == 0:
        return out
    order = np.lexsort((-(ends - starts), starts, tids))
    t_s, s_s, e_s = tids[order], starts[order], ends[order]
    parent = parents(t_s, s_s, e_s)
    j = np.full(len(qt), -1, dtype=np.int64)
    for tid in np.unique(qtid):
        lo, hi = np.searchsorted(t_s, tid, "left"), np.searchsorted(t_s, tid, "right")
        if hi == lo:
            continue
        m = qtid == tid
        k = np.searchsorted(s_s[lo:hi], qt[m], side="right") - 1
        j[m] = np.where(k >= 0, k + lo, -1)
    live = j >= 0
    while True:  # climb while the span has ended
        jj = np.where(live, j, 0)
        closed = live & (e_s[jj] <= qt)
        if not closed.any():
            break
        j = np.where(closed, parent[jj], j)
        live = j >= 0
    out[live] = order[j[live]]
    return out


def _group_keys(
    sigs: list[Sig], calls: np.ndarray, csig: np.ndarray, list_bytes: dict[int, int]
) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """The roofline's rows of the op calls ``calls`` (ids, of the signatures ``csig``, indexes in
    ``sigs``): the distinct keys (name, shapes, types, concrete inputs; a ``_foreach_*`` op's
    list bytes in the shapes' place) and each call's index among them."""
    ids: dict[tuple[Any, ...], int] = {}
    gkey = np.empty(len(calls), dtype=np.int64)
    for sg in np.unique(csig).tolist():
        name, dims, types, conc = sigs[sg]
        at = csig == sg
        if name.startswith(FOREACH):  # TensorLists: no shapes; the list's bytes instead
            for c in np.flatnonzero(at).tolist():
                key = (name, list_bytes.get(int(calls[c])), types, None)
                gkey[c] = ids.setdefault(key, len(ids))
        else:
            gkey[at] = ids.setdefault((name, dims, types, conc), len(ids))
    return list(ids), gkey


def _kernels_per_key(
    key: np.ndarray, name_id: np.ndarray, ns: np.ndarray, n_keys: int
) -> list[dict[int, float]]:
    """Per roofline row (``key``, 0 .. ``n_keys`` − 1, one per kernel): its kernels' name ids and
    their summed GPU time (ns, float), name ids ascending. One integer per (row, name) pair,
    ``row · span + name_id − lowest``, sorted once: ``np.unique`` of the stacked pairs
    (``axis=0``) sorts them as records, 7× the CPU at 2.2 M kernels (3.8 s against 0.5 s)."""
    out: list[dict[int, float]] = [{} for _ in range(n_keys)]
    if not len(key):
        return out
    nid = np.asarray(name_id, dtype=np.int64)
    lo = int(nid.min())
    span = int(nid.max()) - lo + 1
    codes, pair_of = np.unique(
        np.asarray(key, dtype=np.int64) * span + (nid - lo), return_inverse=True
    )
    pair_ns = np.bincount(
        pair_of.ravel(), weights=np.asarray(ns, dtype=np.float64), minlength=len(codes)
    )
    for code, t in zip(codes.tolist(), pair_ns.tolist(), strict=True):
        g, n = divmod(code, span)
        out[g][n + lo] = float(t)
    return out


def _foreach_list_bytes(con: Connection, run_id: str, rank: int, ops: Any) -> dict[int, int]:
    """Row of ``ops`` -> bytes of one of its TensorLists, for ``_foreach_*`` ops: an out-of-place
    one (``_foreach_sqrt``) allocates its output list, so the allocator's bytes inside it are the
    list's; every foreach op takes the list bytes of the nearest such op on its thread."""
    fe = ops[ops["name"].str.startswith(FOREACH)]
    if fe.empty:
        return {}
    if not recorded_allocator(con, run_id):
        return {}
    mem = con.execute(
        """SELECT tid, ts_ns, bytes FROM memory_events WHERE run_id = ? AND rank = ?
           AND device_type = 1 AND bytes > 0 AND ts_ns >= ? AND ts_ns < ? ORDER BY ts_ns""",
        [run_id, int(rank), int(fe["s"].min()), int(fe["e"].max())],
    ).df()
    if mem.empty:
        return {}
    outp = fe[~fe["name"].str.endswith("_")]
    known: list[tuple[int, int, int]] = []  # (tid, time, list bytes)
    for _, r in outp.iterrows():
        m = mem[(mem["tid"] == r["tid"]) & (mem["ts_ns"] >= r["s"]) & (mem["ts_ns"] < r["e"])]
        if len(m):
            known.append((int(r["tid"]), int(r["s"]), int(m["bytes"].sum())))
    out: dict[int, int] = {}
    for i, r in fe.iterrows():
        same = [(abs(t - int(r["s"])), b) for tid, t, b in known if tid == int(r["tid"])]
        if same:
            out[int(i)] = min(same)[1]  # type: ignore[call-overload]
    return out  # against the tensor-core roof of their dtype


def op_model(
    name: str, dims_text: str | None, types_text: str | None, conc: str | None
) -> tuple[Model | None, str | None]:
    """((FLOPs, bytes, family) of one call, or None when the shapes do not give it; the dtype)."""
    fn = MODELS.get(name)
    dims, types = F._parse_json(dims_text), F._parse_json(types_text)
    if fn is None or not isinstance(dims, list) or not isinstance(types, list):
        return None, None
    ts = tensors(dims, types)
    dt = next((dtype_of(types[i]) for i, _, _ in ts if dtype_of(types[i])), None)
    try:
        return fn(name, dims, types, ts, dims_text, conc), dt
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None, dt


# -- the result -------------------------------------------------------------------------------------


@dataclass
class RoofRow:
    """One op (name + shapes + types) of the window: calls, GPU time of its kernels (ns), FLOPs and
    bytes of all its calls, the roofs it is held against (TFLOP/s, TB/s) and the GPU's L2 size
    (bytes; None: unknown, and then no memory roof)."""

    op: str
    shapes: str
    dtype: str | None
    family: str
    calls: int
    gpu_ns: int
    flops: float
    bytes: float
    peak_tflops: float | None
    peak_tbs: float | None
    l2_bytes: float | None = None

    @property
    def compute_ns(self) -> float | None:
        """FLOPs at the compute roof, ns (None without one)."""
        return self.flops / (self.peak_tflops * 1e12) * 1e9 if self.peak_tflops else None

    @property
    def hbm_bytes(self) -> float | None:
        """The least traffic the op's calls need from the GPU's memory (HBM): per call, its bytes
        less twice the L2 (at most one L2 of its inputs can be there when it starts, and at most
        one L2 of its outputs can still be there when it ends); None with the L2 size unknown."""
        if self.l2_bytes is None:
            return None
        per = self.bytes / max(1, self.calls)
        return max(0.0, per - 2.0 * self.l2_bytes) * self.calls

    @property
    def cache_resident(self) -> bool:
        """The op's bytes per call fit in twice the L2: it may never touch the HBM, and the L2's
        bandwidth is not known, so only a compute-bound op has a roof."""
        return self.hbm_bytes == 0.0

    @property
    def memory_ns(self) -> float | None:
        """:attr:`hbm_bytes` at the memory roof, ns (None without a roof or an L2 size)."""
        hb = self.hbm_bytes
        return hb / (self.peak_tbs * 1e12) * 1e9 if self.peak_tbs and hb is not None else None

    @property
    def ideal_ns(self) -> float | None:
        """The time at the roof: max(FLOPs / compute roof, HBM bytes / memory roof), ns; None for
        an op of the L2 (:attr:`bound` ``L2``) and where no roof is known."""
        if self.bound == "L2" or (self.cache_resident and self.compute_ns is None):
            return None
        parts = [x for x in (self.compute_ns, self.memory_ns) if x is not None]
        return max(parts) if parts else None

    @property
    def bound(self) -> str | None:
        """``compute`` when FLOPs take longer at the compute roof than the bytes at the memory roof
        (all of them, for an op that fits in the L2), and for a matmul, convolution or attention
        that fits in the L2 (its compute roof is the only roof known there); ``memory``
        otherwise; ``L2`` for another op that fits in the L2 (no roof: its compute floor, a few
        FLOPs per element, says nothing)."""
        c, m = self.compute_ns, self.memory_ns
        if c is None or m is None or not self.peak_tbs:
            return None
        if self.cache_resident:
            hbm_all = self.bytes / (self.peak_tbs * 1e12) * 1e9
            return "compute" if c >= hbm_all or self.family in COMPUTE_FAMILIES else "L2"
        return "compute" if c >= m else "memory"

    @property
    def lost_ns(self) -> float | None:
        i = self.ideal_ns
        return max(0.0, self.gpu_ns - i) if i is not None else None

    def per_step(self, n_steps: int) -> RoofOp:
        """The row over ``n_steps`` steps, as the Run page and ``analyze --json`` give it."""
        per = max(1, n_steps)
        s = self.gpu_ns / 1e9
        i = self.ideal_ns
        return RoofOp(
            op=self.op,
            shapes=self.shapes,
            dtype=self.dtype,
            family=self.family,
            calls_per_step=self.calls / per,
            gpu_us_per_step=self.gpu_ns / per / 1e3,
            flops_per_call=self.flops / self.calls if self.calls else None,
            bytes_per_call=self.bytes / self.calls if self.calls else None,
            intensity_flop_per_byte=self.flops / self.bytes if self.bytes else None,
            achieved_tflops=self.flops / s / 1e12 if s else None,
            achieved_tbs=self.bytes / s / 1e12 if s else None,
            bound=self.bound,
            roof_pct=100.0 * i / self.gpu_ns if i is not None and self.gpu_ns else None,
            lost_us_per_step=(self.lost_ns or 0.0) / per / 1e3 if i is not None else None,
        )

    def to_json(self, n_steps: int) -> dict[str, Any]:
        return dataclasses.asdict(self.per_step(n_steps))


@dataclass(frozen=True)
class RoofOp:
    """One op of the roofline table per step (what the Run page shows and ``analyze --json``
    writes under ``roofline.ops``): calls and GPU time (µs) per step, FLOPs and bytes per call,
    intensity (FLOP/byte), achieved TFLOP/s and TB/s, the roof that binds (``compute`` or
    ``memory``), % of the roof reached and the time lost against it (µs per step); None where
    the roofs or the op's FLOPs/bytes are unknown."""

    op: str
    shapes: str
    dtype: str | None
    family: str
    calls_per_step: float
    gpu_us_per_step: float
    flops_per_call: float | None
    bytes_per_call: float | None
    intensity_flop_per_byte: float | None
    achieved_tflops: float | None
    achieved_tbs: float | None
    bound: str | None
    roof_pct: float | None
    lost_us_per_step: float | None


@dataclass(frozen=True)
class RooflineView:
    """The Run page's roofline section (``analyze --json``'s ``roofline``): the GPU and its
    memory roof (TB/s), the time lost against the roofs, in modelled ops and in kernels no model
    covers (µs per step; the top ten of those by op), the top :data:`TOP_ROWS` ops by time lost
    (:class:`RoofOp`), how many ops were modelled, and the notes."""

    gpu_model: str | None
    memory_tbs: float | None
    lost_us_per_step: float
    modelled_us_per_step: float
    unmodelled_us_per_step: float
    unmodelled_top: tuple[tuple[str, float], ...]
    ops: tuple[RoofOp, ...]
    n_ops: int
    notes: tuple[str, ...]


@dataclass
class Roofline:
    """Every modelled op of the window against the GPU's roofs, sorted by time lost."""

    gpu_model: str | None
    peak_tbs: float | None
    n_steps: int
    rows: list[RoofRow] = field(default_factory=list)
    modelled_ns: int = 0
    unmodelled_ns: int = 0
    unmodelled: dict[str, int] = field(default_factory=dict)  # op (or "(no op)") -> ns
    notes: list[str] = field(default_factory=list)
    memory_bound_fp32_matmul: dict[str, float] = field(default_factory=dict)
    """Kernel name -> the share (0-1) of its time in matmul ops that ran in plain fp32 on CUDA
    cores and are memory-bound there (:attr:`RoofRow.bound`): tensor cores cannot speed those up
    (``mixed_precision``'s re-timing reads it). Names with none are absent."""

    @property
    def lost_ns(self) -> float:
        return sum(r.lost_ns or 0.0 for r in self.rows)

    def view(self) -> RooflineView:
        """The roofline per step, as the Run page shows it (and ``to_json`` writes it)."""
        per = max(1, self.n_steps)
        top_un = sorted(self.unmodelled.items(), key=lambda kv: -kv[1])[:10]
        return RooflineView(
            gpu_model=self.gpu_model,
            memory_tbs=self.peak_tbs,
            lost_us_per_step=self.lost_ns / per / 1e3,
            modelled_us_per_step=self.modelled_ns / per / 1e3,
            unmodelled_us_per_step=self.unmodelled_ns / per / 1e3,
            unmodelled_top=tuple((k, v / per / 1e3) for k, v in top_un),
            ops=tuple(r.per_step(self.n_steps) for r in self.rows[:TOP_ROWS]),
            n_ops=len(self.rows),
            notes=tuple(self.notes),
        )

    def to_json(self) -> dict[str, Any]:
        v = self.view()
        return {
            "gpu_model": v.gpu_model,
            "memory_tbs": v.memory_tbs,
            "lost_us_per_step": v.lost_us_per_step,
            "modelled_us_per_step": v.modelled_us_per_step,
            "unmodelled_us_per_step": v.unmodelled_us_per_step,
            "unmodelled_top": [{"op": k, "gpu_us_per_step": u} for k, u in v.unmodelled_top],
            "ops": [dataclasses.asdict(o) for o in v.ops],
            "n_ops": v.n_ops,
            "notes": list(v.notes),
        }


def roofline(
    con: Connection,
    run_id: str,
    rank: int,
    window: Window,
    device: int | None,
    device_props: dict[str, Any] | None,
    device_properties: Any = None,
) -> Roofline:
    """The roofline table of the window's kernels on ``device`` (see the module docstring)."""
    tbs, model, how = P.mem_tbs_for(device_props)
    res = Roofline(gpu_model=model, peak_tbs=tbs, n_steps=window.n_steps)
    if device is None:
        res.notes.append("no GPU activity in the window")
        return res
    if tbs is None:
        res.notes.append(f"no memory roof: {how}")
    lx = K.launched(con, run_id, rank, window.start_ns, window.end_ns, device=device)
    if not len(lx):
        return res
    kern = lx.copy == 0
    launch = lx.has_launch & kern
    gidx_all = np.full(len(lx), -1, dtype=np.int64)
    gsig_all = np.full(len(lx), -1, dtype=np.int64)
    with modelled_ops(con, run_id, rank, window.start_ns - 10**10, window.end_ns) as ops:
        list_bytes = _foreach_list_bytes(con, run_id, rank, ops.foreach_frame())
        sigs = ops.sigs
        sel = np.flatnonzero(launch)
        sel = sel[np.argsort(lx.launch_ns[sel], kind="stable")]
        for a in range(0, len(sel), LAUNCH_BATCH_ROWS):  # the launches in time order, in batches
            part = sel[a : a + LAUNCH_BATCH_ROWS]
            qt, qtid = lx.launch_ns[part].astype(np.int64), lx.tid[part].astype(np.int64)
            oid, tid, s, e, sig = ops.overlapping(int(qt.min()), int(qt.max()), qtid)
            rows = innermost_rows(tid, s, e, qtid, qt)
            hit = rows >= 0
            gidx_all[part[hit]] = oid[rows[hit]]
            gsig_all[part[hit]] = sig[rows[hit]]
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    un_names: dict[int, int] = {}
    peak_cache: dict[tuple[str, str | None], float | None] = {}
    kj = np.flatnonzero(kern)
    gidx, gsig = gidx_all[kj], gsig_all[kj]
    del gidx_all, gsig_all
    # the CUDA-graph replays' launch calls: their kernels' ops ran at capture, not here
    replays = {
        (int(t), int(ts))
        for t, ts in con.execute(
            """SELECT e.tid, e.ts_ns FROM events e
               JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
               WHERE e.run_id = ? AND e.rank = ? AND list_contains(?, n.name)
                 AND e.ts_ns < ? AND e.ts_ns > ?""",
            [run_id, int(rank), list(GRAPH_LAUNCH_APIS), window.end_ns, window.start_ns - 10**10],
        ).fetchall()
    }
    graph_names: dict[int, int] = {}
    graph_launches: set[tuple[int, int]] = set()
    for j in kj[gidx < 0]:  # kernels launched outside any modelled op
        ns = int(lx.in_ns[j])
        at = (int(lx.tid[j]), int(lx.launch_ns[j]))
        if lx.has_launch[j] and at in replays:
            graph_names[int(lx.name_id[j])] = graph_names.get(int(lx.name_id[j]), 0) + ns
            graph_launches.add(at)
        else:
            un_names[int(lx.name_id[j])] = un_names.get(int(lx.name_id[j]), 0) + ns
        res.unmodelled_ns += ns
    # GPU time per op call, then per (name, shapes, types, args): the groups in the order of
    # their first kernel
    on = gidx >= 0
    calls, first, inv = np.unique(gidx[on], return_index=True, return_inverse=True)
    per_call = np.zeros(len(calls), dtype=np.int64)
    np.add.at(per_call, inv, np.asarray(lx.in_ns[kj[on]], dtype=np.int64))
    keys, gkey = _group_keys(sigs, calls, gsig[on][first], list_bytes)
    n_keys = len(keys)
    first_of = np.full(n_keys, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_of, gkey, first)
    key_ns = np.zeros(n_keys, dtype=np.int64)
    np.add.at(key_ns, gkey, per_call)
    key_calls = np.bincount(gkey, minlength=n_keys)
    # each group's kernels (name ids) and their time in it: what ran decides the compute roof
    # (TF32, FFT); the time tells which kernels run memory-bound fp32 matmuls
    key_kernels = _kernels_per_key(gkey[inv], lx.name_id[kj[on]], lx.in_ns[kj[on]], n_keys)
    for g in np.argsort(first_of, kind="stable").tolist():
        groups[keys[g]] = {
            "ns": int(key_ns[g]),
            "calls": int(key_calls[g]),
            "kernels": key_kernels[g],
        }
    kernel_ids = set(un_names).union(graph_names, *(g["kernels"] for g in groups.values()))
    names = K.name_lookup(con, run_id, kernel_ids)
    for nid, ns in graph_names.items():
        k = f"(CUDA graph replay) {names.get(nid, '?')[:60]}"
        res.unmodelled[k] = res.unmodelled.get(k, 0) + ns
    if graph_names:
        g_ns = sum(graph_names.values())
        per = max(1, window.n_steps)
        res.notes.append(
            f"{sig3(g_ns / per / 1e3)} µs of kernels per step ran in "
            f"{sig3(len(graph_launches) / per)} CUDA graph replay(s) per step: their ops ran when "
            "the graph was captured, so they have no shapes here and no roof"
        )
    l2 = L2_BYTES.get(model) if model is not None else None
    n_l2 = n_fewer = 0
    mm_ns: dict[str, float] = {}  # kernel name -> its time in matmul ops, and in memory-bound
    mb_ns: dict[str, float] = {}  # fp32 ones
    for nid, ns in un_names.items():
        k = f"(kernel without a modelled op) {names.get(nid, '?')[:60]}"
        res.unmodelled[k] = res.unmodelled.get(k, 0) + ns
    for (name, dims, types, conc), grp in groups.items():
        dt: str | None
        if str(name).startswith(FOREACH):
            m, dt = foreach_model(str(name), dims, types), "fp32"
            dims = f"{_n_lists(types)} TensorList(s) of {dims} B" if dims else ""
        else:
            m, dt = op_model(name, dims, types, conc)
        if m is None:
            res.unmodelled_ns += grp["ns"]
            k = (
                f"{name} (TensorList sizes unknown: record with profile_memory=True)"
                if str(name).startswith(FOREACH)
                else f"{name} (shapes do not give its FLOPs/bytes)"
            )
            res.unmodelled[k] = res.unmodelled.get(k, 0) + grp["ns"]
            continue
        fl, by, fam = m
        roof_dt, held = roof_dtype(dt, fam, [names.get(k, "") for k in sorted(grp["kernels"])])
        if (fam, roof_dt) not in peak_cache:
            peak_cache[(fam, roof_dt)] = P.peak_for(
                device_properties, roof_dt, device=device
            ).tflops
        n = grp["calls"]
        row = RoofRow(
            op=str(name), shapes=str(dims or ""), dtype=dt, family=fam, calls=n,
            gpu_ns=int(grp["ns"]), flops=fl * n, bytes=by * n,
            peak_tflops=peak_cache[(fam, roof_dt)] if held else None, peak_tbs=tbs, l2_bytes=l2,
        )  # fmt: skip
        n_l2 += row.bound == "L2"
        n_fewer += not held
        if fam == "matmul":
            fp32_mem = dt == "fp32" and roof_dt == "fp32" and row.bound == "memory"
            for nid, kns in grp["kernels"].items():
                kname = names.get(nid, "")
                mm_ns[kname] = mm_ns.get(kname, 0.0) + kns
                if fp32_mem:
                    mb_ns[kname] = mb_ns.get(kname, 0.0) + kns
        res.rows.append(row)
        res.modelled_ns += int(grp["ns"])
    if tbs is not None and l2 is None:
        res.notes.append(f"no L2 size known for the {model}: no memory roof")
    if n_l2:
        res.notes.append(
            f"{n_l2} memory-bound op(s) fit in twice the L2 ({sig3(2 * (l2 or 0) / 2**20)} MiB): "
            "their bytes need not touch the HBM and the L2's bandwidth is not known, so they have "
            "no roof (bound L2)"
        )
    if n_fewer:
        res.notes.append(
            f"{n_fewer} convolution(s) ran as FFT or Winograd, which do fewer multiplies than "
            "the direct count: no compute roof for them"
        )
    res.rows.sort(key=lambda r: (-(r.lost_ns or 0.0), -r.gpu_ns, r.op))
    res.memory_bound_fp32_matmul = {k: v / mm_ns[k] for k, v in mb_ns.items() if mm_ns[k] > 0}
    return res

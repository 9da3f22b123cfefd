"""Collectives matched across ranks: who arrives last, who waits, how fast the data moves.

Two halves, so that a rank's part can be computed where its trace lands (and stored) and the run's
part needs no events:

- :func:`rank_collectives` reads ONE rank from the store: one row per communication kernel
  (:data:`FRAME_COLUMNS`). :func:`collective_from_args` maps the ``args`` Kineto writes on a NCCL
  kernel or on ``record_param_comms`` to the same fields, for a reader that sees the raw trace.
- :func:`match_collectives` matches the frames of all ranks into collective **instances** and
  measures, per instance and rank: arrival (the rank's NCCL kernel start on its GPU, absolute
  time), skew, the last arriver, **wait** (before the last arrival) and **transfer** (after it),
  bytes, algorithm and bus bandwidth; and the **straggler**: the rank whose late arrivals make the
  others wait longest in total, with the steps and phases where it happens.

What Kineto writes (surveyed on pytorch/pytorch ``torch/csrc/profiler/util.cpp`` and
``ParamCommsUtils``, pytorch/kineto's tests, the real 2-rank DDP sample of torch 2.11):

- every torch 2.x: a ``record_param_comms`` CPU op per collective (``Input Dims`` of its tensor
  lists), a ``nccl:<op>`` annotation and a ``c10d::<op>`` op; the NCCL kernel's name gives the
  collective and dtype (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, older
  ``ncclKernel_AllReduce_RING_LL_Sum_float``; p2p is ``SendRecv``);
- torch >= 2.1 copies ``Collective name``, ``dtype``, ``In msg nelems``, ``Out msg nelems``,
  ``Group size``, ``In split size``, ``Out split size`` onto the kernel; >= 2.3 adds ``Process
  Group Name``, ``Process Group Description``, ``Process Group Ranks``; ``record_param_comms``
  also has ``Rank``, ``Global rank start/stride`` and, for p2p, ``Src Rank``/``Dst Rank``; newer
  Kineto writes ``Seq`` (the process group's sequence number) and ``Comms Id``. The DDP sample
  (torch 2.11) has the process-group keys but no ``Seq``.

The store keeps none of these ``args`` (ingest keeps a fixed set of columns), so
:func:`rank_collectives` identifies a process group by the CUDA **stream** its NCCL kernels run on
(ProcessGroupNCCL gives every communicator its own stream), reads the collective and dtype from the
kernel name (else, for AllGather/Broadcast/SendRecv kernels that name no dtype, the op's ``Input
type``), the collective from the op when it names one (all-to-all runs as SendRecv kernels), the
message size from the launching ``record_param_comms`` / ``nccl:*`` op's ``Input Dims`` and the
group's size from ``record_param_comms``' last ``Concrete Input`` (torch >= 2.2). Without ``Seq`` an instance is identified by its order among the group's calls
within one training step (ranks agree on step numbers): a rank whose trace misses a call of a step
shifts that step's later calls (caveat, docs/metrics.md "Collectives across ranks"). Kernels whose
launch is not in the trace (queued before the profiler started) are left out of matching and
counted. Times: integer ns; absolute time = trace time + the rank's ``time_offset_ns``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
from gpuscope.analysis.event_classes import COMM_RE, KERNEL_CATS, OPTIMIZER_RE
from gpuscope.analysis.fmt import sig3
from gpuscope.analysis.rank_index import (
    NO_NAME,
    NO_RANK,
    RankBatch,
    RankIndex,
    ids_param,
    in_ids,
    name_class,
)
from gpuscope.analysis.store_access import RUNTIME_CATS_SQL, execute, regex, sql_list

if TYPE_CHECKING:
    from gpuscope.analysis.steps import Window
    from gpuscope.store import Connection

#: Columns of a rank's frame (:func:`rank_collectives`), one row per communication kernel.
#: ``pg``: process group key (its name when known, else ``stream:<id>``); ``pg_size``/``seq``/
#: ``peer`` nullable; ``coll``: one of :data:`COLLS`; ``msg_bytes``: NCCL's message size S
#: (nullable); ``start_ns``/``end_ns``: the kernel on the GPU, absolute ns; ``step``: the training
#: step of its launch (nullable); ``phase``: forward/backward/optimizer/unknown; ``launched``:
#: whether the launching call is in the trace.
FRAME_COLUMNS: tuple[str, ...] = (
    "rank",
    "device",
    "stream",
    "pg",
    "pg_size",
    "seq",
    "coll",
    "peer",
    "dtype",
    "msg_bytes",
    "start_ns",
    "end_ns",
    "step",
    "phase",
    "launched",
    "name",
)

#: Collective kinds, normalised.
COLLS: tuple[str, ...] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "reduce",
    "alltoall",
    "send",
    "recv",
    "sendrecv",
    "barrier",
    "unknown",
)
P2P: frozenset[str] = frozenset({"send", "recv", "sendrecv"})

#: Bus-bandwidth factor per collective over n ranks: NCCL's docs/PERFORMANCE.md ("bus bandwidth")
#: and nccl-tests: allreduce 2(n-1)/n, reducescatter and allgather (n-1)/n, broadcast and reduce 1;
#: alltoall (n-1)/n as nccl-tests; send/recv 1.


def bus_factor(coll: str, n: int) -> float | None:
    """NCCL's bus-bandwidth factor of ``coll`` on ``n`` ranks (None when it has none)."""
    if n < 1:
        return None
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if coll in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        return 1.0
    return None


#: Element sizes (bytes) by the dtype spellings of NCCL kernel names and of ``dtype`` args.
DTYPE_BYTES: dict[str, int] = {
    "f64": 8,
    "double": 8,
    "f32": 4,
    "float": 4,
    "float32": 4,
    "f16": 2,
    "half": 2,
    "float16": 2,
    "bf16": 2,
    "b16": 2,
    "bfloat16": 2,
    "i64": 8,
    "u64": 8,
    "long": 8,
    "int64": 8,
    "int64_t": 8,
    "uint64_t": 8,
    "i32": 4,
    "u32": 4,
    "int": 4,
    "int32": 4,
    "int32_t": 4,
    "uint32_t": 4,
    "i8": 1,
    "u8": 1,
    "int8_t": 1,
    "uint8_t": 1,
    "char": 1,
    "byte": 1,
    "bool": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "i16": 2,
    "short": 2,
    "int16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "long int": 8,
    "signed char": 1,
    "unsigned char": 1,
}


def dtype_key(text: str | None) -> str | None:
    """A dtype spelling as :data:`DTYPE_BYTES` keys it: ``dtype`` args (``Float``, ``BFloat16``)
    and ``Input type`` entries (``float``, ``c10::BFloat16``, ``c10::Half``, ``long int``,
    ``c10::Float8_e4m3fn``) lower-cased without the ``c10::`` prefix; None when not a dtype
    (``TensorList``, ``Scalar``, empty)."""
    if not text:
        return None
    k = str(text).strip().lower().removeprefix("c10::").removeprefix("at::")
    return k if k in DTYPE_BYTES else None


_KERNEL_COLL = [
    ("alltoall", re.compile(r"all_?to_?all", re.I)),
    ("allgather", re.compile(r"all_?gather", re.I)),
    ("reducescatter", re.compile(r"reduce_?scatter", re.I)),
    ("allreduce", re.compile(r"all_?reduce", re.I)),
    ("sendrecv", re.compile(r"send_?recv", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
    ("send", re.compile(r"send", re.I)),
    ("recv", re.compile(r"recv", re.I)),
    ("barrier", re.compile(r"barrier", re.I)),
]
_DTYPE_TOKEN = re.compile(
    r"_(f8e4m3|f8e5m2|bf16|f16|f32|f64|b16|i8|u8|i32|u32|i64|u64|"
    r"half|float|double|int8_t|uint8_t|int32_t|uint32_t|int64_t|uint64_t)(?=_|\(|$)",
    re.I,
)


def coll_of(name: str | None) -> str:
    """The collective kind (one of :data:`COLLS`) named in a kernel name, a host op name
    (``nccl:all_gather_into_tensor_coalesced``, ``c10d::allreduce_``) or a ``Collective name``
    arg (``_allgather_base``, ``reduce_scatter_tensor_coalesced``)."""
    if not name:
        return "unknown"
    for kind, rx in _KERNEL_COLL:
        if rx.search(name):
            return kind
    return "unknown"


def dtype_of_kernel(name: str) -> str | None:
    """The dtype token of a NCCL kernel name (``f32``, ``bf16``, ...), None when absent."""
    m = _DTYPE_TOKEN.search(name)
    return m.group(1).lower() if m else None


def message_bytes(
    coll: str, in_nelems: int | None, out_nelems: int | None, elem_bytes: int | None, n: int | None
) -> int | None:
    """NCCL's message size S (bytes) of one collective, as in its PERFORMANCE.md and nccl-tests:
    the whole buffer: allgather its output (n x the input), reducescatter its input (n x the
    output), every other kind its input. None when a size or the element size is unknown."""
    if elem_bytes is None:
        return None
    if coll == "allgather":
        nel = out_nelems if out_nelems else (in_nelems * n if in_nelems and n else None)
    elif coll == "reducescatter":
        nel = in_nelems if in_nelems else (out_nelems * n if out_nelems and n else None)
    else:
        nel = in_nelems if in_nelems is not None else out_nelems
    return None if nel is None else int(nel) * int(elem_bytes)


def _int(v: Any) -> int | None:
    try:
        return None if v is None or v == "" else int(v)
    except (TypeError, ValueError):
        return None


def collective_from_args(args: dict[str, Any], kernel_name: str = "") -> dict[str, Any]:
    """The frame fields (``pg``, ``pg_size``, ``seq``, ``coll``, ``peer``, ``dtype``,
    ``msg_bytes``) that a kernel's (or ``record_param_comms``'s) Kineto ``args`` give, for a reader
    of the raw trace; what is absent stays None and the kernel name fills ``coll``/``dtype``.
    Handles every variant of torch 2.0-2.11 (keys absent in older ones; ``Process Group Ranks``
    a string; ``Seq`` only in newer Kineto; ``Src Rank``/``Dst Rank`` on p2p)."""
    coll = coll_of(str(args.get("Collective name") or "")) if args.get("Collective name") else None
    if coll in (None, "unknown"):
        coll = coll_of(kernel_name)
    dt = args.get("dtype")
    dtype = (dtype_key(str(dt)) or str(dt).lower()) if dt else dtype_of_kernel(kernel_name)
    size = _int(args.get("Group size"))
    pg = args.get("Process Group Name")
    peer = _int(args.get("Dst Rank")) if coll == "send" else None
    if coll == "recv":
        peer = _int(args.get("Src Rank"))
    return {
        "pg": str(pg) if pg not in (None, "") else None,
        "pg_size": size,
        "seq": _int(args.get("Seq")),
        "coll": coll,
        "peer": peer,
        "dtype": dtype,
        "msg_bytes": message_bytes(
            coll,
            _int(args.get("In msg nelems")),
            _int(args.get("Out msg nelems")),
            DTYPE_BYTES.get(dtype or ""),
            size,
        ),
    }


def _nelems(dims: Any) -> int | None:
    """Elements of one ``Input Dims`` entry: a shape ``[a, b]`` or a tensor list ``[[a], [b]]``."""
    if not isinstance(dims, list) or not dims:
        return None
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims, dtype=np.int64)) if dims else None
    if all(isinstance(d, list) for d in dims):
        parts = [_nelems(d) for d in dims]
        vals = [p for p in parts if p is not None]
        return int(sum(vals)) if vals else None
    return None


def sizes_from_input_dims(text: str | None) -> tuple[int | None, int | None]:
    """(input, output) elements from a host op's ``Input Dims`` (JSON text): the first entry is
    the input tensor(s); the second, when it is a shape or tensor list, the output ones."""
    if not text:
        return None, None
    try:
        dims = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(dims, list) or not dims:
        return None, None
    return _nelems(dims[0]), (_nelems(dims[1]) if len(dims) > 1 else None)


def _json_list(text: str | None) -> list[Any] | None:
    if not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, list) else None


def dtype_from_input_types(text: str | None) -> str | None:
    """The dtype of a communication op's tensor from its ``Input type`` (JSON text): the first
    entry that names one (``nccl:_all_gather_base``'s ``["c10::BFloat16"]``, a single-tensor
    ``record_param_comms``' first entry); None for tensor lists (``TensorList``) or none."""
    for t in _json_list(text) or []:
        k = dtype_key(t) if isinstance(t, str) else None
        if k is not None:
            return k
    return None


def group_size_from_params(types_text: str | None, concrete_text: str | None) -> int | None:
    """The process group's size from ``record_param_comms``' parameters (``Input type`` and
    ``Concrete Inputs``, JSON text). Since torch 2.2 its inputs end ``in split sizes, out split
    sizes, global rank start, global rank stride, world size`` (``RECORD_PARAM_COMMS[_DATA]`` in
    ``ParamCommsUtils.hpp``; the DDP sample: ``..., "[]", "[]", "0", "1", "2"``): the last entry,
    read only when the two split-size lists sit where that layout puts them. torch 2.0-2.1 end with
    the split sizes (no size): None."""
    types, conc = _json_list(types_text), _json_list(concrete_text)
    if not types or not conc or len(types) != len(conc) or len(types) < 5:
        return None
    if types[-5] != "ScalarList" or types[-4] != "ScalarList" or types[-1] != "Scalar":
        return None
    n = _int(conc[-1])
    return n if n is not None and n >= 1 else None


def _sizes_of(ctx: list[tuple[Any, ...]], coll: str) -> tuple[int | None, int | None]:
    """(input, output) elements from the first op of ``ctx`` whose ``Input Dims`` give a size.
    ``c10d::allgather_``/``_allgather_base_``/``_reduce_scatter_base_`` take the output first
    (``(output, input, ...)``): swapped back."""
    for o in ctx:
        in_n, out_n = sizes_from_input_dims(o[5])
        if in_n is None:
            continue
        if str(o[6]).startswith("c10d::") and coll in ("allgather", "reducescatter"):
            return out_n, in_n
        return in_n, out_n
    return None, None


def empty_frame() -> pd.DataFrame:
    """A rank frame with no rows and the right columns."""
    return _typed(pd.DataFrame({c: [] for c in FRAME_COLUMNS}))


_INT_COLUMNS = ("pg_size", "seq", "peer", "msg_bytes", "step")


def _int_or_none(v: Any) -> int | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    out = df[list(FRAME_COLUMNS)].copy()
    for c in ("rank", "device", "stream", "start_ns", "end_ns"):
        out[c] = out[c].astype("int64")
    for c in _INT_COLUMNS:
        out[c] = pd.array([_int_or_none(v) for v in out[c]], dtype="Int64")
    out["launched"] = out["launched"].astype(bool)
    for c in ("pg", "coll", "dtype", "phase", "name"):
        out[c] = out[c].astype(object)
    return out.reset_index(drop=True)


def _op_by_external_id(comm_ops: list[tuple[Any, ...]], wanted: set[int]) -> dict[int, Any]:
    """For each ``External id`` of ``wanted`` (the kernels'), the op that launched it: the last
    one that has input dims (``record_param_comms`` wins: it carries the message sizes), else the
    first one. ``comm_ops``: rows (pid, tid, s, e, external_id, input_dims, name) in start order.
    One pass over plain rows: a 3 M-event rank has ~40 k such ops."""
    first: dict[int, Any] = {}
    with_dims: dict[int, Any] = {}
    for op in comm_ops:
        ext = op[4]
        if ext is None or int(ext) not in wanted:
            continue
        first.setdefault(int(ext), op)
        if op[5] is not None and str(op[5]) != "":
            with_dims[int(ext)] = op
    return {ext: with_dims.get(ext, op) for ext, op in first.items()}


def rank_collectives(
    con: Connection, run_id: str, rank: int, window: Window | None = None
) -> pd.DataFrame:
    """One rank's communication kernels as a frame (:data:`FRAME_COLUMNS`), ordered by start:
    :func:`rank_collective_columns`, typed."""
    cols = rank_collective_columns(con, run_id, rank, window)
    return _typed(pd.DataFrame(cols)) if cols["rank"] else empty_frame()


def _inside_any(span_s: Any, span_e: Any, t: Any) -> Any:
    """For each time of ``t``: whether some span ``[s, e]`` (ends included) holds it. Spans sorted
    by start with the running maximum of their ends: t is held iff the spans starting at or
    before it reach it (int64 arrays; a bool array like ``t``)."""
    if span_s.size == 0:
        return np.zeros(len(t), dtype=bool)
    order = np.argsort(span_s, kind="stable")
    s, reach = span_s[order], np.maximum.accumulate(span_e[order])
    i = np.searchsorted(s, t, side="right") - 1
    return (i >= 0) & (reach[np.maximum(i, 0)] >= t)


_RPC = "record_param_comms"

#: The names of a rank's collective ops, backward spans and optimizer spans (the phases).
_COMM_OPS = name_class(regex(COMM_RE))
_BACKWARD = name_class("starts_with(name, 'autograd::engine::evaluate_function')")
_OPTIMIZER = name_class(regex(OPTIMIZER_RE))


def rank_collective_columns(
    con: Connection, run_id: str, rank: int, window: Window | None = None
) -> dict[str, list[Any]]:
    """One rank's communication kernels, ordered by start, as columns (:data:`FRAME_COLUMNS`) of
    plain values: ints, strings, bools and None (the values of :func:`rank_collectives`' frame,
    without building it: the cross-rank part stores these lists).

    Reads only this rank's rows: its communication kernels (name matching the communication
    pattern), their launching runtime call (by correlation), the ``record_param_comms`` /
    ``nccl:*`` / ``c10d::*`` op that launched them (by ``External id``, else the innermost such op
    on the launching thread around the call) for the collective, direction and message size,
    ``autograd::engine::evaluate_function`` and ``Optimizer.*`` spans for the phase, and
    ``window``'s steps (default: :func:`steps.find_window`) for the step."""
    from gpuscope.analysis.steps import find_window

    w = window if window is not None else find_window(con, run_id, rank)
    ix = RankIndex.shared(con, run_id, rank)
    k, ops = _frame_rows(con, ix, run_id, [int(rank)])
    return _frame_columns(
        rank, w, k[int(rank)], ops.get(int(rank)), rank_offset_ns(con, run_id, rank)
    )


def batch_collective_columns(
    batch: RankBatch, windows: dict[int, Window], offsets: dict[int, int]
) -> dict[int, dict[str, list[Any]]]:
    """:func:`rank_collective_columns` of every rank of ``batch`` (rank -> columns; ``offsets``:
    :func:`batch_offsets`), its two reads of the rows (kernels, ops) one statement each for the
    whole batch: the same statements as for one rank."""
    ranks = list(batch.ranks)
    k, ops = _frame_rows(batch.con, batch, batch.run_id, ranks)
    return {r: _frame_columns(r, windows[r], k[r], ops.get(r), offsets[r]) for r in ranks}


def batch_offsets(batch: RankBatch) -> dict[int, int]:
    """:func:`rank_offset_ns` of every rank of ``batch``, from one statement."""
    out = dict.fromkeys(batch.ranks, 0)
    for r, off in batch.con.execute(
        "SELECT rank, time_offset_ns FROM ranks WHERE run_id = ? AND list_contains(?, rank)",
        [batch.run_id, list(batch.ranks)],
    ).fetchall():
        out[int(r)] = int(off) if off is not None else 0
    return out


def _frame_rows(
    con: Connection, src: Any, run_id: str, ranks: list[int]
) -> tuple[dict[int, list[tuple[Any, ...]]], dict[int, pa.Table]]:
    """Per rank of ``ranks``: its communication kernels with their launch (rows ordered by start)
    and the ops, backward and optimizer spans that place them (Arrow), from ``src``'s tables (a
    rank's index, or a batch's)."""
    # the kernels from the rank's GPU activity table, their launch calls from its host table
    # (both built once per rank for every analysis; reading ``events`` here again cost two
    # scans of the rank's rows)
    rows = execute(
        con,
        f"""
        WITH kn AS (
            SELECT g.rank, g.dev AS device, g.stream, g.s, g.e, g.correlation, g.external_id,
                   n.name
            FROM {src.gpu()} g JOIN names n ON n.run_id = $run AND n.name_id = g.name_id
            WHERE list_contains($rk, g.rank) AND g.cat IN {sql_list(KERNEL_CATS)}
              AND list_contains($comm_ids, g.name_id)
        ),
        rt AS (
            SELECT rank, correlation, min(ts_ns) AS ls, min(tid) AS ltid, min(pid) AS lpid
            FROM {src.host()}
            WHERE list_contains($rk, rank) AND ph = 'X' AND cat IN {RUNTIME_CATS_SQL}
              AND correlation IN (SELECT correlation FROM kn WHERE correlation IS NOT NULL)
            GROUP BY rank, correlation
        )
        SELECT kn.*, rt.ls, rt.ltid, rt.lpid FROM kn LEFT JOIN rt USING (rank, correlation)
        ORDER BY kn.rank, kn.s, kn.e
        """,
        {"run": run_id, "rk": ranks, "comm_ids": ids_param(src.comm_name_ids())},
    ).fetchall()
    k: dict[int, list[tuple[Any, ...]]] = {r: [] for r in ranks}
    for row in rows:
        k[int(row[0])].append(row[1:])
    # kind 0: a communication op, 1: a backward span, 2: an optimizer span. As Arrow, not Python
    # rows: a 3 M-event rank has ~180 k of them (~70 MB more as tuples), mostly backward spans.
    # Only the communication ops carry their name and input dims (the 1 GB benchmark rank's
    # 137 k spans: 10 MB of names otherwise).
    bwd, opt = ids_param(src.name_ids(_BACKWARD)), ids_param(src.name_ids(_OPTIMIZER))
    ids = ids_param(sorted({*src.name_ids(_COMM_OPS), *bwd, *opt} - {NO_NAME}))
    want = [r for r in ranks if k[r]]  # a rank without communication kernels needs no ops
    ops_all = execute(
        con,
        f"""
        SELECT rank, pid, tid, s, e, external_id,
               CASE WHEN kind = 0 THEN input_dims END AS input_dims,
               CASE WHEN kind = 0 THEN name END AS name, kind,
               CASE WHEN kind = 0 THEN input_types END AS input_types,
               CASE WHEN kind = 0 THEN concrete_inputs END AS concrete_inputs
        FROM (
            SELECT e.rank, e.pid, e.tid, e.ts_ns AS s, e.ts_ns + e.dur_ns AS e, e.external_id,
                   e.input_dims, e.input_types, e.concrete_inputs, n.name,
                   CASE WHEN {in_ids("e.name_id", "bwd", bwd)} THEN 1
                        WHEN {in_ids("e.name_id", "opt", opt)} THEN 2 ELSE 0 END AS kind
            FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
            WHERE e.run_id = $run AND list_contains($rk, e.rank) AND e.ph = 'X'
              AND e.dur_ns IS NOT NULL AND e.cat IN ('cpu_op', 'user_annotation', 'Operator')
              AND {in_ids("e.name_id", "ids", ids)}
        )
        ORDER BY rank, s
        """,
        {"run": run_id, "rk": want or [NO_RANK], "bwd": bwd, "opt": opt, "ids": ids},
    ).to_arrow_table()
    rank_col = ops_all.column("rank").to_numpy()
    ops_all = ops_all.drop_columns(["rank"])
    ops = {r: ops_all.filter(pa.array(rank_col == r)) if len(want) > 1 else ops_all for r in want}
    return k, ops


def _frame_columns(
    rank: int, w: Window, k: list[tuple[Any, ...]], ops: pa.Table | None, off: int
) -> dict[str, list[Any]]:
    """The columns of :func:`rank_collective_columns` from the rank's kernel rows ``k`` and its
    ops ``ops`` (:func:`_frame_rows`), ``off`` its time offset."""
    if not k:
        return {c: [] for c in FRAME_COLUMNS}
    assert ops is not None
    kind = ops.column("kind").to_numpy()

    def column(name: str, of: int) -> Any:  # int64, contiguous: masked per kernel
        return np.asarray(ops.column(name).to_numpy(), dtype=np.int64)[kind == of]

    comm = ops.filter(pa.array(kind == 0))
    names = (
        "pid",
        "tid",
        "s",
        "e",
        "external_id",
        "input_dims",
        "name",
        "input_types",
        "concrete_inputs",
    )
    comm_ops: list[tuple[Any, ...]] = list(
        zip(*(comm.column(c).to_pylist() for c in names), strict=True)
    )
    by_ext = _op_by_external_id(comm_ops, {int(r[5]) for r in k if r[5] is not None})
    b_tid, b_s, b_e = column("tid", 1), column("s", 1), column("e", 1)
    c_tid, c_s, c_e = column("tid", 0), column("s", 0), column("e", 0)
    # each kernel's time: its launch call's start, else its own
    is_launched = np.fromiter((r[7] is not None for r in k), dtype=bool, count=len(k))
    at = np.fromiter((r[7] if r[7] is not None else r[2] for r in k), dtype=np.int64, count=len(k))
    l_tid = np.fromiter((r[8] if r[8] is not None else -1 for r in k), dtype=np.int64, count=len(k))
    in_opt = _inside_any(column("s", 2), column("e", 2), at)
    in_bwd = np.zeros(len(k), dtype=bool)  # inside a backward span of the launching thread
    for tid in np.unique(l_tid[is_launched]):
        on, mine = b_tid == tid, l_tid == tid
        in_bwd[mine] = _inside_any(b_s[on], b_e[on], at[mine])
    bounds = w.step_bounds_ns() if w.source != "trace" else []
    nums = [s.number for s in w.steps] if w.source != "trace" else []
    starts = np.array([b[0] for b in bounds], dtype=np.int64)
    rows = []
    for j, (device, stream, ks, ke, _corr, ext, kname, ls, ltid, _lpid) in enumerate(k):
        launched = ls is not None
        t = int(at[j])
        op: tuple[Any, ...] | None = by_ext.get(int(ext)) if ext is not None else None
        around: list[tuple[Any, ...]] = []  # comm ops around the launch, innermost first
        if launched and len(comm_ops):
            inside = np.flatnonzero((c_tid == int(ltid)) & (c_s <= t) & (c_e >= t))
            inside = inside[np.argsort((c_e - c_s)[inside], kind="stable")]
            around = [comm_ops[int(i)] for i in inside]
            if op is None and around:
                # the innermost comm op on the launching thread around the call (shortest;
                # the first of equal ones in start order)
                op = around[0]
        ctx = ([op] if op is not None else []) + [o for o in around if o is not op]
        kcoll = coll_of(kname)
        # the collective: the first op (chosen, then innermost out) that names one (NCCL runs
        # all-to-all as SendRecv kernels: the op says alltoall), else the kernel's
        named = [c for c in (coll_of(o[6]) for o in ctx) if c != "unknown"]
        coll = named[0] if named else kcoll
        # dtype: the kernel name's (AllGather/Broadcast/SendRecv kernels name none), else the
        # op's tensor type
        dtype = dtype_of_kernel(kname) or next(
            (d for d in (dtype_from_input_types(o[7]) for o in ctx) if d), None
        )
        in_n, out_n = _sizes_of(ctx, coll)
        pg_size = next(
            (
                g
                for g in (group_size_from_params(o[7], o[8]) for o in ctx if o[6] == _RPC)
                if g is not None
            ),
            None,
        )
        phase = "unknown"
        if launched:
            if in_opt[j]:
                phase = "optimizer"
            elif in_bwd[j]:
                phase = "backward"
            else:
                phase = "forward"
        step = None
        if len(starts):
            i = int(np.searchsorted(starts, t, side="right")) - 1
            if 0 <= i < len(bounds) and t < bounds[i][1]:
                step = nums[i]
        rows.append(
            {
                "rank": int(rank),
                "device": int(device),
                "stream": int(stream),
                "pg": f"stream:{int(stream)}",
                "pg_size": pg_size,
                "seq": None,
                "coll": coll,
                "peer": None,
                "dtype": dtype,
                # allgather's output and reducescatter's input: n x the other buffer
                "msg_bytes": message_bytes(
                    coll, in_n, out_n, DTYPE_BYTES.get(dtype or ""), pg_size
                ),
                "start_ns": int(ks) + off,
                "end_ns": int(ke) + off,
                "step": step,
                "phase": phase,
                "launched": bool(launched),
                "name": kname,
            }
        )
    cols = {c: [r[c] for r in rows] for c in FRAME_COLUMNS}
    for c in _INT_COLUMNS:
        cols[c] = [_int_or_none(v) for v in cols[c]]
    return cols


# -- matching ------------------------------------------------------------------------------------


@dataclass
class Straggler:
    """The rank whose late arrivals at collectives make the others wait longest in total.

    ``caused_wait_ns``: the others' wait in the instances where it arrived last (ns, whole
    trace); ``per_rank_caused_ns``: that total for every rank; ``last_arrivals``: how many
    instances it arrived last at (of ``instances`` matched with two ranks or more);
    ``by_phase_ns`` / ``by_step_ns``: its caused wait by phase and by step; ``waiting_rank``: the
    rank that waited longest for it, ``waiting_ns`` that rank's wait."""

    rank: int
    caused_wait_ns: int
    per_rank_caused_ns: dict[int, int]
    last_arrivals: int
    instances: int
    by_phase_ns: dict[str, int]
    by_step_ns: dict[int, int]
    waiting_rank: int
    waiting_ns: int
    n_steps: int
    evidence: str = ""
    comm_only_ms_per_step: dict[int, float] = field(default_factory=dict)

    @property
    def wait_ms_per_step(self) -> float:
        """The waiting rank's wait for it, ms per step."""
        return self.waiting_ns / max(1, self.n_steps) / 1e6

    def to_json(self) -> dict[str, Any]:
        n = max(1, self.n_steps)
        return {
            "rank": self.rank,
            "evidence": self.evidence,
            "method": "matched_collectives",
            "waiting_rank": self.waiting_rank,
            "wait_ms_per_step": self.waiting_ns / n / 1e6,
            "caused_wait_ms_per_step": self.caused_wait_ns / n / 1e6,
            "caused_wait_ms_by_rank": {
                str(k): v / n / 1e6 for k, v in sorted(self.per_rank_caused_ns.items())
            },
            "last_arrivals": self.last_arrivals,
            "instances": self.instances,
            "caused_wait_ms_by_phase": {k: v / 1e6 for k, v in self.by_phase_ns.items()},
            "caused_wait_ms_by_step": {str(k): v / 1e6 for k, v in self.by_step_ns.items()},
            "comm_only_ms_per_step": {
                str(k): v for k, v in sorted(self.comm_only_ms_per_step.items())
            },
        }


@dataclass
class CollectiveMatch:
    """Matched collectives of a run.

    ``rows``: one row per instance and rank present: the frame's columns plus ``instance`` (an id),
    ``n_present``, ``n_expected``, ``last_arrival_ns``, ``first_arrival_ns``, ``skew_ns``,
    ``last_rank``, ``is_last``, ``wait_ns``, ``transfer_ns``. ``instances``: one row per instance:
    ``instance``, ``pg``, ``coll``, ``step``, ``phase``, ``seq``, ``n_present``, ``n_expected``,
    ``missing`` (the ranks expected and absent, a list), ``first_arrival_ns``,
    ``last_arrival_ns``, ``skew_ns``, ``last_rank``, ``wait_ns`` (all ranks), ``msg_bytes``,
    ``transfer_ns`` (the shortest transfer across ranks), ``algbw_gbs`` = bytes / transfer,
    ``busbw_gbs`` = algbw x NCCL's factor, ``link_pct`` of ``link_gbs`` when known.
    ``unlaunched``: per rank, kernels whose launch is not in the trace (not matched)."""

    rows: pd.DataFrame
    instances: pd.DataFrame
    unlaunched: dict[int, int] = field(default_factory=dict)
    straggler: Straggler | None = None
    link_gbs: float | None = None
    id_method: str = "order"

    def missing_sentences(self, limit: int = 5) -> list[str]:
        """Plain sentences for instances a rank is missing from (at most ``limit``, then a count)."""
        miss = self.instances[self.instances["missing"].map(len) > 0]
        out = []
        for r in miss.head(limit).itertuples():
            who = ", ".join(str(x) for x in r.missing)
            step = f" in step {int(r.step)}" if pd.notna(r.step) else ""
            out.append(
                f"rank{'s' if len(r.missing) > 1 else ''} {who} missing from {r.coll} "
                f"#{r.instance} of process group {r.pg}{step} "
                f"({r.n_present} of {r.n_expected} ranks took part)"
            )
        if len(miss) > limit:
            out.append(f"... and {len(miss) - limit} more collectives with a rank missing")
        return out

    def wait_ns_by_rank(self) -> dict[int, int]:
        """Total wait (ns) of each rank over the matched collectives."""
        if self.rows.empty:
            return {}
        g = self.rows.groupby("rank")["wait_ns"].sum()
        return {int(k): int(v) for k, v in g.items()}

    def wait_intervals(self, rank: int) -> pd.DataFrame:
        """The rank's matched kernels: ``start_ns``, ``end_ns``, ``wait_end_ns`` (= start + wait),
        absolute ns."""
        r = self.rows[self.rows["rank"] == rank]
        return pd.DataFrame(
            {
                "start_ns": r["start_ns"].to_numpy(np.int64),
                "end_ns": r["end_ns"].to_numpy(np.int64),
                "wait_end_ns": (r["start_ns"] + r["wait_ns"]).to_numpy(np.int64),
            }
        )


def _instance_keys(f: pd.DataFrame) -> tuple[pd.Series, str]:
    """An instance key per row, and the method (``seq`` when every matched row has one)."""
    f = f.copy()
    step = f["step"].astype("float64").fillna(-1).astype("int64")
    has_seq = f["seq"].notna()
    p2p = f["coll"].isin(list(P2P)) & f["peer"].notna()
    peer = f["peer"].astype("float64").fillna(-1)
    src = np.where(f["coll"] == "recv", peer, f["rank"]).astype("int64")
    dst = np.where(f["coll"] == "recv", f["rank"], f["peer"].astype("float64").fillna(-1)).astype(
        "int64"
    )
    # sendrecv without a direction: the pair
    lo = np.minimum(src, dst)
    hi = np.maximum(src, dst)
    is_sr = (f["coll"] == "sendrecv").to_numpy()
    src = np.where(is_sr, lo, src)
    dst = np.where(is_sr, hi, dst)
    f["_grp"] = np.where(
        p2p,
        "p2p|"
        + f["pg"].astype(str)
        + "|"
        + pd.Series(src, index=f.index).astype(str)
        + ">"
        + pd.Series(dst, index=f.index).astype(str),
        "c|" + f["pg"].astype(str),
    )
    f["_step"] = step
    f = f.sort_values(["rank", "start_ns", "end_ns"], kind="stable")
    f["_ord"] = f.groupby(["rank", "_grp", "_step"]).cumcount()
    key = np.where(
        has_seq.loc[f.index] & ~p2p.loc[f.index],
        f["_grp"] + "|seq" + f["seq"].astype("float64").fillna(-1).astype("int64").astype(str),
        f["_grp"] + "|s" + f["_step"].astype(str) + "|o" + f["_ord"].astype(str),
    )
    method = "seq" if bool(has_seq.all()) and len(f) else ("mixed" if has_seq.any() else "order")
    return pd.Series(key, index=f.index).reindex(f.index), method


def match_collectives(
    frames: list[pd.DataFrame] | dict[int, pd.DataFrame],
    *,
    link_gbs: float | None = None,
    n_steps: int = 1,
    min_wait_ns_per_step: int = 100_000,
    min_wait_pct: float = 2.0,
    step_ns: float | None = None,
) -> CollectiveMatch:
    """Match the ranks' frames (:func:`rank_collectives`) into instances; see
    :class:`CollectiveMatch`. An instance is identified by (process group, ``Seq``) when the rows
    have one, else by (process group, step, order of the call within the step on that rank);
    send/recv by (pair, direction, step, order). Expected members: the ranks seen in that process
    group (or ``pg_size`` when it says more). ``link_gbs``: the peak link bandwidth (GB/s per
    direction) for ``link_pct``. The straggler is named when the wait it causes is at least
    ``min_wait_ns_per_step`` per step or ``min_wait_pct`` of ``step_ns`` (a step's length, ns)."""
    parts = list(frames.values()) if isinstance(frames, dict) else list(frames)
    parts = [p for p in parts if p is not None and not p.empty]
    allf = pd.concat(parts, ignore_index=True) if parts else empty_frame()
    unl = allf[~allf["launched"]] if not allf.empty else allf
    unlaunched = {int(k): int(v) for k, v in unl.groupby("rank").size().items()} if len(unl) else {}
    f = allf[allf["launched"]].copy() if not allf.empty else allf.copy()
    if f.empty:
        return CollectiveMatch(_empty_rows(), _empty_instances(), unlaunched, None, link_gbs)
    keys, method = _instance_keys(f)
    f["instance_key"] = keys
    # expected members of a group: every rank seen in it (pairs: both ends)
    grp_of = f["instance_key"].str.rsplit("|", n=2).str[0]
    f["_grp"] = grp_of
    members = f.groupby("_grp")["rank"].agg(lambda s: sorted(set(int(x) for x in s)))
    codes = {k: i for i, k in enumerate(sorted(set(f["instance_key"]), key=str))}
    f["instance"] = f["instance_key"].map(codes).astype("int64")
    g = f.groupby("instance")
    f["n_present"] = g["rank"].transform("nunique").astype("int64")
    f["first_arrival_ns"] = g["start_ns"].transform("min").astype("int64")
    f["last_arrival_ns"] = g["start_ns"].transform("max").astype("int64")
    f["skew_ns"] = f["last_arrival_ns"] - f["first_arrival_ns"]
    # the last arriver: latest start (ties: the lowest rank)
    idx_last = f.sort_values(["instance", "start_ns", "rank"], ascending=[True, False, True])
    last_rank = idx_last.drop_duplicates("instance").set_index("instance")["rank"]
    f["last_rank"] = f["instance"].map(last_rank).astype("int64")
    dur = f["end_ns"] - f["start_ns"]
    f["wait_ns"] = np.clip(f["last_arrival_ns"] - f["start_ns"], 0, dur).astype("int64")
    f["transfer_ns"] = np.clip(
        f["end_ns"] - np.maximum(f["start_ns"], f["last_arrival_ns"]), 0, None
    ).astype("int64")
    f["is_last"] = (f["rank"] == f["last_rank"]) & (f["skew_ns"] > 0)

    def expected(row_grp: str, size: Any) -> list[int]:
        m = members.get(row_grp, [])
        return list(m)

    inst = g.agg(
        pg=("pg", "first"),
        coll=("coll", "first"),
        step=("step", "first"),
        phase=("phase", lambda s: s.mode().iloc[0] if len(s) else "unknown"),
        seq=("seq", "first"),
        n_present=("rank", "nunique"),
        present=("rank", lambda s: sorted(set(int(x) for x in s))),
        pg_size=("pg_size", "max"),
        grp=("_grp", "first"),
        first_arrival_ns=("start_ns", "min"),
        last_arrival_ns=("start_ns", "max"),
        wait_ns=("wait_ns", "sum"),
        msg_bytes=("msg_bytes", "max"),
        transfer_ns=("transfer_ns", "min"),
    ).reset_index()
    inst["last_rank"] = inst["instance"].map(last_rank).astype("int64")
    inst["skew_ns"] = (inst["last_arrival_ns"] - inst["first_arrival_ns"]).astype("int64")
    exp = [expected(gk, ps) for gk, ps in zip(inst["grp"], inst["pg_size"], strict=True)]
    inst["missing"] = [
        [r for r in e if r not in set(p)] for e, p in zip(exp, inst["present"], strict=True)
    ]
    inst["n_expected"] = [
        max(len(e), int(ps) if pd.notna(ps) else 0)
        for e, ps in zip(exp, inst["pg_size"], strict=True)
    ]
    n_for_bw = [
        int(ps) if pd.notna(ps) else ne
        for ps, ne in zip(inst["pg_size"], inst["n_expected"], strict=True)
    ]
    alg: list[float | None] = []
    bus: list[float | None] = []
    link: list[float | None] = []
    for c, b, t, n in zip(
        inst["coll"], inst["msg_bytes"], inst["transfer_ns"], n_for_bw, strict=True
    ):
        if pd.isna(b) or t <= 0:
            alg.append(None)
            bus.append(None)
            link.append(None)
            continue
        a = float(b) / float(t)  # bytes/ns = GB/s
        fac = bus_factor(str(c), int(n))
        alg.append(a)
        bus.append(a * fac if fac is not None else None)
        link.append(100.0 * a * fac / link_gbs if fac is not None and link_gbs else None)
    inst["algbw_gbs"] = pd.array(alg, dtype="Float64")
    inst["busbw_gbs"] = pd.array(bus, dtype="Float64")
    inst["link_pct"] = pd.array(link, dtype="Float64")
    inst = inst.drop(columns=["grp", "present"])
    rows = f.drop(columns=["_grp", "instance_key"]).sort_values(["instance", "rank"])
    rows = rows.reset_index(drop=True)
    m = CollectiveMatch(rows, inst, unlaunched, None, link_gbs, method)
    m.straggler = find_straggler(
        m,
        n_steps=n_steps,
        min_wait_ns_per_step=min_wait_ns_per_step,
        min_wait_pct=min_wait_pct,
        step_ns=step_ns,
    )
    return m


def _empty_rows() -> pd.DataFrame:
    extra = [
        "instance",
        "n_present",
        "first_arrival_ns",
        "last_arrival_ns",
        "skew_ns",
        "last_rank",
        "wait_ns",
        "transfer_ns",
        "is_last",
    ]
    return pd.DataFrame({c: [] for c in [*FRAME_COLUMNS, *extra]})


def _empty_instances() -> pd.DataFrame:
    cols = [
        "instance",
        "pg",
        "coll",
        "step",
        "phase",
        "seq",
        "n_present",
        "n_expected",
        "missing",
        "first_arrival_ns",
        "last_arrival_ns",
        "skew_ns",
        "last_rank",
        "wait_ns",
        "msg_bytes",
        "transfer_ns",
        "algbw_gbs",
        "busbw_gbs",
        "link_pct",
    ]
    return pd.DataFrame({c: [] for c in cols})


def find_straggler(
    m: CollectiveMatch,
    *,
    n_steps: int = 1,
    min_wait_ns_per_step: int = 100_000,
    min_wait_pct: float = 2.0,
    step_ns: float | None = None,
) -> Straggler | None:
    """The rank whose late arrivals cause the most total waiting on the others (every other
    rank's wait in an instance is charged to that instance's last arriver); None with no
    instance of two ranks or more, or when the caused wait is under both thresholds (per step)."""
    rows = m.rows
    if rows.empty:
        return None
    multi = rows[(rows["n_present"] >= 2) & (rows["rank"] != rows["last_rank"])]
    if multi.empty:
        return None
    caused = multi.groupby("last_rank")["wait_ns"].sum()
    if caused.empty or int(caused.max()) <= 0:
        return None
    top = caused.sort_values(ascending=False, kind="stable")
    best = int(top.max())
    rank = int(min(int(k) for k, v in top.items() if int(v) == best))
    n = max(1, int(n_steps))
    per_step = best / n
    share = 100.0 * per_step / step_ns if step_ns else 0.0
    if per_step < min_wait_ns_per_step and share < min_wait_pct:
        return None
    mine = multi[multi["last_rank"] == rank]
    by_phase = {str(k): int(v) for k, v in mine.groupby("phase")["wait_ns"].sum().items()}
    st = mine.dropna(subset=["step"])
    by_step = {int(k): int(v) for k, v in st.groupby("step")["wait_ns"].sum().items()}
    waiter = mine.groupby("rank")["wait_ns"].sum().sort_values(ascending=False, kind="stable")
    w_rank, w_ns = int(waiter.index[0]), int(waiter.iloc[0])
    n_inst = int(rows.loc[rows["n_present"] >= 2, "instance"].nunique())
    n_last = int(rows.loc[rows["is_last"] & (rows["rank"] == rank), "instance"].nunique())
    s = Straggler(
        rank,
        best,
        {int(k): int(v) for k, v in caused.items()},
        n_last,
        n_inst,
        dict(sorted(by_phase.items(), key=lambda kv: -kv[1])),
        by_step,
        w_rank,
        w_ns,
        n,
    )
    s.evidence = _evidence(s, int(mine["rank"].nunique()), step_ns)
    return s


def _evidence(s: Straggler, waiters: int, step_ns: float | None) -> str:
    """The straggler's sentence. With several waiting ranks their waits add up to GPU time (a
    sum over GPUs can exceed a step), so the sum says "GPU·ms" and only the rank that waits most
    is put against a step."""
    n = max(1, s.n_steps)
    unit = "ms" if waiters <= 1 else "GPU·ms"
    phases = ", ".join(f"{k} {sig3(v / n / 1e6)} {unit}" for k, v in s.by_phase_ns.items() if v > 0)
    worst = max(s.by_step_ns.items(), key=lambda kv: kv[1]) if s.by_step_ns else None
    step = f"; most in step {worst[0]} ({sig3(worst[1] / 1e6)} {unit})" if worst else ""
    top = s.waiting_ns / n
    pct = f" ({100.0 * top / step_ns:.3g}% of a step)" if step_ns else ""
    if waiters <= 1:
        who = f"rank {s.waiting_rank} has to wait {sig3(top / 1e6)} ms per step for it{pct}"
    else:
        who = (
            f"{waiters} ranks wait for it, {sig3(s.caused_wait_ns / n / 1e6)} GPU·ms per step "
            f"in all (rank {s.waiting_rank} the most: {sig3(top / 1e6)} ms per step{pct})"
        )
    return (
        f"rank {s.rank} arrives last at {s.last_arrivals} of {s.instances} matched collectives; "
        f"{who}; by phase per step: {phases or 'unknown'}{step}."
    )


#: Peak NVLink bandwidth per GPU and direction (GB/s) by model: what NCCL's bus bandwidth
#: approaches within one NVLink domain (NVIDIA's data sheets: NVLink 4 900 GB/s, NVLink 3
#: 600 GB/s, NVLink 5 1.8 TB/s, both directions together). PCIe parts and links between nodes
#: are slower; we only name a peak for SXM parts.
LINK_PEAK_GBS: tuple[tuple[str, float], ...] = (
    ("B200", 900.0),
    ("B100", 900.0),
    ("GB200", 900.0),
    ("H200", 450.0),
    ("H100 80GB HBM3", 450.0),
    ("H100 SXM", 450.0),
    ("A100-SXM", 300.0),
    ("A100 SXM", 300.0),
)


def link_peak_gbs(gpu_name: str | None) -> float | None:
    """The NVLink peak (GB/s per direction) of a GPU model name, None when unknown."""
    if not gpu_name:
        return None
    for key, v in LINK_PEAK_GBS:
        if key.lower() in gpu_name.lower():
            return v
    return None


def run_collectives(
    con: Connection,
    run_id: str,
    windows: dict[int, Window] | None = None,
    *,
    n_steps: int | None = None,
    step_ns: float | None = None,
    step_annotation: str | None = None,
) -> CollectiveMatch:
    """Every rank's frame (:func:`rank_collectives`) matched (:func:`match_collectives`), with
    the link peak of rank 0's GPU when known. ``windows``: the ranks' windows already found."""
    from gpuscope.analysis.steps import find_window
    from gpuscope.analysis.store_access import ranks_of

    ranks = ranks_of(con, run_id)
    ws = {r: (windows or {}).get(r) or find_window(con, run_id, r, step_annotation) for r in ranks}
    frames = {r: rank_collectives(con, run_id, r, ws[r]) for r in ranks}
    row = con.execute("SELECT gpu_name FROM runs WHERE run_id = ?", [run_id]).fetchone()
    steps = n_steps if n_steps is not None else max((w.n_steps for w in ws.values()), default=1)
    return match_collectives(
        frames, link_gbs=link_peak_gbs(row[0] if row else None), n_steps=steps, step_ns=step_ns
    )


def rank_offset_ns(con: Connection, run_id: str, rank: int) -> int:
    """The rank's ``time_offset_ns`` (absolute time = trace time + this), 0 when unknown; read
    once per rank index (a rank's cross-rank part asks twice)."""

    def read() -> int:
        row = con.execute(
            "SELECT time_offset_ns FROM ranks WHERE run_id = ? AND rank = ?", [run_id, int(rank)]
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    return RankIndex.shared(con, run_id, rank).memo(("offset",), read)


def wait_table(
    con: Connection, run_id: str, rank: int, match: CollectiveMatch | None
) -> pd.DataFrame | None:
    """The rank's matched kernels in its trace time (``start_ns``, ``end_ns``, ``wait_ns``): what
    :func:`gpuscope.analysis.busy.busy_split` takes; None without a match."""
    if match is None:
        return None
    off = rank_offset_ns(con, run_id, rank)
    r = match.rows[match.rows["rank"] == rank] if not match.rows.empty else match.rows
    return pd.DataFrame(
        {
            "start_ns": (r["start_ns"].astype("int64") - off).to_numpy(np.int64),
            "end_ns": (r["end_ns"].astype("int64") - off).to_numpy(np.int64),
            "wait_ns": r["wait_ns"].astype("int64").to_numpy(np.int64),
        }
    )


def wait_by_step(match: CollectiveMatch | None, rank: int) -> dict[int, int]:
    """The rank's collective wait (ns) per step number."""
    if match is None or match.rows.empty:
        return {}
    r = match.rows[(match.rows["rank"] == rank)].dropna(subset=["step"])
    return {int(k): int(v) for k, v in r.groupby("step")["wait_ns"].sum().items()}


def _p50(s: pd.Series) -> float | None:
    v = pd.to_numeric(s, errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def match_json(m: CollectiveMatch, n_steps: int = 1) -> dict[str, Any]:
    """The ``collectives`` key of ``analyze --json`` (docs/cli-json.md): how instances were
    identified, counts, ranks missing, wait per rank, skew, and per (process group, collective)
    the median message size, transfer time and bandwidths."""
    n = max(1, int(n_steps))
    inst = m.instances
    by = []
    if not inst.empty:
        for (pg, coll), g in inst.groupby(["pg", "coll"], sort=True):
            by.append(
                {
                    "pg": str(pg),
                    "coll": str(coll),
                    "instances": len(g),
                    "msg_bytes_p50": _p50(g["msg_bytes"]),
                    "transfer_us_p50": (_p50(g["transfer_ns"]) or 0.0) / 1e3,
                    "skew_us_p50": (_p50(g["skew_ns"]) or 0.0) / 1e3,
                    "algbw_gbs_p50": _p50(g["algbw_gbs"]),
                    "busbw_gbs_p50": _p50(g["busbw_gbs"]),
                    "link_pct_p50": _p50(g["link_pct"]),
                    "wait_ms_per_step": float(g["wait_ns"].sum()) / n / 1e6,
                }
            )
    skew = inst["skew_ns"] if not inst.empty else pd.Series(dtype="int64")
    return {
        "id_method": m.id_method,
        "instances": len(inst),
        "instances_with_missing_ranks": int((inst["missing"].map(len) > 0).sum())
        if not inst.empty
        else 0,
        "missing": m.missing_sentences(),
        "unlaunched_kernels": {str(k): v for k, v in sorted(m.unlaunched.items())},
        "wait_ms_per_step_by_rank": {
            str(k): v / n / 1e6 for k, v in sorted(m.wait_ns_by_rank().items())
        },
        "skew_us_p50": (_p50(skew) or 0.0) / 1e3,
        "skew_us_max": float(skew.max()) / 1e3 if len(skew) else 0.0,
        "link_gbs": m.link_gbs,
        "by_collective": by,
    }


def wait_in_view(
    con: Connection,
    run_id: str,
    rank: int,
    device: int | None,
    start_ns: int,
    end_ns: int,
    n_buckets: int,
    match: CollectiveMatch | None,
) -> pd.DataFrame:
    """The rank's communication wait per sawtooth bucket of ``[start_ns, end_ns)`` (trace ns):
    :func:`gpuscope.analysis.busy.wait_series` over the match's waits (zeros without one)."""
    from gpuscope.analysis.busy import wait_series

    return wait_series(
        con,
        run_id,
        rank,
        start_ns,
        end_ns,
        n_buckets,
        device,
        wait_table(con, run_id, rank, match),
    )


def wait_spans(
    con: Connection,
    run_id: str,
    rank: int,
    start_ns: int,
    end_ns: int,
    match: CollectiveMatch | None,
) -> pd.DataFrame:
    """The rank's waits in ``[start_ns, end_ns)`` (trace ns), for a zoomed sawtooth that draws each
    kernel: ``start_ns``, ``end_ns`` (the wait part of a matched kernel, clipped to the range),
    ``coll``, ``last_rank`` (whom it waited for), ``step``."""
    cols = ["start_ns", "end_ns", "coll", "last_rank", "step"]
    if match is None or match.rows.empty:
        return pd.DataFrame({c: [] for c in cols})
    off = rank_offset_ns(con, run_id, rank)
    r = match.rows[(match.rows["rank"] == rank) & (match.rows["wait_ns"] > 0)]
    s = r["start_ns"].astype("int64") - off
    e = s + r["wait_ns"].astype("int64")
    keep = (e > start_ns) & (s < end_ns)
    return pd.DataFrame(
        {
            "start_ns": s[keep].clip(lower=start_ns).to_numpy(np.int64),
            "end_ns": e[keep].clip(upper=end_ns).to_numpy(np.int64),
            "coll": r.loc[keep, "coll"].to_numpy(),
            "last_rank": r.loc[keep, "last_rank"].to_numpy(np.int64),
            "step": r.loc[keep, "step"].to_numpy(),
        }
    )

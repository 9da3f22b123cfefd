"""FLOPs per training step from the CPU ops of a trace: matmul, convolution and attention families.

Each counted op gets its FLOPs from the trace's ``flops`` arg when Kineto wrote one (``with_flops``:
aten::mm/addmm/bmm/baddbmm/conv2d), else from its shapes (``Input Dims``, ``Concrete Inputs``).
Counted ops nest (aten::linear > aten::addmm, aten::conv2d > ... > aten::cudnn_convolution,
SDPA > _scaled_dot_product_*_attention > _*_attention_forward); on each thread the innermost
counted op wins, so nothing is counted twice and autograd's backward ops (aten::mm under
``AddmmBackward0``, aten::convolution_backward, ``*_attention_backward``) count as themselves. An op
with a ``flops`` arg and no counted descendant carrying one uses that arg for its whole subtree.

Conventions (the same as PaLM's MFU and torch.utils.flop_counter, except where said):
- a multiply-add is 2 FLOPs; bias adds, activations, norms, softmax and the optimizer are not counted;
- addmm/baddbmm count 2·M·N·K (their bias add is negligible);
- attention forward = 2·B·H·Sq·Sk·(Dqk + Dv) (QKᵀ and AV), the full Sq×Sk even when causal (counted
  in ``causal_attention_ops``); attention backward = 2 × forward (model FLOPs: the recomputation of
  QKᵀ by flash/memory-efficient kernels is not model work; FlopCounterMode counts 2.5×);
- convolution backward = forward × (input-grad + weight-grad asked for, from ``output_mask``).
"""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from gpuscope.analysis import kernels as K
from gpuscope.analysis.store_access import execute
from gpuscope.analysis.tensor_cores import dtype_of, tensor_core_info

if TYPE_CHECKING:
    from gpuscope.store import Connection

Dims = list[list[int]]

# --------------------------------------------------------------------------------------------------
# Shapes -> FLOPs


def _prod(xs: Iterable[int]) -> int:
    return math.prod(int(x) for x in xs)


def _tensor(dims: Dims, i: int, ndim: int | None = None) -> list[int] | None:
    if i >= len(dims):
        return None
    d = dims[i]
    if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
        return None
    if ndim is not None and len(d) != ndim:
        return None
    return d


def mm_flops(a: Sequence[int], b: Sequence[int]) -> int:
    """2·M·N·K for a [M, K] @ b [K, N]."""
    return 2 * a[0] * a[1] * b[1]


def bmm_flops(a: Sequence[int], b: Sequence[int]) -> int:
    """2·B·M·N·K for a [B, M, K] @ b [B, K, N]."""
    return 2 * a[0] * a[1] * a[2] * b[2]


def matmul_flops(a: Sequence[int], b: Sequence[int]) -> int | None:
    """torch.matmul with broadcasting: 2 · batch · M · N · K (1-D operands promoted as torch does)."""
    if not a or not b:
        return None
    a2 = [1, a[0]] if len(a) == 1 else list(a)
    b2 = [b[0], 1] if len(b) == 1 else list(b)
    if a2[-1] != b2[-2]:
        return None
    ba, bb = a2[:-2], b2[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
    batch = _prod(max(x, y) for x, y in zip(ba, bb, strict=True))
    return 2 * batch * a2[-2] * a2[-1] * b2[-1]


def conv_flops(
    x: Sequence[int], w: Sequence[int], out_spatial: Sequence[int], *, transposed: bool = False
) -> int:
    """Forward convolution FLOPs: 2 · N · w[0] · w[1] · prod(kernel) · prod(S), S = output spatial dims,
    or the input's for a transposed convolution (its weight is [Cin, Cout/groups, k...])."""
    spatial = x[2:] if transposed else out_spatial
    return 2 * x[0] * w[0] * w[1] * _prod(w[2:]) * _prod(spatial)


def conv_out_spatial(
    x_spatial: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> list[int]:
    """floor((in + 2p - d(k-1) - 1) / s) + 1 per spatial dim."""
    return [
        (i + 2 * p - d * (k - 1) - 1) // s + 1
        for i, k, s, p, d in zip(x_spatial, kernel, stride, padding, dilation, strict=True)
    ]


def attention_flops(
    q: Sequence[int], k: Sequence[int], v: Sequence[int], layout: str
) -> int | None:
    """Forward SDPA: 2·B·H·Sq·Sk·Dqk (QKᵀ) + 2·B·H·Sq·Sk·Dv (AV). ``layout`` 'bhsd' or 'bshd'."""
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None  # variable-length (packed) batches: the per-sequence S² is not in the shapes
    if layout == "bhsd":
        b, h, sq, dqk = q
        sk, dv = k[2], v[3]
    else:
        b, sq, h, dqk = q
        sk, dv = k[1], v[3]
    return 2 * b * h * sq * sk * (dqk + dv)


# --------------------------------------------------------------------------------------------------
# Op table


@dataclass(frozen=True)
class OpSpec:
    """How to count one aten op: family, and a function (dims, concrete inputs) -> (flops | None, approx)."""

    family: str
    count: Callable[[Dims, list[Any]], tuple[int | None, bool]]
    backward: bool = False
    causal_arg: int | None = None


def _arg(concrete: list[Any], i: int | None) -> Any:
    return concrete[i] if i is not None and i < len(concrete) else None


def _ints(v: Any, n: int) -> list[int] | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v * n if len(v) == 1 else (v if len(v) == n else None)
    return None


def _mm(ia: int, ib: int) -> Callable[[Dims, list[Any]], tuple[int | None, bool]]:
    def f(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
        a, b = _tensor(dims, ia, 2), _tensor(dims, ib, 2)
        return (mm_flops(a, b) if a and b and a[1] == b[0] else None), False

    return f


def _bmm(ia: int, ib: int) -> Callable[[Dims, list[Any]], tuple[int | None, bool]]:
    def f(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
        a, b = _tensor(dims, ia, 3), _tensor(dims, ib, 3)
        return (bmm_flops(a, b) if a and b and a[2] == b[1] else None), False

    return f


def _mv(ia: int, ib: int) -> Callable[[Dims, list[Any]], tuple[int | None, bool]]:
    def f(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
        a, v = _tensor(dims, ia, 2), _tensor(dims, ib, 1)
        return (2 * a[0] * a[1] if a and v else None), False

    return f


def _matmul(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
    a, b = _tensor(dims, 0), _tensor(dims, 1)
    return (matmul_flops(a, b) if a and b else None), False


def _linear(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
    x, w = _tensor(dims, 0), _tensor(dims, 1, 2)
    if not x or not w or x[-1] != w[1]:
        return None, False
    return 2 * _prod(x[:-1]) * w[1] * w[0], False


def _conv(
    *,
    stride: int | None,
    padding: int | None,
    dilation: int | None,
    transposed: int | bool | None = False,
) -> Callable[[Dims, list[Any]], tuple[int | None, bool]]:
    """Forward convolution with its hyper-parameters at the given argument positions."""

    def f(dims: Dims, c: list[Any]) -> tuple[int | None, bool]:
        x, w = _tensor(dims, 0), _tensor(dims, 1)
        if not x or not w or len(x) != len(w) or len(x) < 3:
            return None, False
        n = len(x) - 2
        tr = transposed if isinstance(transposed, bool) else bool(_arg(c, transposed))
        if tr:
            return conv_flops(x, w, [], transposed=True), False
        s = _ints(_arg(c, stride), n) if stride is not None else [1] * n
        d = _ints(_arg(c, dilation), n) if dilation is not None else [1] * n
        pv = _arg(c, padding) if padding is not None else 0
        if pv == "same":
            return conv_flops(x, w, x[2:]), False
        p = [0] * n if pv == "valid" else _ints(pv, n)
        if s is None or p is None or d is None:  # hyper-parameters not in the trace: assume 'same'
            return conv_flops(x, w, x[2:]), True
        out = conv_out_spatial(x[2:], w[2:], s, p, d)
        if any(o <= 0 for o in out):
            return None, False
        return conv_flops(x, w, out), False

    return f


def _conv_backward(dims: Dims, c: list[Any]) -> tuple[int | None, bool]:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask): forward FLOPs × (grad_input + grad_weight)."""
    go, x, w = _tensor(dims, 0), _tensor(dims, 1), _tensor(dims, 2)
    if not go or not x or not w or len(x) < 3:
        return None, False
    transposed = bool(_arg(c, 7))
    fwd = conv_flops(x, w, go[2:], transposed=transposed)
    mask = _arg(c, 10)
    approx = False
    if isinstance(mask, list) and len(mask) >= 2:
        k = int(bool(mask[0])) + int(bool(mask[1]))
    else:
        k, approx = 2, mask is None
    return fwd * k, approx


def _attn(
    layout: str, q: int, k: int, v: int, factor: int
) -> Callable[[Dims, list[Any]], tuple[int | None, bool]]:
    def f(dims: Dims, _c: list[Any]) -> tuple[int | None, bool]:
        tq, tk, tv = _tensor(dims, q), _tensor(dims, k), _tensor(dims, v)
        if not tq or not tk or not tv:
            return None, False
        fl = attention_flops(tq, tk, tv, layout)
        return (fl * factor if fl is not None else None), False

    return f


OPS: dict[str, OpSpec] = {
    "aten::mm": OpSpec("matmul", _mm(0, 1)),
    "aten::addmm": OpSpec("matmul", _mm(1, 2)),
    "aten::_addmm_activation": OpSpec("matmul", _mm(1, 2)),
    "aten::_scaled_mm": OpSpec("matmul", _mm(0, 1)),
    "aten::_int_mm": OpSpec("matmul", _mm(0, 1)),
    "aten::bmm": OpSpec("matmul", _bmm(0, 1)),
    "aten::baddbmm": OpSpec("matmul", _bmm(1, 2)),
    "aten::addbmm": OpSpec("matmul", _bmm(1, 2)),
    "aten::mv": OpSpec("matmul", _mv(0, 1)),
    "aten::addmv": OpSpec("matmul", _mv(1, 2)),
    "aten::matmul": OpSpec("matmul", _matmul),
    "aten::linear": OpSpec("matmul", _linear),
    # convolution forward: argument positions of stride / padding / dilation (/ transposed)
    "aten::conv1d": OpSpec("conv", _conv(stride=3, padding=4, dilation=5)),
    "aten::conv2d": OpSpec("conv", _conv(stride=3, padding=4, dilation=5)),
    "aten::conv3d": OpSpec("conv", _conv(stride=3, padding=4, dilation=5)),
    "aten::convolution": OpSpec("conv", _conv(stride=3, padding=4, dilation=5, transposed=6)),
    "aten::_convolution": OpSpec("conv", _conv(stride=3, padding=4, dilation=5, transposed=6)),
    "aten::conv_transpose1d": OpSpec(
        "conv", _conv(stride=None, padding=None, dilation=None, transposed=True)
    ),
    "aten::conv_transpose2d": OpSpec(
        "conv", _conv(stride=None, padding=None, dilation=None, transposed=True)
    ),
    "aten::conv_transpose3d": OpSpec(
        "conv", _conv(stride=None, padding=None, dilation=None, transposed=True)
    ),
    "aten::cudnn_convolution": OpSpec("conv", _conv(stride=3, padding=2, dilation=4)),
    "aten::cudnn_convolution_transpose": OpSpec(
        "conv", _conv(stride=None, padding=None, dilation=None, transposed=True)
    ),
    "aten::miopen_convolution": OpSpec("conv", _conv(stride=4, padding=3, dilation=5)),
    "aten::miopen_depthwise_convolution": OpSpec("conv", _conv(stride=4, padding=3, dilation=5)),
    "aten::miopen_convolution_transpose": OpSpec(
        "conv", _conv(stride=None, padding=None, dilation=None, transposed=True)
    ),
    "aten::mkldnn_convolution": OpSpec("conv", _conv(stride=4, padding=3, dilation=5)),
    "aten::_conv_depthwise2d": OpSpec("conv", _conv(stride=4, padding=5, dilation=6)),
    "aten::_slow_conv2d_forward": OpSpec("conv", _conv(stride=4, padding=5, dilation=None)),
    "aten::slow_conv_dilated2d": OpSpec("conv", _conv(stride=4, padding=5, dilation=6)),
    "aten::convolution_backward": OpSpec("conv", _conv_backward, backward=True),
    # attention: (layout, q, k, v index, factor); forward wrappers in BHSD, the kernels' ops in BSHD
    "aten::scaled_dot_product_attention": OpSpec(
        "attention", _attn("bhsd", 0, 1, 2, 1), causal_arg=5
    ),
    "aten::_scaled_dot_product_flash_attention": OpSpec(
        "attention", _attn("bhsd", 0, 1, 2, 1), causal_arg=4
    ),
    "aten::_scaled_dot_product_efficient_attention": OpSpec(
        "attention", _attn("bhsd", 0, 1, 2, 1), causal_arg=6
    ),
    "aten::_scaled_dot_product_cudnn_attention": OpSpec(
        "attention", _attn("bhsd", 0, 1, 2, 1), causal_arg=6
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu": OpSpec(
        "attention", _attn("bhsd", 0, 1, 2, 1), causal_arg=4
    ),
    "aten::_flash_attention_forward": OpSpec("attention", _attn("bshd", 0, 1, 2, 1), causal_arg=8),
    "aten::_efficient_attention_forward": OpSpec("attention", _attn("bshd", 0, 1, 2, 1)),
    "aten::_cudnn_attention_forward": OpSpec("attention", _attn("bhsd", 0, 1, 2, 1)),
    "aten::_scaled_dot_product_flash_attention_backward": OpSpec(
        "attention", _attn("bhsd", 1, 2, 3, 2), True
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": OpSpec(
        "attention", _attn("bhsd", 1, 2, 3, 2), True
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": OpSpec(
        "attention", _attn("bhsd", 1, 2, 3, 2), True
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": OpSpec(
        "attention", _attn("bhsd", 1, 2, 3, 2), True
    ),
    "aten::_flash_attention_backward": OpSpec("attention", _attn("bshd", 1, 2, 3, 2), True),
    "aten::_efficient_attention_backward": OpSpec("attention", _attn("bshd", 1, 2, 3, 2), True),
    "aten::_cudnn_attention_backward": OpSpec("attention", _attn("bhsd", 1, 2, 3, 2), True),
}
FAMILIES = ("matmul", "conv", "attention")


@lru_cache(maxsize=262144)
def _parse_json(text: str | None) -> Any:
    if not isinstance(text, str):  # None, or a number a hostile trace put where shapes go
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _parse_concrete(text: str | None) -> list[Any]:
    """Kineto's ``Concrete Inputs``: a list of strings ('' when not recorded) -> Python values."""
    raw = _parse_json(text)
    if not isinstance(raw, list):
        return []
    return [_concrete_value(v) for v in raw]


@lru_cache(maxsize=65536)
def _concrete_value_str(s: str) -> Any:
    if s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    try:
        return json.loads(s)
    except ValueError:
        pass
    try:  # Python literals: [False, True, True], 'same', None
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return s.strip("'\"")


def _concrete_value(v: Any) -> Any:
    return _concrete_value_str(v) if isinstance(v, str) else v


@lru_cache(maxsize=262144)
def op_flops(
    name: str, input_dims: str | None, concrete_inputs: str | None
) -> tuple[int | None, bool]:
    """(FLOPs from shapes or None, approximate?) of one op by name (see OPS)."""
    spec = OPS.get(name)
    dims = _parse_json(input_dims)
    if spec is None or not isinstance(dims, list):
        return None, False
    try:
        return spec.count(dims, _parse_concrete(concrete_inputs))
    except (TypeError, ValueError, IndexError):
        return None, False


@lru_cache(maxsize=65536)
def _dtype_of_types(types_text: str | None, name: str) -> str | None:

    types = _parse_json(types_text)
    if not isinstance(types, list):
        return None
    spec = OPS.get(name)
    # the operands that carry the math: skip a leading bias / grad / scalar entries
    order = range(len(types))
    if (spec and spec.backward and spec.family == "attention") or name in (
        "aten::addmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::addmv",
    ):
        order = range(1, len(types))
    for i in order:
        d = dtype_of(types[i]) if isinstance(types[i], str) else None
        if d is not None:
            return d
    return None


@lru_cache(maxsize=65536)
def _is_causal(name: str, conc: str | None) -> bool:
    arg = OPS[name].causal_arg
    return arg is not None and _parse_concrete(conc)[arg : arg + 1] == [True]


# --------------------------------------------------------------------------------------------------
# Result


@dataclass
class FlopsResult:
    """FLOPs of the window's steps on one rank.

    flops_per_step / flops_total: FLOPs (not TFLOPs); None when nothing could be counted.
    dtype: the dtype with most FLOPs ('bf16', 'fp16', 'fp32', 'tf32', 'fp8', 'int8', 'fp64'): fp32 ops
    whose kernels ran on TF32 tensor cores count as 'tf32'.
    source: 'trace_flops' (Kineto's flops args gave most FLOPs), 'shapes', 'override' (user's model
    FLOPs), or 'none'.
    ops_counted / ops_unknown: counted ops with FLOPs / matmul-conv-attention ops whose FLOPs could not
    be read (no shapes, packed sequences, ...): a result with ops_unknown > 0 is a lower bound.
    """

    flops_per_step: float | None
    flops_total: float | None
    dtype: str | None
    by_family: dict[str, float]
    source: str
    ops_counted: int
    ops_unknown: int
    n_steps: int = 0
    by_dtype: dict[str, float] = field(default_factory=dict)
    by_pass: dict[str, float] = field(default_factory=dict)
    by_source: dict[str, float] = field(default_factory=dict)
    unknown_ops: dict[str, int] = field(default_factory=dict)
    ops_approx: int = 0
    causal_attention_ops: int = 0
    trace_flops_per_step: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.ops_unknown == 0 and self.ops_approx == 0

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["complete"] = self.complete
        return d


@dataclass
class NestSelection:
    """Which counted ops of a sorted op table count, as numpy arrays over the ops (see nest_select)."""

    chosen: np.ndarray  # bool: this op's FLOPs are counted (for its whole subtree)
    value: np.ndarray  # float: FLOPs of a chosen op
    from_trace: np.ndarray  # bool: the value is Kineto's flops arg
    unknown: np.ndarray  # bool: a leaf whose FLOPs could not be read (and nothing above covers it)
    first_leaf: np.ndarray  # int: first leaf of the op's subtree (itself for a leaf)
    causal_roots: int  # outermost counted ops whose subtree holds a causal attention op


def nest_select(
    segments: Sequence[tuple[int, int]],
    ts: np.ndarray,
    end: np.ndarray,
    shape: np.ndarray,
    trace: np.ndarray,
    causal: np.ndarray,
) -> NestSelection:
    """Vectorised nest rules over counted ops sorted by (thread, start, longest first); ``segments``
    are the [a, b) row ranges of each thread. ``shape``/``trace`` are NaN where unknown / absent.

    An op's subtree is the ops after it that start before it ends. Counted: (1) an op with a trace
    ``flops`` arg and none below it; (2) a leaf with FLOPs from shapes, not under (1); (3) the innermost op
    with FLOPs from shapes whose subtree counted nothing (its leaves' shapes were unreadable).
    """
    n = len(ts)
    idx = np.arange(n)
    sub_end = np.empty(n, dtype=np.int64)
    is_root = np.zeros(n, dtype=bool)
    for a, b in segments:
        sub_end[a:b] = a + np.searchsorted(ts[a:b], end[a:b], side="left")
        sub_end[a:b] = np.maximum(sub_end[a:b], idx[a:b] + 1)
        if b > a:
            prev = np.maximum.accumulate(sub_end[a:b])
            is_root[a] = True
            is_root[a + 1 : b] = idx[a + 1 : b] >= prev[:-1]
    nxt = idx + 1

    def csum(mask: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])

    def inside(c: np.ndarray) -> np.ndarray:  # count over strict descendants
        return c[sub_end] - c[nxt]

    def covered(mask: np.ndarray) -> np.ndarray:  # strict descendants of ops in mask
        d = np.zeros(n + 1, dtype=np.int64)
        np.add.at(d, nxt[mask], 1)
        np.add.at(d, sub_end[mask], -1)
        return np.cumsum(d[:n]) > 0

    is_leaf = sub_end == nxt
    has_trace = ~np.isnan(trace)
    chosen_trace = has_trace & (inside(csum(has_trace)) == 0)
    cov_t = covered(chosen_trace)
    known = ~np.isnan(shape)
    free_leaf = is_leaf & ~cov_t & ~chosen_trace
    leaf_ok = free_leaf & known
    counted_inside = inside(csum(leaf_ok | chosen_trace))
    cand = ~is_leaf & known & ~chosen_trace & ~cov_t & (counted_inside == 0)
    fallback = cand & (inside(csum(cand)) == 0)
    unknown = free_leaf & ~known & ~covered(fallback)
    chosen = leaf_ok | chosen_trace | fallback
    value = np.where(chosen_trace, trace, shape)
    # first leaf at or after each op (for the dtype of an op counted for its subtree)
    leaf_pos = np.where(is_leaf, idx, n)
    first_leaf = np.minimum.accumulate(leaf_pos[::-1])[::-1]
    first_leaf = (
        np.where(is_leaf, idx, np.minimum(first_leaf[np.minimum(nxt, n - 1)], n - 1))
        if n
        else first_leaf
    )
    causal_roots = (
        int(np.sum(is_root & (csum(causal)[sub_end] - csum(causal)[idx] > 0))) if n else 0
    )
    return NestSelection(chosen, value, chosen_trace, unknown, first_leaf, causal_roots)


_OPS_WHERE = """
    FROM events
    WHERE run_id = $run AND rank = $rank AND cat IN ('cpu_op', 'Operator') AND dur_ns IS NOT NULL
      AND name_id IN (SELECT name_id FROM names WHERE run_id = $run AND list_contains($names, name))
      AND ts_ns >= $start AND ts_ns < $end
"""
_SIG = "hash(name_id, input_dims, input_types, concrete_inputs)"
_OPS_ROWS = f"SELECT pid, tid, ts_ns, dur_ns, {_SIG} AS sig, coalesce(flops, 'NaN'::DOUBLE) AS flops {_OPS_WHERE}"
_OPS_SIGS = f"""
    SELECT s.sig, n.name, s.input_dims, s.input_types, s.concrete_inputs
    FROM (SELECT DISTINCT {_SIG} AS sig, name_id, input_dims, input_types, concrete_inputs {_OPS_WHERE}) s
    JOIN names n ON n.run_id = $run AND n.name_id = s.name_id
"""


@dataclass
class OpTable:
    """Counted-op events of a window, sorted by (pid, tid, start, longest first), as numpy arrays."""

    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    sig: np.ndarray
    trace: np.ndarray
    sigs: dict[
        int, tuple[str, str | None, str | None, str | None]
    ]  # sig -> (name, dims, types, concrete)

    def segments(self) -> list[tuple[int, int]]:
        n = len(self.ts)
        if n == 0:
            return []
        cut = np.flatnonzero((self.pid[1:] != self.pid[:-1]) | (self.tid[1:] != self.tid[:-1])) + 1
        bounds = [0, *cut.tolist(), n]
        return list(itertools.pairwise(bounds))


def load_ops(con: Connection, params: dict[str, Any]) -> OpTable:
    p = {**params, "names": list(OPS)}
    d = execute(con, _OPS_ROWS, p).fetchnumpy()
    srows = execute(con, _OPS_SIGS, p).fetchall()
    keys = np.asarray([r[0] for r in srows], dtype=np.uint64)
    korder = np.argsort(keys)
    sigs = {i: (r[1], r[2], r[3], r[4]) for i, r in enumerate(srows)}
    pid, tid = np.asarray(d["pid"], dtype=np.int64), np.asarray(d["tid"], dtype=np.int64)
    ts, dur = np.asarray(d["ts_ns"], dtype=np.int64), np.asarray(d["dur_ns"], dtype=np.int64)
    order = np.lexsort((-dur, ts, tid, pid))  # thread, start, longest first
    h = np.asarray(d["sig"], dtype=np.uint64)[order]
    sig = (
        korder[np.searchsorted(keys[korder], h)] if len(keys) else np.zeros(len(h), dtype=np.int64)
    )
    return OpTable(
        pid[order],
        tid[order],
        ts[order],
        ts[order] + np.maximum(dur[order], 0),
        sig.astype(np.int64),
        np.asarray(d["flops"], dtype=np.float64)[order],
        sigs,
    )


def _tf32_ops(
    con: Connection,
    run_id: str,
    rank: int,
    window: Any,
    ops: OpTable,
    rows: np.ndarray,
) -> np.ndarray:
    """Of the counted op rows ``rows`` (fp32), those that launched a kernel that ran on TF32 tensor cores."""

    hit_rows: list[np.ndarray] = []
    lx = K.launched(con, run_id, rank, window.start_ns, window.end_ns)
    if not len(lx) or not len(rows):
        return np.zeros(0, dtype=np.int64)
    ids = {int(i) for i in np.unique(lx.name_id)}
    names = K.name_lookup(con, run_id, ids)
    tf32 = [
        i
        for i in ids
        if tensor_core_info(names.get(i, ""), K.classify_kernel(names.get(i, ""))).precision
        == "tf32"
    ]
    if not tf32:
        return np.zeros(0, dtype=np.int64)
    launch_tf32 = lx.has_launch & np.isin(lx.name_id, np.asarray(tf32, dtype=np.int64))
    for p, t in {(int(a), int(b)) for a, b in zip(ops.pid[rows], ops.tid[rows], strict=True)}:
        r = rows[(ops.pid[rows] == p) & (ops.tid[rows] == t)]
        m = launch_tf32 & (lx.pid == p) & (lx.tid == t)
        if not m.any():
            continue
        order = np.argsort(ops.ts[r], kind="stable")
        iv = K.Intervals(ops.ts[r][order], ops.end[r][order], r[order])
        j = iv.lookup(lx.launch_ns[m])
        hit_rows.append(iv.name_id[j[j >= 0]])
    return np.unique(np.concatenate(hit_rows)) if hit_rows else np.zeros(0, dtype=np.int64)


def _backward_ops(
    con: Connection, run_id: str, rank: int, ops: OpTable, rows: np.ndarray
) -> np.ndarray:
    """Bool per row of ``rows``: the op ran in autograd's backward (a backward thread, or under an
    ``autograd::engine::evaluate_function`` / ``*Backward`` op on its thread)."""

    out = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return out
    bwd_threads = K.backward_threads(con, run_id, rank)
    threads = sorted({(int(a), int(b)) for a, b in zip(ops.pid[rows], ops.tid[rows], strict=True)})
    todo = [th for th in threads if th not in bwd_threads]
    tops = K.toplevel_intervals(con, run_id, rank, todo)
    bwd_names = np.asarray(K.name_ids_where(con, run_id, K.BACKWARD_NAMES_SQL), dtype=np.int64)
    for th in threads:
        m = (ops.pid[rows] == th[0]) & (ops.tid[rows] == th[1])
        if th in bwd_threads:
            out[m] = True
            continue
        iv = tops.get(th)
        if iv is not None:
            j = iv.lookup(ops.ts[rows][m])
            out[m] = (j >= 0) & np.isin(iv.name_id[np.maximum(j, 0)], bwd_names)
    return out


def flops_per_step(
    con: Connection,
    run_id: str,
    rank: int,
    window: Any,
    n_steps: int | None = None,
    *,
    model_flops_per_step: float | None = None,
) -> FlopsResult:
    """FLOPs per step of one rank over the window's steps (``n_steps``, default ``len(window.steps)``).

    ``model_flops_per_step`` (e.g. 6·N·tokens) overrides the counted FLOPs (source 'override'); the
    dtype is still read from the trace.
    """

    if n_steps is None:
        n_steps = len(getattr(window, "steps", ()) or ())
    params = {
        "run": run_id,
        "rank": int(rank),
        "start": int(window.start_ns),
        "end": int(window.end_ns),
    }
    ops = load_ops(con, params)
    nsig = max(ops.sigs, default=-1) + 1
    sig_flops = np.full(nsig, np.nan)
    sig_approx = np.zeros(nsig, dtype=bool)
    sig_causal = np.zeros(nsig, dtype=bool)
    sig_dtype: list[str | None] = [None] * nsig
    sig_name: list[str] = [""] * nsig
    for k, (name, dims, types, conc) in ops.sigs.items():
        fl, approx = op_flops(name, dims, conc)
        sig_flops[k] = np.nan if fl is None else float(fl)
        sig_approx[k], sig_causal[k] = approx, _is_causal(name, conc)
        sig_dtype[k], sig_name[k] = _dtype_of_types(types, name), name
    sel = nest_select(
        ops.segments(), ops.ts, ops.end, sig_flops[ops.sig], ops.trace, sig_causal[ops.sig]
    )
    rows = np.flatnonzero(sel.chosen)
    values = sel.value[rows]
    fam_of = np.asarray(
        [OPS[nm].family if nm in OPS else "matmul" for nm in sig_name] or ["matmul"]
    )
    dtype_sig = np.asarray([d or "unknown" for d in sig_dtype] or ["unknown"], dtype=object)
    own = dtype_sig[ops.sig[rows]] if len(rows) else np.zeros(0, dtype=object)
    leaf_dt = dtype_sig[ops.sig[sel.first_leaf[rows]]] if len(rows) else np.zeros(0, dtype=object)
    dtypes = np.where(leaf_dt != "unknown", leaf_dt, own).astype(object)
    fp32_rows = rows[dtypes == "fp32"]
    if len(fp32_rows):
        tf = _tf32_ops(con, run_id, rank, window, ops, fp32_rows)
        dtypes[np.isin(rows, tf)] = "tf32"
    backward = _backward_ops(con, run_id, rank, ops, rows)

    unknown: dict[str, int] = {}
    for k, c in zip(*np.unique(ops.sig[sel.unknown], return_counts=True), strict=True):
        unknown[sig_name[int(k)]] = unknown.get(sig_name[int(k)], 0) + int(c)
    unknown.update(_unknown_compiled(con, params))
    total = float(values.sum()) if len(rows) else 0.0
    fams = fam_of[ops.sig[rows]] if len(rows) else np.zeros(0, dtype=object)
    by_family = {f: float(values[fams == f].sum()) for f in FAMILIES}
    by_dtype = (
        {str(d): float(values[dtypes == d].sum()) for d in np.unique(dtypes)} if len(rows) else {}
    )
    by_pass = {"forward": float(values[~backward].sum()), "backward": float(values[backward].sum())}
    from_trace = sel.from_trace[rows]
    by_source = {
        k: v
        for k, v in (
            ("trace_flops", float(values[from_trace].sum())),
            ("shapes", float(values[~from_trace].sum())),
        )
        if v > 0
    }
    per = n_steps if n_steps and n_steps > 0 else 1
    known = {k: v for k, v in by_dtype.items() if k != "unknown"}
    dtype = max(known, key=lambda k: known[k]) if known else None
    notes = []
    if not n_steps:
        notes.append("no steps in the window: FLOPs per step are the window's total")
    if unknown:
        notes.append(
            "some matmul/conv/attention ops have no FLOPs (no shapes recorded?): a lower bound"
        )
    if sel.causal_roots:
        notes.append(
            "causal attention counted as full Sq×Sk (the PaLM / FlopCounterMode convention)"
        )
    src = "none"
    if total > 0:
        src = "trace_flops" if by_source.get("trace_flops", 0.0) >= 0.5 * total else "shapes"
    result = FlopsResult(
        flops_per_step=total / per if total > 0 else None,
        flops_total=total if total > 0 else None,
        dtype=dtype,
        by_family={k: v / per for k, v in by_family.items()},
        source=src,
        ops_counted=len(rows),
        ops_unknown=sum(unknown.values()),
        n_steps=n_steps or 0,
        by_dtype={k: v / per for k, v in sorted(by_dtype.items(), key=lambda kv: -kv[1])},
        by_pass={k: v / per for k, v in by_pass.items()},
        by_source={k: v / per for k, v in by_source.items()},
        unknown_ops=unknown,
        ops_approx=int((sig_approx[ops.sig[rows]] & ~from_trace).sum()) if len(rows) else 0,
        causal_attention_ops=sel.causal_roots,
        trace_flops_per_step=total / per if total > 0 else None,
        notes=notes,
    )
    if model_flops_per_step is not None:
        result.flops_per_step = float(model_flops_per_step)
        result.flops_total = float(model_flops_per_step) * per
        result.source = "override"
    return result


def _unknown_compiled(con: Connection, params: dict[str, Any]) -> dict[str, int]:
    """Inductor template kernels (``triton_tem_*`` CPU ops named after the kernel) that do matmul or
    convolution: their FLOPs are not read from the trace, so they are reported as unknown."""
    rows = execute(
        con,
        """SELECT n.name, count(*) FROM events e JOIN names n ON n.run_id = e.run_id AND n.name_id = e.name_id
           WHERE e.run_id = $run AND e.rank = $rank AND e.cat = 'cpu_op' AND e.ts_ns >= $start AND e.ts_ns < $end
             AND e.name_id IN (SELECT name_id FROM names WHERE run_id = $run AND name LIKE 'triton\\_tem\\_%' ESCAPE '\\')
           GROUP BY n.name""",
        params,
    ).fetchall()
    return {str(n): int(c) for n, c in rows}


def metadata_model_flops(con: Connection, run_id: str, rank: int) -> float | None:
    """Analytic FLOPs per step of one rank written into the trace's metadata by the recorder
    (``model_flops_per_step_per_rank``, else ``model_flops_per_step`` / world size), or None."""
    row = con.execute(
        "SELECT metadata, world_size FROM ranks WHERE run_id = ? AND rank = ?", [run_id, int(rank)]
    ).fetchone()
    if not row or row[0] is None:
        return None
    meta = json.loads(row[0]) if isinstance(row[0], str) else row[0]

    def num(v: Any) -> float | None:
        try:
            return float(v) if v is not None and not isinstance(v, bool) else None
        except (TypeError, ValueError):
            return None

    per_rank = num(meta.get("model_flops_per_step_per_rank"))
    if per_rank:
        return per_rank
    total = num(meta.get("model_flops_per_step"))
    if total:
        ws = num(meta.get("world_size")) or num(row[1]) or 1.0
        return total / ws
    return None


def transformer_flops_per_step(
    n_matmul_params: float,
    tokens_per_step: float,
    *,
    n_layers: int = 0,
    seq_len: int = 0,
    d_model: int = 0,
    training: bool = True,
) -> float:
    """Analytic model FLOPs of a transformer step: 6·N·T (+ 12·L·S·d·T for attention) when training,
    2·N·T (+ 4·L·S·d·T) for inference; N = matmul weights, T = tokens per step."""
    f = 6 if training else 2
    return (
        f * n_matmul_params * tokens_per_step
        + 2 * f * n_layers * seq_len * d_model * tokens_per_step
    )

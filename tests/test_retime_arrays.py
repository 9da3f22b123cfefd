"""The re-timings the fixes compose (``fixes.base.after``, ``with_host_cost``) read every node at
once (``gains.raw_durations``: ``Composed.array``, ``PlusHost.array``, the host-work mask) and give
the floats their node-by-node calls give, bit for bit: rounding half to even, floors at 0, a host
segment that becomes (or stops being) the user's own code once re-timed, nested compositions, a
function shared by two variants."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gpuscope.analysis import gains as GN
from gpuscope.analysis.critical_path import GpuEvent, Graph, HostEvent, Node
from gpuscope.analysis.fixes import base as fx
from hypothesis import given, settings
from hypothesis import strategies as st

KINDS = (
    ("host", "cpu"),
    ("host", "launch"),
    ("host", "sync"),
    ("host", "copies"),
    ("gpu", "kernels"),
    ("gpu", "copies"),
)
TAGS = (frozenset(), frozenset({"dataloader"}), frozenset({"optimizer"}), frozenset({"gemm"}))
EVENTS = (
    None,
    HostEvent("aten::mm", "cpu_op", 0, 1, 1),
    HostEvent("my_function", "python_function", 0, 1, 1),
    HostEvent("cudaLaunchKernel", "cuda_runtime", 0, 1, 1),
)

node_st = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(TAGS),
    st.sampled_from(EVENTS),
    # around the own-code threshold (1 ms) too, and 0
    st.one_of(st.integers(0, 3_000), st.integers(900_000, 1_100_000)),
)


def graph(rows: list[tuple[tuple[str, str], frozenset[str], HostEvent | None, int]]) -> Graph:
    nodes, t = [], 0
    for (kind, cat), tags, ev, d in rows:
        nodes.append(Node(kind, cat, t, t + d, "n", tags, ev if kind == "host" else None))
        t += d + 1
    return Graph(nodes, [[] for _ in nodes], list(range(len(nodes))))


def one_by_one(g: Graph, dur: GN.DurFn) -> list[str]:
    return [max(0.0, float(dur(v, n))).hex() for v, n in enumerate(g.nodes)]


def at_once(g: Graph, dur: GN.DurFn, picked: dict | None = None) -> list[str]:  # type: ignore[type-arg]
    return [x.hex() for x in GN._durations(g, dur, picked).tolist()]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(node_st, min_size=1, max_size=25),
    f=st.sampled_from([0.0, 0.25, 0.5, 1.5, 2.5, 3.0, 1e-3, 1200.0, -0.5]),
    shift=st.sampled_from([0.0, 0.5, -0.5, 999_999.5, -2.5]),
    per=st.floats(min_value=0.0, max_value=3.0, allow_nan=False),
)
def test_composed_retimings_at_once_are_the_ones_node_by_node(rows, f, shift, per) -> None:  # type: ignore[no-untyped-def]
    g = graph(rows)

    def a(v: int, n: Node) -> float:  # reads the index, the duration and the end
        return n.dur * f + shift if v % 3 == 0 else float(n.e - n.s)

    def b(v: int, n: Node) -> float:
        return n.dur * f if fx.is_host_work(n) else float(n.dur) - shift

    def keep_all(i: int, ed: object) -> bool:
        return True

    scaled = fx.scaled(lambda n: n.kind == "host" and n.dur > 1000, f)
    first = fx.after((a, None), {"x": (None, None)})["x"]
    first = fx.after((b, keep_all), {"x": first})["x"]  # two causes, nested
    variants: dict[str, GN.Variant] = {
        "low": (b, None),
        "mid": (fx.PlusHost(a, per), None),
        "high": (scaled, None),
        "same": (b, None),  # one function in two variants: read once
        "none": (None, keep_all),
    }
    composed = fx.after(first, variants)
    plus = fx.with_host_cost(composed, g, GN.Context(n_steps=1, step_ms=1.0), per, ("low", "high"))
    picked: dict = {}  # type: ignore[type-arg]
    for d in [first[0], a, b, scaled, fx.PlusHost(None, per), fx.PlusHost(b, per)]:
        assert d is not None
        assert at_once(g, d, picked) == one_by_one(g, d)
    for name in variants:
        for vs in (composed, plus):
            d = vs[name][0]
            assert d is not None
            assert at_once(g, d, picked) == one_by_one(g, d), name
            assert at_once(g, d) == one_by_one(g, d), name


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(node_st, min_size=1, max_size=25), data=st.data())
def test_the_host_work_mask_is_is_host_work_of_each_node(rows, data) -> None:  # type: ignore[no-untyped-def]
    g = graph(rows)
    assert fx.host_work_mask(g).tolist() == [fx.is_host_work(n) for n in g.nodes]
    durs = np.array(
        data.draw(
            st.lists(st.integers(0, 1_100_000), min_size=len(g.nodes), max_size=len(g.nodes))
        ),
        dtype=np.int64,
    )
    moved = GN.nodes_at(g, durs)
    assert [n.dur for n in moved] == durs.tolist()
    assert fx.host_work_mask(g, durs).tolist() == [fx.is_host_work(n) for n in moved]
    # the nodes a re-timing leaves as recorded are the graph's own
    same = GN.recorded_ns(g) == durs
    assert all((m is n) == s for m, n, s in zip(moved, g.nodes, same.tolist(), strict=True))


def test_a_retiming_that_rounds_to_nan_raises_as_node_by_node() -> None:
    """A NaN duration under a composition: round() raises, at once as node by node."""

    g = graph([(("host", "cpu"), frozenset(), None, 10)])
    d = fx.after((lambda v, n: float("nan"), None), {"x": (None, None)})["x"][0]
    assert d is not None
    with pytest.raises(ValueError):
        d(0, g.nodes[0])
    with pytest.raises(ValueError):
        GN._durations(g, d)


VALIDATION = Path(__file__).resolve().parent.parent / "sample_traces" / "validation"

#: Real runs of sample_traces/validation whose estimates, together, hand the replay every
#: re-timing that has an every-node form (``gains.ByNode`` and the classes with an ``array``).
REAL_CASES = ("v07", "v03", "v27", "v40", "v48", "v216")

#: What those runs must exercise: each re-timing by its node-by-node function's qualified name
#: and module.
EVERY_FORM = {
    "base:Composed",
    "base:PlusHost",
    "batch_size:_grow.<locals>.dur",
    "cuda_graphs:InductorKernels",
    "cuda_graphs:_fused.<locals>.dur",
    "cuda_graphs:_host_scaled.<locals>.around.<locals>.dur",
    "cudnn_benchmark:retime.<locals>.variant.<locals>.dur",
    "dataloader_workers:_plus_loader.<locals>.dur",
    "dtensor_dispatch:retime.<locals>.dur",
    "kernel_fusion:_fused.<locals>.fuse.<locals>.dur",
    "kernel_fusion:retime_chains.<locals>.dur",
    "kernel_fusion:retime_whole_host.<locals>.fuse.<locals>.dur",
    "load_imbalance:equal_work_retime.<locals>.dur.<locals>.d",
    "mixed_precision:_retime_tf32.<locals>.mp.<locals>.dur",
    "mixed_precision:retime.<locals>.mp.<locals>.dur",
}


def _name_of(dur: object) -> str:
    each = getattr(dur, "each", dur)
    name = getattr(each, "__qualname__", type(each).__qualname__)
    return f"{getattr(each, '__module__', '?').rsplit('.', 1)[-1]}:{name}"


def test_every_retiming_at_once_is_node_by_node_on_real_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fix's re-timings on real runs (the validation set's planted cases), as the ingest's
    analysis and ``analyze`` estimate them: wherever the replay reads a duration function at
    once (``raw_durations`` of one with an ``array``), the floats are the function's own node by
    node, bit for bit, on the nodes as recorded and as an earlier re-timing moved them; and
    every such function is met."""
    from clitools import analysis_store, cli_in_process

    real = GN.raw_durations
    seen: set[str] = set()
    wrong: list[str] = []

    def checked(
        g: Graph, dur: GN.DurFn | None, durs: np.ndarray | None, picked: dict
    ) -> np.ndarray:  # type: ignore[type-arg]
        got = real(g, dur, durs, picked)
        if dur is not None and getattr(dur, "array", None) is not None:
            nodes = GN.nodes_at(g, durs)
            want = [float(dur(v, n)).hex() for v, n in enumerate(nodes)]
            have = [x.hex() for x in got.tolist()]
            seen.add(_name_of(dur))
            if have != want:
                v = next(i for i, (a, b) in enumerate(zip(have, want, strict=True)) if a != b)
                wrong.append(f"{_name_of(dur)}: node {v} {nodes[v]}: {have[v]} != {want[v]}")
        return got

    for name, module in list(sys.modules.items()):
        if name.startswith("gpuscope.") and getattr(module, "raw_durations", None) is real:
            monkeypatch.setattr(module, "raw_durations", checked)
    store = str(analysis_store(tmp_path))
    for case in REAL_CASES:
        traces = sorted((VALIDATION / case).glob("*.pt.trace.json.gz"))
        src = traces[0] if len(traces) == 1 else traces[0].parent
        done = cli_in_process("ingest", str(src), "--db", store, "--name", case)
        assert done.returncode == 0, done.stderr
        run = done.stdout.split()[-1]
        for rank in {t.name.split("rank")[-1].split(".")[0] for t in traces}:
            got = cli_in_process("analyze", run, "--rank", rank, "--json", "--db", store)
            assert got.returncode == 0, got.stderr
        assert not wrong, f"{case}: {wrong[:3]}"
    assert seen >= EVERY_FORM, f"never met: {sorted(EVERY_FORM - seen)}"


KERNEL_NAMES = (
    "ampere_sgemm_128x64_nn",  # fp32 GEMM on CUDA cores (with the gemm tag)
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
    "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)",
    "cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>",
    "void at::native::batch_norm_collect_statistics_channels_last_kernel<float>",
    "void at::native::batch_norm_collect_statistics_kernel<float>",
    "implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16",
    "sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_stage1",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "void at::native::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata>",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void fft2d_r2c_32x32<float, false, 0u, false>",
)
"""Kernels each fix's re-timing tells apart: fp32, TF32 and bf16 math, 3xTF32 attention, cuDNN's
and PyTorch's BatchNorms (per channel, channels-last), fp32 and TF32 convolutions, cuDNN's
fallback and layout kernels, elementwise, the optimizer's, a collective."""

_DISPATCH_LABELS = ("aten::mm", "PythonSubclass", "n")

host_node_st = st.tuples(
    st.just("host"),
    st.sampled_from(["cpu", "launch", "sync", "copies"]),
    st.sampled_from(
        [
            frozenset(),
            frozenset({"dataloader"}),
            frozenset({"optimizer"}),
            frozenset({"compiled_call"}),
        ]
    ),
    st.sampled_from(EVENTS),
    st.sampled_from(_DISPATCH_LABELS),
    st.none(),
    st.one_of(st.integers(0, 30_000), st.integers(900_000, 1_100_000)),
)
gpu_node_st = st.tuples(
    st.just("gpu"),
    st.sampled_from(["kernels", "kernels", "copies", "communication"]),
    st.sampled_from([frozenset(), frozenset({"gemm"}), frozenset({"conv"})]),
    st.sampled_from(KERNEL_NAMES),
    st.just("n"),
    st.one_of(st.none(), st.integers(1, 300)),
    # around the short kernel (20 us), the fixed part (3 us) and the GEMM ratio's ends
    st.one_of(st.integers(0, 30_000), st.integers(40_000, 2_000_000)),
)


def mixed_graph(rows: list[tuple]) -> Graph:  # type: ignore[type-arg]
    nodes, t = [], 0
    for kind, cat, tags, ev, label, blocks, d in rows:
        if kind == "gpu":
            ev = GpuEvent(ev, "kernel", t, t + d, 7, None, None, blocks)
        nodes.append(Node(kind, cat, t, t + d, label, tags, ev))
        t += d + 1
    return Graph(nodes, [[] for _ in nodes], list(range(len(nodes))))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.one_of(host_node_st, gpu_node_st), min_size=1, max_size=30),
    data=st.data(),
    sms=st.sampled_from([None, 0, 108, 132]),
    cl=st.booleans(),
)
def test_each_fixs_own_retiming_at_once_is_node_by_node(rows, data, sms, cl) -> None:  # type: ignore[no-untyped-def]
    """Every fix's own re-timings (``gains.ByNode``), on graphs mixing the nodes they tell apart,
    with index sets drawn at random (removed kernels, RNN layers' host nodes, channels-last
    BatchNorms, the optimizer's work): at once, the floats of their calls node by node, on the
    nodes as recorded and as an earlier re-timing moved them."""
    from gpuscope.analysis.fixes import (
        batch_size,
        cuda_graphs,
        cudnn_benchmark,
        dataloader_workers,
        dtensor_dispatch,
        kernel_fusion,
        load_imbalance,
        mixed_precision,
    )

    g = mixed_graph(rows)
    n = len(g.nodes)
    picks = st.lists(st.booleans(), min_size=n, max_size=n)  # about half the nodes each
    removed, rnn, norms, fixed = (
        frozenset(v for v, p in enumerate(data.draw(picks)) if p) for _ in range(4)
    )
    g.memo["rnn_host_nodes"] = frozenset(rnn)  # what _host_scaled and kernel_fusion read
    ctx = GN.Context(
        n_steps=2,
        step_ms=1.0,
        sms=sms,
        gpu_model=data.draw(st.sampled_from([None, "NVIDIA H100 80GB HBM3"])),
        memory_bound_fp32_matmul={"ampere_sgemm_128x64_nn": 0.4},
    )
    durs = np.array(
        data.draw(st.lists(st.integers(0, 1_100_000), min_size=n, max_size=n)), dtype=np.int64
    )
    host = cuda_graphs.in_compiled_calls(g)
    funcs: list[GN.DurFn | None] = []
    for vs in (
        kernel_fusion.retime(g, ctx),
        kernel_fusion.retime(g, ctx, keep_gpu=True),
        kernel_fusion._fused(removed, 0.3, rnn, cl),
        kernel_fusion.retime_chains(g, ctx),
        kernel_fusion.retime_whole_host(g, ctx),
        cuda_graphs._host_scaled(g, 0.5, 0.2, 0.05, fused=True, host=host),
        mixed_precision.retime(g, ctx, channels_last=cl),
        mixed_precision._retime_tf32(g, cl),
        batch_size.retime(g, ctx),
        cudnn_benchmark.retime(g, ctx),
        dtensor_dispatch.retime(g, ctx),
        load_imbalance.equal_work_retime(0.8, 0.6, 0.5),
    ):
        funcs += [d for d, _ in vs.values()]
    funcs += [
        cuda_graphs._fused(removed, 0.2, host, 0.5, norms, 0.25),
        batch_size._grow(data.draw(st.sampled_from(["low", "mid", "high"])), 4, sms or 0, fixed),
        dataloader_workers._plus_loader(None, 0.5),
        dataloader_workers._plus_loader(batch_size._grow("low", 4, 0), 0.25),
    ]
    moved = GN.nodes_at(g, durs)
    met = 0
    for d in funcs:
        if d is None or getattr(d, "array", None) is None:
            continue
        met += 1
        assert at_once(g, d) == one_by_one(g, d), _name_of(d)
        got = [x.hex() for x in GN.raw_durations(g, d, durs, {}).tolist()]
        assert got == [float(d(v, m)).hex() for v, m in enumerate(moved)], _name_of(d)
    assert met >= 30


def test_bf16_in_channels_last_at_once_is_node_by_node() -> None:
    """The mixed-precision re-timing's own branch with the model in channels_last (fp32 GEMMs
    beside a TF32 convolution, cuDNN's BatchNorm and layout kernels, 3xTF32 attention): at once,
    its calls node by node, at every level."""
    from gpuscope.analysis.fixes import mixed_precision

    names = [KERNEL_NAMES[i] for i in (0, 8, 10, 4, 3, 11, 7)]
    tags = [frozenset({"gemm"}), frozenset({"conv"}), frozenset(), frozenset(), frozenset()]
    rows = [
        ("gpu", "kernels", tags[i] if i < len(tags) else frozenset({"conv"}), nm, "n", 64, d)
        for i, (nm, d) in enumerate(
            zip(names, (900_000, 20_000, 7_000, 9_000, 50_000, 3_000, 60_000), strict=True)
        )
    ]
    rows.append(("host", "cpu", frozenset(), EVENTS[1], "n", None, 4_000))
    g = mixed_graph(rows)
    variants = mixed_precision.retime(g, GN.Context(n_steps=1, step_ms=1.0), channels_last=True)
    for d, _ in variants.values():
        assert d is not None
        assert at_once(g, d) == one_by_one(g, d)
    # every constant the branch applies is met: the layout kernel is dropped (CL_LAYOUT 0), the
    # TF32 convolution takes CL_TF32_CONV, the attention is divided
    top = [float.fromhex(x) for x in one_by_one(g, variants["high"][0])]
    assert top[2] == 0.0 and top[1] == 20_000 * mixed_precision.CL_TF32_CONV
    assert top[4] < 50_000

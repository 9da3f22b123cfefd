"""torch.compile's re-timing counts only the launches fusion removes: hand-made graphs with
answers by hand (analysis/fixes/kernel_fusion.py, docs/metrics.md "Gains from the path")."""

from __future__ import annotations

import pytest
from gpuscope.analysis.critical_path import GpuEvent, HostEvent, Node
from gpuscope.analysis.fixes import kernel_fusion as kf
from gpuscope.analysis.gains import Context

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


def kernel(name: str, start_us: int, stream: int = 7, dur_us: int = 10) -> Node:
    s, e = start_us * 1000, (start_us + dur_us) * 1000
    return Node("gpu", "kernels", s, e, name, frozenset(), GpuEvent(name, "kernel", s, e, stream))


def graph(nodes: list[Node]) -> object:
    return type("G", (), {"nodes": nodes})()


def test_a_chain_of_fusable_kernels_keeps_one_launch() -> None:
    """Stream 7 in time order: add, add, GEMM, norm, add, add (listed out of order): the second
    add, and the norm's two followers are removed (3); stream 8: GEMM, add (a lone fusable
    kernel: 0). 3 of 8 kernels."""
    nodes = [
        kernel(ELEMENTWISE, 50),  # node 0: follows the norm at 40: removed
        kernel(ELEMENTWISE, 0),  # node 1: heads a chain
        kernel(ELEMENTWISE, 10),  # node 2: removed
        kernel(GEMM, 20),
        kernel(NORM, 40),  # heads a chain
        kernel(ELEMENTWISE, 60),  # node 5: removed
        kernel(GEMM, 0, stream=8),
        kernel(ELEMENTWISE, 10, stream=8),  # alone after a GEMM: stays
    ]
    removed, total = kf.removable_kernels(graph(nodes))  # type: ignore[arg-type]
    assert total == 8
    assert removed == {0, 2, 5}


BN_TRAIN = "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)"
BN_BACKWARD = "void at::native::batch_norm_backward_elemt_kernel<float, float, float, int>"
BN_INFERENCE = "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>"


def test_a_training_batch_norm_is_no_link_of_a_chain() -> None:
    """Stream 7 in time order: conv-like GEMM, cuDNN's training BatchNorm, ReLU-like add, add;
    then PyTorch's BatchNorm backward, add; then an inference BatchNorm, add. The training
    BatchNorms are not fusable: the add after each starts a chain (its follower removed: node
    3); the inference BatchNorm is elementwise: it joins the backward's add (node 6 removed) and
    so does the add after it (node 7). 3 of 8 kernels."""
    nodes = [
        kernel(GEMM, 0),
        kernel(BN_TRAIN, 10),
        kernel(ELEMENTWISE, 20),  # heads a chain: the BatchNorm before it is not fusable
        kernel(ELEMENTWISE, 30),  # node 3: removed
        kernel(BN_BACKWARD, 40),
        kernel(ELEMENTWISE, 50),  # heads a chain after a training BatchNorm
        kernel(BN_INFERENCE, 60),  # node 6: elementwise, follows the add: removed
        kernel(ELEMENTWISE, 70),  # node 7: removed
    ]
    removed, total = kf.removable_kernels(graph(nodes))  # type: ignore[arg-type]
    assert total == 8
    assert removed == {3, 6, 7}
    assert kf.classify_kernel(BN_TRAIN) in kf.FUSABLE_CATEGORIES  # the name alone would fuse


def test_host_work_is_cut_by_the_share_of_launches_removed() -> None:
    """ρ = 3 / 8. mid: host op 1000 ns × (1 - 0.7 ρ) = 737.5; a launch call 100 ns × (1 - 0.5 ρ)
    = 81.25; a removed kernel × 0.5; a kept kernel, a GEMM, as it is. high: host × (1 - 0.9 ρ)
    = 662.5, a removed kernel costs nothing; low: host × (1 - 0.4 ρ) = 850, launches and kernels
    unchanged."""
    ks = [
        kernel(ELEMENTWISE, 0),
        kernel(ELEMENTWISE, 10),  # removed
        kernel(GEMM, 20),
        kernel(NORM, 40),
        kernel(ELEMENTWISE, 60),  # removed
        kernel(ELEMENTWISE, 70),  # removed
        kernel(GEMM, 0, stream=8),
        kernel(ELEMENTWISE, 10, stream=8),
    ]
    op = HostEvent("aten::add", "cpu_op", 0, 1000, 1)
    host = Node("host", "cpu", 0, 1000, "aten::add", frozenset(), op)
    launch = Node("host", "launch", 0, 100, "cudaLaunchKernel", frozenset({"launch_call"}), None)
    g = graph([*ks, host, launch])
    v = kf.retime(g, Context(n_steps=1, step_ms=1.0))  # type: ignore[arg-type]
    got = {}
    for k, (dur, _) in v.items():
        assert dur is not None
        got[k] = (dur(8, host), dur(9, launch), dur(1, ks[1]), dur(0, ks[0]), dur(2, ks[2]))
    rho = 3 / 8
    assert got["low"] == pytest.approx((1000 * (1 - 0.4 * rho), 100, 10_000, 10_000, 10_000))
    assert got["mid"] == pytest.approx(
        (1000 * (1 - 0.7 * rho), 100 * (1 - 0.5 * rho), 5_000, 10_000, 10_000)
    )
    assert got["high"] == pytest.approx(
        (1000 * (1 - 0.9 * rho), 100 * (1 - 0.75 * rho), 0, 10_000, 10_000)
    )


def test_a_step_of_unfusable_kernels_keeps_its_host_work() -> None:
    """GEMMs alternating with lone adds (v12's LSTM shape: no chain): nothing removed, the host
    work is re-timed unchanged in every variant."""
    ks = [kernel(GEMM if i % 2 == 0 else ELEMENTWISE, 10 * i) for i in range(10)]
    op = HostEvent("aten::mm", "cpu_op", 0, 1000, 1)
    host = Node("host", "cpu", 0, 1000, "aten::mm", frozenset(), op)
    v = kf.retime(graph([*ks, host]), Context(n_steps=1, step_ms=1.0))  # type: ignore[arg-type]
    for dur, _ in v.values():
        assert dur is not None and dur(10, host) == pytest.approx(1000)


TO_NHWC = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
    "false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
    "__nv_bfloat16 const*, __nv_bfloat16*)"
)
TO_NCHW = (
    "void cudnn::ops::nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
)
CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"


def test_cudnn_layout_transforms_go_with_their_convolution() -> None:
    """Stream 7 in time order: cuDNN's NCHW→NHWC transform, the convolution, NHWC→NCHW, add,
    add (one NCHW convolution call, then a residual add and a ReLU-like add). The transforms are
    launched inside the convolution's call and a launch-bound step keeps them and their launches
    (:func:`removable_kernels`): the first add heads the chain,
    the second is removed (node 4). 1 of 5 kernels; the name alone reads as a copy, which would
    fuse (the old rule removed nodes 3 and 4)."""
    nodes = [
        kernel(TO_NHWC, 0),
        kernel(CONV, 10),
        kernel(TO_NCHW, 20),
        kernel(ELEMENTWISE, 30),  # heads a chain: the transform before it is not fusable
        kernel(ELEMENTWISE, 40),  # node 4: removed
    ]
    removed, total = kf.removable_kernels(graph(nodes))  # type: ignore[arg-type]
    assert (removed, total) == ({4}, 5)
    assert kf.classify_kernel(TO_NHWC) in kf.FUSABLE_CATEGORIES
    # the memory-bound chains (a GPU-bound step) keep them: their GPU time goes with
    # Inductor's layout optimization (v64)
    assert kf.fusable_kernel(TO_NHWC) and kf.fusable_kernel(TO_NCHW)

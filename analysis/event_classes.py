"""The analysis vocabulary, defined once: which events are GPU activity, kernels, copies, runtime
calls and CPU ops; the name rules (steps, optimizer, DataLoader, communication, copies, syncs); the
idle causes; the NVML metric fields.

Busy time, idle gaps, steps, the kernel breakdown, tensor cores, communication-only time and the
report all read these definitions (``gpuscope.analysis.store_access`` re-exports them for its SQL
helpers), so a kernel that the category table calls communication is also communication in the
communication-only time. docs/metrics.md ("Event classes") holds :func:`vocabulary_markdown`'s
table; a test fails when the two differ.
"""

from __future__ import annotations

import functools
import re

from gpuscope.vocabulary.causes import CAUSE_IDS, EVIDENCE_CAUSES
from gpuscope.vocabulary.nvml_fields import NVML_METRIC_FIELDS

#: GPU kernels. ROCm traces use the same names; older exporters spell them with capitals.
KERNEL_CATS: tuple[str, ...] = ("kernel", "Kernel")
#: Copies and fills on the device's copy engines (or as kernels on ROCm).
MEMCPY_CATS: tuple[str, ...] = ("gpu_memcpy", "Memcpy")
MEMSET_CATS: tuple[str, ...] = ("gpu_memset", "Memset")
COPY_CATS: tuple[str, ...] = (*MEMCPY_CATS, *MEMSET_CATS)
#: GPU activity (busy time): kernels, memcpys, memsets. Nothing else is evidence of GPU work.
GPU_CATS: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
#: GPU activity, the one definition (busy time, gaps, kernel time, tensor cores, steps' GPU end):
#: a complete event (``ph`` = this) of GPU_CATS with a positive duration, on its device
#: (``device``, else ``pid``). Zero-length events and instants are not activity.
GPU_ACTIVITY_PHASE = "X"
GPU_ACTIVITY = (
    "complete events (`ph` = `X`) with `cat` in GPU_CATS and a positive duration, per device "
    "(`device`, else `pid`); zero-length kernels are not activity"
)
#: Host-side CUDA/HIP runtime and driver calls (launches, copies, syncs).
RUNTIME_CATS: tuple[str, ...] = (
    "cuda_runtime",
    "cuda_driver",
    "hip_runtime",
    "hip_driver",
    "Runtime",
    "Driver",
)
#: CPU operators (aten ops, Inductor launch ops).
OP_CATS: tuple[str, ...] = ("cpu_op", "Operator")
#: Host spans: operators, annotations, Python functions and runtime calls.
HOST_CATS: tuple[str, ...] = (
    *OP_CATS,
    "user_annotation",
    "python_function",
    "python_function_call",
    *RUNTIME_CATS,
)

#: Communication kernels, read from the name (case-insensitive; valid in Python ``re`` and in
#: DuckDB's RE2): NCCL/RCCL (ring, tree, NVLS, CollNet), c10d and torch symmetric-memory collectives
#: (``multimem_all_reduce_kernel``, ``one_shot_all_reduce``, ``two_shot_all_reduce``), custom
#: all-reduce kernels (vLLM ``cross_device_reduce``), NVSHMEM and DeepEP all-to-all.
COMM_KERNEL_PATTERN = (
    r"nccl|rccl|\bc10d\b|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|multimem|"
    r"cross_device_reduce|one_shot_all|two_shot_all|nvshmem|deep_?ep"
)
COMM_KERNEL_SQL_RE = "(?i)" + COMM_KERNEL_PATTERN
CONV_OP_RE = (
    r"^aten::(?:_?convolution(?:_backward)?|conv(?:_transpose)?[123]d|cudnn_convolution\w*"
    r"|miopen_\w*convolution\w*|_conv_depthwise2d|conv_depthwise3d|slow_conv\w*)$"
)
"""Host operators that run a convolution (forward, transposed, backward): the innermost operator
around a kernel's launch names whose algorithm made it; casts, bias adds and BatchNorm have their
own operators."""
COMPILED_CALL_RE = r"^Torch-Compiled Region|^CompiledFunction|CompiledFunctionBackward$"
"""Host spans of a call into torch.compile's graphs: the forward (``Torch-Compiled Region: 0/0``,
``CompiledFunction``) and its backward (``CompiledFunctionBackward``, also inside
``autograd::engine::evaluate_function: CompiledFunctionBackward``). Host work inside them is what
a CUDA-graph replay of the compiled graphs takes over; the loop, the loss and an eager optimizer
around them stay."""
NATIVE_CONV_RE = r"at::native::.*(?:conv_depthwise|slow_conv|im2col|col2im|vol2col|col2vol)"
"""Convolution kernels of PyTorch's own implementations (depthwise, im2col-based): cuDNN's
algorithm search (``cudnn.benchmark``) does not pick them, so it cannot speed them up."""

CUDNN_NO_SMEM_RE = r"implicit_gemm_indexed_wo_smem"
"""cuDNN's implicit-GEMM convolution kernels that stage no operand in shared memory
(``sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_..._tilesize32x16x64_stage1``): one
pipeline stage and small tiles, the fallback its heuristic picks for shapes it has no tuned kernel
for (a 3-channel first layer's weight gradient, fp32 inputs with TF32). Every one in the
validation set runs TF32; none of its bf16 runs has one. ``cudnn.benchmark`` and bf16 replace
them (the fix units ``cudnn_benchmark`` and ``mixed_precision`` read them apart)."""

CUDNN_LAYOUT_RE = r"cudnn::\S*(?:nchwToNhwc|nhwcToNchw)"
"""cuDNN's layout transforms (``cudnn::engines_precompiled::nchwToNhwcKernel``), launched inside a
convolution's own library call around its tensor-core kernels (which take NHWC) when the model's
tensors are NCHW; a model in ``channels_last`` has none (fixes ``kernel_fusion`` and
``mixed_precision``)."""

CHANNELS_LAST_BATCH_NORM_RE = r"batch_norm_\w*channels_last_kernel"
"""PyTorch's own training BatchNorm kernels for channels-last tensors
(``batch_norm_collect_statistics_channels_last_kernel``, ``batch_norm_transform_input_...``,
``batch_norm_backward_reduce_...``, ``batch_norm_backward_elemt_...``): eager runs a channels-last
BatchNorm as these, not as cuDNN's (``fixes.kernel_fusion.channels_last_batch_norms``)."""

PER_CHANNEL_GRID_RE = (
    r"batch_norm_(?:collect_statistics|backward_reduce|backward)_kernel|bn_(?:fw_tr|bw)_1C11"
)
"""Training BatchNorm kernels of NCHW tensors launched with one block per channel, each block
looping over the batch and the pixels: PyTorch's ``batch_norm_collect_statistics_kernel``,
``batch_norm_backward_reduce_kernel`` and ``batch_norm_backward_kernel`` (not their channels-last
or elementwise siblings, whose grids grow with the tensor), cuDNN's ``bn_fw_tr_1C11_*`` and
``bn_bw_1C11_*``. They leave SMs empty at any batch: a larger batch gives each block more work,
never more blocks (``fixes.batch_size``)."""

# -- name rules of host spans (regular expressions valid in Python ``re`` and DuckDB's RE2) --------

#: A training step: the ``ProfilerStep#N`` annotation.
PROFILER_STEP_RE = r"^ProfilerStep#\d+$"
#: The optimizer: ``Optimizer.step#<Class>.step`` and ``Optimizer.zero_grad#...`` annotations.
OPTIMIZER_RE = r"^Optimizer\.(step|zero_grad)#"
#: An optimizer's ``step`` alone (not its ``zero_grad``): where the phase patterns read the loops
#: over parameters (``analysis.phase_patterns``).
OPTIMIZER_STEP_RE = r"^Optimizer\.step#"
#: Data loading: a DataLoader iterator's ``__next__`` (annotation or Python frame).
DATALOADER_RE = r"(DataLoader.*__next__|DataLoaderIter\.__next__|dataloader\.py\(\d+\): __next__)"
#: Communication on the host: collectives of NCCL, Gloo, MPI, UCC and c10d.
COMM_RE = (
    r"^(nccl:|gloo:|mpi:|ucc:|c10d::|c10d_functional::|_c10d_functional::|record_param_comms$"
    r"|ProcessGroup(NCCL|Gloo|MPI|UCC)?::|torch\.distributed\.)"
)
#: Copy calls of the runtime; their GPU copy's name tells pageable memory.
MEMCPY_API_RE = r"^(cuda|hip|cu)Memcpy"
PAGEABLE_H2D_RE = r"Pageable -> Device"
PAGEABLE_D2H_RE = r"Device -> Pageable"
PINNED_H2D_RE = r"Pinned -> Device"

#: Runtime/driver calls that start GPU work.
LAUNCH_APIS: tuple[str, ...] = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
    "cuGraphLaunch",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipModuleLaunchKernel",
    "hipGraphLaunch",
)

#: The launch calls of a CUDA (HIP) graph: one call, every kernel of the graph under its
#: correlation id; the kernels' ops ran when the graph was captured, not at the replay.
GRAPH_LAUNCH_APIS: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")

#: Runtime/driver calls that block the host until the device (or a stream/event) is done.
#: ``cudaStreamWaitEvent`` is *not* one: it orders streams on the device, the host goes on.
SYNC_APIS: tuple[str, ...] = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpyPeer",
    "cudaMemcpyFromSymbol",
    "cudaMemcpyToSymbol",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD",
    "cuMemcpyHtoD_v2",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "hipMemcpyWithStream",
)
#: CPU operators of ``.item()``. Not evidence by themselves: on a CPU tensor (e.g. AdamW's step
#: counters) they never touch the GPU; on a CUDA tensor they run a device-to-host copy into pageable
#: memory and a ``cudaStreamSynchronize``, which are the evidence (named with this op).
SYNC_OPS: tuple[str, ...] = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero")

# -- idle causes and NVML fields: gpuscope.vocabulary's, re-exported for the analysis ---------------

#: Causes of idle time in precedence order (launch_overhead is decided per gap, the rest per
#: instant; docs/metrics.md "Precedence").
CAUSES: tuple[str, ...] = CAUSE_IDS
#: Host evidence classes, in precedence order (the causes read from host spans).
EVIDENCE_CLASSES: tuple[str, ...] = EVIDENCE_CAUSES
_COMM = re.compile(COMM_KERNEL_PATTERN, re.IGNORECASE)


@functools.lru_cache(maxsize=65536)
def is_comm_kernel(name: str) -> bool:
    """Whether a GPU kernel of this name is communication (see COMM_KERNEL_PATTERN)."""
    return bool(_COMM.search(name))


def _code(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _pattern(p: str) -> str:
    return "`" + p.replace("|", "\\|") + "`"


def vocabulary_markdown() -> str:
    """The vocabulary as the markdown table of docs/metrics.md ("Event classes")."""
    rows = [
        ("GPU activity", f"{GPU_ACTIVITY.replace('GPU_CATS', _code(GPU_CATS))}"),
        ("kernels", _code(KERNEL_CATS)),
        ("copies", _code(COPY_CATS)),
        ("runtime calls", _code(RUNTIME_CATS)),
        ("CPU ops", _code(OP_CATS)),
        ("host spans", _code(HOST_CATS)),
        (
            "communication kernels",
            f"name matches {_pattern(COMM_KERNEL_PATTERN)} (case-insensitive)",
        ),
        ("step", f"host span named {_pattern(PROFILER_STEP_RE)}"),
        ("optimizer", f"host span named {_pattern(OPTIMIZER_RE)}"),
        ("data loading", f"host span named {_pattern(DATALOADER_RE)}"),
        ("host communication", f"host span named {_pattern(COMM_RE)}"),
        ("memcpy calls", f"runtime call named {_pattern(MEMCPY_API_RE)}"),
        (
            "pageable copies",
            f"GPU copy named {_pattern(PAGEABLE_H2D_RE)} (host to device) or "
            f"{_pattern(PAGEABLE_D2H_RE)} (device to host); pinned: {_pattern(PINNED_H2D_RE)}",
        ),
        ("launch calls", _code(LAUNCH_APIS)),
        ("synchronizing calls", _code(SYNC_APIS)),
        ("`.item()` operators (not evidence alone)", _code(SYNC_OPS)),
        ("idle causes (precedence)", _code(CAUSES)),
        ("NVML metric fields", _code(NVML_METRIC_FIELDS)),
    ]
    out = ["| class | definition |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out)

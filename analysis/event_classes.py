"""Every class of trace event, defined once: which ``cat`` values are GPU activity, kernels, copies,
runtime calls and CPU ops, and which kernel names are communication.

Busy time, idle gaps, the kernel breakdown, tensor cores, communication-only time and the report
all read these definitions (``gpuscope.analysis.store_access`` re-exports them for SQL helpers), so
a kernel that the category table calls communication is also communication in the communication-only
time. docs/metrics.md ("Event classes") lists them.
"""

from __future__ import annotations

import re

#: GPU kernels. ROCm traces use the same names; older exporters spell them with capitals.
KERNEL_CATS: tuple[str, ...] = ("kernel", "Kernel")
#: Copies and fills on the device's copy engines (or as kernels on ROCm).
MEMCPY_CATS: tuple[str, ...] = ("gpu_memcpy", "Memcpy")
MEMSET_CATS: tuple[str, ...] = ("gpu_memset", "Memset")
COPY_CATS: tuple[str, ...] = (*MEMCPY_CATS, *MEMSET_CATS)
#: GPU activity (busy time): kernels, memcpys, memsets. Nothing else is evidence of GPU work.
GPU_CATS: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
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
_COMM = re.compile(COMM_KERNEL_PATTERN, re.IGNORECASE)


def is_comm_kernel(name: str) -> bool:
    """Whether a GPU kernel of this name is communication (see COMM_KERNEL_PATTERN)."""
    return bool(_COMM.search(name))

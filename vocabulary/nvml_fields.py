"""NVML fields: the per-GPU metrics of one poll, as the sampler records them, ingest stores them
(the ``nvml_samples`` columns after ``gpu``, ``gpu_uuid``, ``gpu_name``, ``t_ns``) and the
analysis and pages read them. Every other module spells a field through these constants
(tests/test_vocabulary.py fails on a field name written out anywhere else).
"""

from __future__ import annotations

from typing import Final

GPU_UTIL_PCT: Final = "gpu_util_pct"
MEM_UTIL_PCT: Final = "mem_util_pct"
MEM_USED_BYTES: Final = "mem_used_bytes"
MEM_TOTAL_BYTES: Final = "mem_total_bytes"
POWER_W: Final = "power_w"
SM_CLOCK_MHZ: Final = "sm_clock_mhz"
MEM_CLOCK_MHZ: Final = "mem_clock_mhz"
TEMP_C: Final = "temp_c"
PCIE_RX_BYTES_S: Final = "pcie_rx_bytes_s"
PCIE_TX_BYTES_S: Final = "pcie_tx_bytes_s"
SM_ACTIVE_PCT: Final = "sm_active_pct"
TENSOR_ACTIVE_PCT: Final = "tensor_active_pct"

NVML_METRIC_FIELDS: Final[tuple[str, ...]] = (
    GPU_UTIL_PCT,
    MEM_UTIL_PCT,
    MEM_USED_BYTES,
    MEM_TOTAL_BYTES,
    POWER_W,
    SM_CLOCK_MHZ,
    MEM_CLOCK_MHZ,
    TEMP_C,
    PCIE_RX_BYTES_S,
    PCIE_TX_BYTES_S,
    SM_ACTIVE_PCT,
    TENSOR_ACTIVE_PCT,
)
"""The fields in the order of the ``nvml_samples`` columns."""
INT_FIELDS: Final = frozenset({MEM_USED_BYTES, MEM_TOTAL_BYTES})
"""Fields stored as integers (bytes); the others are DOUBLE."""

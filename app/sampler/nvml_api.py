"""NVML access, apart from presentation: one poll of every GPU -> plain dicts in table units.

Every reading is optional: a field a GPU does not support (or that fails) is ``None`` (N/A) and is
not asked again on later polls. Only a missing NVML library, a driver that will not initialise, or
no GPU at all raise: :class:`NvmlUnavailable`, whose message is one line for the CLI.

Units are those of the ``nvml_samples`` table (store/schema.py): %, bytes, W, MHz, °C, bytes/s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.event_classes import NVML_METRIC_FIELDS
from gpuscope.vocabulary import nvml_fields as nf

KIB = 1024  # NVML's PCIe throughput is in KB/s; nvitop and nvidia-smi read that as KiB/s


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: no library, no driver, or no GPU. ``str()`` is one line."""


@dataclass(frozen=True)
class GpuInfo:
    """Static facts of one GPU, as written in the recorder header."""

    index: int
    name: str | None
    uuid: str | None
    mem_total_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        """The header's GPU object: ``index``, ``name``, ``uuid``, ``mem_total_bytes``."""
        return dataclasses.asdict(self)


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({e})") from None
    return pynvml


# GPM metric -> (our field, factor to the table's unit)
_GPM_METRICS: tuple[tuple[str, str, float], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", nf.SM_ACTIVE_PCT, 1.0),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", nf.TENSOR_ACTIVE_PCT, 1.0),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", nf.PCIE_RX_BYTES_S, float(1 << 20)),  # MiB/s
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", nf.PCIE_TX_BYTES_S, float(1 << 20)),
)
_PCT_FIELDS = frozenset({nf.SM_ACTIVE_PCT, nf.TENSOR_ACTIVE_PCT})


class _Gpm:
    """Hopper+ GPU performance metrics of one GPU: keeps the previous sample, gives rates since it.

    Two GPM samples are swapped each read, so every poll reports the interval since the last one.
    """

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        self.metrics = [
            (getattr(nv, const), fld, k) for const, fld, k in _GPM_METRICS if hasattr(nv, const)
        ]
        self.prev = nv.nvmlGpmSampleAlloc()
        try:
            self.cur = nv.nvmlGpmSampleAlloc()
        except BaseException:
            nv.nvmlGpmSampleFree(self.prev)
            raise
        nv.nvmlGpmSampleGet(handle, self.prev)

    def read(self) -> dict[str, float | int | None]:
        """{field: value or None} over the time since the previous read."""
        nv = self.nv
        nv.nvmlGpmSampleGet(self.handle, self.cur)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self.metrics)
        mg.sample1 = self.prev
        mg.sample2 = self.cur
        for i, (mid, _, _) in enumerate(self.metrics):
            mg.metrics[i].metricId = mid
        nv.nvmlGpmMetricsGet(mg)
        self.prev, self.cur = self.cur, self.prev
        out: dict[str, float | int | None] = {}
        for i, (_, fld, k) in enumerate(self.metrics):
            m = mg.metrics[i]
            if m.nvmlReturn != nv.NVML_SUCCESS:
                out[fld] = None
                continue
            v = float(m.value) * k
            # % to 0.001, bytes/s to whole bytes: finer is noise, and it keeps the lines short
            out[fld] = round(_clamp_pct(v), 3) if fld in _PCT_FIELDS else max(0, round(v))
        return out

    def close(self) -> None:
        for s in (self.prev, self.cur):
            with contextlib.suppress(Exception):
                self.nv.nvmlGpmSampleFree(s)


def _clamp_pct(v: float) -> float:
    return min(100.0, max(0.0, v))


class _Device:
    """One GPU: its handle, its static facts, and the fields it has shown it does not support."""

    def __init__(self, nv: Any, index: int) -> None:
        self.nv = nv
        self.index = index
        self.handle = nv.nvmlDeviceGetHandleByIndex(index)
        self.unsupported: set[str] = set()
        self.errors: dict[str, str] = {}  # field -> why it is N/A (first error seen)
        name = self._get("name", lambda: _text(nv.nvmlDeviceGetName(self.handle)))
        uuid = self._get("uuid", lambda: _text(nv.nvmlDeviceGetUUID(self.handle)))
        self.mem_v2 = True
        mem = self._memory()
        self.info = GpuInfo(index, name, uuid, mem[1] if mem else None)
        self.gpm: _Gpm | None = None
        try:
            support = nv.nvmlGpmQueryDeviceSupport(self.handle)
            if support.isSupportedDevice:
                self.gpm = _Gpm(nv, self.handle)
            else:
                self._mark("gpm", "GPM not supported by this GPU (needs Hopper or newer)")
        except Exception as e:  # NVMLError, or an old driver without the GPM entry points
            self._mark("gpm", f"GPM unavailable ({_err(e)})")

    def _mark(self, field: str, why: str) -> None:
        self.unsupported.add(field)
        self.errors.setdefault(field, why)

    def _get(self, field: str, fn: Callable[[], Any]) -> Any:
        """fn() or None; a field that fails is remembered and not asked again."""
        if field in self.unsupported:
            return None
        try:
            return fn()
        except Exception as e:  # NVMLError per field; anything else is N/A too, never a crash
            if getattr(e, "value", None) == self.nv.NVML_ERROR_GPU_IS_LOST:
                self.errors[field] = "GPU is lost"
                return None  # transient from our side: ask again next time
            self._mark(field, _err(e))
            return None

    def _memory(self) -> tuple[int, int] | None:
        """(used, total) bytes; NVML's v2 memory info (used excludes driver-reserved) when the driver has it."""
        nv = self.nv
        if self.mem_v2 and hasattr(nv, "nvmlMemory_v2"):
            try:
                m = nv.nvmlDeviceGetMemoryInfo(self.handle, version=nv.nvmlMemory_v2)
                return int(m.used), int(m.total)
            except Exception:
                self.mem_v2 = False
        m = self._get("memory", lambda: nv.nvmlDeviceGetMemoryInfo(self.handle))
        return (int(m.used), int(m.total)) if m is not None else None

    def poll(self) -> dict[str, Any]:
        nv, h = self.nv, self.handle
        row: dict[str, Any] = dict.fromkeys(("gpu", *NVML_METRIC_FIELDS))
        row["gpu"] = self.index
        util = self._get("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            row[nf.GPU_UTIL_PCT] = int(util.gpu)
            row[nf.MEM_UTIL_PCT] = int(util.memory)
        mem = self._memory()
        if mem is not None:
            row[nf.MEM_USED_BYTES], row[nf.MEM_TOTAL_BYTES] = mem
        mw = self._get(nf.POWER_W, lambda: nv.nvmlDeviceGetPowerUsage(h))
        row[nf.POWER_W] = mw / 1000.0 if mw is not None else None
        row[nf.SM_CLOCK_MHZ] = self._get(
            nf.SM_CLOCK_MHZ, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        )
        row[nf.MEM_CLOCK_MHZ] = self._get(
            nf.MEM_CLOCK_MHZ, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        )
        row[nf.TEMP_C] = self._get(
            nf.TEMP_C, lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        )
        gpm: dict[str, float | int | None] = {}
        if self.gpm is not None:
            try:
                gpm = self.gpm.read()
            except Exception as e:
                self._mark("gpm", f"GPM read failed ({_err(e)})")
                self.gpm.close()
                self.gpm = None
        row[nf.SM_ACTIVE_PCT] = gpm.get(nf.SM_ACTIVE_PCT)
        row[nf.TENSOR_ACTIVE_PCT] = gpm.get(nf.TENSOR_ACTIVE_PCT)
        for fld, counter in (
            (nf.PCIE_RX_BYTES_S, "NVML_PCIE_UTIL_RX_BYTES"),
            (nf.PCIE_TX_BYTES_S, "NVML_PCIE_UTIL_TX_BYTES"),
        ):
            v = gpm.get(fld)
            # without GPM: NVML's byte counter over a 20 ms window (each call blocks ~20 ms)
            if v is None:

                def throughput(c: str = counter) -> Any:
                    return nv.nvmlDeviceGetPcieThroughput(h, getattr(nv, c))

                kbs = self._get(fld, throughput)
                v = kbs * KIB if kbs is not None else None
            row[fld] = v
        return row

    def close(self) -> None:
        if self.gpm is not None:
            self.gpm.close()
            self.gpm = None


def _err(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class NvmlSampler:
    """Polls every GPU (or the given indices) through NVML. Use as a context manager or call close().

    Raises :class:`NvmlUnavailable` when NVML or every GPU is missing (a GPU that cannot be opened is
    left out and listed in ``skipped``). ``poll()`` never raises for a field: unsupported readings
    are ``None`` and are not asked again. PCIe rates come from GPM (Hopper+, free); otherwise from
    NVML's PCIe counter, which blocks ~20 ms per reading, two per GPU per poll, unless ``skip_pcie``.
    """

    def __init__(self, indices: Sequence[int] | None = None, *, skip_pcie: bool = False) -> None:
        nv = _pynvml()
        self.nv = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise NvmlUnavailable(f"NVML is unavailable: {_err(e)}") from None
        except OSError as e:  # the library loads but cannot start
            raise NvmlUnavailable(f"NVML is unavailable: {_err(e)}") from None
        self._lock = threading.Lock()
        self._closed = False
        try:
            count = nv.nvmlDeviceGetCount()
            self.driver_version: str | None = self._driver_version()
            wanted = list(range(count)) if indices is None else list(dict.fromkeys(indices))
            if count == 0 or not wanted:
                raise NvmlUnavailable("NVML found no GPU")
            bad = [i for i in wanted if not 0 <= i < count]
            if bad:
                raise NvmlUnavailable(f"no GPU with index {bad[0]} (NVML sees {count})")
            self.devices: list[_Device] = []
            self.skipped: dict[int, str] = {}  # GPUs that could not be opened, and why
            for i in wanted:
                try:
                    self.devices.append(_Device(nv, i))
                except nv.NVMLError as e:  # one broken GPU must not stop sampling the others
                    self.skipped[i] = _err(e)
            if not self.devices:
                i, why = next(iter(self.skipped.items()))
                raise NvmlUnavailable(f"no GPU could be opened (GPU {i}: {why})")
        except nv.NVMLError as e:
            self._shutdown()
            raise NvmlUnavailable(f"NVML error while opening the GPUs: {_err(e)}") from None
        except BaseException:
            self._shutdown()
            raise
        if skip_pcie:
            for d in self.devices:
                d.unsupported |= {nf.PCIE_RX_BYTES_S, nf.PCIE_TX_BYTES_S}
                d.errors.setdefault(nf.PCIE_RX_BYTES_S, "blocking PCIe counter skipped (skip_pcie)")
                d.errors.setdefault(nf.PCIE_TX_BYTES_S, "blocking PCIe counter skipped (skip_pcie)")

    def _driver_version(self) -> str | None:
        try:
            return _text(self.nv.nvmlSystemGetDriverVersion())
        except Exception:
            return None

    @property
    def gpus(self) -> list[GpuInfo]:
        return [d.info for d in self.devices]

    def unsupported(self) -> dict[int, dict[str, str]]:
        """GPU index -> {field: reason} for every reading that is N/A on that GPU (``"gpu"``: not opened)."""
        out = {d.index: dict(d.errors) for d in self.devices}
        out.update({i: {"gpu": why} for i, why in self.skipped.items()})
        return out

    def poll(self) -> list[dict[str, Any]]:
        """One reading of every GPU: ``[{"gpu": 0, "gpu_util_pct": 37, ...}, ...]`` (None = N/A)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("NvmlSampler is closed")
            return [d.poll() for d in self.devices]

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for d in getattr(self, "devices", []):
                d.close()
            self._shutdown()

    def __enter__(self) -> NvmlSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def nvml_status() -> str | None:
    """None when NVML and at least one GPU can be used here, else the one-line reason why not."""
    try:
        with NvmlSampler():
            return None
    except NvmlUnavailable as e:
        return str(e)


def hostname() -> str:
    return socket.gethostname()


def now_ns() -> int:
    """Unix time in ns (the time base of every sample)."""
    return time.time_ns()

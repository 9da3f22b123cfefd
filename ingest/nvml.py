"""NVML series files -> ``nvml_series`` + ``nvml_samples`` rows (and a ``runs`` row of their own).

Two inputs are read:

* the gpuscope sampler's JSON Lines (``gpuscope sample --out``, ``gpuscope.capture``): a header line
  ``{"format": "gpuscope-nvml", "version": 1, ...}`` then one line per poll; a truncated last line
  (the sampler was killed mid-write) is dropped with a warning;
* ``nvidia-smi --query-gpu=timestamp,... --format=csv[,nounits] [-lms N]`` logs: any column subset and
  order as long as ``timestamp`` is there; ``[N/A]``/``[Not Supported]`` -> NULL; MiB/W/MHz/% are
  converted to the table's units. Its timestamps are local wall-clock time without a zone: ``tz``
  names the zone they were recorded in (default: this machine's local zone).

A series held in memory as typed records (:class:`~gpuscope.ingest.records.SeriesHeader` and
:class:`~gpuscope.ingest.records.Sample`, e.g. the Live page's window) is stored by
:func:`ingest_samples` through the same reader and writer as its JSON Lines file.

:func:`ingest_series` opens no transaction: the caller's ``with transaction(con)`` (one lake
snapshot) makes a bad file leave the store unchanged; :func:`ingest_samples` is one transaction of
its own. Every bad input raises :class:`~gpuscope.ingest.errors.IngestError`.
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import hashlib
import io
import re
import statistics
import zlib
import zoneinfo
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from gpuscope.ingest.errors import DuplicateRunError, IngestError
from gpuscope.ingest.records import RunRow, Sample, SeriesHeader, SeriesResult, run_id_for
from gpuscope.ingest.source import file_sha256, iter_json_bytes
from gpuscope.store import Connection, Store, transaction
from gpuscope.store.schema import NVML_SAMPLES
from gpuscope.vocabulary.nvml_fields import (
    GPU_UTIL_PCT,
    INT_FIELDS,
    MEM_CLOCK_MHZ,
    MEM_TOTAL_BYTES,
    MEM_USED_BYTES,
    MEM_UTIL_PCT,
    POWER_W,
    SM_CLOCK_MHZ,
    TEMP_C,
)

if TYPE_CHECKING:
    import duckdb
    import pandas

FORMAT = "gpuscope-nvml"  # the JSONL header's "format"
VERSION = 1  # the JSONL header's "version" this code writes and reads
JSONL_FORMAT = "gpuscope-jsonl"  # nvml_series.format of a sampler file
CSV_FORMAT = "nvidia-smi-csv"  # nvml_series.format of an nvidia-smi log

_KEY_COLUMNS = ("run_id", "series_id", "gpu", "gpu_uuid", "gpu_name", "t_ns")
METRIC_FIELDS: tuple[str, ...] = tuple(
    c for c in NVML_SAMPLES.column_names if c not in _KEY_COLUMNS
)
SNIFF_BYTES = 64 << 10


# ---------------------------------------------------------------------------------------------------
# The sampler's JSON Lines


class _HeaderGpu(msgspec.Struct):
    index: int
    name: str | None = None
    uuid: str | None = None
    mem_total_bytes: int | None = None


class _Header(msgspec.Struct):
    format: str
    version: int
    gpus: list[_HeaderGpu]
    host: str | None = None
    interval_ms: float | None = None
    started_ns: int | None = None


Num = int | float  # a reading as written: ints stay ints (replay serves them unchanged)


class _GpuRow(msgspec.Struct):
    gpu: int
    gpu_util_pct: Num | None = None
    mem_util_pct: Num | None = None
    mem_used_bytes: Num | None = None
    mem_total_bytes: Num | None = None
    power_w: Num | None = None
    sm_clock_mhz: Num | None = None
    mem_clock_mhz: Num | None = None
    temp_c: Num | None = None
    pcie_rx_bytes_s: Num | None = None
    pcie_tx_bytes_s: Num | None = None
    sm_active_pct: Num | None = None
    tensor_active_pct: Num | None = None


class _Line(msgspec.Struct):
    t_ns: int
    gpus: list[_GpuRow]


assert set(METRIC_FIELDS) <= set(_GpuRow.__struct_fields__), "schema and JSONL fields out of step"

_HEADER_DEC = msgspec.json.Decoder(_Header)
_LINE_DEC = msgspec.json.Decoder(_Line)


@dataclass
class JsonlSeries:
    """A sampler file, validated. ``samples``: ``[{"t_ns": int, "gpus": [{"gpu": 0, <field>: value|None}]}]``."""

    header: dict[str, Any]
    samples: list[dict[str, Any]]
    truncated: bool = False  # the last line was cut mid-write and dropped
    warnings: list[str] = field(default_factory=list)


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise IngestError(path, "no such file")
    if not path.is_file():
        raise IngestError(path, "not a regular file")
    return b"".join(iter_json_bytes(path))


def _jsonl_header(path: str | Path, line: bytes) -> _Header:
    try:
        header = _HEADER_DEC.decode(line)
    except msgspec.ValidationError as e:
        raise IngestError(path, f"bad gpuscope-nvml header (line 1): {e}") from None
    except msgspec.DecodeError as e:
        raise IngestError(path, f"line 1 is not a JSON header ({e})") from None
    if header.format != FORMAT:
        raise IngestError(path, f"header format is {header.format!r}, not {FORMAT!r}")
    if header.version != VERSION:
        raise IngestError(
            path, f"gpuscope-nvml version {header.version}; this gpuscope reads version {VERSION}"
        )
    if not header.gpus:
        raise IngestError(path, "the header lists no GPU")
    idx = [g.index for g in header.gpus]
    if len(set(idx)) != len(idx):
        raise IngestError(path, "the header lists a GPU index twice")
    return header


def parse_jsonl(path: str | Path, data: bytes) -> JsonlSeries:
    """Validate a sampler file's bytes. A cut last line is dropped (``truncated``); any other bad line raises."""
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()
    if not lines or not lines[0].strip():
        raise IngestError(path, "empty file")
    if len(lines) == 1 and not ends_with_newline:
        try:
            msgspec.json.decode(lines[0])
        except msgspec.DecodeError:
            raise IngestError(path, "the header line is truncated") from None
    header = _jsonl_header(path, lines[0])
    known = {g.index for g in header.gpus}
    raw = msgspec.json.decode(lines[0])  # keeps extra keys (driver_version, replay_of, ...)
    out = JsonlSeries({**raw, **msgspec.to_builtins(header)}, [])
    last = len(lines) - 1
    for n, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        try:
            line = _LINE_DEC.decode(raw)
        except msgspec.DecodeError as e:
            is_cut = (
                n - 1 == last
                and not ends_with_newline
                and not isinstance(e, msgspec.ValidationError)
            )
            if is_cut:
                out.truncated = True
                out.warnings.append(
                    f"line {n} is truncated (the recorder stopped mid-write); dropped"
                )
                break
            raise IngestError(path, f"line {n}: {e}") from None
        if line.t_ns <= 0:
            raise IngestError(path, f"line {n}: t_ns {line.t_ns} is not a Unix time in ns")
        rows = []
        for g in line.gpus:
            if g.gpu not in known:
                raise IngestError(path, f"line {n}: gpu {g.gpu} is not in the header")
            rows.append(msgspec.to_builtins(g))
        out.samples.append({"t_ns": line.t_ns, "gpus": rows})
    return out


def read_jsonl(path: str | Path) -> JsonlSeries:
    """Read and validate a sampler JSONL file (gzip allowed); raises IngestError."""
    p = Path(path)
    return parse_jsonl(p, _read_bytes(p))


# ---------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV

# query name (as nvidia-smi prints it in the header, or as given to --query-gpu) -> (field, priority)
_CSV_COLUMNS: dict[str, tuple[str, int]] = {
    "timestamp": ("timestamp", 0),
    "index": ("gpu", 0),
    "name": ("gpu_name", 0),
    "gpu_name": ("gpu_name", 0),
    "uuid": ("gpu_uuid", 0),
    "gpu_uuid": ("gpu_uuid", 0),
    "utilization.gpu": (GPU_UTIL_PCT, 0),
    "utilization.memory": (MEM_UTIL_PCT, 0),
    "memory.used": (MEM_USED_BYTES, 0),
    "memory.total": (MEM_TOTAL_BYTES, 0),
    "power.draw": (POWER_W, 0),
    "power.draw.instant": (POWER_W, 1),
    "power.draw.average": (POWER_W, 2),
    "clocks.sm": (SM_CLOCK_MHZ, 0),
    "clocks.current.sm": (SM_CLOCK_MHZ, 0),
    "clocks.mem": (MEM_CLOCK_MHZ, 0),
    "clocks.current.memory": (MEM_CLOCK_MHZ, 0),
    "temperature.gpu": (TEMP_C, 0),
}
_UNITS: dict[str, dict[str, float]] = {  # field kind -> unit -> factor to the table's unit
    "pct": {"": 1, "%": 1},
    "bytes": {
        "": 2**20,
        "MiB": 2**20,
        "KiB": 2**10,
        "GiB": 2**30,
        "B": 1,
    },  # nvidia-smi's default is MiB
    "w": {"": 1, "W": 1, "mW": 1e-3, "kW": 1e3},
    "mhz": {"": 1, "MHz": 1, "GHz": 1e3, "kHz": 1e-3},
    "c": {"": 1, "C": 1, "°C": 1},
}
_KIND = {
    GPU_UTIL_PCT: "pct",
    MEM_UTIL_PCT: "pct",
    MEM_USED_BYTES: "bytes",
    MEM_TOTAL_BYTES: "bytes",
    POWER_W: "w",
    SM_CLOCK_MHZ: "mhz",
    MEM_CLOCK_MHZ: "mhz",
    TEMP_C: "c",
}
_HEADER_CELL = re.compile(r"^(.*?)\s*(?:\[([^\]]*)\])?$")
_VALUE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%°]*)$")
_NA = {"", "n/a", "na", "not supported", "unknown error", "insufficient permissions", "gpu is lost"}
_TIMESTAMP = re.compile(
    r"^(\d{4})[/-](\d{1,2})[/-](\d{1,2})[ T](\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?$"
)


def resolve_tz(tz: str | dt.tzinfo | None) -> dt.tzinfo | None:
    """A time zone for nvidia-smi timestamps: None or "local" = this machine's zone, "UTC", an IANA
    name ("Europe/Paris") or a fixed offset ("+05:30"). Raises ValueError for an unknown zone."""
    if tz is None or isinstance(tz, dt.tzinfo):
        return tz
    s = tz.strip()
    if s.lower() == "local":
        return None
    if s.upper() in ("UTC", "Z", "GMT"):
        return dt.UTC
    m = re.fullmatch(r"(?:UTC)?([+-])(\d{1,2}):?(\d{2})?", s, re.IGNORECASE)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3) or 0)
        return dt.timezone((-1 if m.group(1) == "-" else 1) * dt.timedelta(minutes=minutes))
    try:
        return zoneinfo.ZoneInfo(s)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {tz!r} (use an IANA name such as Europe/Paris, UTC, or +05:30)"
        ) from None


class _Clock:
    """Local wall-clock time (nvidia-smi's timestamps) -> Unix ns, in a given zone (None = local)."""

    def __init__(self, tz: dt.tzinfo | None) -> None:
        self.tz = tz
        self.offsets: dict[tuple[int, ...], int] = {}  # per minute: UTC offset in seconds

    def ns(self, text: str) -> int | None:
        m = _TIMESTAMP.match(text.strip())
        if not m:
            return None
        y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
        frac = m.group(7) or ""
        key = (y, mo, d, h, mi)
        off = self.offsets.get(key)
        if off is None:
            try:
                naive = dt.datetime(y, mo, d, h, mi)
            except ValueError:
                return None
            aware = naive.astimezone() if self.tz is None else naive.replace(tzinfo=self.tz)
            utcoff = aware.utcoffset()
            off = int(utcoff.total_seconds()) if utcoff is not None else 0
            self.offsets[key] = off
        if s > 60:
            return None
        secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - off
        return secs * 1_000_000_000 + int(frac.ljust(9, "0"))


@dataclass
class _Columns:
    """Rows of nvml_samples, column-wise (without run_id/series_id)."""

    gpu: list[int] = field(default_factory=list)
    gpu_uuid: list[str | None] = field(default_factory=list)
    gpu_name: list[str | None] = field(default_factory=list)
    t_ns: list[int] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=lambda: {f: [] for f in METRIC_FIELDS})

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass
class _Parsed:
    format: str
    host: str | None
    cols: _Columns
    warnings: list[str]
    interval_ms: float | None = None


def _csv_value(
    path: Path, lineno: int, name: str, fld: str, text: str, header_unit: str
) -> float | None:
    t = text.strip()
    if t.startswith("[") or t.lower() in _NA:
        return None
    m = _VALUE.match(t)
    if not m:
        raise IngestError(path, f"line {lineno}: {name} value {t!r} is not a number")
    unit = m.group(2) or header_unit
    table = _UNITS[_KIND[fld]]
    if unit not in table:
        raise IngestError(
            path,
            f"line {lineno}: {name} has unit {unit!r}, expected one of {sorted(u for u in table if u)}",
        )
    return float(m.group(1)) * table[unit]


def headerless(line: str) -> bool:
    """Whether a CSV line is a sample of ``--format=csv,noheader``: one cell is a timestamp."""
    try:
        cells = next(csv.reader([line], skipinitialspace=True))
    except (csv.Error, StopIteration):
        return False
    return len(cells) > 1 and any(_TIMESTAMP.match(c.strip()) for c in cells)


def smi_header(columns: str | Iterable[str]) -> str:
    """The CSV header line for a ``--query-gpu`` list (``"timestamp,index,utilization.gpu"``)."""
    names = columns.split(",") if isinstance(columns, str) else list(columns)
    names = [n.strip() for n in names if n.strip()]
    if "timestamp" not in [n.lower() for n in names]:
        raise ValueError("--smi-columns must name timestamp (the --query-gpu list of the log)")
    return ", ".join(names)


def parse_csv(
    path: Path, text: str, tz: dt.tzinfo | None, *, header_from: str | None = None
) -> _Parsed:
    """An nvidia-smi --query-gpu CSV log (with or without units) -> rows; raises IngestError.
    ``header_from``: the log has no header line (``noheader``); this is the one to read it with
    (from ``--smi-columns``), and line numbers still count the file's own lines."""
    if header_from is not None:
        text = header_from + "\n" + text
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        rows = list(reader)
    except csv.Error as e:
        raise IngestError(path, f"not a CSV file ({e})") from None
    header_idx = next((i for i, r in enumerate(rows) if any(c.strip() for c in r)), None)
    if header_idx is None:
        raise IngestError(path, "empty file")
    header = [c.strip() for c in rows[header_idx]]
    names: list[str] = []
    units: list[str] = []
    for cell in header:
        m = _HEADER_CELL.match(cell)
        assert m is not None
        names.append(m.group(1).strip().lower())
        units.append((m.group(2) or "").strip())
    if "timestamp" not in names:
        raise IngestError(
            path,
            "not an nvidia-smi CSV log: no timestamp column in the header (record with "
            "--query-gpu=timestamp,... --format=csv, without noheader)",
        )
    chosen: dict[str, tuple[int, int]] = {}  # field -> (column, priority)
    ignored: list[str] = []
    for i, n in enumerate(names):
        spec = _CSV_COLUMNS.get(n)
        if spec is None:
            ignored.append(header[i])
            continue
        fld, prio = spec
        if fld not in chosen or prio < chosen[fld][1]:
            chosen[fld] = (i, prio)
    warnings = []
    if ignored:
        warnings.append(f"ignored columns: {', '.join(ignored)}")
    col = {f: c for f, (c, _) in chosen.items()}
    clock = _Clock(tz)
    cols = _Columns()
    uuid_index: dict[str, int] = {}
    ends_with_newline = text.endswith(("\n", "\r"))
    data_rows = rows[header_idx + 1 :]
    # csv.reader counts records, not physical lines: nvidia-smi never quotes, so they are the same
    for k, row in enumerate(data_rows):
        lineno = header_idx + 2 + k - (header_from is not None)
        if not any(c.strip() for c in row):
            continue
        if [c.strip() for c in row] == header:
            continue  # a repeated header (logs appended to one file)
        if len(row) != len(header):
            if k == len(data_rows) - 1 and not ends_with_newline:
                warnings.append(f"line {lineno} is truncated (the log stopped mid-write); dropped")
                break
            has = "--smi-columns names" if header_from is not None else "the header has"
            raise IngestError(path, f"line {lineno}: {len(row)} fields, {has} {len(header)}")
        t_ns = clock.ns(row[col["timestamp"]])
        if t_ns is None:
            if k == len(data_rows) - 1 and not ends_with_newline:
                warnings.append(f"line {lineno} is truncated (the log stopped mid-write); dropped")
                break
            raise IngestError(
                path,
                f"line {lineno}: cannot read timestamp {row[col['timestamp']].strip()!r} "
                "(expected YYYY/MM/DD HH:MM:SS.mmm)",
            )
        uuid = row[col["gpu_uuid"]].strip() or None if "gpu_uuid" in col else None
        if uuid is not None and uuid.startswith("["):
            uuid = None
        if "gpu" in col:
            raw = row[col["gpu"]].strip()
            if not raw.isdigit():
                raise IngestError(path, f"line {lineno}: GPU index {raw!r} is not a number")
            gpu = int(raw)
        elif uuid is not None:
            gpu = uuid_index.setdefault(uuid, len(uuid_index))
        else:
            gpu = 0
        name = row[col["gpu_name"]].strip() or None if "gpu_name" in col else None
        cols.gpu.append(gpu)
        cols.gpu_uuid.append(uuid)
        cols.gpu_name.append(name)
        cols.t_ns.append(t_ns)
        for fld in METRIC_FIELDS:
            c = col.get(fld)
            v = None if c is None else _csv_value(path, lineno, names[c], fld, row[c], units[c])
            cols.metrics[fld].append(v)
    if not cols.t_ns:
        raise IngestError(path, "the CSV log has a header but no samples")
    if "gpu" not in col and "gpu_uuid" not in col and len(set(cols.t_ns)) < len(cols.t_ns):
        warnings.append("no index or uuid column: every row is taken as GPU 0")
    per_gpu: dict[int, list[int]] = {}
    for g, t in zip(cols.gpu, cols.t_ns, strict=True):
        per_gpu.setdefault(g, []).append(t)
    return _Parsed(CSV_FORMAT, None, cols, warnings, _median_interval_ms(per_gpu.values()))


def _median_interval_ms(series: Iterable[list[int]]) -> float | None:
    diffs = []
    for ts in series:
        u = sorted(set(ts))
        diffs += [b - a for a, b in pairwise(u)]
    return statistics.median(diffs) / 1e6 if diffs else None


def _parse_jsonl_series(source: str | Path, data: bytes) -> _Parsed:
    """A sampler series' bytes (from a file, or encoded from records) -> rows; raises IngestError."""
    s = parse_jsonl(source, data)
    if not s.samples:
        raise IngestError(source, "the series has a header but no samples")
    return _jsonl_columns(s)


def _jsonl_columns(s: JsonlSeries) -> _Parsed:
    info = {g["index"]: g for g in s.header["gpus"]}
    cols = _Columns()
    for sample in s.samples:
        for g in sample["gpus"]:
            gi = info[g["gpu"]]
            cols.gpu.append(g["gpu"])
            cols.gpu_uuid.append(gi.get("uuid"))
            cols.gpu_name.append(gi.get("name"))
            cols.t_ns.append(sample["t_ns"])
            for fld in METRIC_FIELDS:
                cols.metrics[fld].append(g.get(fld))
    interval = _median_interval_ms([[x["t_ns"] for x in s.samples]])
    if interval is None:
        interval = s.header.get("interval_ms")
    return _Parsed(JSONL_FORMAT, s.header.get("host"), cols, list(s.warnings), interval)


# ---------------------------------------------------------------------------------------------------
# Sniffing and ingest


def _first_line(path: Path) -> bytes:
    import gzip

    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"\x1f\x8b":
            with gzip.open(f) as g:
                block = g.read(SNIFF_BYTES)
        else:
            block = f.read(SNIFF_BYTES)
    block = block.lstrip(b"\xef\xbb\xbf")
    return block.split(b"\n", 1)[0].strip()


def is_nvml_file(path: str | Path) -> bool:
    """True when the file starts like an NVML series: a gpuscope-nvml JSONL header, or a CSV header
    with a ``timestamp`` column (nvidia-smi --query-gpu). Never raises."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        line = _first_line(p)
    except (OSError, EOFError, zlib.error):
        return False
    if line.startswith(b"{"):
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return False
        return isinstance(obj, dict) and obj.get("format") == FORMAT
    try:
        cells = next(csv.reader([line.decode("utf-8")], skipinitialspace=True))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return False
    return len(cells) > 1 and (
        any(
            _HEADER_CELL.match(c.strip()).group(1).strip().lower() == "timestamp"  # type: ignore[union-attr]
            for c in cells
        )
        or any(_TIMESTAMP.match(c.strip()) for c in cells)  # --format=csv,noheader
    )


def parse_series(
    path: str | Path,
    *,
    tz: str | dt.tzinfo | None = None,
    smi_columns: str | Iterable[str] | None = None,
) -> tuple[_Parsed, bytes]:
    """Read either format; returns the rows and the file's raw bytes. Raises IngestError.

    ``smi_columns``: the ``--query-gpu`` list of a ``--format=csv,noheader`` log (which has no
    header line to name its columns); ignored for a log with a header."""
    p = Path(path)
    data = _read_bytes(p)
    if not data.strip():
        raise IngestError(p, "empty file")
    first = data.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].strip()
    if first.startswith(b"{"):
        return _parse_jsonl_series(p, data), data
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise IngestError(
            p, "not an NVML series: neither gpuscope-nvml JSONL nor UTF-8 CSV"
        ) from None
    try:
        zone = resolve_tz(tz)
    except ValueError as e:
        raise IngestError(p, str(e)) from None
    first_text = first.decode("utf-8", "replace")
    if "timestamp" not in first_text.lower() and headerless(first_text):
        if smi_columns is None:
            raise IngestError(
                p,
                "an nvidia-smi CSV log without a header (--format=csv,noheader): give the "
                "--query-gpu list that produced it with --smi-columns, e.g. --smi-columns "
                "timestamp,index,utilization.gpu,memory.used,power.draw",
            )
        try:
            header = smi_header(smi_columns)
        except ValueError as e:
            raise IngestError(p, str(e)) from None
        return parse_csv(p, text, zone, header_from=header), data
    if "timestamp" not in first_text.lower():
        raise IngestError(
            p,
            "not an NVML series: neither a gpuscope-nvml JSONL header nor an nvidia-smi "
            "CSV header with a timestamp column",
        )
    return parse_csv(p, text, zone), data


def display_name(path: Path) -> str:
    n = path.name
    for suffix in (".gz", ".jsonl", ".csv", ".log", ".txt", ".nvml"):
        if n.lower().endswith(suffix):
            n = n[: -len(suffix)]
    return n or path.name


def ingest_series(
    con: Connection,
    path: str | Path,
    *,
    run_id: str | None = None,
    name: str | None = None,
    tags: Iterable[str] = (),
    tz: str | dt.tzinfo | None = None,
    smi_columns: str | Iterable[str] | None = None,
    uploaded_by: str | None = None,
) -> SeriesResult:
    """Store one NVML series file inside the caller's transaction.

    ``con``: a :class:`~gpuscope.store.Store` (or a DuckDB connection). ``run_id=None``: a
    run of its own (``kind='nvml'``, id from the file's bytes; raises DuplicateRunError when already
    stored). Else the series is attached to that existing run (e.g. a trace of the same job; raises
    IngestError when there is no such run, DuplicateRunError when this series is already attached
    to it). ``tz``: zone of nvidia-smi's local timestamps (default: this machine's).
    ``smi_columns``: the ``--query-gpu`` list of a headerless nvidia-smi log. ``uploaded_by``: who
    stores it (``runs.uploaded_by`` of a run of its own). Raises IngestError for any bad input,
    before anything is written.
    """
    p = Path(path)
    parsed, _ = parse_series(p, tz=tz, smi_columns=smi_columns)
    return _store_series(
        con,
        parsed,
        source=str(p),
        sha=file_sha256(p),
        source_bytes=p.stat().st_size,
        run_id=run_id,
        name=name or display_name(p),
        tags=tags,
        uploaded_by=uploaded_by,
    )


_ENC = msgspec.json.Encoder()


def encode_series(header: SeriesHeader, samples: Iterable[Sample]) -> bytes:
    """The gpuscope-nvml JSON Lines of a series held as records: the bytes the sampler's writer
    (``gpuscope.sampler.record``) writes for this header and these samples, one line each."""
    head: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "host": header.host,
        "interval_ms": header.interval_ms,
        "gpus": header.gpus,
        "started_ns": header.started_ns,
    }
    if header.written_by is not None:
        head["written_by"] = header.written_by
    return b"".join([_ENC.encode(head) + b"\n", *(_ENC.encode(s) + b"\n" for s in samples)])


def ingest_samples(
    con: Connection,
    header: SeriesHeader,
    samples: Sequence[Sample],
    *,
    source: str,
    name: str | None = None,
    tags: Iterable[str] = (),
    uploaded_by: str | None = None,
) -> SeriesResult:
    """Store a series held as records as an NVML-only run, in one transaction of its own.

    The rows, run id and ``runs`` row are those that ingesting the series' JSON Lines file
    (:func:`encode_series`) gives: the records are encoded to those bytes in memory and go
    through the file's reader and writer. ``source``: where the series came from, stored as
    ``nvml_series.path`` and naming it in errors (error line numbers count the file's lines: 1 is
    the header, n is sample n-1). ``name``: the run's name (default: ``source``). A series already
    stored comes back with ``duplicate=True`` and is not written again. Raises IngestError (one
    line; the store unchanged) for bad records: no sample, a GPU the header does not list, a
    time that is not Unix ns.
    """
    if not samples:
        raise IngestError(source, "no samples to store")
    data = encode_series(header, samples)
    parsed = _parse_jsonl_series(source, data)
    sha = hashlib.sha256(data).hexdigest()

    def once() -> SeriesResult:
        with transaction(con):
            try:
                return _store_series(
                    con,
                    parsed,
                    source=source,
                    sha=sha,
                    source_bytes=len(data),
                    run_id=None,
                    name=name or source,
                    tags=tags,
                    uploaded_by=uploaded_by,
                )
            except DuplicateRunError as e:
                stored = stored_series(con, e.run_id, sha[:12])
                if stored is None:  # a run of that id without this series: report it as is
                    raise
                return stored

    return con.retrying(once) if isinstance(con, Store) else once()


def stored_series(con: Connection, run_id: str, series_id: str) -> SeriesResult | None:
    """The stored series ``series_id`` of run ``run_id``, described as its ingest did (with
    ``duplicate=True``: what a second ingest of it reports); None when there is none."""
    row = con.execute(
        "SELECT s.path, s.format, s.host, s.interval_ms, s.n_samples, s.start_ns, s.end_ns, "
        "r.name, r.kind, r.gpu_name, r.uploaded_by, "
        "(SELECT count(DISTINCT gpu) FROM nvml_samples n "
        " WHERE n.run_id = s.run_id AND n.series_id = s.series_id) "
        "FROM nvml_series s JOIN runs r USING (run_id) WHERE s.run_id = ? AND s.series_id = ?",
        [run_id, series_id],
    ).fetchone()
    if row is None:
        return None
    path, fmt, host, interval, n, start, end, name, kind, gpu_name, uploaded_by, n_gpus = row
    own = kind == "nvml"
    return SeriesResult(
        run_id=run_id,
        name=name,
        path=path,
        series_id=series_id,
        attached=not own,
        format=fmt,
        host=host,
        interval_ms=interval,
        n_samples=n,
        n_gpus=n_gpus,
        gpu_name=gpu_name,
        start_ns=start,
        end_ns=end,
        duplicate=True,
        uploaded_by=uploaded_by if own else None,
    )


def _store_series(
    con: Connection,
    parsed: _Parsed,
    *,
    source: str,
    sha: str,
    source_bytes: int,
    run_id: str | None,
    name: str,
    tags: Iterable[str],
    uploaded_by: str | None,
) -> SeriesResult:
    """Write a parsed series (``sha``: SHA-256 of its bytes, ``source_bytes`` their size) as
    :func:`ingest_series` documents, inside the caller's transaction."""
    import pyarrow as pa

    series_id = sha[:12]
    own = run_id is None
    if own:
        rid = run_id_for([sha])
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [rid]).fetchone():
            raise DuplicateRunError(source, rid)
    else:
        rid = str(run_id)
        if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [rid]).fetchone():
            raise IngestError(source, f"no run {rid} to attach the series to")
        if con.execute(
            "SELECT 1 FROM nvml_series WHERE run_id = ? AND series_id = ?", [rid, series_id]
        ).fetchone():
            raise DuplicateRunError(source, rid)
    cols = parsed.cols
    n = len(cols)
    start, end = min(cols.t_ns), max(cols.t_ns)
    arrays: dict[str, pa.Array] = {
        "run_id": pa.array([rid] * n, pa.string()),
        "series_id": pa.array([series_id] * n, pa.string()),
        "gpu": pa.array(cols.gpu, pa.int32()),
        "gpu_uuid": pa.array(cols.gpu_uuid, pa.string()),
        "gpu_name": pa.array(cols.gpu_name, pa.string()),
        "t_ns": pa.array(cols.t_ns, pa.int64()),
    }
    for fld in METRIC_FIELDS:
        vals = cols.metrics[fld]
        if fld in INT_FIELDS:
            arrays[fld] = pa.array([None if v is None else round(v) for v in vals], pa.int64())
        else:
            arrays[fld] = pa.array(vals, pa.float64())
    table = pa.table(arrays)
    names = ", ".join(table.column_names)
    con.register("_gpuscope_nvml", table)
    try:
        con.execute(
            f"INSERT INTO nvml_samples ({names}) SELECT {names} FROM _gpuscope_nvml ORDER BY t_ns, gpu"
        )
    finally:
        con.unregister("_gpuscope_nvml")
    con.execute(
        "INSERT INTO nvml_series VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [rid, series_id, source, parsed.format, parsed.host, parsed.interval_ms, n, start, end],
    )
    first_gpu = min(range(n), key=lambda i: (cols.gpu[i], cols.t_ns[i]))
    gpu_name = cols.gpu_name[first_gpu]
    run_name = name
    if own:
        RunRow(
            run_id=rid,
            name=run_name,
            kind="nvml",
            n_ranks=0,
            n_events=n,
            source_bytes=source_bytes,
            gpu_name=gpu_name,
            tags=list(tags),
            start_ns=start,
            end_ns=end,
            uploaded_by=uploaded_by,
        ).insert(con)
    else:
        row = con.execute("SELECT name FROM runs WHERE run_id = ?", [rid]).fetchone()
        run_name = row[0] if row else run_name
    return SeriesResult(
        run_id=rid,
        name=run_name,
        path=source,
        series_id=series_id,
        attached=not own,
        format=parsed.format,
        host=parsed.host,
        interval_ms=parsed.interval_ms,
        n_samples=n,
        n_gpus=len(set(cols.gpu)),
        gpu_name=gpu_name,
        start_ns=start,
        end_ns=end,
        warnings=list(parsed.warnings),
        uploaded_by=uploaded_by if own else None,
    )


def series_for_run(con: duckdb.DuckDBPyConnection, run_id: str) -> pandas.DataFrame:
    """Every NVML sample stored under a run, ordered by time then GPU (empty frame when none)."""
    return con.execute(
        "SELECT * FROM nvml_samples WHERE run_id = ? ORDER BY t_ns, gpu, series_id", [run_id]
    ).df()


def align_offset_ns(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Subtract from ``nvml_samples.t_ns`` (Unix ns) to get the trace time (``events.ts_ns``) of the run's
    lowest rank: that rank's ``ranks.time_offset_ns``; 0 for a run without ranks (an NVML-only run)."""
    row = con.execute(
        "SELECT time_offset_ns FROM ranks WHERE run_id = ? ORDER BY rank LIMIT 1", [run_id]
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0

"""NVML series ingest: the sampler's JSONL and nvidia-smi CSV logs -> nvml_series / nvml_samples / runs."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from gpuscope.ingest.errors import DuplicateRunError, IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.nvml import (
    METRIC_FIELDS,
    align_offset_ns,
    ingest_series,
    is_nvml_file,
    read_jsonl,
    resolve_tz,
    series_for_run,
)
from gpuscope.store import RUN_TABLES, connect, transaction

FIXTURES = Path(__file__).resolve().parent.parent / "sample_traces" / "nvml"
JSONL = FIXTURES / "synthetic_h100x2_100ms.nvml.jsonl"
CSV_UNITS = FIXTURES / "synthetic_nvidia-smi_units.csv"
CSV_NOUNITS = FIXTURES / "synthetic_nvidia-smi_nounits.csv"
CSV_SUBSET = FIXTURES / "synthetic_nvidia-smi_subset.csv"
MIB = 1 << 20
T0_UTC_NS = 1736935200 * 10**9  # 2025-01-15 10:00:00 UTC, the fixtures' first timestamp


@pytest.fixture
def con():
    c = connect(":memory:")
    yield c
    c.close()


def snapshot(con) -> dict[str, list]:
    return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in RUN_TABLES}


def ingest(con, path, **kw):
    with transaction(con):
        return ingest_series(con, path, **kw)


def copy(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dst = tmp_path / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


# --- the sampler's JSONL ---------------------------------------------------------------------------


def test_jsonl_own_run(con):
    res = ingest(con, JSONL, run_id=None, name=None)
    sha = hashlib.sha256(JSONL.read_bytes()).hexdigest()
    assert res.series_id == sha[:12]
    assert not res.attached
    assert res.n_samples == 80 and res.n_gpus == 2
    assert res.format == "gpuscope-jsonl" and res.host == "synthetic-node-01"
    run = con.execute(
        "SELECT name, kind, n_ranks, n_events, source_bytes, gpu_name, torch_version, start_ns, end_ns "
        "FROM runs WHERE run_id = ?",
        [res.run_id],
    ).fetchone()
    lines = [json.loads(x) for x in JSONL.read_text().splitlines()[1:]]
    assert run == (
        "synthetic_h100x2_100ms",
        "nvml",
        0,
        80,
        JSONL.stat().st_size,
        "NVIDIA H100 80GB HBM3",
        None,
        lines[0]["t_ns"],
        lines[-1]["t_ns"],
    )
    series = con.execute(
        "SELECT series_id, path, format, host, interval_ms, n_samples, start_ns, end_ns "
        "FROM nvml_series WHERE run_id = ?",
        [res.run_id],
    ).fetchone()
    assert series[:4] == (sha[:12], str(JSONL), "gpuscope-jsonl", "synthetic-node-01")
    assert series[4] == pytest.approx(
        100.0, abs=2.0
    )  # median interval, ms (the fixture has ~1 ms jitter)
    assert series[5:] == (80, lines[0]["t_ns"], lines[-1]["t_ns"])
    # values stored exactly as recorded, in the table's units; JSON null -> SQL NULL
    row = (
        con.execute(
            "SELECT * FROM nvml_samples WHERE run_id = ? AND gpu = 0 ORDER BY t_ns LIMIT 1",
            [res.run_id],
        )
        .df()
        .iloc[0]
    )
    want = lines[0]["gpus"][0]
    for f in METRIC_FIELDS:
        assert row[f] == pytest.approx(want[f]), f
    assert row["gpu_uuid"] == "GPU-00000000-5y47-0000-0000-synthetic000"
    nulls = con.execute(
        "SELECT count(*) FROM nvml_samples WHERE gpu = 1 AND sm_active_pct IS NULL "
        "AND tensor_active_pct IS NULL AND pcie_rx_bytes_s IS NULL"
    ).fetchone()[0]
    assert nulls == 40


def test_jsonl_duplicate_is_refused(con):
    res = ingest(con, JSONL)
    before = snapshot(con)
    with pytest.raises(DuplicateRunError) as e:
        ingest(con, JSONL)
    assert e.value.run_id == res.run_id
    assert snapshot(con) == before


def test_jsonl_name_and_tags(con):
    res = ingest(con, JSONL, name="bench A", tags=["x", "a", "x"])
    assert con.execute("SELECT name, tags FROM runs WHERE run_id = ?", [res.run_id]).fetchone() == (
        "bench A",
        ["a", "x"],
    )


def test_gzipped_jsonl(con, tmp_path):
    gz = tmp_path / "s.nvml.jsonl.gz"
    gz.write_bytes(gzip.compress(JSONL.read_bytes()))
    assert is_nvml_file(gz)
    assert ingest(con, gz).n_samples == 80


def test_truncated_last_line_is_dropped(con, tmp_path):
    data = JSONL.read_bytes()
    cut = data[: len(data) - 200]  # inside the last line: no newline at the end
    assert not cut.endswith(b"\n")
    p = tmp_path / "cut.nvml.jsonl"
    p.write_bytes(cut)
    s = read_jsonl(p)
    assert s.truncated and len(s.samples) == 39
    res = ingest(con, p)
    assert res.n_samples == 78 and any("truncated" in w for w in res.warnings)


def test_cut_after_a_newline_is_complete(tmp_path):
    p = tmp_path / "c.nvml.jsonl"
    p.write_bytes(b"\n".join(JSONL.read_bytes().split(b"\n")[:11]) + b"\n")
    s = read_jsonl(p)
    assert not s.truncated and len(s.samples) == 10


def test_ints_stay_ints(tmp_path):
    s = read_jsonl(JSONL)
    g = s.samples[0]["gpus"][0]
    assert type(g["mem_used_bytes"]) is int and type(g["power_w"]) is float and g["gpu"] == 0


# --- nvidia-smi CSV ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CSV_UNITS, CSV_NOUNITS])
def test_nvidia_smi_csv_with_and_without_units(con, path):
    res = ingest(con, path, tz="UTC")
    assert res.format == "nvidia-smi-csv" and res.n_samples == 20 and res.n_gpus == 2
    assert res.interval_ms == pytest.approx(500.0)
    assert res.start_ns == T0_UTC_NS and res.end_ns == T0_UTC_NS + 4_500_000_000
    df = series_for_run(con, res.run_id)
    first = df[(df.gpu == 0)].iloc[0]
    assert first.t_ns == T0_UTC_NS
    assert first.gpu_name == "NVIDIA H100 80GB HBM3"
    assert first.gpu_uuid == "GPU-00000000-5y47-0000-0000-synthetic000"
    assert first.gpu_util_pct == 98 and first.mem_util_pct == 41
    assert first.mem_used_bytes == 61234 * MIB and first.mem_total_bytes == 81559 * MIB
    assert first.power_w == pytest.approx(612.47)
    assert first.sm_clock_mhz == 1980 and first.mem_clock_mhz == 2619 and first.temp_c == 57
    gpu1 = df[df.gpu == 1]
    assert gpu1.power_w.isna().all()  # [N/A]
    # nvidia-smi has no PCIe/GPM columns: NULL
    assert df.pcie_rx_bytes_s.isna().all() and df.sm_active_pct.isna().all()


def test_units_and_nounits_give_the_same_rows(con):
    a = ingest(con, CSV_UNITS, tz="UTC")
    b = ingest(con, CSV_NOUNITS, tz="UTC")
    cols = ["gpu", "t_ns", *METRIC_FIELDS]
    da = series_for_run(con, a.run_id)[cols]
    db = series_for_run(con, b.run_id)[cols]
    assert da.equals(db)


def test_csv_subset_other_order_no_index(con):
    res = ingest(con, CSV_SUBSET, tz="UTC")
    df = series_for_run(con, res.run_id)
    assert list(df.gpu_util_pct) == [0, 35, 100, 100, 12, 0]
    assert list(df.mem_used_bytes) == [(1024 + k) * MIB for k in range(6)]
    assert df.sm_clock_mhz.isna().all()  # [Not Supported]
    assert df.gpu.eq(0).all() and df.gpu_name.isna().all() and df.power_w.isna().all()
    assert res.interval_ms == pytest.approx(100.0)
    assert con.execute("SELECT gpu_name FROM runs WHERE run_id = ?", [res.run_id]).fetchone() == (
        None,
    )


def test_csv_time_zone_option():
    starts = {}
    for tz in ("UTC", "+02:00", "Europe/Paris"):  # Paris is UTC+1 in January
        c = connect(":memory:")  # same bytes = same run id: one store each
        starts[tz] = ingest(c, CSV_SUBSET, tz=tz).start_ns
        c.close()
    assert starts["UTC"] == T0_UTC_NS
    assert starts["UTC"] - starts["+02:00"] == 2 * 3600 * 10**9
    assert starts["UTC"] - starts["Europe/Paris"] == 3600 * 10**9


def test_csv_default_zone_is_local(con, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "America/New_York")  # UTC-5 in January
    time.tzset()
    try:
        res = ingest(con, CSV_SUBSET)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert res.start_ns == T0_UTC_NS + 5 * 3600 * 10**9


def test_resolve_tz():
    assert resolve_tz(None) is None and resolve_tz("local") is None
    assert resolve_tz("UTC") is dt.UTC
    assert resolve_tz("-03:30").utcoffset(None) == -dt.timedelta(hours=3, minutes=30)
    with pytest.raises(ValueError, match="unknown time zone"):
        resolve_tz("Mars/Olympus")


def test_csv_real_nvidia_smi_layout(con, tmp_path):
    """The layout nvidia-smi prints: header units in brackets, GHz/kW-free, CRLF tolerated, a
    repeated header from an appended log, unknown columns ignored with a warning."""
    p = tmp_path / "smi.csv"
    p.write_text(
        "timestamp, index, pci.bus_id, power.draw.instant [W], memory.used [MiB]\r\n"
        "2025/01/15 10:00:00.250, 0, 00000000:19:00.0, 120.5 W, 10 MiB\r\n"
        "timestamp, index, pci.bus_id, power.draw.instant [W], memory.used [MiB]\r\n"
        "2025/01/15 10:00:01.250, 0, 00000000:19:00.0, [Unknown Error], 0.5 GiB\r\n"
    )
    res = ingest(con, p, tz="UTC")
    df = series_for_run(con, res.run_id)
    assert list(df.t_ns) == [T0_UTC_NS + 250_000_000, T0_UTC_NS + 1_250_000_000]
    assert df.power_w.iloc[0] == pytest.approx(120.5) and df.power_w.isna().iloc[1]
    assert list(df.mem_used_bytes) == [10 * MIB, 512 * MIB]
    assert any("pci.bus_id" in w for w in res.warnings)


def test_csv_truncated_last_row_dropped(con, tmp_path):
    p = tmp_path / "t.csv"
    text = CSV_UNITS.read_text()
    p.write_text(text[: len(text) - 30])  # the last row is cut mid-field
    res = ingest(con, p, tz="UTC")
    assert res.n_samples == 19 and any("truncated" in w for w in res.warnings)


# --- attaching to a trace run -----------------------------------------------------------------------


def write_trace(path: Path, base_ns: int) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 1000.0,
            "dur": 50.0,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 1010.0,
            "dur": 30.0,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        },
    ]
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "baseTimeNanoseconds": base_ns,
                "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                "traceEvents": events,
            }
        )
    )


def test_attach_to_trace_run(con, tmp_path):
    trace = tmp_path / "job_rank0.pt.trace.json"
    base = T0_UTC_NS - 10**9
    write_trace(trace, base)
    [run] = ingest_paths(con, [trace])
    events_before = con.execute(
        "SELECT n_events FROM runs WHERE run_id = ?", [run.run_id]
    ).fetchone()
    res = ingest(con, JSONL, run_id=run.run_id)
    assert res.attached and res.run_id == run.run_id and res.name == run.name
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)  # no run of its own
    assert (
        con.execute("SELECT n_events FROM runs WHERE run_id = ?", [run.run_id]).fetchone()
        == events_before
    )
    assert len(series_for_run(con, run.run_id)) == 80
    assert align_offset_ns(con, run.run_id) == base
    # the analysis sees the series: the recommendations' memory figure is NVML's peak used
    from gpuscope.analysis.memory import MemoryResult
    from gpuscope.analysis.report import _mem_used_frac, _memory_used_frac, analyze_run

    assert analyze_run(con, run.run_id).memory.nvml_series is True
    frac = _mem_used_frac(con, run.run_id)
    assert frac is not None and 0 < frac <= 1
    assert _memory_used_frac(con, run.run_id, MemoryResult(False, nvml_series=True)) == frac
    assert _memory_used_frac(con, run.run_id, None) == frac
    assert _memory_used_frac(con, run.run_id, MemoryResult(False, nvml_series=False)) is None
    # a second series (CSV) can be attached to the same run; the same one twice cannot
    ingest(con, CSV_UNITS, run_id=run.run_id, tz="UTC")
    assert con.execute(
        "SELECT count(*) FROM nvml_series WHERE run_id = ?", [run.run_id]
    ).fetchone() == (2,)
    before = snapshot(con)
    with pytest.raises(DuplicateRunError):
        ingest(con, JSONL, run_id=run.run_id)
    assert snapshot(con) == before


def test_attach_to_missing_run_changes_nothing(con):
    before = snapshot(con)
    with pytest.raises(IngestError, match="no run deadbeef0000"):
        ingest(con, JSONL, run_id="deadbeef0000")
    assert snapshot(con) == before


def test_align_offset_of_nvml_run_is_zero(con):
    res = ingest(con, JSONL)
    assert align_offset_ns(con, res.run_id) == 0
    assert series_for_run(con, "nosuchrun").empty


# --- bad input: IngestError, database unchanged ----------------------------------------------------

HEADER = {
    "format": "gpuscope-nvml",
    "version": 1,
    "host": "h",
    "interval_ms": 100,
    "gpus": [{"index": 0, "name": "G", "uuid": "GPU-x", "mem_total_bytes": 1}],
    "started_ns": 1,
}
GOOD_LINE = {"t_ns": T0_UTC_NS, "gpus": [{"gpu": 0, "gpu_util_pct": 5}]}


def jl(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


BAD_INPUTS = {
    "empty": ("", "empty file"),
    "blank lines": ("\n\n\n", "empty file"),
    "not a series": ("hello world\nthis is text\n", "not an NVML series"),
    "binary": (b"\x00\xff\xfe\x01garbage", "not an NVML series"),
    "kineto trace": ('{"schemaVersion": 1, "traceEvents": []}\n', "header"),
    "header only": (jl(HEADER), "no samples"),
    "truncated header": (json.dumps(HEADER)[:40], "header line is truncated"),
    "wrong format": (jl({**HEADER, "format": "something-else"}, GOOD_LINE), "not 'gpuscope-nvml'"),
    "newer version": (jl({**HEADER, "version": 2}, GOOD_LINE), "version 2"),
    "no gpus in header": (jl({**HEADER, "gpus": []}, GOOD_LINE), "lists no GPU"),
    "gpus not a list": (jl({**HEADER, "gpus": "0"}, GOOD_LINE), "header"),
    "duplicate gpu index": (jl({**HEADER, "gpus": HEADER["gpus"] * 2}, GOOD_LINE), "twice"),
    "string value": (
        jl(HEADER, {"t_ns": T0_UTC_NS, "gpus": [{"gpu": 0, "power_w": "300 W"}]}),
        "line 2",
    ),
    "bool value": (jl(HEADER, {"t_ns": T0_UTC_NS, "gpus": [{"gpu": 0, "temp_c": True}]}), "line 2"),
    "t_ns float": (jl(HEADER, {"t_ns": 1.5e18, "gpus": []}), "line 2"),
    "t_ns missing": (jl(HEADER, {"gpus": []}), "line 2"),
    "t_ns not positive": (jl(HEADER, {"t_ns": -5, "gpus": []}), "not a Unix time"),
    "unknown gpu": (
        jl(HEADER, {"t_ns": T0_UTC_NS, "gpus": [{"gpu": 3}]}),
        "gpu 3 is not in the header",
    ),
    "corrupt middle line": (jl(HEADER, GOOD_LINE, '{"t_ns": 17', GOOD_LINE), "line 3"),
    "csv no timestamp column": ("index, utilization.gpu [%]\n0, 5 %\n", "not an NVML series"),
    "csv header only": ("timestamp, utilization.gpu [%]\n", "no samples"),
    "csv bad timestamp": (
        "timestamp, utilization.gpu [%]\nyesterday, 5 %\n",
        "cannot read timestamp",
    ),
    "csv impossible date": (
        "timestamp, utilization.gpu [%]\n2025/02/30 10:00:00.000, 5 %\n",
        "cannot read timestamp",
    ),
    "csv field count": (
        "timestamp, utilization.gpu [%]\n2025/01/15 10:00:00.000, 5 %, 7\n"
        "2025/01/15 10:00:01.000, 5 %\n",
        "3 fields",
    ),
    "csv not a number": (
        "timestamp, utilization.gpu [%]\n2025/01/15 10:00:00.000, lots\n",
        "not a number",
    ),
    "csv unknown unit": (
        "timestamp, memory.used [MiB]\n2025/01/15 10:00:00.000, 5 parsecs\n",
        "unit",
    ),
    "csv bad index": ("timestamp, index\n2025/01/15 10:00:00.000, first\n", "GPU index"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_and_leaves_db_unchanged(con, tmp_path, case):
    ingest(con, JSONL)  # something already stored, which must survive untouched
    content, message = BAD_INPUTS[case]
    p = tmp_path / "bad.nvml.jsonl"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    before = snapshot(con)
    with pytest.raises(IngestError) as e:
        ingest(con, p)
    assert message in str(e.value)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)
    assert snapshot(con) == before


def test_bad_file_after_good_one_rolls_back_both(con, tmp_path):
    """The caller's one transaction over several files: a bad one undoes the good one before it."""
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp, utilization.gpu [%]\nnot-a-time, 1 %\n")
    before = snapshot(con)
    with pytest.raises(IngestError), transaction(con):
        ingest_series(con, JSONL)
        ingest_series(con, bad)
    assert snapshot(con) == before


def test_missing_file_and_folder(con, tmp_path):
    with pytest.raises(IngestError, match="no such file"):
        ingest(con, tmp_path / "nope.jsonl")
    with pytest.raises(IngestError, match="not a regular file"):
        ingest(con, tmp_path)


def test_bad_tz_is_an_ingest_error(con):
    with pytest.raises(IngestError, match="unknown time zone"):
        ingest(con, CSV_SUBSET, tz="Nowhere/Special")


# --- sniffing ----------------------------------------------------------------------------------------


def test_is_nvml_file(tmp_path):
    assert is_nvml_file(JSONL) and is_nvml_file(CSV_UNITS) and is_nvml_file(CSV_SUBSET)
    trace = tmp_path / "t.json"
    write_trace(trace, 0)
    other = tmp_path / "o.csv"
    other.write_text("a,b,c\n1,2,3\n")
    single = tmp_path / "s.txt"
    single.write_text("timestamp\n")
    empty = tmp_path / "e.jsonl"
    empty.write_bytes(b"")
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(256)))
    for p in (trace, other, single, empty, binary, tmp_path, tmp_path / "missing"):
        assert not is_nvml_file(p), p

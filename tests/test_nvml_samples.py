"""ingest_samples: an NVML series held as typed records (the Live page's window) stored without a
file gives the rows, run row and summary that ingesting the same series as a JSONL file gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from gpuscope.analysis.nvml_run import analyze_nvml_run
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.nvml import encode_series, ingest_samples, read_jsonl
from gpuscope.ingest.records import GpuReading, Sample, SeriesGpu, SeriesHeader
from gpuscope.sampler.record import SeriesWriter, encode_line, make_header
from gpuscope.store import Connection, connect

REAL = Path(__file__).resolve().parent.parent / "sample_traces" / "nvml" / "h200_live.nvml.jsonl"
SOURCE = "live window of vm"


def _records(path: Path) -> tuple[SeriesHeader, list[Sample]]:
    """A recorded series as the records a Live window holds (the header's GPUs, every poll)."""
    s = read_jsonl(path)
    h = s.header
    header = SeriesHeader(
        h["host"],
        float(h["interval_ms"]),
        tuple(msgspec.convert(g, SeriesGpu) for g in h["gpus"]),
        h["started_ns"],
        written_by="gpuscope live page",
    )
    return header, [msgspec.convert(x, Sample) for x in s.samples]


def _write_jsonl(path: Path, header: SeriesHeader, samples: list[Sample]) -> Path:
    """The same series written as a file by the sampler's own writer."""
    head = make_header(
        header.host,
        header.interval_ms,
        [msgspec.to_builtins(g) for g in header.gpus],
        header.started_ns,
        written_by=header.written_by,
    )
    with SeriesWriter(path, head) as out:
        for s in samples:
            out.write_encoded(encode_line(s))
    return path


def _tables(con: Connection) -> dict[str, list[Any]]:
    """Every row the series tables hold (runs without created_at, the time of the ingest)."""
    return {
        "runs": con.execute("SELECT * EXCLUDE (created_at) FROM runs ORDER BY run_id").fetchall(),
        "nvml_series": con.execute("SELECT * FROM nvml_series ORDER BY run_id").fetchall(),
        "nvml_samples": con.execute(
            "SELECT * FROM nvml_samples ORDER BY run_id, t_ns, gpu"
        ).fetchall(),
    }


@pytest.mark.slow
def test_records_and_their_jsonl_file_store_the_same_run(con: Connection, tmp_path: Path) -> None:
    header, samples = _records(REAL)
    assert len(samples) == 408 and len(header.gpus) == 2
    path = _write_jsonl(tmp_path / "window.nvml.jsonl", header, samples)
    assert encode_series(header, samples) == path.read_bytes()  # the writer's bytes, no file

    res = ingest_samples(
        con, header, samples, source=SOURCE, name="live vm", tags=["h200"], uploaded_by="ann"
    )
    assert (res.name, res.n_samples, res.n_gpus, res.duplicate) == ("live vm", 816, 2, False)
    assert (res.path, res.attached, res.uploaded_by) == (SOURCE, False, "ann")

    other = connect(tmp_path / "other")
    try:
        (from_file,) = ingest_paths(other, [path], name="live vm", tags=["h200"], uploaded_by="ann")
        assert from_file.run_id == res.run_id
        a, b = _tables(con), _tables(other)
        assert len(a["nvml_samples"]) == 816
        assert a["nvml_samples"] == b["nvml_samples"]
        assert a["runs"] == b["runs"]
        # the one difference: where the series came from
        assert [r[2] for r in a["nvml_series"]] == [SOURCE]
        assert [r[2] for r in b["nvml_series"]] == [str(path)]
        assert [r[:2] + r[3:] for r in a["nvml_series"]] == [
            r[:2] + r[3:] for r in b["nvml_series"]
        ]
        assert (
            analyze_nvml_run(con, res.run_id).to_json()
            == analyze_nvml_run(other, res.run_id).to_json()
        )

        # stored again (either way): a duplicate, described as stored, nothing written
        again = ingest_samples(other, header, samples, source=SOURCE, name="another name")
        assert (again.duplicate, again.run_id, again.name) == (True, res.run_id, "live vm")
        assert (again.n_samples, again.n_gpus, again.uploaded_by) == (816, 2, "ann")
        assert _tables(other) == b
    finally:
        other.close()

    # the records lose nothing of the recording: its own file (ints, extra header keys) stores
    # the same readings
    (original,) = ingest_paths(con, [REAL])
    rows = (
        "SELECT * EXCLUDE (run_id, series_id) FROM nvml_samples WHERE run_id = ? ORDER BY t_ns, gpu"
    )
    assert original.run_id != res.run_id
    assert (
        con.execute(rows, [original.run_id]).fetchall()
        == con.execute(rows, [res.run_id]).fetchall()
    )


@pytest.mark.slow
def test_bad_records_are_one_line_and_store_nothing(con: Connection) -> None:
    header, samples = _records(REAL)
    ingest_samples(con, header, samples[:10], source=SOURCE)  # something already stored
    before = _tables(con)
    stray = Sample(samples[20].t_ns, (*samples[20].gpus, GpuReading(7, gpu_util_pct=50.0)))
    bad = {
        "no samples": (header, []),
        "gpu 7 is not in the header": (header, [*samples[11:20], stray]),
        "not a Unix time": (header, [Sample(-5, samples[11].gpus)]),
        "the header lists no GPU": (
            SeriesHeader(header.host, header.interval_ms, (), header.started_ns),
            samples[11:20],
        ),
    }
    for problem, (h, s) in bad.items():
        with pytest.raises(IngestError) as e:
            ingest_samples(con, h, s, source=SOURCE, name="bad")
        line = str(e.value)
        assert line.startswith(f"{SOURCE}: ") and problem in line and "\n" not in line, line
        assert _tables(con) == before, problem

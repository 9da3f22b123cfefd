"""nvidia-smi logs without a header (issue 8): ``--format=csv,noheader[,nounits]``, the usual shape
in scripts, read with ``--smi-columns`` (the ``--query-gpu`` list), else one line asking for it."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.cli.main import main
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.ingest.nvml import METRIC_FIELDS, is_nvml_file, series_for_run

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "nvml"


def strip_header(src: Path, dst: Path) -> str:
    """Write ``src`` without its header line; returns the --query-gpu list of that header."""
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(lines[1:]))
    return ",".join(c.split("[")[0].strip() for c in lines[0].split(","))


@pytest.mark.parametrize(
    "name", ["synthetic_nvidia-smi_nounits.csv", "synthetic_nvidia-smi_units.csv"]
)
def test_noheader_log_reads_like_the_headed_one(con, tmp_path, name):
    src = SAMPLES / name
    cols = strip_header(src, tmp_path / "smi.csv")
    assert is_nvml_file(tmp_path / "smi.csv")
    a = ingest_paths(con, [src], tz="UTC")[0]
    b = ingest_paths(con, [tmp_path / "smi.csv"], tz="UTC", smi_columns=cols)[0]
    assert b.kind == "nvml" and b.n_events == a.n_events == 20
    keep = ["gpu", "gpu_name", "t_ns", *METRIC_FIELDS]
    assert series_for_run(con, a.run_id)[keep].equals(series_for_run(con, b.run_id)[keep])


def test_noheader_without_columns_asks_for_them(con, tmp_path):
    strip_header(SAMPLES / "synthetic_nvidia-smi_nounits.csv", tmp_path / "smi.csv")
    with pytest.raises(
        IngestError,
        match=r"without a header \(--format=csv,noheader\): give the "
        r"--query-gpu list that produced it with --smi-columns",
    ):
        ingest_paths(con, [tmp_path / "smi.csv"])
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_wrong_column_count_names_smi_columns(con, tmp_path):
    strip_header(SAMPLES / "synthetic_nvidia-smi_nounits.csv", tmp_path / "smi.csv")
    with pytest.raises(IngestError, match=r"line 1: \d+ fields, --smi-columns names 2"):
        ingest_paths(con, [tmp_path / "smi.csv"], smi_columns="timestamp,index")


def test_smi_columns_must_name_timestamp(con, tmp_path):
    strip_header(SAMPLES / "synthetic_nvidia-smi_nounits.csv", tmp_path / "smi.csv")
    with pytest.raises(IngestError, match="must name timestamp"):
        ingest_paths(con, [tmp_path / "smi.csv"], smi_columns="index,utilization.gpu")


@pytest.mark.slow
def test_cli(capsys, tmp_path):
    cols = strip_header(SAMPLES / "synthetic_nvidia-smi_nounits.csv", tmp_path / "smi.csv")
    db = str(tmp_path / "s.duckdb")
    code = main(["ingest", str(tmp_path / "smi.csv"), "--db", db])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--smi-columns" in err and "not JSON" not in err
    code = main(
        ["ingest", str(tmp_path / "smi.csv"), "--db", db, "--smi-columns", cols, "--tz", "UTC"]
    )
    out = capsys.readouterr().out
    assert code == 0 and len(out.split()) == 1

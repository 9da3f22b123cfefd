"""AppTest: an upload takes an NVML series with its trace (issue 23): the real "before" folder
(trace, `before.nvml.jsonl`, `timing.json`) dropped on the uploader is one run with its NVML
series attached, so its busy plot has the NVML overlay; `timing.json` is left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, counts, open_app, texts

BEFORE = Path(__file__).resolve().parent.parent / "sample_traces" / "before"


def test_series_names_are_accepted_and_kept_beside_traces() -> None:
    import io

    from gpuscope.ingest.errors import IngestError
    from gpuscope.web.uploads import check_names, trace_files

    def up(name: str) -> io.BytesIO:
        f = io.BytesIO(b"{}")
        f.name = name  # type: ignore[attr-defined]
        return f

    folder = [up("job_rank0.pt.trace.json.gz"), up("job.nvml.jsonl"), up("timing.json")]
    kept, left = trace_files(folder)  # type: ignore[arg-type]
    assert [f.name for f in kept] == ["job_rank0.pt.trace.json.gz", "job.nvml.jsonl"]
    assert left == ["timing.json"]
    check_names(kept)  # type: ignore[arg-type]
    with pytest.raises(IngestError, match=r"expected \.json, \.json\.gz or \.jsonl"):
        check_names([up("notes.txt")])  # type: ignore[list-item]


@pytest.mark.slow
def test_a_dropped_capture_folder_gets_its_nvml_overlay(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    db = app_store(tmp_path, monkeypatch)
    at = open_app()
    files = [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(BEFORE.iterdir())]
    at.file_uploader[0].set_value(files)
    at.run()
    caps = texts(at, "caption")
    assert any("before.nvml.jsonl" in c and "attached to the run" in c for c in caps), caps
    assert any("left out (not traces): timing.json" in c for c in caps)
    assert next(t for t in at.text_input if t.label == "Name").value == "before"
    at.button(key="ingest").click().run()
    assert not at.exception, at.exception
    assert texts(at, "title") == ["before"]
    n = counts(db)
    assert n["runs"] == 1 and n["nvml_series"] == 1 and n["nvml_samples"] > 0
    assert any("NVML utilization overlaid" in c for c in texts(at, "caption"))

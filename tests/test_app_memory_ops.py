"""AppTest: the Run page's memory line, memory, roofline and module sections on the real H100
sample (recorded with profile_memory, record_shapes and with_modules), and a run without them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts

RUN = "screens/run.py"
SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "memory"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return app_store(tmp_path, monkeypatch, lake=False)


def _frames(at) -> dict[str, object]:
    return {d.proto.id: d.value for d in at.dataframe}


@pytest.mark.slow
def test_run_page_memory_roofline_modules(db: Path) -> None:
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    facts = json.loads((SAMPLE / "facts.json").read_text())
    (rid,) = ingest(db, SAMPLE / "gpt_mem.pt.trace.json.gz")
    con = connect(db)
    ingest_paths(con, [SAMPLE / "gpt_mem.smi.csv"], attach=rid, tz="UTC")
    con.close()
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    subs = texts(at, "subheader")
    assert {"Memory", "Ops against the roofline", "Modules and phases"} <= set(subs)
    # the memory line: a second chart, on the sawtooth's ms axis, allocated and reserved in GiB
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    mem = next(s for s in specs if "allocated (tensors)" in s)
    assert "reserved (allocator" in mem and "GiB" in mem
    metrics = {m.label: m.value for m in at.metric}
    peak = facts["max_memory_allocated"] / 2**30
    assert metrics["Peak allocated"] == f"{peak:,.3f} GiB"  # = torch.cuda.max_memory_allocated()
    assert metrics["Peak reserved"] == f"{facts['max_memory_reserved'] / 2**30:,.3f} GiB"
    tables = [d.value for d in at.dataframe]
    roof = next(t for t in tables if "lost µs per step" in t.columns)
    lost = list(roof["lost µs per step"])
    assert lost == sorted(lost, reverse=True) and "aten::mm" in set(roof["op"])
    mods = next(t for t in tables if "path" in t.columns)
    assert "GPT_0/Block_0" in set(mods["path"])
    phases = next(t for t in tables if "phase" in t.columns and "GPU per step" in t.columns)
    assert {"forward", "backward", "optimizer"} <= set(phases["phase"])
    # issue 46: ms with three figures, "—" for none, the special rows named (no raw floats, no
    # "None", no "(end of window)")
    for t in (mods, phases):
        shown = t.astype(str).to_numpy().ravel().tolist()
        assert not any(v in ("None", "nan", "(end of window)") for v in shown), shown
        for col in ("GPU per step", "idle per step"):
            assert all(re.fullmatch(r"[\d,]+(\.\d{1,4})? ms|—", v) for v in t[col]), t[col]
    assert "(idle after the last kernel)" in {m.strip() for m in mods["module"]}
    reps = next(t for t in tables if "times per step" in t.columns)
    assert 4 in set(reps["times per step"])


@pytest.mark.slow
def test_run_without_memory_says_how_to_record(db: Path, tmp_path: Path) -> None:
    from synth import training_trace

    (rid,) = ingest(db, training_trace("before", steps=4).write(tmp_path / "b.pt.trace.json.gz"))
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    assert any("profile_memory=True" in i for i in texts(at, "info"))
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert not any("allocated (tensors)" in s for s in specs)  # no memory line without memory


class _Upload:
    """What st.file_uploader hands over: a named binary stream."""

    def __init__(self, name: str, data: bytes) -> None:
        import io

        self.name, self._b = name, io.BytesIO(data)

    def read(self, size: int = -1, /) -> bytes:
        return self._b.read(size)

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._b.seek(offset, whence)


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_upload_with_snapshot(con, tmp_path: Path) -> None:
    import pickle

    from gpuscope.analysis.store_access import rank_meta
    from gpuscope.ingest.errors import IngestError
    from gpuscope.web.uploads import ingest_uploads, trace_files

    trace = _Upload(SAMPLE.joinpath("gpt_mem.pt.trace.json.gz").name,
                    SAMPLE.joinpath("gpt_mem.pt.trace.json.gz").read_bytes())  # fmt: skip
    marker = tmp_path / "PWNED"
    evil = _Upload("snap.pickle", pickle.dumps({"segments": [], "x": _Evil(marker)}))
    kept, left = trace_files([trace, evil, _Upload("facts.json", b"{}")])
    assert [f.name for f in kept] == [trace.name, "snap.pickle"] and left == ["facts.json"]
    with pytest.raises(IngestError) as e:
        ingest_uploads(con, [trace, evil])
    assert str(e.value).startswith("snap.pickle: refused") and not marker.exists()
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    real = _Upload(
        "gpt_mem.snapshot.pickle", SAMPLE.joinpath("gpt_mem.snapshot.pickle").read_bytes()
    )
    (r,) = ingest_uploads(con, [trace, real])
    snap = rank_meta(con, r.run_id, 0)["metadata"]["gpuscope.memory_snapshot"]
    assert snap["file"] == "gpt_mem.snapshot.pickle" and snap["devices"]["0"]["segments"] == 43

"""AppTest: the Run page's fixes say what the analysis says (issue 23): the gain line is the
recommendation's own sentence (a per-sample bound reads "per-sample time", never "step time"),
evidence reads in words (no raw keys, fractions as shares, no "×1.0"), and the top-kernels table
never shows two kernels alike. On the real "before" sample."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

from apptools import app_store, ingest, open_app, texts

RUN = "screens/run.py"
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def test_evidence_labels_and_values_are_words() -> None:
    from gpuscope.web.views import _fmt_value, _label

    assert (_label("memory_used_frac"), _fmt_value("memory_used_frac", 0.027)) == (
        "Memory used",
        "2.7 %",
    )
    assert (_label("loader"), _fmt_value("loader", "single_process")) == (
        "DataLoader",
        "batches made in the training process (num_workers=0)",
    )
    assert _label("idle_us_per_step") == "GPU idle" and _label("share_pct") == "Share of the run"
    assert _fmt_value("assumed_speedup", 14.767) == "14.77×"


@pytest.mark.slow
def test_fix_headers_are_the_analysis_sentences(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.analysis.report import analyze_run
    from gpuscope.store import connect
    from gpuscope.web import ui

    db = app_store(tmp_path, monkeypatch, lake=False)
    (rid,) = ingest(db, SAMPLES / "before" / "before_rank0.pt.trace.json.gz")
    con = connect(db)
    recs = {r.id: r for r in analyze_run(con, rid, all_ranks=False).recommendations}
    con.close()
    assert recs["batch_size"].footing == "per_sample_time"
    at = open_app(RUN, {"run": rid})
    assert not at.exception, at.exception
    # the Run page's cards are profiled, and the page says so beside the unprofiled step
    [note] = [i for i in texts(at, "info") if "Without the profiler" in i]
    assert "The cards above are profiled" in note
    md = texts(at, "markdown")
    for r in recs.values():
        [head] = [m for m in md if m.startswith(f"**{ui.md(r.title, None)}**")]
        assert ui.md(r.gain_phrase, None) in head, head
    [batch] = [m for m in md if m.startswith(f"**{ui.md(recs['batch_size'].title, None)}**")]
    # the batch fix's estimate is on the time per sample; it has no proven bound: no "at most"
    assert "time per sample down" in batch and "step time down" not in batch
    assert "at most" not in batch
    captions = " ".join(texts(at, "caption"))
    assert "memory used frac" not in captions.lower() and "single_process" not in captions
    assert " Loader:" not in captions and not re.search(r"×\d+\.\d", " ".join(md))
    assert "DataLoader: **batches made in the training process" in captions
    # the host-sync evidence counts calls per step in words
    assert any(ui.md("aten::_local_scalar_dense (once per step)", None) in m for m in md)
    # the top-kernels table: the two fp32 cutlass GEMMs no longer read alike
    html = next(h.proto.body for h in at.get("html") if "gs-top" in h.proto.body)
    cells = re.findall(r'<td style="text-align:left" title="[^"]*">([^<]*)</td>', html)
    assert len(set(cells)) == len(cells)
    assert sum("cutlass::Kernel2" in c for c in cells) >= 2

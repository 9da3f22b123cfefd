"""`gpuscope report` (issue 24): self-contained Markdown/HTML reports with an SVG sawtooth."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from clitools import analysis_store, run_cli
from gpuscope.ingest.loader import ingest_paths
from gpuscope.reports import build_report, sawtooth_data, sawtooth_svg
from test_analysis_recommendations import after_like, before_like
from test_gate import stepped

SAMPLES = (
    Path(__file__).resolve().parent.parent / "sample_traces"
)  # (not from conftest: tests/e2e has one too)

SVG = "{http://www.w3.org/2000/svg}"

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


@pytest.fixture
def db_path(tmp_path: Path) -> Path | str:
    """The store ``gpuscope report`` is handed: the report, not the store, is the subject."""
    return analysis_store(tmp_path)


@pytest.fixture
def stepped_run(tmp_path, con):
    path = stepped([1000, 1000, 1000, 1000], 400).write(tmp_path / "stepped.json")
    return ingest_paths(con, [str(path)])[0].run_id


@pytest.mark.slow
def test_sawtooth_data_by_hand(con, stepped_run):
    # 4 steps of 1000 µs, each with one 400 µs kernel from +20 µs: the window is 4 ms, busy 40%
    d = sawtooth_data(con, stepped_run, 0, n=40)
    assert d.step_starts_ms == [0.0, 1.0, 2.0, 3.0]
    assert d.edges_ms[0] == 0 and d.edges_ms[-1] == pytest.approx(4.0)
    widths = np.diff(d.edges_ms)
    assert float(np.sum(d.busy_pct * widths) / 4.0) == pytest.approx(40.0)
    # bucket 0 (0..100 µs) holds 80 µs of kernel (20..100): 80 %; bucket 5 (500..600 µs) none
    assert d.busy_pct[0] == pytest.approx(80.0) and d.busy_pct[5] == 0.0
    # the idle time of every bucket is split over causes: busy + idle = 100 % everywhere
    total = d.busy_pct + sum(d.idle_pct.values())
    assert np.allclose(total, 100.0)


@pytest.mark.slow
def test_sawtooth_svg_is_valid_and_shows_steps_and_legend(con, stepped_run):
    svg = sawtooth_svg(sawtooth_data(con, stepped_run, 0), title="a <b> & c")
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag == f"{SVG}svg"
    dashed = [e for e in root.iter(f"{SVG}line") if e.get("stroke-dasharray")]
    assert len(dashed) == 4  # one per step start
    texts = [e.text for e in root.iter(f"{SVG}text")]
    assert "a <b> & c" in texts and "GPU busy" in texts and "0 ms" in texts
    paths = [p for p in root.iter(f"{SVG}path") if p.find(f"{SVG}title") is not None]
    assert paths[0].find(f"{SVG}title").text == "GPU busy"  # type: ignore[union-attr]


class _Tags(HTMLParser):
    VOID: ClassVar[set[str]] = {"meta", "br", "img", "rect", "line", "path", "hr", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: list[tuple[str, dict[str, str | None]]] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.seen.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):  # type: ignore[no-untyped-def]
        self.seen.append((tag, dict(attrs)))

    def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def self_contained(html_text: str) -> _Tags:
    """Parse the page; fail on unbalanced tags, scripts, or anything fetched from elsewhere."""
    p = _Tags()
    p.feed(html_text)
    assert p.errors == [] and p.stack == []
    for tag, attrs in p.seen:
        assert tag not in ("script", "link", "iframe", "img", "object")
        for k in ("src", "href"):
            assert attrs.get(k) is None, (tag, attrs)
    assert "url(" not in html_text and "@import" not in html_text
    return p


@pytest.mark.slow
def test_html_report_of_a_comparison(tmp_path, con):
    before = before_like().write(tmp_path / "before.json")
    after = after_like().write(tmp_path / "after.json")
    a = ingest_paths(con, [str(before)], name="before <b>")[0].run_id
    b = ingest_paths(con, [str(after)], name="after")[0].run_id
    text = build_report(con, b, fmt="html", compare_to=a)
    p = self_contained(text)
    assert "<title>gpuscope report: before &lt;b&gt; → after</title>" in text
    sections = [attrs.get("id") for tag, attrs in p.seen if tag == "section"]
    assert sections == ["comparison", "headline", "sawtooth", "causes", "fixes", "kernels"]
    assert sum(1 for tag, _ in p.seen if tag == "svg") == 2  # A's and B's sawtooth
    # before_like's dataloader fix is resolved by after_like: said in the comparison
    assert re.search(r"Fixes resolved by B: [^;]*dataloader_workers", text)
    # after_like: 2000 µs steps (the window runs on to the last GPU end: mean 2.07 ms)
    # the job's verdict (metrics.md, "The job"): the GPU's pace, between step completions
    assert "<td>Job step time</td><td>2.05 ms</td>" in text
    assert "<td>rank 0: step spans</td><td>2.00 ms median, 2.07 ms mean</td>" in text


@pytest.mark.slow
def test_markdown_report_has_fixes_with_estimates_and_code(tmp_path, con):
    before = before_like().write(tmp_path / "before.json")
    rid = ingest_paths(con, [str(before)])[0].run_id
    text = build_report(con, rid, fmt="md")
    assert text.startswith("# gpuscope report: ")
    assert "| Job step time | 8.00 ms |" in text  # the job's verdict (metrics.md, "The job")
    assert "| rank 0: step spans | 8.00 ms median, 8.00 ms mean |" in text
    assert "### Use DataLoader workers" in text or "dataloader" in text.lower()
    # the estimate and its range; "at most" only after the DataLoader's proven bound
    assert re.search(
        r"\*\*Estimate:\*\* step time down [\d.]+% \(range [-\d.]+ to [\d.]+%\); at most", text
    )
    assert "```python\n" in text and "num_workers" in text
    assert "## Top kernels" in text and "| gemm |" in text
    # the sawtooth: an SVG data URI that decodes to a well-formed SVG
    m = re.search(r"!\[sawtooth\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", text)
    assert m is not None
    assert ET.fromstring(base64.b64decode(m.group(1))).tag == f"{SVG}svg"
    assert "http" not in text.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.slow
def test_report_cli(tmp_path, db_path, capsys):
    before = before_like().write(tmp_path / "before.json")
    db = ["--db", str(db_path)]
    out_file = tmp_path / "r.html"
    code, out, err = run_cli(
        capsys, "report", str(before), "--format", "html", "-o", str(out_file), *db
    )
    assert code == 0 and out == "" and "wrote" in err
    self_contained(out_file.read_text(encoding="utf-8"))
    assert oct(out_file.stat().st_mode & 0o777) != oct(0o600)
    code, out, _ = run_cli(capsys, "report", "before", *db)  # Markdown on stdout by default
    assert code == 0 and out.startswith("# gpuscope report: before")
    # --compare takes a tag
    assert run_cli(capsys, "tag", "before", "baseline/main", *db)[0] == 0
    code, out, _ = run_cli(capsys, "report", "before", "--compare", "baseline/main", *db)
    assert code == 0 and out.startswith("# gpuscope report: before → before\n\n## Comparison")
    # bad input: one line, exit 2, no file
    code, _, err = run_cli(capsys, "report", "nope", "-o", str(tmp_path / "x.md"), *db)
    assert code == 2 and "nope: no such run" in err and not (tmp_path / "x.md").exists()
    code, _, err = run_cli(capsys, "report", "before", "--rank", "4", *db)
    assert code == 2 and "no rank 4" in err
    code, _, err = run_cli(capsys, "report", "before", "--format", "pdf", *db)
    assert code == 2 and "invalid choice" in err
    # an NVML-only run has no trace to report on: one line, exit 2 (and the same for `log`)
    nvml = SAMPLES / "nvml" / "synthetic_h100x2_100ms.nvml.jsonl"
    code, _, err = run_cli(capsys, "report", str(nvml), *db)
    assert code == 2 and "an NVML-only run" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "log", str(nvml), "--to", "mlflow", *db)
    assert code == 2 and "an NVML-only run" in err

"""One spelling per word: idle causes and NVML fields are written out only in
``gpuscope.vocabulary``; every other module of the package uses its constants. The scan reads every
string constant of the package (docstrings aside) with the AST.

Fix ids are not scanned here: each is written once, in its unit of gpuscope.analysis.fixes
(tests/test_fix_units.py scans for them); the Live page's advice takes the unit's words (checked
below)."""

from __future__ import annotations

import ast
from pathlib import Path

from gpuscope.vocabulary import causes, nvml_fields

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("app", "ingest", "analysis", "store")  # vocabulary/ is where the words are written

#: Words the scan cannot hold to one meaning: ``other`` and ``communication`` are also kernel
#: categories (gpuscope.analysis.kernels), critical-path kinds and plain English; their cause use
#: goes through causes.OTHER / causes.COMMUNICATION, but a literal elsewhere is no mistake.
SHARED_WORDS = frozenset({causes.OTHER, causes.COMMUNICATION})
WORDS = (frozenset(causes.CAUSE_IDS) | frozenset(nvml_fields.NVML_METRIC_FIELDS)) - SHARED_WORDS

#: Files that other branches rewrite on the same day (report, ranks, gains, ingest speed, the Run
#: page): their literals are counted, not yet replaced, so that the merge stays mechanical; the
#: count may only go down (re-run the rewrite after the merge, then delete the entry).
PENDING: dict[str, int] = {}


def spelled_out(path: Path) -> list[tuple[int, str]]:
    """(line, word) of every string constant of ``path`` that is a vocabulary word (docstrings
    aside)."""
    tree = ast.parse(path.read_text(), str(path))
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docs.add(id(body[0].value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in WORDS and id(n) not in docs
    ]


def findings(repo: Path = REPO) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            found = spelled_out(path)
            if found:
                out[str(path.relative_to(repo))] = found
    return out


def test_no_cause_or_nvml_field_is_spelled_out_outside_the_vocabulary() -> None:
    found = findings()
    new = {f: hits for f, hits in found.items() if len(hits) > PENDING.get(f, 0)}
    assert not new, f"spell these through gpuscope.vocabulary: {new}"
    stale = {f: n for f, n in PENDING.items() if len(found.get(f, [])) < n}
    assert not stale, f"fewer literals than PENDING says (lower the count): {stale}"


def test_the_scan_finds_a_literal_and_skips_docstrings(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "page.py").write_text(
        '"""Mentions "data_loading" in prose."""\n'
        "def f(row):\n"
        '    """power_w"""\n'
        '    return row["power_w"], row.get("host_sync"), "other"\n'
    )
    assert findings(tmp_path) == {"app/page.py": [(4, "power_w"), (4, "host_sync")]}


def test_each_word_is_defined_once() -> None:
    assert len(set(causes.CAUSE_IDS)) == len(causes.CAUSES) == len(causes.BY_ID)
    assert set(causes.EVIDENCE_CAUSES) | set(causes.HOST_CAUSES) == set(causes.CAUSE_IDS)
    assert len(set(nvml_fields.NVML_METRIC_FIELDS)) == len(nvml_fields.NVML_METRIC_FIELDS)
    assert len({c.colour for c in causes.CAUSES}) == len(causes.CAUSES)  # no two alike


def test_the_live_page_and_the_run_page_give_one_text_per_fix() -> None:
    """The Live page's advice for a sawtooth and for irregular idle is the Run page's fix, word for
    word (title and code): the fix unit's."""
    from types import SimpleNamespace

    from gpuscope.analysis.fixes import dataloader_workers, host_sync
    from gpuscope.web.advice import what_to_do

    saw = what_to_do(SimpleNamespace(idle_share_pct=40.0, period_s=0.5, timescale="step"))
    assert (saw.fix_id, saw.title, saw.code) == (
        "dataloader_workers",
        "Load batches in background workers",
        dataloader_workers.WORDS.code,
    )
    rough = what_to_do(SimpleNamespace(idle_share_pct=40.0, period_s=None, timescale="step"))
    assert (rough.fix_id, rough.title, rough.code) == (
        "host_sync",
        "Stop synchronising with the GPU every step",
        host_sync.WORDS.code,
    )

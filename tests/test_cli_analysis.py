"""`gpuscope analyze/compare/check`: JSON keys kept in step with docs/cli-json.md, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import analysis_store, run_cli
from gpuscope.analysis.idle import CAUSES
from test_analysis_recommendations import after_like, before_like

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli-json.md"
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|")


@pytest.fixture
def db_path(tmp_path: Path) -> Path | str:
    """The store the CLI is handed: the commands' output, not the store, is the subject."""
    return analysis_store(tmp_path)


def documented(section: str) -> tuple[set[str], set[str]]:
    """(every documented key path, those not broken down: `map` and `list`) of one section."""
    text = DOC.read_text(encoding="utf-8")
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    keys, leaves = set(), set()
    for line in part.splitlines():
        m = ROW.match(line)
        if m:
            keys.add(m.group(1))
            if m.group(2).strip() in ("map", "list"):
                leaves.add(m.group(1))
    return keys, leaves


def key_paths(obj, leaves: set[str], prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            if p not in leaves:
                out |= key_paths(v, leaves, p)
    elif isinstance(obj, list) and prefix not in leaves:
        for v in obj:
            out |= key_paths(v, leaves, prefix + "[]")
    return out


@pytest.fixture
def traces(tmp_path):
    return before_like().write(tmp_path / "before.json"), after_like().write(
        tmp_path / "after.json"
    )


@pytest.mark.slow
def test_analyze_json_matches_docs(traces, db_path, capsys):
    before, _ = traces
    code, out, err = run_cli(capsys, "analyze", str(before), "--json", "--db", str(db_path))
    assert code == 0, err
    doc = json.loads(out)
    keys, leaves = documented("analyze")
    got = key_paths(doc, leaves)
    assert got - keys == set(), "output keys missing from docs/cli-json.md"
    assert keys - got == set(), "documented keys missing from the output"
    assert set(doc["idle"]["causes"]) == set(CAUSES) == set(doc["idle"]["causes_pct"])
    assert sum(doc["idle"]["causes"].values()) == pytest.approx(doc["idle"]["total_us"])
    assert {"dataloader_workers", "mixed_precision"} <= {r["id"] for r in doc["recommendations"]}
    # by run id, and the readable form
    code, text, _ = run_cli(capsys, "analyze", doc["run"]["id"][:6], "--db", str(db_path))
    assert code == 0 and "recommendations:" in text and "[dataloader_workers]" in text


@pytest.mark.slow
def test_compare_json_matches_docs_and_table(traces, db_path, capsys):
    before, after = traces
    code, out, err = run_cli(
        capsys, "compare", str(before), str(after), "--json", "--db", str(db_path)
    )
    assert code == 0, err
    doc = json.loads(out)
    keys, leaves = documented("compare")
    got = key_paths(doc, leaves)
    assert got - keys == set() and keys - got == set()
    assert "dataloader_workers" in doc["recommendations"]["resolved"]
    code, text, _ = run_cli(capsys, "compare", "before", "after", "--db", str(db_path))
    # issue 9: the speed-up line is by throughput ("B processes N× the samples per second"),
    # no longer a step-time ratio called "speed-up"
    assert code == 0 and "resolved by B" in text and "× the samples per second of A" in text


@pytest.mark.slow
def test_check_exit_codes(traces, db_path, capsys):
    before, after = traces
    db = ["--db", str(db_path)]
    code, out, _ = run_cli(
        capsys, "check", str(after), "--max-idle-pct", "50", "--max-step-ms", "10", *db
    )
    assert code == 0 and out.strip().endswith(": ok")
    # the same path again: already ingested, found by content (duplicates are fine)
    code, out, err = run_cli(capsys, "check", str(before), "--max-idle-pct", "20", *db)
    assert code == 1 and out == "" and err.count("\n") == 1 and "--max-idle-pct 20" in err
    code, _, err = run_cli(capsys, "check", "before", "--max-step-ms", "5", *db)
    assert code == 1 and "step time 8.000 ms > --max-step-ms 5" in err
    code, _, err = run_cli(capsys, "check", "before", "--min-busy-pct", "90", *db)
    assert code == 1 and "--min-busy-pct 90" in err
    # bad input: 2
    assert run_cli(capsys, "check", "no-such-run", "--max-idle-pct", "5", *db)[0] == 2
    assert run_cli(capsys, "check", "before", *db)[0] == 2  # no bound
    code, _, err = run_cli(capsys, "check", "before", "--min-mfu-pct", "10", *db)
    assert code == 2 and "MFU unknown" in err  # no FLOPs in this trace
    code, _, err = run_cli(
        capsys, "check", "before", "--min-mfu-pct", "10", "--model-flops-per-step", "1e9", *db
    )
    assert code == 1 and "MFU" in err and "--min-mfu-pct 10" in err
    assert run_cli(capsys, "analyze", "before", "--rank", "3", *db)[0] == 2


@pytest.mark.slow
def test_module_entry_point(traces, db_path):
    before, _ = traces
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope",
            "check",
            str(before),
            "--max-idle-pct",
            "1",
            "--db",
            str(db_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and p.stderr.startswith("gpuscope: ") and p.stderr.count("\n") == 1

"""The vocabulary is defined once (gpuscope.analysis.event_classes) and docs/metrics.md says the same:
its event-class table is the generated one, its precedence list names the causes in the code's
order, and the NVML field list is the store's. Every analysis module reads the one definition."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.analysis import event_classes as E
from gpuscope.analysis import idle, kernels, steps, store_access
from gpuscope.store.schema import NVML_SAMPLES

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "metrics.md").read_text()


def test_metrics_md_lists_the_codes_classes_patterns_and_causes():
    assert E.vocabulary_markdown() in DOC, (
        "docs/metrics.md 'Event classes' differs from event_classes.vocabulary_markdown(): "
        "paste the generated table"
    )


def test_metrics_md_precedence_is_the_codes():
    section = DOC[DOC.index("### Precedence") : DOC.index("**Evidence**")]
    listed = re.findall(r"^\s*\d\. \*\*`(\w+)`\*\*", section, re.MULTILINE)
    assert tuple(listed) == E.CAUSES
    assert idle.CAUSES is E.CAUSES and idle.EVIDENCE_CLASSES is E.EVIDENCE_CLASSES


def test_nvml_fields_are_the_stores_columns():
    keys = ("run_id", "series_id", "gpu", "gpu_uuid", "gpu_name", "t_ns")
    assert tuple(c for c in NVML_SAMPLES.column_names if c not in keys) == E.NVML_METRIC_FIELDS


def test_the_app_reads_the_nvml_fields_and_causes_from_the_vocabulary():
    """The sampler polls, the Live page holds and saves the vocabulary's NVML fields, and the
    palette colours and labels exactly its causes in its order (the legend's order): no copy of
    either list anywhere in the app."""
    import pandas as pd
    from gpuscope.sampler import nvml_api
    from gpuscope.web import live, palette

    assert nvml_api.NVML_METRIC_FIELDS is E.NVML_METRIC_FIELDS
    body = {"samples": [{"t_ns": 1, "gpus": [{"gpu": 0, "power_w": 10.0}]}]}
    assert list(live.parse(body).rows.columns) == ["t_ns", "gpu", *E.NVML_METRIC_FIELDS]
    rows = pd.DataFrame([{"t_ns": 1, "gpu": 0, **dict.fromkeys(E.NVML_METRIC_FIELDS, 1.0)}])
    window = live.window_of(rows, host="h", gpus=[], interval_ms=100)
    assert live.GpuReading.__struct_fields__ == ("gpu", *E.NVML_METRIC_FIELDS)
    assert window.samples[0].gpus[0] == live.GpuReading(0, *[1] * len(E.NVML_METRIC_FIELDS))
    assert tuple(palette.CAUSES) == E.CAUSES, "a cause without a colour, or a colour of no cause"
    assert tuple(palette.CAUSE_TEXT) == E.CAUSES
    spelled = re.compile(r"^\s*\"(gpu_util_pct|launch_overhead)\",$")
    offenders = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sorted((REPO / "app").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert offenders == []


def test_name_rules_are_read_from_one_place():
    for name in ("PROFILER_STEP_RE", "OPTIMIZER_RE", "DATALOADER_RE", "COMM_RE", "SYNC_APIS"):
        assert getattr(store_access, name) is getattr(E, name)
    assert steps.PROFILER_STEP_RE is E.PROFILER_STEP_RE
    # the optimizer region of the kernel breakdown uses the same pattern as everything else
    assert E.OPTIMIZER_RE in kernels.OPTIMIZER_NAMES_SQL.replace("''", "'")
    # no other module spells a copy of a rule or a class
    copies = re.compile(
        r"LIKE 'ProfilerStep|LIKE 'Optimizer|ProfilerStep#\\d|Optimizer\\\.|[\"']gpu_memcpy[\"']"
        r"|[\"']cuda_runtime[\"']|\"gpu_util_pct\",$|DataLoader\.\*"
    )
    offenders = [
        f"{p.name}:{i}: {line.strip()}"
        for p in sorted((REPO / "analysis").glob("*.py"))
        if p.name != "event_classes.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if copies.search(line)
    ]
    assert offenders == []


def test_gpu_activity_predicate_is_the_one_definition():
    assert (
        f"ph = '{E.GPU_ACTIVITY_PHASE}' AND cat IN {store_access.sql_list(E.GPU_CATS)} "
        "AND dur_ns > 0"
    ) == store_access.GPU_ACTIVITY_SQL
    # the rules are valid in both engines: Python re and DuckDB's RE2
    import duckdb

    con = duckdb.connect()
    for pat, yes, no in [
        (E.PROFILER_STEP_RE, "ProfilerStep#12", "ProfilerStep#x"),
        (E.OPTIMIZER_RE, "Optimizer.step#AdamW.step", "Optimizer.stepper"),
        (E.DATALOADER_RE, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "next"),
        (E.COMM_RE, "nccl:all_reduce", "aten::add"),
    ]:
        for name, want in ((yes, True), (no, False)):
            assert bool(re.search(pat, name)) is want
            assert con.execute("SELECT regexp_matches(?, ?)", [name, pat]).fetchone()[0] is want

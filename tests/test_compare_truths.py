"""Compare says what it means (issue 23): every figure profiled or unprofiled, the unprofiled
throughput first, how much of each trace is profiler overhead, percentage points for percentages,
a noise threshold ("unchanged"), and a change coloured by whether it is good for the user. On the
real before/after samples (sample_traces/), through the analysis and through `gpuscope compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import run_cli
from gpuscope.analysis.compare import NOISE_PP, Delta, compare_view
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import connect

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def test_percentages_change_in_points_and_noise_is_unchanged() -> None:
    busy = Delta("gpu_busy_pct", "%", 43.2, 34.7, "higher")
    assert busy.delta_pct is None  # never a percentage of a percentage
    assert busy.change == "-8.5 pp" and busy.verdict == "worse"
    assert Delta("x", "%", 40.0, 40.0 + NOISE_PP / 2, "higher").verdict == "unchanged"
    opt = Delta("optimizer", "µs/step", 569.0, 568.0, "lower")  # 0.18 %: noise
    assert (opt.change, opt.verdict, opt.improved) == ("unchanged", "unchanged", None)
    step = Delta("step_time_ms", "ms", 11.3, 8.12, "lower")
    assert (step.change, step.verdict) == ("-28.1 %", "better")
    assert Delta("k", "µs/step", 0.0, 52.8, "lower").change == "new"
    doc = busy.to_json()
    assert (doc["basis"], doc["change"], doc["verdict"]) == ("profiled", "-8.5 pp", "worse")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    db = f"duckdb:{tmp_path_factory.mktemp('cmp') / 'store.duckdb'}"  # a file: analysis, not the store
    con = connect(db)
    ids = {}
    for name in ("before", "after"):
        [res] = ingest_paths(con, [SAMPLES / name / f"{name}_rank0.pt.trace.json.gz"])
        ids[name] = res.run_id
    yield con, ids, db
    con.close()


@pytest.mark.slow
def test_cards_lead_with_unprofiled_throughput_and_colour_by_the_user(
    samples, kept_analyses
) -> None:  # type: ignore[no-untyped-def]
    con, ids, _ = samples
    a = analyze_run(con, ids["before"], all_ranks=False)
    b = analyze_run(con, ids["after"], all_ranks=False)
    view = compare_view(a, b)
    cards = {c.key: c for c in view.cards}
    assert [c.key for c in view.cards][:2] == ["throughput", "step_time"]
    tp, step = cards["throughput"], cards["step_time"]
    # the samples carry their unprofiled step time: the cards use it, and say so
    assert tp.basis == step.basis == "unprofiled"
    assert tp.a == pytest.approx(a.throughput.tokens_per_s_untraced)
    assert step.a == pytest.approx(a.profiler.untraced_step_ms)
    assert tp.tone == "good" and step.tone == "good" and tp.delta == "+455.9 %"
    # B is faster, yet its busy share fell and its idle per step rose: not red, and it says why
    busy, idle = cards["gpu_busy"], cards["idle_per_step"]
    assert busy.basis == idle.basis == "profiled"
    assert busy.delta is not None and busy.delta.endswith(" pp") and busy.b < busy.a
    assert busy.tone == "neutral" and idle.tone == "neutral"
    assert busy.why and "faster" in busy.why
    # how much of each trace is the profiler's own cost
    over = view.comparison.profiler_overhead_pct
    pc = b.profiler
    assert over["b"] == pytest.approx(
        100 * (pc.traced_step_ms - pc.untraced_step_ms) / pc.traced_step_ms
    )
    assert view.overhead_text and f"{over['b']:.0f}% of B's trace is profiler overhead" in (
        view.overhead_text
    )
    # no kernel name on the page reads like another
    tops = next(s for s in view.sections if s.title.startswith("Kernels"))
    names = [d.metric for d in tops.rows]
    assert len(set(names)) == len(names) and all(len(n) <= 64 for n in names)


@pytest.mark.slow
def test_cli_compare_says_basis_points_and_unchanged(samples, kept_analyses, capsys) -> None:  # type: ignore[no-untyped-def]
    _, ids, db = samples
    code, out, _ = run_cli(capsys, "compare", ids["before"], ids["after"], "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    busy = next(ln for ln in lines if ln.startswith("gpu_busy_pct"))
    assert " profiled " in busy and " pp " in busy and "%  %" not in busy
    unprof = next(ln for ln in lines if ln.startswith("samples_per_s_untraced"))
    assert " unprofiled " in unprof and "better" in unprof
    opt = next(ln for ln in lines if ln.startswith("optimizer"))
    assert "unchanged" in opt and "better" not in opt and "worse" not in opt
    assert "of B's trace is profiler overhead" in out
    kernels = lines[lines.index(next(ln for ln in lines if ln.startswith("kernels that"))) + 1 :]
    labels = [ln[:44] for ln in kernels if ln and not ln.startswith("recommendations")][:10]
    assert len(set(labels)) == len(labels)  # truncated names stay distinct
    code, out, _ = run_cli(
        capsys, "compare", ids["before"], ids["after"], "--db", str(db), "--json"
    )
    doc = json.loads(out)
    m = {d["metric"]: d for d in doc["metrics"]}
    assert m["gpu_busy_pct"]["delta_pct"] is None and m["gpu_busy_pct"]["change"].endswith("pp")
    assert (
        m["untraced_step_ms"]["basis"] == "unprofiled" and m["step_time_ms"]["basis"] == "profiled"
    )
    assert m["flops_per_step"]["basis"] is None
    assert doc["profiler_overhead_pct"]["b"] > doc["profiler_overhead_pct"]["a"] > 0


README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_figures() -> list[str]:
    """The lines of README's figures block (after its ``<!-- figures: ... -->`` marker)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- figures:", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    return [ln for ln in block.splitlines() if ln.strip()]


@pytest.mark.slow
def test_readme_quotes_what_gpuscope_prints_on_the_samples(samples, kept_analyses, capsys) -> None:  # type: ignore[no-untyped-def]
    """One source for README's figures: each line of its figures block is a line that
    `gpuscope compare before after` or `gpuscope analyze` prints on the sample runs, and the
    samples/s it quotes in prose are those lines' figures."""
    _, ids, db = samples
    printed: list[str] = []
    for args in (
        ("compare", ids["before"], ids["after"]),
        ("analyze", ids["before"]),
        ("analyze", ids["after"]),
    ):
        code, out, _ = run_cli(capsys, *args, "--db", str(db))
        assert code == 0
        printed += out.splitlines()
    figures = _readme_figures()
    assert len(figures) == 3
    for line in figures:
        assert line in printed, f"README says {line!r}; gpuscope prints no such line"
    unprofiled = [ln.split(", ")[1].split()[0] for ln in figures if "samples/s profiled" in ln]
    text = README.read_text(encoding="utf-8")
    speedup = figures[0].split("×")[0].split()[-1]
    assert f"{unprofiled[0]} → {unprofiled[1]} samples/s ({speedup}×)" in text


@pytest.mark.slow
def test_analyze_text_has_the_kernel_breakdown_and_top_kernels(
    samples, kept_analyses, capsys
) -> None:  # type: ignore[no-untyped-def]
    _, ids, db = samples
    code, out, _ = run_cli(capsys, "analyze", ids["before"], "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    i = lines.index("kernel time per step, by category")
    assert lines[i + 1].split()[0] == "gemm" and "ms per step" in lines[i + 1]
    j = next(k for k, ln in enumerate(lines) if ln.startswith("top kernels (per step)"))
    rows = lines[j + 1 : j + 11]
    names = [r[2:62] for r in rows]
    assert len(set(names)) == 10  # the cutlass and xmma GEMMs no longer read alike
    assert sum("cutlass::Kernel2<" in n for n in names) == 3
    assert all(r.rstrip().endswith(("fp32", "3xtf32", "-")) for r in rows)
    assert "step time (profiled)" in out and "709 unprofiled" in out

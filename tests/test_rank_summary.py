"""Rank summaries: computed in the ingest's transaction, stored with each rank, read by analyze,
recomputed when their version changes (gpuscope.analysis.rank_summary)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from clitools import analysis_spec, analysis_store, run_cli
from gpuscope.analysis import rank_summary as RS
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.errors import IngestError
from gpuscope.ingest.loader import ingest_paths
from gpuscope.store import RUN_TABLES, connect
from hypothesis import given, settings
from hypothesis import strategies as st
from tracegen import TraceBuilder, two_rank_job

REPO = Path(__file__).resolve().parent.parent
DDP = REPO / "sample_traces" / "ddp"


def EVERY_RUN(con, result) -> None:  # type: ignore[no-untyped-def]
    """The mechanism for a run of any number of ranks (the default hook stores one-rank runs')."""
    RS.write_rank_summaries(con, str(result.run_id))


def one_gpu(path: Path) -> Path:
    """A single-GPU trace (no world size): 3 steps of 100 µs, one kernel of 50 µs in each."""
    t = TraceBuilder()
    for n in range(3):
        t0 = 1000.0 + 100.0 * n
        t.step(n, t0, 100.0)
        t.launch("volta_sgemm_128x64_nn", t0 + 1.0, t0 + 5.0, 50.0)
    return t.write(path)


@pytest.mark.slow
def test_the_ingest_hook_stores_every_ranks_cross_rank_part_and_one_rank_runs_all(
    tmp_path: Path,
) -> None:
    # small runs of each shape in an in-memory store (clitools.analysis_spec; the lake under
    # GPUSCOPE_TESTS_ON_LAKE=1): which parts the hook stores for which run is the subject (what
    # they hold on the real samples: the tests below and tests/test_report_part.py)
    job = two_ranks(tmp_path / "t")
    with connect(analysis_spec(tmp_path, "s")) as con:
        two = ingest_paths(con, [job], after_trace=RS.store_after_ingest_with_document)[0].run_id
        one = one_gpu(tmp_path / "one.json")
        single = ingest_paths(con, [one], after_trace=RS.store_after_ingest_with_document)[0].run_id
        parts = "SELECT rank, part FROM rank_summaries WHERE run_id = ? ORDER BY ALL"
        # every run: its analyze document once, under its lowest rank (report_part)
        assert con.execute(parts, [two]).fetchall() == [
            (0, "cross_rank"),
            (0, "report"),
            (1, "cross_rank"),
        ]
        # a single-GPU run (no world size) needs no cross-rank part
        assert {p for _, p in con.execute(parts, [single]).fetchall()} == set(RS.PARTS) - {
            "cross_rank"
        } | {"report"}
        # one rank of a job of two (the other node reports later) gets it too
        rank0 = ingest_paths(
            con, [job / "rank0.json"], after_trace=RS.store_after_ingest_with_document
        )[0].run_id
        assert {p for _, p in con.execute(parts, [rank0]).fetchall()} == set(RS.PARTS) | {"report"}


def two_ranks(folder: Path, *, busy: tuple[float, float] = (80.0, 20.0)) -> Path:
    """Two rank files: 3 steps of 100 µs; rank r runs one kernel of ``busy[r]`` µs per step."""
    return two_rank_job(folder, busy)


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in RUN_TABLES}


def stored(con, run_id: str) -> dict[tuple[int, str], tuple[int, dict]]:
    rows = con.execute(
        "SELECT rank, part, version, doc FROM rank_summaries WHERE run_id = ?", [run_id]
    ).fetchall()
    out = {(r, p): (v, json.loads(d)) for r, p, v, d in rows}
    for (_, part), (_, doc) in out.items():
        if part == "report":  # its stamp hashes the run's row, which holds its ingest's time
            doc.pop("stamp")
    return out


RANK0 = DDP / "ddp_rank0.pt.trace.json.gz"
#: A run's id and its stored parts (:func:`stored`).
Parts = tuple[str, dict[tuple[int, str], tuple[int, dict]]]


def _small_rank0(tmp_path: Path, hook: Callable[..., object]) -> Parts:
    """The DDP sample's rank 0 (one rank of a world of 2, small enough to copy) ingested with
    ``hook`` into an in-memory store (clitools.analysis_spec): its parts computed inside the
    ingest's transaction, the reference the big-rank tests hold the lake's parts to."""
    with connect(analysis_spec(tmp_path, "small")) as con:
        run_id = ingest_paths(con, [RANK0], after_trace=hook)[0].run_id
        return str(run_id), stored(con, run_id)


# The references, made once for the module (each before the first test that asks for it runs,
# so under no test's monkeypatching); each test gets its own copy of one.
@pytest.fixture(scope="module")
def _small_parts(tmp_path_factory: pytest.TempPathFactory) -> Parts:
    return _small_rank0(tmp_path_factory.mktemp("small_parts"), RS.store_after_ingest)


@pytest.fixture(scope="module")
def _small_parts_and_document(tmp_path_factory: pytest.TempPathFactory) -> Parts:
    return _small_rank0(
        tmp_path_factory.mktemp("small_document"), RS.store_after_ingest_with_document
    )


@pytest.fixture
def small_parts(_small_parts: Parts) -> Parts:
    """RANK0's parts under ``RS.store_after_ingest`` (a small rank's, a copy for the test)."""
    return copy.deepcopy(_small_parts)


@pytest.fixture
def small_parts_and_document(_small_parts_and_document: Parts) -> Parts:
    """RANK0's parts and run document under ``RS.store_after_ingest_with_document`` (a copy)."""
    return copy.deepcopy(_small_parts_and_document)


@pytest.mark.slow
def test_ingest_stores_every_part_of_every_rank_at_its_version(tmp_path: Path, capsys) -> None:
    with connect(analysis_spec(tmp_path, "s")) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "t")], after_trace=EVERY_RUN)[0].run_id
        rows = stored(con, run_id)
    assert set(rows) == {(r, p) for r in (0, 1) for p in RS.PARTS}
    assert all(v == RS.PARTS[p].version for (_, p), (v, _) in rows.items())
    # hand-computed: 3 steps of 100 µs, rank 0 busy 80 µs per step, rank 1 busy 20 µs per step
    assert rows[(0, "rank_row")][1]["gpu_busy_pct"] == pytest.approx(80.0, abs=0.5)
    assert rows[(1, "rank_row")][1]["gpu_busy_pct"] == pytest.approx(20.0, abs=0.5)
    assert [s["number"] for s in rows[(1, "steps")][1]] == [0, 1, 2]
    assert [s["busy_pct"] for s in rows[(1, "steps")][1]][:2] == pytest.approx([20.0, 20.0])
    assert rows[(0, "headline")][1]["step_time_ms"]["mean"] == pytest.approx(0.1, rel=0.06)
    assert rows[(1, "kernels")][1]["total_us"] == pytest.approx(60.0)


@pytest.mark.slow
def test_analyze_reads_the_other_ranks_from_their_summaries(tmp_path: Path) -> None:
    with connect(analysis_spec(tmp_path, "s")) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "t")], after_trace=EVERY_RUN)[0].run_id
        from_events = analyze_run(con, run_id, rank=0).to_json()["ranks"]
        # a stored part is what analyze shows for that rank (it does not go back to the events)
        doc = stored(con, run_id)[(1, "cross_rank")][1]
        con.execute(
            "UPDATE rank_summaries SET doc = ? WHERE run_id = ? AND rank = 1 AND part = 'cross_rank'",
            [json.dumps({**doc, "busy_pct": 12.5}), run_id],
        )
        shown = analyze_run(con, run_id, rank=0).to_json()["ranks"]
    assert from_events[1]["gpu_busy_pct"] == pytest.approx(20.0, abs=0.5)
    assert shown[1]["gpu_busy_pct"] == 12.5
    assert shown[0] == from_events[0]  # the analysed rank itself comes from its events


def doctored(con, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    """Two ranks ingested with every part stored, rank 1's cross-rank part then doctored to say
    12.5 % busy (its events say 20 %): whoever shows 12.5 read the stored part."""
    run_id = ingest_paths(con, [two_ranks(tmp_path / "t")], after_trace=EVERY_RUN)[0].run_id
    doc = stored(con, run_id)[(1, "cross_rank")][1]
    con.execute(
        "UPDATE rank_summaries SET doc = ? WHERE run_id = ? AND rank = 1 AND part = 'cross_rank'",
        [json.dumps({**doc, "busy_pct": 12.5}), run_id],
    )
    return str(run_id)


@pytest.mark.slow
def test_a_fresh_analyze_process_reads_the_stored_parts(tmp_path: Path) -> None:
    """``gpuscope analyze`` in a process of its own reads the ranks' stored parts (a doctored
    part shows), not their events (the same JSON, 18x slower at 128 ranks): the command imports
    the module that installs them as the report's source, now that it no longer imports every
    other command's modules."""
    import subprocess
    import sys

    # a DuckDB file (clitools.analysis_store; the lake under GPUSCOPE_TESTS_ON_LAKE=1): what the
    # fresh process imports is the subject, not the store it opens
    db = str(analysis_store(tmp_path))
    with connect(db) as con:
        run_id = doctored(con, tmp_path)
    cli = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "analyze", run_id, "--db", db, "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert json.loads(cli.stdout)["ranks"][1]["gpu_busy_pct"] == 12.5


@pytest.mark.slow
def test_summaries_give_the_figures_the_events_give_on_the_real_ddp_pair(tmp_path: Path) -> None:
    from gpuscope.analysis.report import rank_row

    # no summaries: the lines from the events, after ingest
    with connect(analysis_spec(tmp_path, "a")) as con:
        plain = ingest_paths(con, [DDP])[0].run_id
        direct = [rank_row(con, plain, r) for r in (0, 1)]
    # computed inside the ingest's transaction, stored
    with connect(analysis_spec(tmp_path, "b")) as con:
        run_id = ingest_paths(con, [DDP], after_trace=EVERY_RUN)[0].run_id
        assert len(stored(con, run_id)) == 2 * len(RS.PARTS)
        # (details=False, as `check`: the other rank's line is its stored summary)
        via = analyze_run(con, run_id, rank=0, details=False).to_json()["ranks"]
    assert run_id == plain
    assert via[1] == direct[1].to_json()
    assert direct[1].gpu_busy_pct != direct[0].gpu_busy_pct


@pytest.mark.slow
def test_a_stale_version_is_not_read_and_refresh_stores_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(analysis_spec(tmp_path, "s")) as con:
        run_id = doctored(con, tmp_path)
        newer = dataclasses.replace(RS.CROSS_RANK, version=RS.CROSS_RANK.version + 1)
        monkeypatch.setitem(RS.PARTS, "cross_rank", newer)
        monkeypatch.setattr(RS, "CROSS_RANK", newer)
        monkeypatch.setattr(RS.rank_frames, "VERSION", newer.version)  # what the facade reads
        shown = analyze_run(con, run_id, rank=0).to_json()["ranks"]
        assert shown[1]["gpu_busy_pct"] == pytest.approx(20.0, abs=0.5)  # not the stale 12.5
        assert RS.refresh(con, run_id, ["cross_rank"]) == 2  # refresh stores the new version
        rows = stored(con, run_id)
    assert rows[(1, "cross_rank")][0] == newer.version
    assert rows[(1, "cross_rank")][1]["busy_pct"] == pytest.approx(20.0, abs=0.5)
    assert rows[(0, "cross_rank")][0] == newer.version
    assert rows[(1, "headline")][0] == RS.HEADLINE.version  # other parts untouched


@pytest.mark.slow
def test_an_analysis_writes_no_summaries(tmp_path: Path) -> None:
    """Analyses only read: a run of several ranks is read from its events with its collectives
    matched, so storing per-rank lines on the way would cost a write nobody reads."""
    with connect(analysis_spec(tmp_path, "s")) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "t")])[0].run_id
        assert stored(con, run_id) == {}
        doc = analyze_run(con, run_id, rank=0).to_json()
        assert stored(con, run_id) == {}
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]


@pytest.mark.slow
def test_a_failing_part_rolls_the_whole_ingest_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def broken(con, run_id: str, rank: int) -> dict:
        raise IngestError(f"rank {rank}", "summary part failed")

    monkeypatch.setitem(RS.PARTS, "broken", RS.SummaryPart("broken", 1, "fails on rank 1", broken))
    db = tmp_path / "s"
    with connect(db) as con:
        before = counts(con)
    one = DDP.parent / "before" / "before_rank0.pt.trace.json.gz"  # the hook runs for one rank
    code, out, err = run_cli(capsys, "ingest", str(one), "--db", str(db))
    assert code != 0 and out == ""
    assert err.strip().splitlines() == ["gpuscope: rank 0: summary part failed"]
    with connect(db) as con:
        assert counts(con) == before  # nothing half-written: no run, rank, event or summary


def test_the_registry_refuses_a_name_taken_and_a_bad_version() -> None:
    with pytest.raises(ValueError, match="registered already"):
        RS.register(RS.SummaryPart("rank_row", 1, "another", lambda c, r, k: {}))
    with pytest.raises(ValueError, match="version"):
        RS.register(RS.SummaryPart("zero", 0, "bad", lambda c, r, k: {}))
    with pytest.raises(ValueError, match="no summary part"):
        RS.missing(None, "x", ["nope"])  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_new_part_plugs_in_and_runs_stored_before_get_it_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(analysis_spec(tmp_path, "s")) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "t")], after_trace=EVERY_RUN)[0].run_id
        part = RS.SummaryPart(
            "n_kernels",
            1,
            "kernels of the rank",
            lambda c, r, k: c.execute(
                "SELECT count(*) FROM events WHERE run_id = ? AND rank = ? AND cat = 'kernel'",
                [r, k],
            ).fetchone()[0],
        )
        monkeypatch.setitem(RS.PARTS, "n_kernels", part)
        assert RS.load(con, run_id, "n_kernels", compute=False) == {}
        assert RS.load(con, run_id, "n_kernels") == {0: 3, 1: 3}  # computed, not stored
        assert RS.refresh(con, run_id, ["n_kernels"]) == 2
        assert RS.load(con, run_id, "n_kernels", compute=False) == {0: 3, 1: 3}


@pytest.mark.slow
def test_the_runs_list_figures_come_from_the_summaries_alone(tmp_path: Path) -> None:
    from gpuscope.analysis.run_views import run_summary, stored_run_summary

    with connect(analysis_spec(tmp_path, "s")) as con:
        bare = ingest_paths(con, [two_ranks(tmp_path / "t", busy=(30.0, 70.0))])[0].run_id
        assert stored_run_summary(con, bare) is None  # stored before summaries: not known yet
        # several ranks, every part stored (a small job: any run of several ranks; the real
        # one-rank sample below is the one whose figures are compared): the wait beside busy
        # needs the collectives matched across them
        job = two_ranks(tmp_path / "j", busy=(60.0, 40.0))
        several = ingest_paths(con, [job], after_trace=EVERY_RUN)[0].run_id
        assert len(stored(con, several)) == 2 * len(RS.PARTS)
        assert stored_run_summary(con, several) is None
        one = DDP.parent / "before" / "before_rank0.pt.trace.json.gz"
        run_id = ingest_paths(con, [one], after_trace=RS.store_after_ingest)[0].run_id
        # the list shows the job's verdict (a run of one rank: the job is that rank)
        from gpuscope.analysis.job import diagnose

        expected = run_summary(diagnose(con, run_id, lambda r: analyze_run(con, run_id, rank=r)))
        con.execute("DELETE FROM events WHERE run_id = ?", [run_id])  # no events to read now
        got = stored_run_summary(con, run_id)
    assert got == expected
    assert got is not None and got.busy_pct is not None and got.step_ms is not None


@pytest.mark.slow
def test_a_store_made_before_the_table_gets_it_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "s"
    with connect(db) as con:
        run_id = ingest_paths(con, [two_ranks(tmp_path / "t")])[0].run_id
        con.execute("DROP TABLE rank_summaries")  # as a schema-3 store of before this table
    with connect(db) as con:  # the open adds it (an additive table: the version stays 3)
        assert con.execute("SELECT count(*) FROM rank_summaries").fetchone() == (0,)
        doc = analyze_run(con, run_id, rank=0).to_json()
        assert con.execute("SELECT count(*) FROM rank_summaries").fetchone() == (0,)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]


@pytest.mark.slow
def test_many_ranks_in_one_ingest_stay_within_the_ingests_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each rank's parts make ~20 working tables; made inside the ingest's transaction DuckDB keeps
    # their memory until the commit (1,024 small ranks ran out of the 160 MB limit): each rank is
    # computed in a database of its own instead
    from gpuscope.ingest import loader

    monkeypatch.setattr(loader, "INGEST_MEMORY_LIMIT", "24MB")
    folder = tmp_path / "t"
    folder.mkdir()
    for rank in range(24):
        t = TraceBuilder(rank=rank, world_size=24)
        for n in range(2):
            t.step(n, 1000.0 + 100.0 * n, 100.0)
            t.launch("volta_sgemm_128x64_nn", 1001.0 + 100.0 * n, 1005.0 + 100.0 * n, 10.0)
        t.write(folder / f"rank{rank}.json")
    with connect(tmp_path / "s") as con:
        run_id = ingest_paths(con, [folder], after_trace=EVERY_RUN)[0].run_id
        n = con.execute(
            "SELECT count(DISTINCT rank) FROM rank_summaries WHERE run_id = ?", [run_id]
        ).fetchone()
    assert n == (24,)


def test_a_ranks_parts_check_the_run_row_once_per_index_and_give_the_same_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts computed on the store itself (a rank too big for a copy): every index checks
    the run row when it is made, never again while the parts are computed (each check is a
    catalog query on a lake), and the parts are those computed with the checks."""
    from gpuscope.analysis import rank_index

    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)  # every rank computed on the store
    made: list[int] = []
    checks: list[int] = []
    init, stamp = rank_index.RankIndex.__init__, rank_index.RankIndex._run_stamp

    def counted_init(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
        made.append(1)
        init(self, *a, **k)

    def counted_stamp(self):  # type: ignore[no-untyped-def]
        checks.append(1)
        return stamp(self)

    with connect(tmp_path / "s") as con:
        run_id = ingest_paths(con, [DDP / "ddp_rank0.pt.trace.json.gz"])[0].run_id
        monkeypatch.setattr(rank_index.RankIndex, "__init__", counted_init)
        monkeypatch.setattr(rank_index.RankIndex, "_run_stamp", counted_stamp)
        assert RS.write_rank_summaries(con, run_id) == len(RS.PARTS)
        assert made and len(checks) == len(made)  # one check each, when made
        first = stored(con, run_id)
        # the same parts when every table checks the run row again
        monkeypatch.setattr(RS, "unchanging", lambda on: contextlib.nullcontext())
        con.execute("DELETE FROM rank_summaries WHERE run_id = ?", [run_id])
        checks.clear()
        made.clear()
        assert RS.write_rank_summaries(con, run_id) == len(RS.PARTS)
        assert len(checks) > len(made)
        assert stored(con, run_id) == first


def _spied(monkeypatch: pytest.MonkeyPatch, name: str, seen: list) -> None:  # type: ignore[type-arg]
    """Part ``name`` records, each time it is computed, whether a second connection to the store
    sees the run (whether the ingest that wrote it has committed)."""
    part = RS.PARTS[name]

    def compute(con, run_id, rank):  # type: ignore[no-untyped-def]
        import duckdb

        try:  # inside the ingest's transaction the other connection may not even read its files
            with connect(STORE[0]) as other:
                q = "SELECT count(*) FROM runs WHERE run_id = ?"
                seen.append(other.execute(q, [run_id]).fetchone() == (1,))
        except duckdb.Error:
            seen.append(False)
        return part.compute(con, run_id, rank)

    monkeypatch.setitem(RS.PARTS, name, dataclasses.replace(part, compute=compute))


STORE: list[Path] = []


def test_a_rank_too_big_to_copy_gets_its_parts_once_the_ingest_has_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts_and_document: Parts
) -> None:
    """Inside the ingest's transaction DuckDB cannot spill a part's working tables, and a 6 GB
    one-rank trace failed with "Out of Memory". A rank too big to copy (here: every rank) gets its
    parts right after the commit, while the run is already visible to others; they are the parts
    a small rank gets inside the transaction, and ingest_paths returns once they are stored."""
    trace = RANK0
    run_id, inside = small_parts_and_document  # the parts a small rank gets inside
    assert len(inside) == len(RS.PARTS) + 1  # one rank of a world of 2: every part, its report
    STORE[:] = [tmp_path / "big"]
    seen: list[bool] = []
    _spied(monkeypatch, "rank_row", seen)
    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)
    with connect(tmp_path / "big") as con:
        assert (
            ingest_paths(con, [trace], after_trace=RS.store_after_ingest_with_document)[0].run_id
            == run_id
        )
        assert stored(con, run_id) == inside
    assert seen == [True], seen  # computed once, after the commit


def test_parts_that_run_out_of_memory_are_computed_again_at_the_next_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts: Parts
) -> None:
    """A rank too big to copy gets its parts on the store under the first of
    PARTS_MEMORY_LIMITS; where DuckDB runs out of memory there (planted: the idle attribution of
    a 6 GB rank did at 64 MB, docs/history/benchmarks-2026-11.md), they are computed again at the next limit and
    stored, the same parts as a small rank's. When the last limit runs out too, the error stands
    and nothing is stored."""
    trace = RANK0
    run_id, inside = small_parts  # the parts a small rank gets inside the ingest's transaction
    tries: list[str] = []  # DuckDB's memory limit each time the part is computed
    part = RS.PARTS["kernels"]
    shown = duckdb.connect()  # how DuckDB writes each limit back
    first, second = (
        shown.execute(f"SET memory_limit = '{m}'")
        .execute("SELECT current_setting('memory_limit')")
        .fetchone()[0]
        for m in ("2000MB", "160MB")
    )
    shown.close()

    def compute(con, run_id, rank):  # type: ignore[no-untyped-def]
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        tries.append(limit)
        if limit == first:
            raise duckdb.OutOfMemoryException("Out of Memory Error: planted")
        return part.compute(con, run_id, rank)

    monkeypatch.setitem(RS.PARTS, "kernels", dataclasses.replace(part, compute=compute))
    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)
    monkeypatch.setattr(RS, "PARTS_MEMORY_LIMITS", ("2000MB", "160MB"))
    with connect(tmp_path / "big") as con:
        assert ingest_paths(con, [trace], after_trace=RS.store_after_ingest)[0].run_id == run_id
        assert stored(con, run_id) == inside
    assert tries == [first, second]

    monkeypatch.setattr(RS, "PARTS_MEMORY_LIMITS", ("2000MB",))
    with connect(tmp_path / "none") as con:
        with pytest.raises(duckdb.OutOfMemoryException, match="planted"):
            ingest_paths(con, [trace], after_trace=RS.store_after_ingest)
        assert stored(con, run_id) == {}  # the run is stored; its parts are computed when read


def test_parts_of_a_run_deleted_while_they_were_computed_are_not_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store_outside_transaction computes outside any transaction; a run deleted (or ingested
    again) before its parts are stored gets none: no rows of a run that is gone."""
    from gpuscope.store import delete_run, transaction

    with connect(tmp_path / "s") as con:
        run_id = ingest_paths(con, [DDP / "ddp_rank0.pt.trace.json.gz"])[0].run_id
        compute = RS._compute_rows

        def then_delete(c, rid, todo, **kw):  # type: ignore[no-untyped-def]
            rows = compute(c, rid, todo, **kw)
            delete_run(c, rid)
            return rows

        monkeypatch.setattr(RS, "_compute_rows", then_delete)
        assert RS.store_outside_transaction(con, run_id, ["rank_row"]) == 0
        n = con.execute("SELECT count(*) FROM rank_summaries WHERE run_id = ?", [run_id])
        assert n.fetchone() == (0,)
        monkeypatch.setattr(RS, "_compute_rows", compute)
        run_id = ingest_paths(con, [DDP / "ddp_rank0.pt.trace.json.gz"])[0].run_id
        assert RS.store_outside_transaction(con, run_id, ["rank_row"]) == 1
        with pytest.raises(ValueError, match="inside a transaction"), transaction(con):
            RS.store_outside_transaction(con, run_id, ["headline"])


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=4)
    ),
    max_leaves=30,
)


def _finite_by_hand(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _finite_by_hand(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite_by_hand(x) for x in v]
    return v


@settings(max_examples=200, deadline=None)
@given(_json_like)
def test_finite_makes_every_nan_and_inf_none_at_any_depth(v):
    got = RS._finite(v)
    assert json.dumps(got, allow_nan=False) == json.dumps(_finite_by_hand(v), allow_nan=False)


def test_part_scratch_compares_constant_lists_without_a_join():
    """The part threads' scratch keeps ``cat IN (...)`` a comparison (the in_clause optimizer is
    off there: ~6 % of a DDP rank's part); the rows are the same (tests/test_parts_while_ingesting.py)."""
    scratch = RS._new_scratch()
    try:
        row = scratch.execute("SELECT current_setting('disabled_optimizers')").fetchone()
        assert "in_clause" in str(row[0]).split(",")
    finally:
        scratch.close()


def test_a_big_ranks_parts_start_from_freed_memory_and_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_parts: Parts
) -> None:
    """A rank too big to copy has its parts computed one after the other on the store: the
    allocators give back what the ingest freed before the first, and the rank's index forgets
    its large values and the allocators give back their pages after each (the 1 GB benchmark's
    summary: docs/history/benchmarks-2026-11.md). The parts are a small rank's."""
    trace = RANK0
    run_id, inside = small_parts  # the parts a small rank gets inside the ingest's transaction
    calls: list[str] = []
    forget = RS.forget_values
    monkeypatch.setattr(RS, "release_free_memory", lambda: calls.append("release"))

    def forgetting(con):  # type: ignore[no-untyped-def]
        calls.append("forget")
        forget(con)

    monkeypatch.setattr(RS, "forget_values", forgetting)
    parts = RS.PARTS
    for name, part in list(parts.items()):

        def compute(con, run_id, rank, _part=part):  # type: ignore[no-untyped-def]
            calls.append(_part.name)
            return _part.compute(con, run_id, rank)

        monkeypatch.setitem(parts, name, dataclasses.replace(part, compute=compute))
    monkeypatch.setattr(RS, "MAX_IN_MEMORY_EVENTS", 0)
    with connect(tmp_path / "big") as con:
        assert ingest_paths(con, [trace], after_trace=RS.store_after_ingest)[0].run_id == run_id
        assert stored(con, run_id) == inside
    want = ["release"]
    for name in parts:
        want += [name, "forget", "release"]
    assert calls[: len(want)] == want
    # then the run's analyze document (report_part), which reads the rank_row's stored line
    assert set(calls[len(want) :]) <= {"rank_row", "headline", "steps", "kernels", "cross_rank"}

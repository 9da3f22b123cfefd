"""``resolve_run``: a run id, a unique prefix of one, or a run name -> the run id. It matches in
Python (a bound parameter would make duckdb import pandas); checked against the SQL it replaced,
on random stores and references."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
from gpuscope.store import AmbiguousRunName, resolve_run
from gpuscope.store.runs import match_run
from hypothesis import given, settings
from hypothesis import strategies as st

# the former statement, kept as the reference
REFERENCE = (
    "SELECT run_id, name FROM runs WHERE run_id = ? OR name = ? OR starts_with(run_id, ?) "
    "ORDER BY created_at DESC, run_id"
)


def reference(con: duckdb.DuckDBPyConnection, ref: str) -> str | None:
    """The former resolve_run: the rows chosen by the statement, then the same pick."""
    return match_run(ref, con.execute(REFERENCE, [ref, ref, ref]).fetchall())


def store(
    runs: list[tuple[str, str, int]], con: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """A ``runs`` table of just ``runs`` (in ``con``, made afresh there; default a new connection)."""
    con = duckdb.connect() if con is None else con
    con.execute("CREATE OR REPLACE TABLE runs (run_id VARCHAR, name VARCHAR, created_at TIMESTAMP)")
    if runs:
        con.executemany(
            "INSERT INTO runs VALUES (?, ?, TIMESTAMP '2026-11-26' + to_seconds(?))", runs
        )
    return con


def outcome(f, con, ref):
    try:
        return ("run", f(con, ref))
    except AmbiguousRunName as e:
        return ("ambiguous", str(e))


hexes = st.text("0ab", min_size=1, max_size=4)
names = st.text("0ab'%_ ", min_size=0, max_size=4)


@pytest.fixture(scope="module")
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB connection for the random stores below, each example's ``runs`` table made
    afresh in it (a new connection and table cost 13 ms of CPU: 2 s over the examples)."""
    con = duckdb.connect()
    yield con
    con.close()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(hexes, names, st.integers(0, 3)), max_size=6),
    st.one_of(hexes, names),
)
def test_matches_the_statement_it_replaced(scratch, runs, ref) -> None:
    con = store(runs, scratch)
    assert outcome(resolve_run, con, ref) == outcome(reference, con, ref)


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("abc123", "abc123"),  # the id itself, though another run's name is the same
        ("abc1", "abc123"),  # a unique prefix
        ("nightly", "ffff00"),  # a name
        ("zzz", None),
        ("%", None),  # LIKE's wildcards are plain characters
        ("x' OR '1'='1", None),
    ],
)
def test_an_id_a_prefix_or_a_name(ref: str, want: str | None) -> None:
    con = store([("abc123", "first", 0), ("ffff00", "nightly", 1), ("abd000", "abc123", 2)])
    assert resolve_run(con, ref) == want


def test_a_name_of_two_runs_is_ambiguous() -> None:
    con = store([("aaaa", "n", 0), ("bbbb", "n", 1)])
    with pytest.raises(AmbiguousRunName, match=r"bbbb.*aaaa"):
        resolve_run(con, "n")

"""Helpers shared by the AppTest suites (tests/test_app_*.py) and the browser tests."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
MAIN = REPO / "app" / "web" / "main.py"
TABLES = ("runs", "ranks", "names", "events", "threads", "nvml_series", "nvml_samples")


def app_store(tmp_path: Path, monkeypatch: Any, *, lake: bool = True) -> Any:
    """A fresh store for the app under test: ``$GPUSCOPE_DB`` names it for the test's duration
    (``monkeypatch``: pytest's). Returns what ``connect`` and :func:`ingest` take: the lake's folder,
    or with ``lake=False`` a single-process DuckDB file (``duckdb:PATH``; the same door and
    analysis, 2.6x less CPU per AppTest session) for page tests that only read the runs they were
    given (tests/test_store_equivalence.py: the analysis is the lake's)."""
    path = tmp_path / "store.duckdb"
    spec = str(path) if lake else f"duckdb:{path}"
    monkeypatch.setenv("GPUSCOPE_DB", spec)
    return path if lake else spec


def open_app(
    page: str | None = None, params: dict[str, Any] | None = None, *, timeout: float = 90
) -> AppTest:
    """Run the dashboard once (Runs page), then switch to ``page`` (e.g. ``screens/run.py``)."""
    at = AppTest.from_file(str(MAIN), default_timeout=timeout)
    at.run()
    if page is not None:
        at.switch_page(page)
        at.query_params.clear()
        at.query_params.update(params or {})
        at.run()
    return at


def ingest(db: Path, *paths: Path, tags: tuple[str, ...] = ()) -> list[str]:
    """Store traces (each path one run) with the loader, outside the app; returns the run ids."""
    from gpuscope.ingest.loader import ingest_paths
    from gpuscope.store import connect

    con = connect(db)
    try:
        return [r.run_id for r in ingest_paths(con, list(paths), tags=list(tags))]
    finally:
        con.close()


def counts(db: Path) -> dict[str, int]:
    """Rows per table: a bad upload must leave every count unchanged."""
    from gpuscope.store import connect

    con = connect(db)
    try:
        return {t: int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}
    finally:
        con.close()


def texts(at: AppTest, kind: str) -> list[str]:
    """The values of every element of one kind (``error``, ``warning``, ``markdown`` ...)."""
    return [str(getattr(e, "value", "")) for e in getattr(at, kind)]


@dataclass(frozen=True)
class ShownCard:
    """A headline card as the page's HTML shows it (``views.cards_html``): its label, value, the
    words beside the value and its hover text, unescaped."""

    label: str
    value: str
    beside: str
    help: str


class _CardParser(HTMLParser):
    """Reads ``views.cards_html``'s markup: each ``gs-card`` div's parts by their class."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cards: list[dict[str, str]] = []
        self.lines: list[str] = []
        self._part: str | None = None
        self._skip = 0  # inside a card label's help mark (a span): not the label's text

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = a.get("class") or ""
        if cls == "gs-card":
            self.cards.append(
                {"label": "", "value": "", "beside": "", "help": a.get("title") or ""}
            )
        elif cls.startswith("gs-card-"):
            self._part = cls.removeprefix("gs-card-")
        elif tag == "span" and self._part == "label":
            self._skip += 1
        elif cls == "gs-line":
            self.lines.append("")
            self._part = "line"

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._skip:
            self._skip -= 1
        elif tag == "div":
            self._part = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._part == "line":
            self.lines[-1] += data
        elif self._part is not None and self.cards:
            self.cards[-1][self._part] += data


def _parsed(at: AppTest) -> list[_CardParser]:
    out = []
    for h in at.get("html"):
        body = h.proto.body
        if "gs-card" in body or "gs-line" in body:
            p = _CardParser()
            p.feed(body)
            out.append(p)
    return out


def cards(at: AppTest) -> list[ShownCard]:
    """Every headline card on the page, in order (label without its help mark)."""
    return [
        ShownCard(c["label"].strip(), c["value"], c["beside"], c["help"])
        for p in _parsed(at)
        for c in p.cards
    ]


def card_lines(at: AppTest) -> list[str]:
    """The lines under the headline cards ("First fix: …", "Why: …"), as shown."""
    return [line.strip() for p in _parsed(at) for line in p.lines]

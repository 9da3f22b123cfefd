"""No ``dict[str, Any]`` between the analysis and the web (issue 21): a page section, a figure or
the pages' data layer (``app/web``) takes and gives typed page models built by analysis
(``gpuscope.analysis.run_views``, ``.sawtooth``, ...), never a document of strings to ``Any``. A
function of ``app/web`` whose parameter or return is annotated ``dict[str, Any]``,
``Mapping[str, Any]`` or ``MutableMapping[str, Any]`` (alone or inside another type) is listed
below with the reason it carries no analysis document; any other fails the test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WEB = "app/web"
ANY_DOC = re.compile(r"\b(?:dict|Mapping|MutableMapping)\[str, Any\]")

#: "path:function:parameter" (``return`` for the return) -> why it is not an analysis document.
EXCEPTIONS = {
    # sign-in: what the identity provider and the signed cookie hold
    "app/web/auth.py:identity:claims": "an OIDC ID token's claims",
    "app/web/auth.py:viewer_from_claims:claims": "an OIDC ID token's claims",
    "app/web/auth.py:signed_cookie:return": "the payload of the session cookie the app signed",
    # the Live page: what a sampler (gpuscope serve) sends over HTTP, parsed into typed batches
    "app/web/live.py:parse:body": "a sampler's JSON body (its wire format)",
    "app/web/live.py:_gpu_info:described": "a GPU as the recording's header describes it",
    "app/web/live.py:window_of:gpus": "the recording's header's GPUs (the wire format)",
    "app/web/live_steps.py:fetch_steps:return": "the step times a training job posts (wire format)",
    # the store's row of a run, by column (gpuscope.store.schema.RUN_COLUMNS), not an analysis
    "app/web/db.py:run_row:return": "the runs table's row of a run, by column",
    "app/web/views.py:run_caption:row": "the runs table's row of a run, by column",
    # free-form by design: each rule's own evidence rows (Recommendation.evidence)
    "app/web/views.py:_rows_frame:rows": "a recommendation's evidence rows (free-form per rule)",
    # Streamlit's own registry of deferred downloads (file id -> its entry), not an analysis
    "app/web/redrawn_downloads.py:current_id:callables": "Streamlit's deferred-download registry",
    # made by the page itself from page models: the cached figure and what its caption says
    "app/web/views.py:_sawtooth_view:return": "the page's own cache of a figure and its caption",
}


def documents(repo: Path = REPO) -> list[str]:
    """Every ``path:function:parameter`` (or ``:return``) of ``app/web`` annotated with a
    document type (:data:`ANY_DOC`)."""
    found: list[str] = []
    for path in sorted((repo / WEB).rglob("*.py")):
        where = path.relative_to(repo).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            named = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            notes = [(x.arg, x.annotation) for x in named if x is not None]
            for name, ann in [*notes, ("return", node.returns)]:
                if ann is not None and ANY_DOC.search(ast.unparse(ann)):
                    found.append(f"{where}:{node.name}:{name}")
    return found


def test_the_web_takes_and_gives_no_documents() -> None:
    found = documents()
    assert [f for f in found if f not in EXCEPTIONS] == []
    # an exception that is gone must leave the list (it only shrinks)
    assert set(found) == set(EXCEPTIONS)


def test_a_document_is_found(tmp_path: Path) -> None:
    (tmp_path / WEB / "screens").mkdir(parents=True)
    (tmp_path / WEB / "views.py").write_text(
        "from typing import Any\n"
        "def roofline(report: dict[str, Any]) -> None: ...\n"  # found
        "def cards(h: Headline, *, extra: Mapping[str, Any] | None = None) -> None: ...\n"  # found
        "def typed(v: RooflineView | None, n: dict[str, float]) -> list[str]: ...\n"  # typed
    )
    (tmp_path / WEB / "data.py").write_text(
        "def report(path: str) -> dict[str, Any]: ...\n"  # found
        "def rows(path: str) -> list[dict[str, Any]]: ...\n"  # found, inside another type
    )
    (tmp_path / WEB / "screens" / "run.py").write_text(
        "def rest(report: 'dict[str, Any]' = None, **kw: dict[str, Any]) -> None: ...\n"
    )
    assert documents(tmp_path) == [
        "app/web/data.py:report:return",
        "app/web/data.py:rows:return",
        "app/web/screens/run.py:rest:report",  # a string annotation too
        "app/web/screens/run.py:rest:kw",
        "app/web/views.py:roofline:report",
        "app/web/views.py:cards:extra",
    ]

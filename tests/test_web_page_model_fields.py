"""No ``dict[str, Any]`` between the analysis and the web (issue 21), field by field: the
signatures of ``app/web`` take typed page models (tests/test_web_takes_no_documents.py); here, the
FIELDS of those models hold no document either. Every dataclass that the modules of
``gpuscope.analysis`` imported by ``app/web`` define or re-export is walked, recursively through
its fields' types (``typing.get_type_hints``), and a field typed ``dict[str, Any]``,
``Mapping[str, Any]`` or ``MutableMapping[str, Any]`` (alone or inside another type, e.g.
``list[dict[str, Any]]``) fails the test unless it is listed below with its reason."""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import importlib
import pkgutil
import sys
import typing
from pathlib import Path
from typing import Any

import gpuscope.analysis

REPO = Path(__file__).resolve().parent.parent
WEB = REPO / "app" / "web"

#: "module.Class.field" -> why it is free-form by design (the list only shrinks).
FREE_FORM = {
    "gpuscope.analysis.recommendation.Recommendation.evidence": (
        "each rule's own evidence rows: the keys differ per rule"
    ),
    "gpuscope.analysis.report.RunReport.run": "the runs table's row of the run, by column",
    "gpuscope.analysis.nvml_run.NvmlReport.run": "the runs table's row of the run, by column",
}
#: Documents still to be typed (issue 21 stays open for them): "module.Class.field" -> what it is.
NOT_YET_TYPED: dict[str, str] = {}

_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}


def analysis_modules_of_the_web(web: Path = WEB) -> list[str]:
    """The ``gpuscope.analysis`` modules that ``app/web`` imports (``from gpuscope.analysis
    import x`` counts module ``x``)."""
    found: set[str] = set()
    for path in sorted(web.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "gpuscope.analysis":
                    found |= {f"gpuscope.analysis.{a.name}" for a in node.names}
                elif node.module.startswith("gpuscope.analysis."):
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("gpuscope.analysis.")}
    return sorted(found)


def _analysis_classes() -> dict[str, type]:
    """Every class defined in a ``gpuscope.analysis`` module, by name: resolves the names a module
    imports only under ``TYPE_CHECKING`` (the module's own names come first)."""
    names: dict[str, type] = {}
    for info in pkgutil.iter_modules(gpuscope.analysis.__path__):
        mod = importlib.import_module(f"gpuscope.analysis.{info.name}")
        for k, v in vars(mod).items():
            if isinstance(v, type) and v.__module__ == mod.__name__:
                names.setdefault(k, v)
    return names


def is_document(t: Any) -> bool:
    """Whether the type ``t`` is, or holds, a mapping of ``str`` to ``Any``."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in _MAPPINGS and args == (str, Any):
        return True
    return any(is_document(a) for a in args)


def _types_in(t: Any) -> list[Any]:
    return [t, *(x for a in typing.get_args(t) for x in _types_in(a))]


def document_fields(roots: list[type]) -> list[str]:
    """``module.Class.field`` of every field typed as a document (:func:`is_document`) in the
    dataclasses ``roots`` and, recursively, those their fields' types name."""
    known = _analysis_classes()
    seen: set[type] = set()
    found: list[str] = []

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls, localns={**known, **vars(sys.modules[cls.__module__])})
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            t = hints[f.name]
            if is_document(t):
                found.append(f"{cls.__module__}.{cls.__qualname__}.{f.name}")
            for x in _types_in(t):
                if isinstance(x, type) and dataclasses.is_dataclass(x):
                    walk(x)

    for c in roots:
        walk(c)
    return found


def web_models() -> list[type]:
    """The dataclasses the analysis modules that ``app/web`` imports define or re-export."""
    out: list[type] = []
    for name in analysis_modules_of_the_web():
        mod = importlib.import_module(name)
        out += [
            v for v in vars(mod).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
        ]
    return out


def test_the_models_the_web_reads_hold_no_documents() -> None:
    found = document_fields(web_models())
    listed = {**FREE_FORM, **NOT_YET_TYPED}
    assert [f for f in found if f not in listed] == []
    # a field that is typed now must leave the lists (they only shrink)
    assert set(found) == set(listed)


def test_the_walk_reaches_the_memory_section() -> None:
    """The Run page's memory section (``MemoryResult`` and what it holds) is among the models."""
    from gpuscope.analysis import memory

    models = web_models()
    assert memory.MemoryResult in models
    assert document_fields([memory.MemoryResult]) == []


@dataclasses.dataclass
class _Inner:
    rows: list[dict[str, Any]]  # found, inside a list
    fine: dict[str, float]


@dataclasses.dataclass
class _Outer:
    extra: typing.Mapping[str, Any] | None  # found, inside a union
    inner: tuple[_Inner, ...]  # walked into
    by_gpu: dict[int, _Inner]  # walked into (seen once)
    n: int


def test_a_document_field_is_found() -> None:
    assert document_fields([_Outer]) == [f"{__name__}._Outer.extra", f"{__name__}._Inner.rows"]
    assert is_document(dict[str, Any]) and not is_document(dict[str, int])
    assert "gpuscope.analysis.memory" not in analysis_modules_of_the_web()  # via run_views
    assert "gpuscope.analysis.run_views" in analysis_modules_of_the_web()

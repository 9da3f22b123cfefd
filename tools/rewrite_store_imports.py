"""Point every import at gpuscope.store (the store moved out of gpuscope.ingest): run from the
repository root after merging; idempotent. Rewrites Python imports and dotted names in text."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

STORE_ERRORS = {"StoreError", "store_fault", "catalog_lost"}
TEXT = [
    (r"\bgpuscope\.ingest\.store\b", "gpuscope.store"),
    (r"\bgpuscope\.ingest\.schema\b", "gpuscope.store.schema"),
    (r"\bgpuscope\.ingest\.extensions\b", "gpuscope.store.extensions"),
    (r"\bingest/schema\.py\b", "store/schema.py"),
    (r"\bingest/store\.py\b", "store/"),
    (r"\bingest/extensions\.py\b", "store/extensions.py"),
    (r"from gpuscope\.ingest\.records import now_utc\b", "from gpuscope.store import now_utc"),
    (
        r"from gpuscope\.ingest\.naming import AmbiguousRunName\b",
        "from gpuscope.store import AmbiguousRunName",
    ),
]
MOVED = {"store": "gpuscope", "schema": "gpuscope.store", "extensions": "gpuscope.store"}


def fix_imports(src: str) -> str:
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        names = [(a.name, a.asname) for a in node.names]
        new: list[tuple[str, list[tuple[str, str | None]]]] = []
        if node.module == "gpuscope.ingest.errors" and any(n in STORE_ERRORS for n, _ in names):
            keep = [x for x in names if x[0] not in STORE_ERRORS]
            moved = [x for x in names if x[0] in STORE_ERRORS]
            if keep:
                new.append(("gpuscope.ingest.errors", keep))
            new.append(("gpuscope.store.errors", moved))
        elif node.module == "gpuscope.ingest" and any(n in MOVED for n, _ in names):
            keep = [x for x in names if x[0] not in MOVED]
            if keep:
                new.append(("gpuscope.ingest", keep))
            for n, a in names:
                if n in MOVED:
                    new.append((MOVED[n], [(n, a)]))
        else:
            continue
        indent = lines[node.lineno - 1][: node.col_offset]
        text = "".join(
            f"{indent if i else ''}from {m} import "
            + ", ".join(n if a is None else f"{n} as {a}" for n, a in ns)
            + "\n"
            for i, (m, ns) in enumerate(new)
        )
        edits.append((node.lineno, node.end_lineno, node.col_offset, text))
    for a, b, col, text in sorted(edits, reverse=True):
        tail = lines[b - 1][len(lines[b - 1].rstrip("\n")) :]
        lines[a - 1 : b] = [lines[a - 1][:col] + text.rstrip("\n") + tail]
    return "".join(lines)


def main(paths: list[str]) -> None:
    for p in map(Path, paths):
        src = p.read_text()
        out = fix_imports(src) if p.suffix == ".py" else src
        for pat, rep in TEXT:
            out = re.sub(pat, rep, out)
        if out != src:
            p.write_text(out)
            print("rewrote", p)


if __name__ == "__main__":
    main(sys.argv[1:])

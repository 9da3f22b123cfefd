"""Rewrite cause ids and NVML field names written as string literals into the vocabulary's
constants (``"data_loading"`` -> ``DATA_LOADING`` with ``from gpuscope.vocabulary.causes import
DATA_LOADING``). Usage: python spell.py FILE... (prints what it changed)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

VOCAB = {
    "gpuscope.vocabulary.causes": (
        "launch_overhead",
        "data_loading",
        "pageable_copy",
        "host_sync",
        "cpu_overhead",
    ),
    "gpuscope.vocabulary.nvml_fields": (
        "gpu_util_pct",
        "mem_util_pct",
        "mem_used_bytes",
        "mem_total_bytes",
        "power_w",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "temp_c",
        "pcie_rx_bytes_s",
        "pcie_tx_bytes_s",
        "sm_active_pct",
        "tensor_active_pct",
    ),
}
WORD = {w: (mod, w.upper()) for mod, ws in VOCAB.items() for w in ws}


def docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            out.add(id(body[0].value))
    return out


def rewrite(path: Path) -> int:
    src = path.read_text()
    tree = ast.parse(src)
    skip = docstrings(tree) | {
        id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values
    }
    lines = src.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    needed: dict[str, set[str]] = {}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Constant) and isinstance(n.value, str)) or id(n) in skip:
            continue
        if n.value not in WORD or n.lineno != n.end_lineno:
            continue
        seg = lines[n.lineno - 1][n.col_offset : n.end_col_offset]
        if seg not in (f'"{n.value}"', f"'{n.value}'"):
            continue
        mod, const = WORD[n.value]
        edits.append((n.lineno - 1, n.col_offset, n.end_col_offset, const))
        needed.setdefault(mod, set()).add(const)
    if not edits:
        return 0
    clash = {c for cs in needed.values() for c in cs} & {
        t.id for t in ast.walk(tree) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    if clash:
        raise SystemExit(f"{path}: names already bound: {sorted(clash)}")
    for ln, a, b, const in sorted(edits, reverse=True):
        lines[ln] = lines[ln][:a] + const + lines[ln][b:]
    imports = "".join(
        f"from {mod} import {', '.join(sorted(cs))}\n" for mod, cs in sorted(needed.items())
    )
    # after the module docstring and `from __future__` import (ruff --fix sorts the block)
    at = 0
    for i, ln in enumerate(lines):
        if ln.startswith("from __future__ import"):
            at = i + 1
            break
    else:
        body = tree.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            at = body[0].end_lineno or 0
    lines.insert(at, ("\n" if at else "") + imports)
    path.write_text("".join(lines))
    return len(edits)


if __name__ == "__main__":
    for f in sys.argv[1:]:
        n = rewrite(Path(f))
        if n:
            print(f"{f}: {n}")

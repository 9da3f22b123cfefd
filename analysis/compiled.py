"""Is the run torch.compile'd, and does it replay CUDA graphs? (docs/metrics.md, "Compiled runs")

Evidence, counted in the window of one rank:

* compiled regions: host spans named ``Torch-Compiled Region*`` (one per call into a compiled
  graph; several per step = graph breaks or several compiled modules) and ``*CompiledFxGraph*``;
* Inductor/Triton kernels: GPU kernels named ``triton_*`` (Inductor's generated kernels);
* CUDA graph replays: ``cudaGraphLaunch`` / ``cuGraphLaunch`` / ``hipGraphLaunch`` runtime calls;
* CUDA graph captures: ``cudaStreamBeginCapture`` / ``cudaGraphInstantiate*`` (and the ``cu``/``hip``
  ones): the program builds CUDA graphs (a window that captures them records a warm-up, not the
  replayed steps), so it uses them even where no replay is in the window;
* collectives in compiled graphs: functional collectives (``_c10d_functional::all_reduce_`` and the
  other ops of ``torch.distributed._functional_collectives``, not their ``wait_tensor``) that start
  inside a compiled region or a ``CompiledFxGraph`` call on the same thread: the compiled graph
  itself communicates, as a tensor-parallel model compiled after ``parallelize_module`` does
  (DTensor's dispatch traced away, its collectives left in the graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuscope.analysis.steps import Window
from gpuscope.analysis.store_access import GPU_CATS_SQL, execute

if TYPE_CHECKING:
    from gpuscope.store import Connection

COMPILED_REGION_RE = r"^Torch-Compiled Region"
COMPILED_FX_RE = r"CompiledFxGraph"
TRITON_KERNEL_RE = r"^triton_"
GRAPH_LAUNCH_RE = r"^(cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)"
GRAPH_CAPTURE_RE = r"^(cuda|cu|hip)(StreamBeginCapture|GraphInstantiate)"
FUNCTIONAL_COLLECTIVE_RE = r"^_?c10d_functional::(all_|reduce_scatter|broadcast)"
"""The functional collectives' host ops (``_c10d_functional::``; ``c10d_functional::`` before torch
2.3), their waits (``wait_tensor``) left out."""


@dataclass
class CompiledInfo:
    """Per-step counts of compile / graph evidence. ``compiled``: any compiled region,
    ``CompiledFxGraph`` or Triton kernel; ``cuda_graphs``: any graph launch;
    ``compiled_collectives_per_step``: functional collectives started inside compiled code;
    ``graph_capture_steps``: how many of the window's steps hold a graph capture (more than one,
    beside replays: the graphs are recorded again, step after step, not warmed up once)."""

    n_steps: int
    compiled_regions_per_step: float = 0.0
    compiled_fx_graphs_per_step: float = 0.0
    triton_kernels_per_step: float = 0.0
    triton_kernel_us_per_step: float = 0.0
    graph_launches_per_step: float = 0.0
    graph_captures: int = 0
    compiled_collectives_per_step: float = 0.0
    graph_capture_steps: int = 0

    @property
    def compiled(self) -> bool:
        return (
            self.compiled_regions_per_step > 0
            or self.compiled_fx_graphs_per_step > 0
            or self.triton_kernels_per_step > 0
        )

    @property
    def cuda_graphs(self) -> bool:
        """The program uses CUDA graphs: it replays some in the window, or captures some there."""
        return self.graph_launches_per_step > 0 or self.graph_captures > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "compiled": self.compiled,
            "cuda_graphs": self.cuda_graphs,
            "compiled_regions_per_step": self.compiled_regions_per_step,
            "compiled_fx_graphs_per_step": self.compiled_fx_graphs_per_step,
            "triton_kernels_per_step": self.triton_kernels_per_step,
            "triton_kernel_us_per_step": self.triton_kernel_us_per_step,
            "graph_launches_per_step": self.graph_launches_per_step,
            "graph_captures": self.graph_captures,
            "compiled_collectives_per_step": self.compiled_collectives_per_step,
            "graph_capture_steps": self.graph_capture_steps,
        }

    @property
    def recaptured(self) -> bool:
        """Graphs replayed and captured again in more than one step of the window."""
        return self.graph_launches_per_step > 0 and self.graph_capture_steps > 1


def compiled_info(con: Connection, run_id: str, rank: int, window: Window) -> CompiledInfo:
    """Compile and CUDA-graph evidence of one rank over ``window`` (counts per step)."""
    n = window.n_steps
    row = execute(
        con,
        f"""
        WITH nm AS (
            SELECT name_id,
                   regexp_matches(name, $region) AS region,
                   regexp_matches(name, $fx) AS fx,
                   regexp_matches(name, $triton) AS triton,
                   regexp_matches(name, $graph) AS graph,
                   regexp_matches(name, $capture) AS capture
            FROM names WHERE run_id = $run
              AND (regexp_matches(name, $region) OR regexp_matches(name, $fx)
                   OR regexp_matches(name, $triton) OR regexp_matches(name, $graph)
                   OR regexp_matches(name, $capture))
        )
        SELECT
            count(*) FILTER (WHERE nm.region AND e.cat NOT IN {GPU_CATS_SQL}),
            count(*) FILTER (WHERE nm.fx AND NOT nm.region AND e.cat NOT IN {GPU_CATS_SQL}),
            count(*) FILTER (WHERE nm.triton AND e.cat IN ('kernel', 'Kernel')),
            coalesce(sum(e.dur_ns) FILTER (WHERE nm.triton AND e.cat IN ('kernel', 'Kernel')), 0),
            count(*) FILTER (WHERE nm.graph AND e.cat NOT IN {GPU_CATS_SQL}),
            count(*) FILTER (WHERE nm.capture AND e.cat NOT IN {GPU_CATS_SQL})
        FROM events e JOIN nm ON nm.name_id = e.name_id
        WHERE e.run_id = $run AND e.rank = $rank AND e.ts_ns >= $ws AND e.ts_ns < $we
        """,
        {
            "run": run_id,
            "rank": rank,
            "ws": window.start_ns,
            "we": window.end_ns,
            "region": COMPILED_REGION_RE,
            "fx": COMPILED_FX_RE,
            "triton": TRITON_KERNEL_RE,
            "graph": GRAPH_LAUNCH_RE,
            "capture": GRAPH_CAPTURE_RE,
        },
    ).fetchone()
    if row is None:
        return CompiledInfo(n)
    inside = _compiled_collectives(con, run_id, rank, window) if int(row[0]) or int(row[1]) else 0
    return CompiledInfo(
        n_steps=n,
        compiled_regions_per_step=int(row[0]) / n,
        compiled_fx_graphs_per_step=int(row[1]) / n,
        triton_kernels_per_step=int(row[2]) / n,
        triton_kernel_us_per_step=int(row[3]) / n / 1e3,
        graph_launches_per_step=int(row[4]) / n,
        graph_captures=int(row[5]),
        compiled_collectives_per_step=inside / n,
        graph_capture_steps=_capture_steps(con, run_id, rank, window) if int(row[5]) else 0,
    )


def _capture_steps(con: Connection, run_id: str, rank: int, window: Window) -> int:
    """How many of the window's steps (:meth:`Window.step_bounds_ns`) hold a graph capture
    (:data:`GRAPH_CAPTURE_RE`, host events starting in the step)."""
    import numpy as np

    got = execute(
        con,
        f"""
        SELECT e.ts_ns FROM events e JOIN names n ON n.run_id = $run AND n.name_id = e.name_id
        WHERE e.run_id = $run AND e.rank = $rank AND e.cat NOT IN {GPU_CATS_SQL}
          AND e.ts_ns >= $ws AND e.ts_ns < $we AND regexp_matches(n.name, $capture)
        """,
        {
            "run": run_id,
            "rank": rank,
            "ws": window.start_ns,
            "we": window.end_ns,
            "capture": GRAPH_CAPTURE_RE,
        },
    ).fetchall()
    bounds = window.step_bounds_ns()
    if not got or not bounds:
        return 1 if got else 0
    starts = np.array([b[0] for b in bounds], dtype=np.int64)
    at = np.searchsorted(starts, np.array([r[0] for r in got], dtype=np.int64), side="right") - 1
    return int(np.unique(at[at >= 0]).size)


def _compiled_collectives(con: Connection, run_id: str, rank: int, window: Window) -> int:
    """How many functional collectives (:data:`FUNCTIONAL_COLLECTIVE_RE`) start in ``window`` inside
    a compiled region or ``CompiledFxGraph`` span of their own thread (host events)."""
    row = execute(
        con,
        f"""
        WITH nm AS (
            SELECT name_id, regexp_matches(name, $coll) AS coll
            FROM names WHERE run_id = $run
              AND (regexp_matches(name, $coll) OR regexp_matches(name, $region)
                   OR regexp_matches(name, $fx))
        ),
        ev AS (
            SELECT e.tid, e.ts_ns AS s, e.ts_ns + coalesce(e.dur_ns, 0) AS e, nm.coll
            FROM events e JOIN nm ON nm.name_id = e.name_id
            WHERE e.run_id = $run AND e.rank = $rank AND e.cat NOT IN {GPU_CATS_SQL}
              AND e.ts_ns < $we AND e.ts_ns + coalesce(e.dur_ns, 0) >= $ws
        )
        SELECT count(*) FROM ev c
        WHERE c.coll AND c.s >= $ws AND c.s < $we AND EXISTS (
            SELECT 1 FROM ev r WHERE NOT r.coll AND r.tid = c.tid AND r.s <= c.s AND c.s < r.e
        )
        """,
        {
            "run": run_id,
            "rank": rank,
            "ws": window.start_ns,
            "we": window.end_ns,
            "coll": FUNCTIONAL_COLLECTIVE_RE,
            "region": COMPILED_REGION_RE,
            "fx": COMPILED_FX_RE,
        },
    ).fetchone()
    return int(row[0]) if row else 0

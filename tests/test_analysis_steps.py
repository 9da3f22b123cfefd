"""Steps and the analysis window, on hand-built traces (times in µs in the builder, ns in the store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuscope.analysis.steps import find_window, step_frame, step_stats
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)


def ingest(con, t: TraceBuilder, path: Path) -> str:
    return ingest_paths(con, [t.write(path)])[0].run_id


def test_profiler_steps_window_reaches_last_gpu_end(con, tmp_path):
    t = TraceBuilder()
    t.step(3, 100, 100)  # CPU 100..200
    t.step(4, 200, 100)  # CPU 200..300
    t.step(5, 300, 50)  # CPU 300..350, the last step
    t.launch("k1", 110, 120, 50)  # launched in step 3, runs 120..170
    t.launch("k2", 290, 295, 100)  # launched in step 4, runs 295..395 (into step 5's time)
    t.launch("k3", 340, 400, 80)  # launched in step 5, runs 400..480: after every CPU end
    t.launch("late", 360, 500, 10)  # launched after the last step: not part of the window
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert w.source == "ProfilerStep"
    assert [s.number for s in w.steps] == [3, 4, 5]  # the last step is kept
    assert [s.gpu_end_ns for s in w.steps] == [170_000, 395_000, 480_000]
    # window: first CPU start .. max(last CPU end 350, last GPU end of a step's launch 480)
    assert (w.start_ns, w.end_ns) == (100_000, 480_000)
    # per step: to the next step's CPU start; the last one to the window end
    assert w.step_bounds_ns() == [(100_000, 200_000), (200_000, 300_000), (300_000, 480_000)]
    st = step_stats(w)
    assert st.n_steps == 3
    assert st.mean_ms == pytest.approx(0.380 / 3)  # window 380 µs / 3 steps
    assert st.p50_ms == pytest.approx(0.100)
    assert st.max_ms == pytest.approx(0.180)
    assert st.min_ms == pytest.approx(0.100)
    frame = step_frame(w)
    assert frame["duration_ns"].sum() == w.duration_ns
    assert frame["gpu_end_ns"].tolist() == [170_000, 395_000, 480_000]


def test_step_without_gpu_work_and_cpu_end_beyond_gpu(con, tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 300)  # launches nothing; its CPU end 400 is the window end
    t.launch("k", 10, 20, 30)
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.gpu_end_ns for s in w.steps] == [50_000, None]
    assert (w.start_ns, w.end_ns) == (0, 400_000)


def test_old_traces_with_cpu_op_steps_and_gpu_annotations(con, tmp_path):
    t = TraceBuilder()
    t.cpu_op("ProfilerStep#7", 0, 100)  # older PyTorch: the step is a cpu_op
    t.launch("k", 10, 20, 30)
    # the GPU-side copy of the annotation must not count as a step
    t.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "ProfilerStep#8",
            "pid": 0,
            "tid": 7,
            "ts": 500,
            "dur": 100,
            "args": {},
        }
    )
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.number for s in w.steps] == [7]
    assert (w.start_ns, w.end_ns) == (0, 100_000)


def test_user_annotation_steps(con, tmp_path):
    t = TraceBuilder()
    t.step(1, 0, 1000)  # one profiler step around two user steps
    t.annotation("train_step", 100, 200)
    t.annotation("train_step", 400, 200)
    t.annotation("train_step_extra", 700, 100)  # a different name: not a step
    t.launch("k", 150, 160, 500)  # launched in the first train_step, ends at 660
    rid = ingest(con, t, tmp_path / "t.json")
    w = find_window(con, rid, 0, step_annotation="train_step")
    assert w.source == "annotation" and w.annotation == "train_step"
    assert [(s.number, s.cpu_start_ns, s.cpu_end_ns) for s in w.steps] == [
        (0, 100_000, 300_000),
        (1, 400_000, 600_000),
    ]
    assert w.steps[0].gpu_end_ns == 660_000
    assert (w.start_ns, w.end_ns) == (100_000, 660_000)
    # an annotation that is not there: ProfilerStep again
    w2 = find_window(con, rid, 0, step_annotation="nope")
    assert w2.source == "ProfilerStep" and [s.number for s in w2.steps] == [1]


def test_numbered_user_annotations_keep_their_numbers(con, tmp_path):
    t = TraceBuilder()
    t.annotation("iter#10", 0, 100)
    t.annotation("iter#11", 100, 100)
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0, step_annotation="iter")
    assert [s.number for s in w.steps] == [10, 11]


def test_no_steps_whole_trace_never_empty(con, tmp_path):
    t = TraceBuilder()
    t.cpu_op("aten::mm", 50, 10)
    t.launch("k", 55, 70, 100)  # GPU end 170
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert w.source == "trace" and w.annotation is None
    assert len(w.steps) == 1 and w.n_steps == 1
    assert (w.start_ns, w.end_ns) == (50_000, 170_000)
    st = step_stats(w)
    assert st.mean_ms == pytest.approx(0.120)


def test_analysis_imports_no_ui_libraries():
    import subprocess
    import sys

    code = (
        "import sys, gpuscope.analysis, gpuscope.analysis.report, gpuscope.analysis.compare\n"
        "bad = [m for m in ('streamlit', 'plotly') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_last_step_the_profiler_cut_as_it_began_is_not_a_step(con, tmp_path):
    """``prof.step()`` opens ProfilerStep#3 just before the profiler stops (HTA's public MI250
    trace: a 9.3 ms step, then a 49 µs one with nothing in it): the stub (no host event, no GPU
    work, shorter than every other step) is left out; the window ends with step 2's kernel."""
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.step(3, 200, 5)  # the stub: 5 µs, nothing inside
    t.launch("k1", 10, 20, 30)
    t.launch("k2", 110, 150, 60)  # runs 150..210, into the stub's time
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.number for s in w.steps] == [1, 2]
    assert (w.start_ns, w.end_ns) == (0, 210_000)
    assert step_stats(w).mean_ms == pytest.approx(0.105)  # 210 µs / 2 steps, not / 3


@pytest.mark.parametrize("what", ["an op", "a launch", "as long"])
def test_a_short_last_step_with_anything_in_it_stays(con, tmp_path, what):
    """The same trace with an operator in step 3, a kernel it launched, or step 3 as long as the
    shortest other step: it is a step."""
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.step(2, 100, 100)
    t.step(3, 200, 100 if what == "as long" else 5)
    t.launch("k1", 10, 20, 30)
    t.launch("k2", 110, 150, 60)
    if what == "an op":
        t.cpu_op("aten::zeros", 201, 2)
    if what == "a launch":
        t.launch("k3", 201, 220, 10)
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.number for s in w.steps] == [1, 2, 3]


@pytest.mark.parametrize("evidence", ["compile", "capture"])
def test_first_steps_that_compile_or_capture_are_warm_up(con, tmp_path, evidence):
    """A window from a compiled model's first call: step 1 compiles (Dynamo's
    ``compile_attempt_0``) or captures a CUDA graph (``cudaStreamBeginCapture``), and so does
    step 2 (a capture); steps 3 and 4 repeat. Steps 1 and 2 are warm-up, left out: the window
    starts at step 3 and says so."""
    t = TraceBuilder()
    for n, (ts, dur) in enumerate([(0, 3000), (3000, 500), (3500, 100), (3600, 100)], start=1):
        t.step(n, ts, dur)
    if evidence == "compile":
        t.annotation("compile_attempt_0", 10, 2500)
    else:
        t.runtime("cudaStreamBeginCapture", 10, 1)
    t.runtime("cudaStreamBeginCapture", 3010, 1)
    for ts in (20, 3020, 3510, 3610):
        t.launch("k", ts, ts + 5, 20)
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.number for s in w.steps] == [3, 4] and w.warmup == (1, 2)
    assert (w.start_ns, w.end_ns) == (3_500_000, 3_700_000)


def test_warm_up_everywhere_leaves_the_window_whole(con, tmp_path):
    """Every step captures: none is left out (a window is never emptied)."""
    t = TraceBuilder()
    for n in (1, 2):
        t.step(n, 100 * (n - 1), 100)
        t.runtime("cudaStreamBeginCapture", 100 * (n - 1) + 10, 1)
        t.launch("k", 100 * (n - 1) + 20, 100 * (n - 1) + 25, 10)
    w = find_window(con, ingest(con, t, tmp_path / "t.json"), 0)
    assert [s.number for s in w.steps] == [1, 2] and w.warmup == ()

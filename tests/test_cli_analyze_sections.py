"""`gpuscope analyze RUN` as text: the memory, roofline and modules sections a user reads, on real
traces (sample_traces/memory: a GPT step recorded with profile_memory and modules;
sample_traces/fixes/pin_memory: no memory events, no module spans)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clitools import run_cli

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
MEM = SAMPLES / "memory"


def section(text: str, head: str) -> list[str]:
    """The lines of the section whose first line starts with ``head`` (to the next blank line)."""
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(head))
    out = []
    for ln in lines[i:]:
        if not ln.strip():
            break
        out.append(ln)
    return out


@pytest.mark.slow
def test_analyze_text_shows_memory_roofline_and_modules(tmp_path, capsys):
    code, out, err = run_cli(
        capsys, "analyze", str(MEM / "gpt_mem.pt.trace.json.gz"), "--db", str(tmp_path / "s")
    )
    assert code == 0, err
    facts = json.loads((MEM / "facts.json").read_text())
    gib = 2**30
    mem = section(out, "memory:")
    # torch.cuda.max_memory_allocated / reserved of the same steps, and the H100's memory
    assert facts["max_memory_allocated"] / gib == pytest.approx(0.4514, abs=1e-4)
    assert mem[0] == (
        "memory: peak allocated 0.451 GiB, reserved 0.473 GiB (0.597% of 79.2 GiB), "
        "reserved - allocated at the peak 0.0213 GiB"
    )
    assert (facts["max_memory_reserved"] - facts["max_memory_allocated"]) / gib == (
        pytest.approx(0.0213, abs=1e-4)
    )
    assert mem[1].startswith("  peak allocated by phase: forward ")
    assert "backward 0.451 GiB" in mem[1]  # the peak falls in the backward pass
    assert mem[2] == "  cudaMalloc/cudaFree inside steps: 0 calls"
    assert mem[3].startswith("  top allocating ops (per step): aten::_to_copy 164 MiB")

    roof = section(out, "roofline")
    assert roof[0].startswith("roofline (H100 SXM): ")
    assert re.search(r"ms per step lost against the roofs, of [\d.]+ ms modelled GPU time", roof[0])
    assert roof[1].split() == ["op", "dtype", "bound", "time/step", "%", "of", "roof", "lost/step"]
    rows = [r for r in roof[2:] if not r.startswith("  note: ")]
    assert len(rows) == 8
    assert rows[0].split()[:3] == ["aten::_foreach_addcdiv_", "fp32", "memory"]
    # ops whose bytes fit in twice the L2 have no HBM roof (docs/metrics.md, the roofline): the
    # layer norm's backward (its rows once led, above their roof) is among them, said in a note
    assert not [r for r in rows if r.split()[0] == "aten::native_layer_norm_backward"]
    assert roof[-1].startswith("  note: 43 memory-bound op(s) fit in twice the L2 (100 MiB)")
    lost = [float(r.split()[-2]) for r in rows]
    assert lost == sorted(lost, reverse=True)  # sorted by time lost against the roof

    phases = section(out, "GPU time per step by phase:")
    assert phases[0].startswith("GPU time per step by phase: forward ")
    assert "backward" in phases[0] and "optimizer" in phases[0]
    assert phases[1] == "GPU time per step by module (nn.Module; top levels)"
    mods = [ln[2:46].strip() for ln in phases[2:] if not ln.startswith("  repeats")]
    assert mods[:2] == ["GPT_0", "(no module)"]
    assert {"GPT_0/Block_0", "GPT_0/Block_3"} <= set(mods)
    assert any(ln.startswith("  repeats: 36 kernels x 4.00 per step in GPT_0") for ln in phases)


@pytest.mark.slow
def test_analyze_text_says_when_memory_and_modules_were_not_recorded(tmp_path, capsys):
    trace = SAMPLES / "fixes" / "pin_memory" / "pin_memory_rank0.pt.trace.json.gz"
    code, out, err = run_cli(capsys, "analyze", str(trace), "--db", str(tmp_path / "s"))
    assert code == 0, err
    assert section(out, "memory:") == [
        "memory: no allocator events: record with torch.profiler.profile(profile_memory=True) "
        "(a run ingested before gpuscope kept them needs ingesting again)"
    ]
    mods = section(out, "GPU time per step by phase:")
    assert any("no nn.Module spans in the trace" in ln for ln in mods)

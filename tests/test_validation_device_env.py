"""The validation recorders' device scripts: each sources device_env.sh before it runs Python, and
device_env.sh turns NVLink multicast off and makes gpuscope importable from this tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAL = ROOT / "sample_traces" / "validation"
SOURCE = ". sample_traces/validation/device_env.sh"


def test_every_device_script_sources_the_shared_env_before_python() -> None:
    scripts = sorted(VAL.glob("record_*_device.sh"))
    assert len(scripts) >= 5
    for script in scripts:
        lines = script.read_text().splitlines()
        at = next(i for i, x in enumerate(lines) if x.startswith(SOURCE))
        first_python = next(i for i, x in enumerate(lines) if "python3" in x)
        assert at < first_python, script.name


def test_device_env_turns_multicast_off_and_imports_gpuscope_from_the_tree() -> None:
    probe = (
        f"{SOURCE} && echo $NCCL_NVLS_ENABLE $TORCH_SYMM_MEM_DISABLE_MULTICAST "
        f"$NVSHMEM_DISABLE_NVLS $PYTHONUNBUFFERED && "
        f"{sys.executable} -c 'import gpuscope; print(gpuscope.__path__[0])'"
    )
    out = subprocess.run(
        ["bash", "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "0 1 1 1"
    assert out[1] == str(ROOT / "app")

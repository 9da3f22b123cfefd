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
        # Python runs on a line of its own, or inside device_env.sh's drive_part / drive_lanes
        first_python = next(
            i
            for i, x in enumerate(lines)
            if "python3" in x or x.strip().startswith(("drive_part ", "drive_lanes "))
        )
        assert at < first_python, script.name


def test_drive_part_runs_the_parts_driver_with_its_arguments(tmp_path: Path) -> None:
    """``drive_part blind4 call1 v70,v71 2 300 more`` (record_blind4_device.sh's arguments) runs
    record_blind4.py's driver on those cases, 2 rounds, a 300 s budget, no trace, into
    $OUT/blind4_call1.tar.gz and its log; the defaults are 3 rounds and 470 s. nvidia-smi,
    python3 and timeout are stubs that write down how they were called."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("nvidia-smi", "python3", "nproc", "uptime"):
        (bin_ / tool).write_text("#!/bin/sh\necho stub\n")
    (bin_ / "timeout").write_text('#!/bin/sh\necho "$@" >>"$OUT/calls.txt"\necho "== done"\n')
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    script = VAL / "record_blind4_device.sh"
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "OUT": str(out), "HOME": str(tmp_path)}
    for args in (["call1", "v70,v71", "2", "300", "more"], ["call2", "v72"]):
        done = subprocess.run(
            ["bash", str(script), *args], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert "== done" in done.stdout
    calls = (out / "calls.txt").read_text().splitlines()
    assert calls[0] == (
        "-s INT 585 python3 sample_traces/validation/record_blind4.py drive --cases v70,v71 "
        f"--rounds 2 --out /tmp/blind4_call1 --tar {out}/blind4_call1.tar.gz --budget-s 300 "
        "--child-timeout 150 --no-trace"
    )
    assert calls[1] == (
        "-s INT 585 python3 sample_traces/validation/record_blind4.py drive --cases v72 "
        f"--rounds 3 --out /tmp/blind4_call2 --tar {out}/blind4_call2.tar.gz --budget-s 470 "
        "--child-timeout 150"
    )
    assert (out / "env_blind4_call1.txt").read_text().startswith("stub")


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


def test_drive_lanes_runs_one_driver_per_lane_on_its_own_gpus_and_cores(tmp_path: Path) -> None:
    """``drive_lanes blind6 c1 400 "0/0-15/v100,v103" "2,3/32-47/v114"``: two drivers at once,
    each with its GPUs in CUDA_VISIBLE_DEVICES and its cores given to taskset, tagged c1-l0 and
    c1-l1, 3 rounds, 400 s budget, interrupted at DRIVE_TIMEOUT_S; then only the case tars and one
    tar of the logs and environments stay in $OUT. nvidia-smi, python3, taskset and timeout are
    stubs that write down how they were called."""
    import tarfile

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("nvidia-smi", "python3", "nproc", "uptime"):
        (bin_ / tool).write_text("#!/bin/sh\necho stub\n")
    (bin_ / "taskset").write_text('#!/bin/sh\necho "$1 $2" >>"$OUT/taskset.txt"\n')
    # the driver's stub writes its tar (named after --tar) and its call with the lane's GPUs
    (bin_ / "timeout").write_text(
        "#!/bin/sh\n"
        'echo "$CUDA_VISIBLE_DEVICES|$*" >>"$OUT/calls.txt"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --tar ] && touch "$2"; shift; done\n'
        'echo "== done"\n'
    )
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "OUT": str(out),
        "HOME": str(tmp_path),
        "DRIVE_TIMEOUT_S": "560",
    }
    probe = f'{SOURCE} && drive_lanes blind6 c1 400 "0/0-15/v100,v103" "2,3/32-47/v114"'
    done = subprocess.run(["bash", "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("== done") == 2
    calls = sorted((out / "calls.txt").read_text().splitlines())
    assert calls == [
        "0|-s INT 560 python3 sample_traces/validation/record_blind6.py drive --cases v100,v103 "
        f"--rounds 3 --out /tmp/blind6_c1-l0 --tar {out}/blind6_c1-l0.tar.gz --budget-s 400 "
        "--child-timeout 150",
        "2,3|-s INT 560 python3 sample_traces/validation/record_blind6.py drive --cases v114 "
        f"--rounds 3 --out /tmp/blind6_c1-l1 --tar {out}/blind6_c1-l1.tar.gz --budget-s 400 "
        "--child-timeout 150",
    ]
    assert sorted(x.split()[1] for x in (out / "taskset.txt").read_text().splitlines()) == [
        "0-15",
        "32-47",
    ]
    (out / "calls.txt").unlink()
    (out / "taskset.txt").unlink()
    assert sorted(p.name for p in out.iterdir()) == [
        "blind6_c1-l0.tar.gz",
        "blind6_c1-l1.tar.gz",
        "blind6_c1_logs.tar.gz",
    ]
    with tarfile.open(out / "blind6_c1_logs.tar.gz") as tf:
        assert sorted(tf.getnames()) == [
            "blind6_c1-l0.log",
            "blind6_c1-l1.log",
            "env_blind6_c1-l0.txt",
            "env_blind6_c1-l1.txt",
            "lane0.out",
            "lane1.out",
        ]

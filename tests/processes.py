"""Process helpers the test support modules share (tests/stored_samples.py, tests/team_servers.py)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: signalling it is refused,
    not unknown)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""The write lock: writers of one local store take turns through an exclusive ``flock`` held for a whole write transaction."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# ---------------------------------------------------------------------------------------------------
# The cross-process write lock


class WriteLock:
    """Exclusive across processes (``flock`` on a file) and threads (a reentrant lock).

    One per lock file and process (:func:`write_lock`): two ``flock`` on separate descriptors of
    one process would block each other.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.thread_lock:
            if self.depth == 0 and self.path is not None:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self.fd = fd
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
                if self.depth == 0 and self.fd is not None:
                    os.close(self.fd)  # releases the flock
                    self.fd = None


_locks: dict[str, WriteLock] = {}
_locks_guard = threading.Lock()


def write_lock(path: Path | None, key: str) -> WriteLock:
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = WriteLock(path)
        return lock

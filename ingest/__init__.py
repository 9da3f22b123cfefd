"""Load PyTorch profiler (Kineto) traces and NVML series into DuckDB.

Public entry points: :func:`gpuscope.store.connect` and :func:`gpuscope.ingest.loader.ingest_paths`.
"""

import os

# numpy's OpenBLAS starts a worker per usable core when numpy is imported (pyarrow imports it), and
# those workers spin on the cores the ingest's threads need; gpuscope does no linear algebra. One
# thread took 0.4-0.5 CPU s less of the 1 GB trace's write phase on a 2-core-pinned GPU host (three
# interleaved pairs, docs/benchmarks.md). Set before this package's modules import numpy; a value
# the user set stays.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

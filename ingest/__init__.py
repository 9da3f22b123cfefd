"""Load PyTorch profiler (Kineto) traces and NVML series into DuckDB.

Public entry points: :func:`gpuscope.store.connect` and :func:`gpuscope.ingest.loader.ingest_paths`.
"""

"""Load PyTorch profiler (Kineto) traces and NVML series into DuckDB.

Public entry points: :func:`gpuscope.ingest.store.connect` and :func:`gpuscope.ingest.loader.ingest_paths`.
"""

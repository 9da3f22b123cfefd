"""gpuscope: why GPUs sit idle during training, from PyTorch profiler traces and NVML series.

This package holds the product's faces (CLI, web site, sampler, capture helper). The data layers are
``gpuscope.ingest`` (files -> DuckDB) and ``gpuscope.analysis`` (DuckDB -> plain data); neither
imports anything from here but this version string.
"""

__version__ = "0.1.0"

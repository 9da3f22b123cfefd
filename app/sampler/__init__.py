"""The GPU sampler behind `gpuscope sample` and `gpuscope.capture` (docs/sampler.md).

``nvml_api`` (NVML polls -> plain dicts, N/A as None), ``sources`` (live polling on a fixed grid,
or replay of a recording), ``record`` (the JSONL recorder), ``loop`` (the sampling thread and the
in-memory ring buffer), ``server`` (HTTP: /metrics, /api/samples, /api/status, /healthz).
"""

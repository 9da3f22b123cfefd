"""A run's throughput: the samples and tokens of a step (from the trace's metadata or the model's
input) over the step time, traced and untraced (docs/metrics.md, "Comparison": the speed-up)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.analysis.json_row import JsonRow

#: The rates of :class:`Throughput` (per second), by name: what ``compare`` picks by key.
RATES = ("samples_per_s", "tokens_per_s", "samples_per_s_untraced", "tokens_per_s_untraced")


@dataclass(frozen=True)
class Throughput(JsonRow):
    """Samples and tokens per step (None: unknown), where they came from (``source``), and per
    second over the traced step time and, when known, the untraced one (``..._untraced``)."""

    samples_per_step: float | None
    tokens_per_step: float | None
    source: str | None
    samples_per_s: float | None
    tokens_per_s: float | None
    samples_per_s_untraced: float | None
    tokens_per_s_untraced: float | None

    def rate(self, key: str) -> float | None:
        """The rate named ``key`` (one of :data:`RATES`, per second)."""
        if key not in RATES:
            raise KeyError(key)
        value: float | None = getattr(self, key)
        return value

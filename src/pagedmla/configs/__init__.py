"""Launch configs: frozen dataclasses (data, not code), one module per kernel family, each with a heuristic.

The heuristics run on every op call and depend only on their arguments, so they are cached (`lru_cache`): a
config built per call cost tens of microseconds of host time (benchmarks/host_overhead.py)."""

"""Launch configs: frozen dataclasses (data, not code), one module per kernel family, each with a heuristic.

The heuristics run on every op call and depend only on their arguments, so they are cached (`lru_cache`). In one
single-shot host-time run on the H200 machine (`benchmarks/results/session-5/host-47e5a2b.txt`, noisy) the
k_matmul launcher took 93 us per call with its heuristic and 54 us with the config given; cached, the two are
within 1 us (`host-9e09ea0.txt`)."""

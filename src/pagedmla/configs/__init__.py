"""Launch configs: frozen dataclasses (data, not code), one module per kernel family, each with a heuristic."""

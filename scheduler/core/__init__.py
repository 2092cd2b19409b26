"""The pure scheduling core: a `model.Snapshot` in, a `model.CycleResult` out.

Entry points: `cycle.schedule` (the loop, the simulator, the benchmarks),
`explain.explain` (the API's explain endpoint) and `invariants.check`. No I/O, no
clock, no randomness: the import-linter contract in pyproject.toml holds it so.
"""

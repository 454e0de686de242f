"""The benchmark harness of svc: ``make bench`` (see bench/README.md).

Run from the repository root as ``python -m bench.harness`` (or
``python bench/harness.py``). Targets are registered in ``bench/targets.py``;
the two baselines live in ``bench/baselines/``.
"""

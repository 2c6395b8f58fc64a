"""Benchmarks for ``django_pydantic_agent.contrib.store``: run ``python -m bench``.

See ``docs/benchmarks.md`` for the recorded figures and how to reproduce them.
"""

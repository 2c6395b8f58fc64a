"""Helpers shared by test packages that are not fixtures of one package's ``conftest.py``."""

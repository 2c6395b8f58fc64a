"""Serve a Pydantic-AI agent over AG-UI from Django, with durable chat history."""

from __future__ import annotations

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]

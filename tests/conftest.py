"""Suite-wide fixtures. Feature fixtures live in the nearest ``conftest.py``."""

from __future__ import annotations

import pydantic_ai.models

# No test may reach a real model provider: FunctionModel and TestModel still work.
pydantic_ai.models.ALLOW_MODEL_REQUESTS = False

"""The ``agent_store_*`` maintenance commands."""

"""A local emulator of the Agentic Memory Service REST API (add to ``INSTALLED_APPS``)."""

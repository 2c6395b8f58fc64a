"""A test-only app: models that exercise the ``Model*Store`` bases."""

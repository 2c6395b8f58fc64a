"""Our development 0001_initial (before 1.0.0.dev0), kept to build such a database in tests."""

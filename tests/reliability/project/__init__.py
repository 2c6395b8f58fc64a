"""A small Django project the reliability suite serves under uvicorn subprocesses.

``settings.py`` reads its database from the environment (a SQLite file with the example
project's locking options, or ``RELIABILITY_DATABASE_URL``), ``urls.py`` mounts the AG-UI
servers under test, ``agent.py`` is their fast scripted model. ``prepare.py`` migrates and
creates the users; ``dump.py`` prints what the database holds, for the tests to check.
"""

"""Golden captures: pgoutput bytes and table states recorded from a real PostgreSQL 18.

Import the loader as ``from golden.loader import load_capture`` (pytest puts ``tests/`` on
``sys.path`` because ``tests/conftest.py`` lives there). See ``tests/golden/README.md``.
"""

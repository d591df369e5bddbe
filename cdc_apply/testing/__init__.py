"""Helpers for users testing their pipelines (and for our own tests): a real PostgreSQL, stream builders."""

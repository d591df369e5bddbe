"""Snapshots: exported slots and copy sessions, key-range chunks, what a publication shows of a table."""

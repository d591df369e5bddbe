"""``cdc-apply verify``: silver compared with the live PostgreSQL table at one consistent point (docs/VERIFY.md)."""

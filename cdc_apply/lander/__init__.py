"""The lander: PostgreSQL replication slot (and snapshots) to the bronze table."""

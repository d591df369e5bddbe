"""Planning core: transaction assembly, ordering, per-key events, truncate and schema segments. No Spark."""

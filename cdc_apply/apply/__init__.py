"""Planning core: transaction assembly, ordering, per-key collapse, truncate and schema segments. No Spark."""

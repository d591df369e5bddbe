"""Lake I/O: bronze, silver, state and history tables in Delta Lake; the micro-batch pipeline."""

"""The apply job's lake I/O with Spark and Delta: the micro-batch pipeline and a batch's tables, with bronze
sources, bookkeeping, silver writes and history tables in rooms of their own."""

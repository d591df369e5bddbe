"""Silver writes of one table: the MERGE and its key moves, appends, snapshot loads, replaced rows."""

"""Bookkeeping: the state tables, the exactly-once ledger and state check, the batch logs, status."""

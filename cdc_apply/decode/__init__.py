"""The decode stage: bronze payloads (Arrow batches) to typed change rows, per a decode plan. No Spark."""

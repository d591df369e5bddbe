"""Pure pgoutput protocol code: messages, decoder, tuple values, type map, encoder. No Spark."""

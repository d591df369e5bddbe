"""History tables (every version of every row) and reads as of a commit."""

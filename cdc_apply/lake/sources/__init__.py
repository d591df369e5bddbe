"""Bronze as the apply job reads it: source formats, the contract checks, the lag, payload columns."""

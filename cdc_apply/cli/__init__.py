"""The ``cdc-apply`` command."""

"""The commit tag: what cdc_apply's own Delta commits of silver and history tables say in ``userMetadata``.

A commit's ``userMetadata`` (``DESCRIBE HISTORY``) holds ``{"cdc_apply": {...}}``: a batch's data
commit the source, relation and last commit LSN, the app id, its ledger step and batch seqs
(:mod:`cdc_apply.lake.books.ledger`), sometimes the ``part`` of the step it is; a schema step its chain and
step (:func:`cdc_apply.lake.silver.schema_changes.apply_schema_ops`). Only this module writes or reads that JSON.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

KEY = "cdc_apply"


def encode_tag(tag: Mapping[str, Any]) -> str:
    """The ``userMetadata`` text of a commit tagged ``tag``."""
    return json.dumps({KEY: dict(tag)}, separators=(",", ":"))


def decode_tag(metadata: str | None) -> dict[str, Any] | None:
    """The tag a commit's ``userMetadata`` holds; ``None`` when it holds none (empty, not JSON, not ours)."""
    if not metadata:
        return None
    try:
        body = json.loads(metadata)
    except ValueError:
        return None
    tag = body.get(KEY) if isinstance(body, dict) else None
    return tag if isinstance(tag, dict) else None


def app_marker(app_id: str) -> str:
    """Text that the ``userMetadata`` of every commit tagged for ``app_id`` contains: a cheap filter on a
    table's history before its tags are decoded."""
    return '"app":' + json.dumps(app_id)

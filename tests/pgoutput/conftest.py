"""Fixtures the value converter tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["column", "scalar"])
def conversion_path(request, monkeypatch):
    """Run a test through the column-at-a-time paths and through the one-value paths.

    Not autouse: the value test modules ask for it with ``pytestmark``, the other tests of
    this folder do not convert values and would only run twice.
    """
    from cdc_apply.pgoutput import values
    from cdc_apply.pgoutput.values import arrays

    limit = 0 if request.param == "column" else 10**9
    for table in (values._SCALAR_TEXT, values._SCALAR_BINARY):
        for kind, (parse, _) in list(table.items()):
            monkeypatch.setitem(table, kind, (parse, limit))
    monkeypatch.setattr(arrays, "SMALL_BATCH", limit)
    return request.param

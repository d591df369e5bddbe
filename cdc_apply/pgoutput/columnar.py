"""Insert/Update/Delete messages column-at-a-time: raw column values as Arrow arrays.

:func:`walk_dml` takes many DML payloads at once and returns, per tuple
column, an Arrow binary array of the raw values (null where the value is
NULL, unchanged TOAST or absent) plus flags for binary-format values, the
unchanged-TOAST bitmask of each new tuple and the key/old tuple beside it.
The type converters then work on whole columns.

A message the walk cannot take gets a :class:`DecodeError` in ``error``
(from the reference decoder, which names the byte offset) and no values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message


@dataclass(slots=True)
class DmlBatch:
    """The walked form of ``n`` DML messages (row ``i`` is the ``i``-th payload)."""

    op: np.ndarray            # uint8: ord('I'), ord('U'), ord('D'); 0 when error
    relation_id: np.ndarray   # int64
    xid: np.ndarray           # int64, -1 outside stream blocks
    old_kind: list            # 'K', 'O' or None per row
    new_count: np.ndarray     # int32 column count of the new tuple, -1 when absent
    old_count: np.ndarray     # int32 column count of the key/old tuple, -1 when absent
    toast: list               # indexes of unchanged-TOAST columns in the new tuple, or None
    new_values: list          # per column: pa.BinaryArray of length n
    new_binary: list          # per column: np.ndarray[bool], True where the value was 'b'
    old_values: list
    old_binary: list
    error: list               # DecodeError or None per row


def toast_columns(values: m.TupleData) -> list[int] | None:
    """Indexes of the unchanged-TOAST columns of a tuple, or None when there are none."""
    found = [i for i, v in enumerate(values) if v is m.UNCHANGED_TOAST]
    return found or None


def _columns(tuples: list, width: int) -> tuple[list, list]:
    values, binary = [], []
    for c in range(width):
        raw: list = []
        flags = np.zeros(len(tuples), dtype=bool)
        for i, tup in enumerate(tuples):
            v = tup[c] if tup is not None and c < len(tup) else None
            if v is None or v is m.UNCHANGED_TOAST:
                raw.append(None)
            elif isinstance(v, str):
                raw.append(v.encode("utf-8"))
            else:
                raw.append(v)
                flags[i] = True
        values.append(pa.array(raw, type=pa.binary()))
        binary.append(flags)
    return values, binary


def walk_dml(payloads: pa.Array, in_stream: np.ndarray) -> DmlBatch:
    """Walk DML payloads; ``in_stream[i]`` says whether payload ``i`` sits in a stream block."""
    n = len(payloads)
    op = np.zeros(n, dtype=np.uint8)
    relation_id = np.zeros(n, dtype=np.int64)
    xid = np.full(n, -1, dtype=np.int64)
    new_count = np.full(n, -1, dtype=np.int32)
    old_count = np.full(n, -1, dtype=np.int32)
    old_kind: list = [None] * n
    toast: list = [None] * n
    error: list = [None] * n
    new_tuples: list = [None] * n
    old_tuples: list = [None] * n
    for i, payload in enumerate(payloads.to_pylist()):
        try:
            msg = decode_message(payload, bool(in_stream[i]))
        except CdcApplyError as err:
            error[i] = err
            continue
        if not isinstance(msg, (m.Insert, m.Update, m.Delete)):
            error[i] = DecodeError("expected Insert, Update or Delete", message_type=type(msg).__name__)
            continue
        op[i] = ord(msg.TYPE)
        relation_id[i] = msg.relation_id
        if msg.xid is not None:
            xid[i] = msg.xid
        new = getattr(msg, "new", None)
        key, old = getattr(msg, "key", None), getattr(msg, "old", None)
        if key is not None:
            old_kind[i], old = "K", key
        elif old is not None:
            old_kind[i] = "O"
        if new is not None:
            new_tuples[i] = new
            new_count[i] = len(new)
            toast[i] = toast_columns(new)
        if old is not None:
            if any(v is m.UNCHANGED_TOAST for v in old):
                error[i] = DecodeError("unchanged TOAST value in a key/old tuple", message_type=type(msg).__name__)
                continue
            old_tuples[i] = old
            old_count[i] = len(old)
    width = int(max(new_count.max(initial=0), old_count.max(initial=0), 0))
    new_values, new_binary = _columns(new_tuples, width)
    old_values, old_binary = _columns(old_tuples, width)
    return DmlBatch(op, relation_id, xid, old_kind, new_count, old_count, toast,
                    new_values, new_binary, old_values, old_binary, error)

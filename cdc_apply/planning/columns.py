"""The private column vocabulary of a silver table's change rows, from projection to MERGE.

A table's decoded changes are projected onto its silver columns (:func:`cdc_apply.lake.silver.merge.project`),
turned into per-key events, collapsed and merged; the history tables read the same rows. Every stage
names these columns through this module, so a name is spelled once. None of them reaches silver:
silver has the table's own columns and the configured metadata columns.

Per silver column ``i`` (its index in the table's silver columns) and key column ``p``:

* ``value(i)``  — ``n_i``: the column's value after the change (NULL for a delete);
* ``carried(i)`` — ``x_i``: the change carries column ``i`` (false: unchanged TOAST, or a column the
  change's relation version does not have);
* ``present(i)`` — ``p_i``: column ``i`` exists in the change's relation version (``p_i and not x_i``:
  unchanged TOAST);
* ``old(i)``    — ``o_i``: the value in the change's old tuple (REPLICA IDENTITY FULL) or key tuple;
* ``key(p)``    — ``k_p``: key column ``p`` of the row the event is about (after a key move: the new key).

After the collapse, one row per key (the MERGE's source):

* ``final(i)``  — ``v_i``: column ``i``'s value for the silver row;
* ``sets(i)``   — ``s_i``: the MERGE sets column ``i`` (false: keep the value silver has).
"""

from __future__ import annotations

from typing import Literal

# The decode's ``op`` of a change row: a DML message's type letter, or M for a logical decoding message.
ChangeOp = Literal["I", "U", "D", "M"]

SEQ = "_seq"                 # the change's bronze seq: commit order within the batch
KIND = "_kind"               # the per-key event: I (insert), U (update), D (delete), M (move-in)
OP = "_op"                   # the change's pgoutput kind (I/U/D), as the history tables record it
OLD_KIND = "_old_kind"       # K (key tuple) or O (old tuple) of an update or delete, else NULL
COMMIT_LSN = "_commit_lsn"   # the transaction's commit LSN (final LSN of Commit)
COMMIT_TS = "_commit_ts"     # the transaction's commit timestamp
XID = "_xid"
ORIGIN = "_origin"
USER = "_user"               # GaussDB: the user whose transaction it was
# The transaction's columns every event carries to the silver row (and the history tables).
EVENT_META = (COMMIT_LSN, COMMIT_TS, XID, ORIGIN, USER)


def value(i: int) -> str:
    """``n_i``: silver column ``i``'s value after the change."""
    return f"n_{i}"


def carried(i: int) -> str:
    """``x_i``: the change carries silver column ``i``."""
    return f"x_{i}"


def present(i: int) -> str:
    """``p_i``: silver column ``i`` exists in the change's relation version."""
    return f"p_{i}"


def old(i: int) -> str:
    """``o_i``: silver column ``i``'s value in the change's old or key tuple."""
    return f"o_{i}"


def key(p: int) -> str:
    """``k_p``: key column ``p`` of the row the event is about."""
    return f"k_{p}"


def final(i: int) -> str:
    """``v_i``: silver column ``i``'s value after the collapse."""
    return f"v_{i}"


def sets(i: int) -> str:
    """``s_i``: the MERGE sets silver column ``i`` from ``v_i`` (else keeps silver's value)."""
    return f"s_{i}"

"""Spark column tests on bronze payloads, from the one table of message kinds, and their twin in Python.

The driver takes the control messages and cdc_apply's directives; everything else — changes, and null,
empty or unknown payloads, which the decode stage turns into errors — goes to the decode. Spark's
``substring`` counts bytes from 1. A batch run on the driver (``cdc_apply.lake.local_batch``) asks the
same questions of each payload in Python (:func:`payload_kinds`; a test holds the two to one answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID
from cdc_apply.planning.assemble import DIRECTIVE_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Type bytes as Spark shows the first payload byte (``hex``).
CONTROL_HEX = tuple(sorted(f"{t:02X}" for t in m.CONTROL_TYPES))
CHANGE_HEX = tuple(sorted(f"{t:02X}" for t in m.CHANGE_TYPES))
MESSAGE_HEX = f"{ord(m.Message.TYPE):02X}"
# Where a Message's prefix starts, as Spark's substring counts (from 1).
_PREFIX_AT = tuple(at + 1 for at in m.MESSAGE_PREFIX_OFFSETS)


def first_byte_hex():
    from pyspark.sql import functions as F

    return F.hex(F.substring(F.col("payload"), 1, 1))


def is_control():
    """A control message (never NULL: a NULL or empty payload is not one)."""
    from pyspark.sql import functions as F

    return F.coalesce(first_byte_hex().isin(*CONTROL_HEX), F.lit(False))


def is_change():
    return first_byte_hex().isin(*CHANGE_HEX)


def is_directive():
    """cdc_apply's own logical decoding messages (a snapshot, column defaults): the driver reads them
    with the control messages; they are decoded into the messages log too, like every message."""
    from pyspark.sql import functions as F

    prefix = DIRECTIVE_PREFIX.encode().hex().upper()
    found = [F.hex(F.substring(F.col("payload"), start, len(prefix) // 2)) == prefix for start in _PREFIX_AT]
    return F.coalesce((first_byte_hex() == MESSAGE_HEX) & (found[0] | found[1]), F.lit(False))


def streamed_xid():
    """The xid of a change inside a stream block: Byte1 type, then Int32 xid."""
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring("payload", 2, 4)), 16, 10).cast("long")


def is_insert():
    from pyspark.sql import functions as F

    return F.coalesce(first_byte_hex() == f"{ord(m.Insert.TYPE):02X}", F.lit(False))


def is_snapshot_held():
    """Rows a snapshot load leaves to the general decode, found by the control scan before the loads
    are known: any change other than an Insert carrying the snapshot's xid (the Truncate that empties
    the table; changes in a stream block carry their xid) and anything that is no change (null, empty,
    unknown payloads: the decode reports them). Others match too (a plain Truncate of two tables):
    they only widen the set, which is read by seq."""
    from pyspark.sql import functions as F

    xid = F.substring(F.col("payload"), 2, 4) == F.lit(SNAPSHOT_XID.to_bytes(4, "big"))
    return F.coalesce(~is_change() | (~is_insert() & xid), F.lit(True))


def not_an_insert():
    """``payload`` is null or does not start with an Insert's type byte, as a range test on the bytes: a
    test Parquet's row-group statistics (min and max payload) can answer, so that a read filtered by it
    skips row groups holding Inserts only — a snapshot's copied rows, a bulk load — without reading them.
    Implied by :func:`is_control`, :func:`is_directive` and :func:`is_snapshot_held` (none is an Insert)."""
    from pyspark.sql import functions as F

    insert = ord(m.Insert.TYPE)
    payload = F.col("payload")
    return payload.isNull() | (payload < F.lit(bytes([insert]))) | (payload >= F.lit(bytes([insert + 1])))


def in_seq_ranges(source: str, ranges):
    """Rows of ``source`` whose seq lies in one of ``ranges`` (a snapshot's stream blocks). The ORs form a
    balanced tree: a chain of hundreds nests too deep for the optimizer."""
    from pyspark.sql import functions as F

    parts = [F.col("seq").between(int(a), int(b)) for a, b in ranges]
    if not parts:
        return F.lit(False)
    while len(parts) > 1:
        parts = [parts[i] | parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return (F.col("source") == source) & parts[0]


_DIRECTIVE = DIRECTIVE_PREFIX.encode()
_SNAPSHOT_XID = SNAPSHOT_XID.to_bytes(4, "big")


def payload_is_control(payload: bytes | None) -> bool:
    """:func:`is_control` of one payload."""
    if not payload:
        return False
    return payload[0] in m.CONTROL_TYPES


def payload_kinds(payload: bytes | None) -> tuple[bool, bool, bool]:
    """(control or directive, change, snapshot-held) of one payload, as :func:`is_control` |
    :func:`is_directive`, :func:`is_change` (a NULL is False) and :func:`is_snapshot_held` answer it."""
    if not payload:
        return False, False, True
    kind = payload[0]
    change = kind in m.CHANGE_TYPES
    driver = kind in m.CONTROL_TYPES or (kind == ord(m.Message.TYPE) and any(
        payload[at:at + len(_DIRECTIVE)] == _DIRECTIVE for at in m.MESSAGE_PREFIX_OFFSETS))
    held = not change or (kind != ord(m.Insert.TYPE) and payload[1:5] == _SNAPSHOT_XID)
    return driver, change, held


def first_change_seqs(spark: SparkSession, messages, source: str, ranges, subxids) -> dict[int, int]:
    """Seq of each subtransaction's first change within ``ranges`` of ``source``'s messages (one job)."""
    from pyspark.sql import functions as F

    if not ranges or not subxids:
        return {}
    xid = streamed_xid()
    candidates = (messages
                  .where((F.col("source") == source)
                         & F.col("seq").between(min(a for a, _ in ranges), max(b for _, b in ranges))
                         & is_change())
                  .select(xid.alias("xid"), "seq").where(F.col("xid").isin(list(subxids))))
    # Outside a stream block the same bytes are a relation OID, so only rows inside the ranges count;
    # a join with the (small) range list, not an OR per range, which grows too deep for the optimizer.
    spans = spark.createDataFrame([(int(a), int(b)) for a, b in ranges], "a LONG, b LONG")
    rows = (candidates.join(F.broadcast(spans), F.col("seq").between(F.col("a"), F.col("b")), "left_semi")
            .groupBy("xid").agg(F.min("seq").alias("first")).collect())
    return {int(r.xid): int(r.first) for r in rows}

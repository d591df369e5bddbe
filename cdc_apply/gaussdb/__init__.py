"""GaussDB / openGauss logical decoding (parallel decoding, binary decode-style ``'b'``). No Spark.

Decode a bronze payload into records, transcode records into pgoutput messages
so the pgoutput apply path serves this format too, and render records as JSON.
See ``docs/GAUSSDB.md``.

>>> from cdc_apply.gaussdb import Begin, Commit, Insert, GaussdbTranscoder, decode_gaussdb_payload, encode_gaussdb
>>> payload = encode_gaussdb([Begin(0x100, 7, 0x100), Insert(0x110, "public", "t", (("id", 23, "1"),)),
...                           Commit(0x130, 700)], batch=True)
>>> [type(r).__name__ for r in decode_gaussdb_payload(payload)]
['Begin', 'Insert', 'Commit']
>>> [type(msg).__name__ for msg in GaussdbTranscoder().transcode_payload(payload).pgoutput()]
['Begin', 'Relation', 'Insert', 'Commit']
"""

from cdc_apply.gaussdb.decoder import decode_gaussdb_payload
from cdc_apply.gaussdb.encoder import encode_gaussdb
from cdc_apply.gaussdb.records import Begin, Column, Commit, Delete, GTuple, Heartbeat, Insert, Record, Update
from cdc_apply.gaussdb.render import inspect_gaussdb_hex, render_record
from cdc_apply.gaussdb.timestamps import format_timestamp, heartbeat_micros, parse_timestamp
from cdc_apply.gaussdb.transcode import (
    USER_MESSAGE_PREFIX,
    GaussdbTranscoder,
    HeartbeatInfo,
    OutMessage,
    TransactionInfo,
    TranscodeResult,
)

__all__ = [
    "Begin", "Column", "Commit", "Delete", "GTuple", "Heartbeat", "Insert", "Record", "Update",
    "GaussdbTranscoder", "HeartbeatInfo", "OutMessage", "TranscodeResult", "TransactionInfo", "USER_MESSAGE_PREFIX",
    "decode_gaussdb_payload", "encode_gaussdb", "format_timestamp", "heartbeat_micros", "inspect_gaussdb_hex",
    "parse_timestamp", "render_record",
]

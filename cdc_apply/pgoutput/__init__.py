"""Pure pgoutput protocol code: messages, decoder, tuple values, type map, encoder. No Spark.

>>> from cdc_apply.pgoutput import Begin, decode_message, encode
>>> decode_message(encode(Begin(final_lsn=1, commit_ts=0, xid=7)))
Begin(final_lsn=1, commit_ts=0, xid=7)
"""

from cdc_apply.pgoutput.decoder import StreamDecoder, decode_message
from cdc_apply.pgoutput.encoder import encode, encode_tuple_data
from cdc_apply.pgoutput.messages import (
    MESSAGE_CLASSES,
    MESSAGE_NAMES,
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    PgOutputMessage,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    format_lsn,
    parse_lsn,
)
from cdc_apply.pgoutput.render import render_message

__all__ = [
    "MESSAGE_CLASSES", "MESSAGE_NAMES", "UNCHANGED_TOAST",
    "Begin", "BeginPrepare", "Commit", "CommitPrepared", "Delete", "Insert", "Message", "Origin",
    "PgOutputMessage", "Prepare", "Relation", "RelationColumn", "RollbackPrepared", "StreamAbort",
    "StreamCommit", "StreamPrepare", "StreamStart", "StreamStop", "Truncate", "Type", "Update",
    "StreamDecoder", "decode_message", "encode", "encode_tuple_data", "format_lsn", "parse_lsn",
    "render_message",
]

"""The one place bytes are read and written: big-endian fields with bounds checks.

Every read checks that the bytes are there before reading; :meth:`Reader.finish`
rejects trailing bytes. Errors are :class:`~cdc_apply.errors.DecodeError` naming
the message type and the byte offset.
"""

from __future__ import annotations

import struct
from operator import itemgetter

from cdc_apply.errors import DecodeError

INT8 = struct.Struct(">b")
UINT8 = struct.Struct(">B")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
UINT64 = struct.Struct(">Q")

# Whole fixed parts of the messages read at every transaction, one unpack each (a batch of 100,000
# transactions reads 200,000 of them): Begin's final LSN, commit timestamp and xid; Commit's flags,
# commit LSN, end LSN and commit timestamp.
BEGIN_FIELDS = struct.Struct(">QqI")
COMMIT_FIELDS = struct.Struct(">BQQq")

# The streaming replication protocol's CopyData messages around pgoutput (the lander's reader): XLogData
# ('w', data start, wal end, send time; the payload follows at XLOG_DATA.size), the primary keepalive
# ('k', wal end, send time, reply requested) and the standby status update ('r', write, flush, apply, now,
# reply requested).
XLOG_DATA = struct.Struct(">cQQq")
KEEPALIVE = struct.Struct(">cQqB")
STANDBY_STATUS = struct.Struct(">cQQQqB")

_u8 = UINT8.unpack_from
_i16 = INT16.unpack_from
_i32 = INT32.unpack_from
_u32 = UINT32.unpack_from
_i64 = INT64.unpack_from
_u64 = UINT64.unpack_from


_first = itemgetter(0)


def first_bytes(payloads) -> bytes:
    """The first byte of each payload (a pgoutput message's type) as one bytes object, made in C loops: the
    lander looks at thousands of messages per read. An empty payload raises ``IndexError``."""
    return bytes(map(_first, payloads))


class Reader:
    """A cursor over one message's bytes."""

    __slots__ = ("buf", "pos", "end", "what")

    def __init__(self, buf: bytes, what: str = "message", pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.what = what

    def fail(self, detail: str, offset: int | None = None) -> DecodeError:
        return DecodeError(detail, message_type=self.what, offset=self.pos if offset is None else offset)

    def _need(self, n: int) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise self.fail(f"truncated: need {n} bytes, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def u8(self) -> int:
        return _u8(self.buf, self._need(1))[0]

    def byte(self) -> str:
        """One byte as a one-character string (type bytes, flags like 'N', 'K', 'O')."""
        return chr(_u8(self.buf, self._need(1))[0])

    def i16(self) -> int:
        return _i16(self.buf, self._need(2))[0]

    def i32(self) -> int:
        return _i32(self.buf, self._need(4))[0]

    def u32(self) -> int:
        return _u32(self.buf, self._need(4))[0]

    def i64(self) -> int:
        return _i64(self.buf, self._need(8))[0]

    def u64(self) -> int:
        return _u64(self.buf, self._need(8))[0]

    def fields(self, layout: struct.Struct) -> tuple:
        """Several fixed-width fields at once (a message's fixed part: one bounds check, one unpack)."""
        return layout.unpack_from(self.buf, self._need(layout.size))

    def raw(self, n: int) -> bytes:
        if n < 0:
            raise self.fail(f"negative length {n}")
        start = self._need(n)
        return bytes(self.buf[start : start + n])

    def cstring(self) -> str:
        """A NUL-terminated UTF-8 string (pgoutput ``String``)."""
        start = self.pos
        nul = self.buf.find(b"\x00", start, self.end)
        if nul < 0:
            raise self.fail("unterminated string")
        self.pos = nul + 1
        try:
            return bytes(self.buf[start:nul]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not valid UTF-8 ({exc.reason})", offset=start + exc.start) from None

    def remaining(self) -> int:
        return self.end - self.pos

    def finish(self) -> None:
        if self.pos != self.end:
            raise self.fail(f"{self.end - self.pos} trailing bytes")


class Writer:
    """Builds one message; the encoder's counterpart of :class:`Reader`."""

    __slots__ = ("parts",)

    def __init__(self, type_byte: str) -> None:
        self.parts: list[bytes] = [type_byte.encode("ascii")]

    def u8(self, v: int) -> "Writer":
        self.parts.append(UINT8.pack(v))
        return self

    def byte(self, c: str) -> "Writer":
        self.parts.append(c.encode("ascii"))
        return self

    def i16(self, v: int) -> "Writer":
        self.parts.append(INT16.pack(v))
        return self

    def i32(self, v: int) -> "Writer":
        self.parts.append(INT32.pack(v))
        return self

    def u32(self, v: int) -> "Writer":
        self.parts.append(UINT32.pack(v))
        return self

    def i64(self, v: int) -> "Writer":
        self.parts.append(INT64.pack(v))
        return self

    def u64(self, v: int) -> "Writer":
        self.parts.append(UINT64.pack(v))
        return self

    def raw(self, b: bytes) -> "Writer":
        self.parts.append(bytes(b))
        return self

    def cstring(self, s: str) -> "Writer":
        data = s.encode("utf-8")
        if b"\x00" in data:
            raise ValueError("a pgoutput String cannot contain a NUL byte")
        self.parts.append(data + b"\x00")
        return self

    def getvalue(self) -> bytes:
        return b"".join(self.parts)

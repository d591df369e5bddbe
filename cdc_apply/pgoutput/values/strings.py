"""Types stored as strings or bytes: text-like, "char", bytea, json/jsonb, uuid, inet/cidr,
macaddr/macaddr8, bit/varbit, pg_lsn, tid, and types without a dedicated converter.

Text forms are kept as PostgreSQL printed them (after a cheap shape check); binary forms are
formatted exactly as the type's output function would print the value, so a row decoded
from a text stream and from a binary stream gives equal strings.
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..messages import format_lsn
from ..types import ColumnType
from .common import (
    Malformed,
    by_rows,
    check_regex,
    fail,
    first_bad_row,
    fixed_width,
    hex_rows,
    offsets_and_data,
    per_value,
    strings_from_rows,
    utf8,
    valid_mask,
    validity_of,
)

PGSQL_AF_INET, PGSQL_AF_INET6 = 2, 3
_TEXT_SHAPES = {
    "uuid": (r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", "a uuid"),
    "macaddr": (r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$", "a macaddr"),
    "macaddr8": (r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){7}$", "a macaddr8"),
    "inet": (r"^[0-9a-fA-F.:]+(/[0-9]{1,3})?$", "an inet address"),
    "cidr": (r"^[0-9a-fA-F.:]+/[0-9]{1,3}$", "a cidr network"),
    "bit": (r"^[01]*$", "a bit string"),
    "pg_lsn": (r"^[0-9A-F]{1,8}/[0-9A-F]{1,8}$", "an LSN"),
    "tid": (r"^\([0-9]+,[0-9]+\)$", "a tuple id"),
}
# Bytes that never appear in the text form of an enum label or text-like extension type.
_CONTROL = frozenset(range(0x20)) - {0x09, 0x0A, 0x0D} | {0x7F}


def as_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """Any output function's text, or a send function that sends the text (textsend, json_send)."""
    return utf8(ct, values)


def shaped_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """uuid_out, macaddr_out, inet_out, cidr_out, bit_out, pg_lsn_out, tidout: kept, shape checked."""
    strings = utf8(ct, values)
    pattern, what = _TEXT_SHAPES[ct.kind]
    check_regex(ct, values, strings, pattern, what)
    return pc.ascii_lower(strings) if ct.kind in ("uuid", "macaddr", "macaddr8") else strings


def jsonb_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """jsonb_send / jsonpath_send: a version byte 1, then the text form."""
    version = pc.binary_slice(values, 0, 1)
    row = first_bad_row(values, pc.equal(version, pa.scalar(b"\x01", pa.binary())))
    if row is not None:
        raise fail(ct, values, row, "expected version byte 1")
    return utf8(ct, pc.binary_slice(values, 1, 2**31 - 1))  # an explicit stop: the default overflows in Arrow 22


# -- "char" --------------------------------------------------------------------------------
def char_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """charsend: one byte, printed as charout does ('' for 0, '\\ooo' for bytes over 127)."""
    def charout(raw: bytes) -> str:
        if len(raw) != 1:
            raise Malformed(f'"char" is 1 byte, got {len(raw)}')
        byte = raw[0]
        return "" if byte == 0 else chr(byte) if byte < 0x80 else f"\\{byte:03o}"

    return per_value(ct, values, charout, lambda items: pa.array(items, pa.string()))


# -- bytea ---------------------------------------------------------------------------------
_HEX_VALUE = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX_VALUE[_c] = 10 + _i


def bytea_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """byteaout: '\\x' + hex (bytea_output = hex), or the escape format."""
    is_hex = pc.starts_with(values, "\\x")
    if pc.all(pc.fill_null(is_hex, True)).as_py():
        decoded = _hex_bytea(values)
        if decoded is not None:
            return decoded
    return per_value(ct, values, _bytea_from_text, lambda items: pa.array(items, pa.binary()))


def _hex_bytea(values: pa.Array) -> pa.Array | None:
    """Vectorised hex decoding; None when the layout or a digit needs the careful path."""
    offsets, data = offsets_and_data(values)
    lengths = np.diff(offsets)
    valid = valid_mask(values)
    if lengths[~valid].any() or (lengths[valid] % 2).any():
        return None
    start, stop = int(offsets[0]), int(offsets[-1])
    keep = np.ones(stop - start, dtype=bool)
    prefix = offsets[:-1][valid] - start
    keep[prefix] = False
    keep[prefix + 1] = False
    nibbles = _HEX_VALUE[data[start:stop][keep]]
    if (nibbles == 255).any():
        return None
    payload = (nibbles[0::2] << 4) | nibbles[1::2]
    new_offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.where(valid, (lengths - 2) // 2, 0), out=new_offsets[1:])
    if new_offsets[-1] >= 2**31:
        return None
    return pa.Array.from_buffers(pa.binary(), len(values),
                                 [validity_of(values), pa.py_buffer(new_offsets.astype(np.int32)),
                                  pa.py_buffer(payload.astype(np.uint8))], null_count=values.null_count)


def _bytea_from_text(raw: bytes) -> bytes:
    if raw.startswith(b"\\x"):
        return bytes.fromhex(raw[2:].decode("ascii"))
    out, i = bytearray(), 0
    while i < len(raw):
        if raw[i] != 0x5C:  # backslash
            out.append(raw[i])
            i += 1
        elif raw[i + 1: i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif len(raw) >= i + 4 and all(0x30 <= b <= 0x37 for b in raw[i + 1: i + 4]) and raw[i + 1] <= 0x33:
            out.append(int(raw[i + 1: i + 4], 8))
            i += 4
        else:
            raise Malformed("invalid escape in bytea")
    return bytes(out)


def bytea_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """byteasend: the bytes themselves."""
    return values


# -- fixed-width identifiers -----------------------------------------------------------------
def uuid_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """uuid_send: 16 bytes, printed lower-case 8-4-4-4-12 as uuid_out does."""
    return strings_from_rows(hex_rows(fixed_width(ct, values, 16), (4, 6, 8, 10), ord("-")), values)


def macaddr_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """macaddr_send (6 bytes) / macaddr8_send (8 bytes): 'xx:xx:...' as the output functions print."""
    width = 8 if ct.kind == "macaddr8" else 6
    return strings_from_rows(hex_rows(fixed_width(ct, values, width), tuple(range(1, width)), ord(":")),
                             values)


def pg_lsn_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """pg_lsn_send: uint64, printed '%X/%X' as pg_lsn_out does."""
    def lsn(raw: bytes) -> str:
        (value,) = struct.unpack(">Q", raw)
        return format_lsn(value)

    return per_value(ct, values, lsn, lambda items: pa.array(items, pa.string()))


def tid_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """tidsend: uint32 block, uint16 offset, printed '(block,offset)'."""
    def tid(raw: bytes) -> str:
        block, offset = struct.unpack(">IH", raw)
        return f"({block},{offset})"

    return per_value(ct, values, tid, lambda items: pa.array(items, pa.string()))


# -- inet / cidr ---------------------------------------------------------------------------
def inet_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """inet_send/cidr_send: family, bits, is_cidr, address length, address; printed as network_out.

    IPv4 values are printed by Arrow a column at a time; IPv6 value by value.
    """
    is_cidr = ct.kind == "cidr"
    offsets, data = offsets_and_data(values)
    lengths = np.diff(offsets)
    present = np.flatnonzero(valid_mask(values))
    eight = present[lengths[present] == 8]
    head = data[offsets[eight][:, None] + np.arange(8)]
    v4 = (head[:, 0] == PGSQL_AF_INET) & (head[:, 3] == 4) & (head[:, 1] <= 32)
    fast, head = eight[v4], head[v4]
    octets = [pa.array(head[:, 4 + i]).cast(pa.string()) for i in range(4)]
    text = pc.binary_join_element_wise(*octets, ".")
    bits = head[:, 1]
    masked = pa.array(is_cidr | (bits != 32))
    text = pc.if_else(masked, pc.binary_join_element_wise(text, pa.array(bits).cast(pa.string()), "/"), text)
    slow = np.setdiff1d(present, fast, assume_unique=True)
    parts = [(fast, text)]
    if slow.size:
        parts.append((slow, per_value(ct, values.take(pa.array(slow)), lambda raw: format_inet(raw, is_cidr),
                                      lambda items: pa.array(items, pa.string()), rows=slow)))
    return by_rows(pa.string(), len(values), parts)


def format_inet(raw: bytes, is_cidr: bool) -> str:
    """network_out of an inet_send value: inet hides a full mask, cidr always shows it."""
    if len(raw) < 4:
        raise Malformed("inet needs a 4-byte header")
    family, bits, _, size = raw[0], raw[1], raw[2], raw[3]
    expected = {PGSQL_AF_INET: 4, PGSQL_AF_INET6: 16}.get(family)
    if expected is None or size != expected or len(raw) != 4 + size or bits > size * 8:
        raise Malformed(f"invalid inet header (family {family}, {bits} bits, {size} address bytes)")
    address = raw[4:]
    if family == PGSQL_AF_INET:
        text = ".".join(str(b) for b in address)
    else:
        text = _ipv6(address)
    if bits != size * 8 or is_cidr:
        text += f"/{bits}"
    return text


def _ipv6(address: bytes) -> str:
    """IPv6 as src/port/inet_net_ntop.c prints it (longest zero run as '::', embedded IPv4)."""
    words = struct.unpack(">8H", address)
    best_base, best_len, cur_base, cur_len = -1, 0, -1, 0
    for i, word in enumerate(words + (1,)):  # a sentinel closes a trailing run
        if word == 0 and i < 8:
            if cur_base == -1:
                cur_base, cur_len = i, 1
            else:
                cur_len += 1
        elif cur_base != -1:
            if best_base == -1 or cur_len > best_len:
                best_base, best_len = cur_base, cur_len
            cur_base = -1
    if best_len < 2:
        best_base = -1
    out = []
    for i in range(8):
        if best_base != -1 and best_base <= i < best_base + best_len:
            if i == best_base:
                out.append(":")
            continue
        if i != 0:
            out.append(":")
        if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 7 and words[7] != 1)
                                          or (best_len == 5 and words[5] == 0xFFFF)):
            out.append(".".join(str(b) for b in address[12:]))
            break
        out.append(f"{words[i]:x}")
    if best_base != -1 and best_base + best_len == 8:
        out.append(":")
    return "".join(out)


# -- bit strings ---------------------------------------------------------------------------
def bit_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """bit_send/varbit_send: int32 bit length, then the bits packed high bit first."""
    def bits(raw: bytes) -> str:
        if len(raw) < 4:
            raise Malformed("bit string needs a 4-byte length")
        (count,) = struct.unpack_from(">i", raw)
        if count < 0 or len(raw) != 4 + (count + 7) // 8:
            raise Malformed(f"{count} bits do not fit {len(raw) - 4} bytes")
        if count == 0:
            return ""
        return format(int.from_bytes(raw[4:], "big"), f"0{8 * (len(raw) - 4)}b")[:count]

    return per_value(ct, values, bits, lambda items: pa.array(items, pa.string()))


# -- types without a dedicated converter -----------------------------------------------------
def opaque_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """A built-in type's send form we do not interpret: '\\x' + hex (lossless)."""
    return per_value(ct, values, lambda raw: "\\x" + raw.hex(), lambda items: pa.array(items, pa.string()))


def user_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """A user type's send form: enum_send (and text-like extension types) send the text itself,
    which is kept; anything else (record_send, hstore, PostGIS, ...) becomes '\\x' + hex."""
    return per_value(ct, values, user_value_from_binary, lambda items: pa.array(items, pa.string()))


def user_value_from_binary(raw: bytes) -> str:
    """The text of a user type's binary value: its UTF-8 when it reads as text, else '\\x' + hex."""
    if not _CONTROL.intersection(raw):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return "\\x" + raw.hex()


def _shaped(kind: str):
    pattern = re.compile(_TEXT_SHAPES[kind][0])
    lower = kind in ("uuid", "macaddr", "macaddr8")

    def parse(ct: ColumnType, raw: bytes) -> str:
        text = raw.decode("utf-8")
        if not pattern.fullmatch(text):
            raise Malformed(f"not {_TEXT_SHAPES[kind][1]}")
        return text.lower() if lower else text

    return parse


def _jsonb_from_binary(ct: ColumnType, raw: bytes) -> str:
    if raw[:1] != b"\x01":
        raise Malformed("expected version byte 1")
    return raw[1:].decode("utf-8")


def _uuid_from_binary(ct: ColumnType, raw: bytes) -> str:
    if len(raw) != 16:
        raise Malformed(f"expected 16 bytes, got {len(raw)}")
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


SCALAR_TEXT = {kind: (_shaped(kind), 128) for kind in _TEXT_SHAPES}
SCALAR_TEXT["bytea"] = (lambda ct, raw: _bytea_from_text(raw), 128)
SCALAR_BINARY = {"inet": (lambda ct, raw: format_inet(raw, False), 128),
                 "cidr": (lambda ct, raw: format_inet(raw, True), 128),
                 "jsonb": (_jsonb_from_binary, 128), "uuid": (_uuid_from_binary, 32)}
TEXT = {kind: as_text for kind in ("text", "json", "jsonb", "char", "opaque", "user")}
TEXT.update({kind: shaped_text for kind in _TEXT_SHAPES})
TEXT["bytea"] = bytea_text
BINARY = {"text": as_text, "json": as_text, "jsonb": jsonb_binary, "char": char_binary,
          "bytea": bytea_binary, "uuid": uuid_binary, "macaddr": macaddr_binary,
          "macaddr8": macaddr_binary, "inet": inet_binary, "cidr": inet_binary, "bit": bit_binary,
          "pg_lsn": pg_lsn_binary, "tid": tid_binary, "opaque": opaque_binary, "user": user_binary}

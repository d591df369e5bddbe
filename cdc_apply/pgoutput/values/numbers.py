"""Numbers: bool, int2/4/8, oid-like, float4/8, money, xid8 — text and binary forms (numeric
lives in :mod:`.numeric`).

Text forms are what the types' output functions print (boolout 't'/'f', int4out, float8out
with 'NaN'/'Infinity'/'-Infinity' and exponents like '1e+30', cash_out); binary forms are
their send functions (big-endian integers, IEEE floats, cash_send's int64 cents).
"""

from __future__ import annotations

import re
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..types import ColumnType
from .common import (
    Malformed,
    big_endian,
    cast_or_fail,
    check_regex,
    decimal_from_int64,
    fail,
    first_bad_row,
    fixed_width,
    utf8,
    valid_mask,
    with_nulls_of,
)

# cash_out under any locale with two fraction digits: symbols, sign or parentheses, digit
# groups, a decimal separator, exactly two fraction digits.
_MONEY_TEXT = r"^[^0-9]*[0-9]+([^0-9]{1,3}[0-9]+)*[.,][0-9]{2}[^0-9]*$"


# -- bool ----------------------------------------------------------------------------------
def bool_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """boolout: 't' or 'f'."""
    is_true = pc.equal(values, pa.scalar(b"t", pa.binary()))
    is_false = pc.equal(values, pa.scalar(b"f", pa.binary()))
    row = first_bad_row(values, pc.or_(is_true, is_false))
    if row is not None:
        raise fail(ct, values, row, "expected 't' or 'f'")
    return is_true


def bool_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """boolsend: one byte, 1 or 0 (boolrecv reads any non-zero byte as true)."""
    flags = fixed_width(ct, values, 1).reshape(-1) != 0
    return pa.array(flags, type=pa.bool_(), mask=~valid_mask(values) if values.null_count else None)


# -- integers and floats ---------------------------------------------------------------------
def cast_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """int2out/int4out/int8out/float4out/float8out: decimal text parsed by Arrow's cast.

    Arrow reads 'NaN', 'Infinity', '-Infinity', '-0' and exponents ('1e+30', '1.5e-07').
    """
    return cast_or_fail(ct, values, utf8(ct, values), ct.arrow_type)


def uint4_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """oidout/xidout/cidout: an unsigned 32-bit decimal, widened to int64."""
    return cast_or_fail(ct, values, utf8(ct, values), pa.uint32()).cast(pa.int64())


_BINARY_DTYPE = {"int2": (2, ">i2"), "int4": (4, ">i4"), "int8": (8, ">i8"), "uint4": (4, ">u4"),
                 "float4": (4, ">f4"), "float8": (8, ">f8")}


def fixed_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """int2send/int4send/int8send/oidsend/float4send/float8send: big-endian, fixed width."""
    width, dtype = _BINARY_DTYPE[ct.kind]
    numbers = big_endian(fixed_width(ct, values, width), dtype)
    if ct.kind == "uint4":
        numbers = numbers.astype(np.int64)
    return with_nulls_of(values, ct.arrow_type, numbers)


# -- money ---------------------------------------------------------------------------------
def money_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """cash_out: locale-formatted ('$1,234.56', '-$1,234.56', '($1.00)'), two fraction digits assumed."""
    strings = utf8(ct, values)
    # C and en_US locales: '$' and ',' out, the point out, and Arrow reads the cents with their sign
    plain = pc.replace_substring(pc.replace_substring(strings, "$", ""), ",", "")
    if pc.all(pc.fill_null(pc.equal(pc.utf8_slice_codeunits(plain, -3, -2), "."), True)).as_py():
        try:
            return decimal_from_int64(ct.arrow_type, pc.fill_null(pc.cast(pc.replace_substring(
                plain, ".", ""), pa.int64()), 0).to_numpy(zero_copy_only=False), values)
        except pa.ArrowInvalid:
            pass  # another locale's symbols, or a malformed value: the careful path decides
    check_regex(ct, values, strings, _MONEY_TEXT, "a money amount with two fraction digits")
    digits = pc.replace_substring_regex(strings, "[^0-9]", "")
    row = first_bad_row(values, pc.less_equal(pc.utf8_length(digits), 19))
    if row is not None:
        raise fail(ct, values, row, "too many digits for money")
    magnitude = pc.fill_null(pc.cast(digits, pa.uint64()), 0).to_numpy(zero_copy_only=False)
    negative = pc.fill_null(pc.match_substring_regex(strings, r"[-(]"), False).to_numpy(zero_copy_only=False)
    limit = np.where(negative, 2**63, 2**63 - 1).astype(np.uint64)
    row = first_bad_row(values, magnitude <= limit)
    if row is not None:
        raise fail(ct, values, row, "out of range for money")
    cents = magnitude.astype(np.int64)  # 2**63 wraps to the minimum, which negation keeps
    cents = np.where(negative, -cents, cents)
    return decimal_from_int64(ct.arrow_type, cents, values)


def money_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """cash_send: int64 cents."""
    return decimal_from_int64(ct.arrow_type, big_endian(fixed_width(ct, values, 8), ">i8"), values)


# -- xid8 ----------------------------------------------------------------------------------
def xid8_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """xid8out: an unsigned 64-bit decimal, kept exactly as DECIMAL(20,0)."""
    strings = utf8(ct, values)
    check_regex(ct, values, strings, r"^[0-9]{1,20}$", "an unsigned 64-bit integer")
    return cast_or_fail(ct, values, strings, ct.arrow_type)


def xid8_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """xid8send: unsigned big-endian 64 bits."""
    unsigned = big_endian(fixed_width(ct, values, 8), ">u8")
    words = np.zeros((len(values), 2), dtype=np.uint64)
    words[:, 0] = unsigned
    return with_nulls_of(values, ct.arrow_type, words)


TEXT = {"bool": bool_text, "int2": cast_text, "int4": cast_text, "int8": cast_text, "float4": cast_text,
        "float8": cast_text, "uint4": uint4_text, "money": money_text, "xid8": xid8_text}
def _money_from_text(raw: bytes) -> Decimal:
    text = raw.decode("utf-8")
    if not _MONEY_SCALAR.fullmatch(text):
        raise Malformed("not a money amount with two fraction digits")
    cents = int("".join(c for c in text if "0" <= c <= "9"))
    cents = -cents if "-" in text or "(" in text else cents
    if not -(2**63) <= cents < 2**63:
        raise Malformed("out of range for money")
    return Decimal(cents).scaleb(-2)


_MONEY_SCALAR = re.compile(_MONEY_TEXT)
SCALAR_TEXT = {"bool": (lambda ct, raw: {b"t": True, b"f": False}[raw], 256),
               "money": (lambda ct, raw: _money_from_text(raw), 64)}
BINARY = {"bool": bool_binary, "int2": fixed_binary, "int4": fixed_binary, "int8": fixed_binary,
          "float4": fixed_binary, "float8": fixed_binary, "uint4": fixed_binary, "money": money_binary,
          "xid8": xid8_binary}

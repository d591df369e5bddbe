"""Numbers: bool, int2/4/8, oid-like, float4/8, numeric, money, xid8 — text and binary forms.

Text forms are what the types' output functions print (boolout 't'/'f', int4out, float8out
with 'NaN'/'Infinity'/'-Infinity' and exponents like '1e+30', numeric_out, cash_out);
binary forms are their send functions (big-endian integers, IEEE floats, numeric_send's
base-10000 digits, cash_send's int64 cents).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .types import ColumnType
from .values_common import (ValueError_, big_endian, cast_or_fail, check_regex, decimal_from_int64,
                            decimal_from_ints, fail, first_bad_row, fixed_width, offsets_and_data,
                            per_value, utf8, valid_mask, with_nulls_of)

# numeric_send's sign word (numeric.c NUMERIC_POS ... NUMERIC_NINF)
NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN, NUMERIC_PINF, NUMERIC_NINF = 0x0000, 0x4000, 0xC000, 0xD000, 0xF000
_SPECIAL_TEXT = {NUMERIC_NAN: "NaN", NUMERIC_PINF: "Infinity", NUMERIC_NINF: "-Infinity"}
_NUMERIC_HEADER = struct.Struct(">hhHH")
_NUMERIC_TEXT = r"^(-?[0-9]+(\.[0-9]+)?|NaN|-?Infinity)$"
# cash_out under any locale with two fraction digits: symbols, sign or parentheses, digit
# groups, a decimal separator, exactly two fraction digits.
_MONEY_TEXT = r"^[^0-9]*[0-9]+([^0-9]{1,3}[0-9]+)*[.,][0-9]{2}[^0-9]*$"
_NAN_ADVICE = ("{what} cannot be stored in {pg_name} mapped to DECIMAL; set the numeric type "
               "option to \"string\" to keep every numeric value losslessly as text")


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


# -- numeric -------------------------------------------------------------------------------
def numeric_decimal_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_out into decimal128(p,s): plain decimal text; 'NaN' cannot be stored."""
    strings = utf8(ct, values)
    try:
        return pc.cast(strings, ct.arrow_type)
    except pa.ArrowInvalid:
        pass
    special = pc.is_in(strings, pa.array(["NaN", "Infinity", "-Infinity"]))
    row = first_bad_row(values, pc.invert(special))
    if row is not None:
        raise fail(ct, values, row, _NAN_ADVICE.format(what=strings[row].as_py(), pg_name=ct.pg_name))
    return cast_or_fail(ct, values, strings, ct.arrow_type)


def numeric_string_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_out kept as text: digits with an optional fraction, 'NaN', 'Infinity', '-Infinity'."""
    strings = utf8(ct, values)
    check_regex(ct, values, strings, _NUMERIC_TEXT, "a numeric")
    return strings


def numeric_parts(raw: bytes) -> tuple[int, int, int, tuple[int, ...]]:
    """numeric_send: (sign, weight, dscale, base-10000 digits), checked as numeric_recv does."""
    if len(raw) < 8:
        raise ValueError_(f"numeric needs an 8-byte header, got {len(raw)} bytes")
    ndigits, weight, sign, dscale = _NUMERIC_HEADER.unpack_from(raw)
    if ndigits < 0 or len(raw) != 8 + 2 * ndigits:
        raise ValueError_(f"{ndigits} digits do not fit {len(raw)} bytes")
    if sign not in (NUMERIC_POS, NUMERIC_NEG, NUMERIC_NAN, NUMERIC_PINF, NUMERIC_NINF):
        raise ValueError_(f"invalid sign word 0x{sign:04x}")
    if dscale > 0x3FFF:
        raise ValueError_(f"invalid display scale {dscale}")
    digits = struct.unpack_from(f">{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise ValueError_("a base-10000 digit is over 9999")
    return sign, weight, dscale, digits


def _scaled(weight: int, digits: tuple[int, ...], scale: int) -> tuple[int, bool]:
    """The magnitude times 10**scale, truncated, and whether digits were cut off."""
    magnitude = int("".join(f"{d:04d}" for d in digits)) if digits else 0
    exponent = 4 * (weight - len(digits) + 1) + scale
    if exponent >= 0:
        return magnitude * 10**exponent, False
    quotient, remainder = divmod(magnitude, 10**-exponent)
    return quotient, remainder != 0


def numeric_text_from_binary(raw: bytes) -> str:
    """numeric_send -> the text numeric_out prints (digits cut at the display scale, as PostgreSQL does)."""
    sign, weight, dscale, digits = numeric_parts(raw)
    if sign in _SPECIAL_TEXT:
        return _SPECIAL_TEXT[sign]
    scaled, _ = _scaled(weight, digits, dscale)
    text = str(scaled)
    if dscale:
        text = text.rjust(dscale + 1, "0")
        text = f"{text[:-dscale]}.{text[-dscale:]}"
    return "-" + text if sign == NUMERIC_NEG else text


def numeric_string_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_send kept as numeric_out's canonical text."""
    return per_value(ct, values, numeric_text_from_binary, lambda items: pa.array(items, pa.string()))


def numeric_decimal_binary(ct: ColumnType, values: pa.Array) -> pa.Array:
    """numeric_send into decimal128(p,s): vectorised when p <= 18, else exact Python integers."""
    if ct.precision <= 18:
        return _numeric_decimal_vectorised(ct, values)

    def unscaled(raw: bytes) -> int:
        sign, weight, _, digits = numeric_parts(raw)
        if sign not in (NUMERIC_POS, NUMERIC_NEG):
            raise ValueError_(_NAN_ADVICE.format(what=_SPECIAL_TEXT[sign], pg_name=ct.pg_name))
        value, cut = _scaled(weight, digits, ct.scale)
        if cut or value >= 10**ct.precision:
            raise ValueError_(f"value does not fit DECIMAL({ct.precision},{ct.scale})")
        return -value if sign == NUMERIC_NEG else value

    return per_value(ct, values, unscaled, lambda items: decimal_from_ints(ct.arrow_type, items))


def _numeric_decimal_vectorised(ct: ColumnType, values: pa.Array) -> pa.Array:
    offsets, data = offsets_and_data(values)
    lengths = np.diff(offsets)
    present = np.flatnonzero(valid_mask(values))
    short = present[lengths[present] < 8]
    if short.size:
        raise fail(ct, values, int(short[0]), f"numeric needs an 8-byte header, got {lengths[short[0]]} bytes")
    starts = offsets[present]
    header = data[starts[:, None] + np.arange(8)].view(">i2").astype(np.int64)
    ndigits, weight = header[:, 0], header[:, 1]
    sign, dscale = header[:, 2] & 0xFFFF, header[:, 3] & 0xFFFF
    bad = np.flatnonzero((ndigits < 0) | (lengths[present] != 8 + 2 * ndigits))
    if bad.size:
        raise fail(ct, values, int(present[bad[0]]), "digit count does not match the length")
    special = np.flatnonzero((sign != NUMERIC_POS) & (sign != NUMERIC_NEG))
    if special.size:
        word = int(sign[special[0]])
        what = _SPECIAL_TEXT.get(word)
        detail = _NAN_ADVICE.format(what=what, pg_name=ct.pg_name) if what else f"invalid sign word 0x{word:04x}"
        raise fail(ct, values, int(present[special[0]]), detail)
    del dscale  # the column's scale decides; the value's display scale only pads zeros
    total = int(ndigits.sum())
    first = np.zeros(len(present) + 1, dtype=np.int64)
    np.cumsum(ndigits, out=first[1:])
    owner = np.repeat(np.arange(len(present)), ndigits)
    position = np.arange(total, dtype=np.int64) - first[owner]
    at = starts[owner] + 8 + 2 * position
    digit = data[at].astype(np.int64) * 256 + data[at + 1]
    exponent = 4 * (weight[owner] - position) + ct.scale
    # A digit alone must fit: below 10**precision, and whole at the column's scale.
    room = np.clip(ct.precision - exponent, 0, 18)
    low = np.clip(-exponent, 0, 5)
    ok = (digit <= 9999) & (np.where(exponent >= 0, digit < 10**room, digit % 10**low == 0))
    ok &= (exponent > -4) | (digit == 0)
    if not ok.all():
        row = int(present[owner[np.flatnonzero(~ok)[0]]])
        raise fail(ct, values, row, f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    contribution = np.where(exponent >= 0, digit * 10 ** np.clip(exponent, 0, 18), digit // 10**low)
    running = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(contribution, out=running[1:])  # wraps on overflow; differences stay exact
    magnitude = running[first[1:]] - running[first[:-1]]
    too_big = np.flatnonzero(magnitude >= 10**ct.precision)
    if too_big.size:
        raise fail(ct, values, int(present[too_big[0]]), f"value does not fit DECIMAL({ct.precision},{ct.scale})")
    unscaled = np.zeros(len(values), dtype=np.int64)
    unscaled[present] = np.where(sign == NUMERIC_NEG, -magnitude, magnitude)
    return decimal_from_int64(ct.arrow_type, unscaled, values)


# -- money ---------------------------------------------------------------------------------
def money_text(ct: ColumnType, values: pa.Array) -> pa.Array:
    """cash_out: locale-formatted ('$1,234.56', '-$1,234.56', '($1.00)'), two fraction digits assumed."""
    strings = utf8(ct, values)
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
        "float8": cast_text, "uint4": uint4_text, "numeric": numeric_decimal_text,
        "numeric_text": numeric_string_text, "money": money_text, "xid8": xid8_text}
BINARY = {"bool": bool_binary, "int2": fixed_binary, "int4": fixed_binary, "int8": fixed_binary,
          "float4": fixed_binary, "float8": fixed_binary, "uint4": fixed_binary,
          "numeric": numeric_decimal_binary, "numeric_text": numeric_string_binary,
          "money": money_binary, "xid8": xid8_binary}

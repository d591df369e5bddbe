"""What the value tests share: the golden vectors (tests/pgoutput/data/values_*.json) and
reference send forms built the way PostgreSQL builds them.

Imported by plain name (``from value_vectors import ...``): pytest puts this folder on
sys.path, and ``python tests/pgoutput/bench_values.py`` runs with it as the script's folder.
"""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from pathlib import Path

from cdc_apply.pgoutput.types import ColumnType, TypeOptions, resolve_column_type

DATA = Path(__file__).parent / "data"


def load_groups() -> list[dict]:
    """Every vector group of every values_*.json file, in file order."""
    groups = []
    for path in sorted(DATA.glob("values_*.json")):
        groups.extend(json.loads(path.read_text(encoding="utf-8"))["groups"])
    return groups


def column_type_of(group: dict) -> ColumnType:
    """The column type a vector group was generated for (its OID, typmod, user type and options)."""
    user_types = {group["type_oid"]: tuple(group["user_type"])} if group["user_type"] else None
    return resolve_column_type(group["type_oid"], group["type_modifier"], user_types,
                               TypeOptions(**group["options"]))


def numeric_send(value: Decimal, dscale: int) -> bytes:
    """numeric_send of a finite Decimal at display scale ``dscale`` (base-10000 digits, stripped)."""
    sign = 0x4000 if value < 0 else 0
    scaled = int(abs(value).scaleb(dscale))  # exact: the value has at most dscale fraction digits
    # align so the decimal point falls between base-10000 digits
    pad = (-dscale) % 4
    digits_text = str(scaled * 10**pad)
    frac_groups = (dscale + pad) // 4
    total_groups = max(math.ceil(len(digits_text) / 4), frac_groups + 1)
    digits_text = digits_text.rjust(total_groups * 4, "0")
    digits = [int(digits_text[i: i + 4]) for i in range(0, len(digits_text), 4)]
    weight = len(digits) - frac_groups - 1
    while digits and digits[0] == 0:
        digits.pop(0)
        weight -= 1
    while digits and digits[-1] == 0:
        digits.pop()
    if not digits:
        weight, sign = 0, 0
    return struct.pack(f">hhHH{len(digits)}H", len(digits), weight, sign, dscale, *digits)

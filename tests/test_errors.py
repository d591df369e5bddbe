"""The exception tree: errors rendered as text (out of a Python worker, in an error column) come back
as their own class with the same text."""

from __future__ import annotations

import pytest

from cdc_apply.errors import CdcApplyError, DecodeError, SchemaError, error_from_text


@pytest.mark.parametrize("cls", CdcApplyError.__subclasses__())
def test_an_error_read_back_from_its_text_has_its_class_and_its_text(cls):
    err = cls("something specific", source="src", seq=7, lsn="0/16B3748")
    again = error_from_text(str(err))
    assert type(again) is cls
    assert str(again) == str(err)


def test_text_of_no_known_class_becomes_the_base_error_unchanged():
    again = error_from_text("the JVM ran out of memory")
    assert type(again) is CdcApplyError and str(again).endswith("the JVM ran out of memory")


def test_a_known_class_is_kept_even_when_the_text_lacks_its_summary():
    assert type(error_from_text("bad bytes at offset 3", DecodeError)) is DecodeError
    assert type(error_from_text(str(SchemaError("x")), DecodeError)) is DecodeError

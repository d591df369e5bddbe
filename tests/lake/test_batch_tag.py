"""A batch's commit tag names the last commit LSN it applied; verify and as-of read it back from
``userMetadata``, in either of the forms it carries."""

from __future__ import annotations

from cdc_apply.lake.books.commit_tag import decode_tag, encode_tag
from cdc_apply.lake.books.ledger import batch_tag, tag_commit_lsn


def test_a_batch_s_commit_tag_gives_back_its_last_commit_lsn_after_userMetadata():
    tag = decode_tag(encode_tag({**batch_tag("pg", "public.t", 0x16B374D848), "apply_step": 41}))
    assert tag is not None and tag_commit_lsn(tag) == 0x16B374D848


def test_a_tag_with_only_the_text_form_is_read_and_one_without_an_lsn_says_none():
    assert tag_commit_lsn({"last_commit_lsn": "16/B374D848"}) == 0x16B374D848
    assert tag_commit_lsn({"source": "pg", "apply_step": 3}) is None

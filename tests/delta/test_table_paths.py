"""Where silver and state tables live: hostile names stay one path segment under their root (no JVM)."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_apply.config import parse_config
from cdc_apply.delta.names import check_under_root, path_segment
from cdc_apply.delta.refs import silver_ref, state_ref
from cdc_apply.errors import PathError

ROOT = "/lake/silver"
STATE = "/lake/state"
HOSTILE = ["..", ".", "...", "../../etc", "a/../../b", "%2e%2e", "%2E%2E", "", "\x00", "a\x00b", "/", "//",
           "..\\..", " .. ", "ü/..", "名前", "\u202e..", "a%"]


def config(source_in_path: bool = False, silver: str = ROOT):
    return parse_config({"bronze": {"path": "/lake/bronze"}, "state": {"path": STATE},
                         "silver": {"path": silver, "source_in_path": source_in_path}})


def segments_below(root: str, path: str) -> list[str]:
    """The path's segments below ``root``, as Hadoop's Path would resolve it (it normalises like normpath)."""
    resolved = posixpath.normpath(path)
    assert resolved == path, f"{path!r} would be read as {resolved!r}"
    assert resolved.startswith(root + "/"), f"{path!r} is not under {root!r}"
    return resolved[len(root) + 1:].split("/")


def decode_segment(segment: str) -> str:
    return "" if segment == "%" else unquote(segment, errors="strict")


@pytest.mark.parametrize("name, segment", [
    ("users", "users"), ("Mixed Case ü", "Mixed Case ü"), ("a%b/c", "a%25b%2Fc"), (" padded ", " padded "),
    ("a.b", "a.b"), ("...a", "...a"), (".hidden", ".hidden"), ("it's \\ `x`", "it's \\ `x`"),
])
def test_ordinary_names_keep_the_segments_existing_lakes_have(name, segment):
    assert path_segment(name) == segment


@pytest.mark.parametrize("name, segment", [(".", "%2E"), ("..", "%2E%2E"), ("...", "%2E%2E%2E"), ("", "%"),
                                           ("\x00", "%00"), ("a\x00b", "a%00b")])
def test_names_a_path_would_resolve_away_are_percent_encoded(name, segment):
    assert path_segment(name) == segment


@pytest.mark.parametrize("namespace", HOSTILE)
@pytest.mark.parametrize("name", ["t", "..", "../x"])
def test_a_hostile_namespace_or_relation_name_lands_under_the_silver_root(namespace, name):
    path = silver_ref(config(), namespace, name).path
    assert segments_below(ROOT, path) == [path_segment(namespace), path_segment(name)]


@pytest.mark.parametrize("source", HOSTILE)
def test_a_hostile_source_name_in_the_path_lands_under_the_silver_root(source):
    path = silver_ref(config(source_in_path=True), "..", "..", source).path
    assert segments_below(ROOT, path) == [path_segment(source), "%2E%2E", "%2E%2E"]


def test_a_state_table_lands_under_the_state_location():
    assert state_ref(config(), "progress").path == f"{STATE}/progress"
    assert segments_below(STATE, state_ref(config(), "../silver").path) == ["..%2Fsilver"]


def test_a_uri_root_keeps_its_scheme_and_takes_the_encoded_segments():
    path = silver_ref(config(silver="s3://bucket/silver/"), "..", "t").path
    assert path == "s3://bucket/silver/%2E%2E/t"


@settings(print_blob=True, max_examples=300, deadline=None)
@given(st.text(max_size=6), st.text(max_size=6))
def test_every_name_is_one_segment_under_the_root_and_reads_back(namespace, name):
    below = segments_below(ROOT, silver_ref(config(), namespace, name).path)
    assert [decode_segment(s) for s in below] == [namespace, name]  # so two names never share a table


@pytest.mark.parametrize("path", [f"{ROOT}/../x/t", f"{ROOT}/a/../../t", f"{ROOT}/./t", f"{ROOT}//t", f"{ROOT}/t/",
                                  "/lake/silverx/a/t", "/elsewhere/a/t", f"{ROOT}/a\x00/t"])
def test_a_path_that_would_leave_its_root_is_an_error_naming_the_relation_and_the_root(path):
    with pytest.raises(PathError) as info:
        check_under_root(ROOT, path, "public.t")
    assert (info.value.context["relation"], info.value.context["root"]) == ("public.t", ROOT)
    assert info.value.context["path"] == path


def test_a_path_under_its_root_passes_the_check():
    check_under_root(ROOT, f"{ROOT}/%2E%2E/t", "...t")
    check_under_root("s3://b/silver", "s3://b/silver/a/t", "a.t")

"""Hypothesis strategies for GaussDB records (shared by the tests in tests/gaussdb)."""

from __future__ import annotations

from hypothesis import strategies as st

from cdc_apply.gaussdb import Begin, Commit, Delete, Heartbeat, Insert, Update, format_timestamp
from cdc_apply.gaussdb.timestamps import INFINITY, NEG_INFINITY

u32 = st.integers(0, 2**32 - 2)  # 0xFFFFFFFF is never a type OID worth testing; it is legal though
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
short_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
values = st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",)), max_size=20))

# PostgreSQL's timestamp range: 4713 BC .. 294276 AD, in microseconds since 2000-01-01.
PG_MIN_TS = -211_813_488_000_000_000
PG_MAX_TS = 9_223_371_331_200_000_000 - 1  # END_TIMESTAMP, exclusive
offsets = st.integers(-15 * 3600 - 59 * 60 - 59, 15 * 3600 + 59 * 60 + 59)


@st.composite
def timestamps(draw) -> str:
    """Timestamp text as timestamptz_to_str writes it."""
    special = draw(st.integers(0, 20))
    if special == 0:
        return "infinity"
    if special == 1:
        return "-infinity"
    return format_timestamp(draw(st.integers(PG_MIN_TS, PG_MAX_TS)), draw(offsets))


maybe_ts = st.one_of(st.none(), timestamps())
columns = st.tuples(short_names, u32, values)
tuples = st.lists(columns, max_size=6).map(tuple)
maybe_tuple = st.one_of(st.none(), tuples)

begins = st.builds(Begin, u64, u64, u64, maybe_ts, st.one_of(st.none(), text), st.one_of(st.none(), u64),
                   st.one_of(st.none(), st.integers(0, 2**32 - 1)))
commits = st.builds(Commit, u64, st.one_of(st.none(), u64), maybe_ts)
inserts = st.builds(Insert, u64, short_names, short_names, maybe_tuple)
updates = st.builds(Update, u64, short_names, short_names, maybe_tuple, maybe_tuple)
deletes = st.builds(Delete, u64, short_names, short_names, maybe_tuple)
heartbeats = st.builds(Heartbeat, u64, u64, i64)
records = st.one_of(begins, commits, inserts, updates, deletes)

__all__ = ["INFINITY", "NEG_INFINITY", "begins", "commits", "deletes", "heartbeats", "inserts", "records",
           "timestamps", "tuples", "updates"]

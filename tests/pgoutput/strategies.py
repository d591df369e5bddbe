"""Hypothesis strategies for every pgoutput message (shared by the pgoutput tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from cdc_apply.pgoutput import messages as m

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
flags8 = st.integers(0, 255)
names = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20)
column_value = st.one_of(
    st.none(),
    st.just(m.UNCHANGED_TOAST),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    st.binary(max_size=30),
)
tuples = st.lists(column_value, max_size=12).map(tuple)
maybe_xid = st.one_of(st.none(), u32)


@st.composite
def relations(draw, xid=maybe_xid):
    columns = draw(st.lists(st.builds(m.RelationColumn, st.integers(0, 1), names, u32, i32), max_size=10))
    return m.Relation(draw(xid), draw(u32), draw(names), draw(names), draw(st.sampled_from("dnfi")), tuple(columns))


@st.composite
def updates(draw, xid=maybe_xid):
    which = draw(st.sampled_from(["none", "key", "old"]))
    key = draw(tuples) if which == "key" else None
    old = draw(tuples) if which == "old" else None
    return m.Update(draw(xid), draw(u32), key, old, draw(tuples))


@st.composite
def deletes(draw, xid=maybe_xid):
    tup = draw(tuples)
    if draw(st.booleans()):
        return m.Delete(draw(xid), draw(u32), tup, None)
    return m.Delete(draw(xid), draw(u32), None, tup)


@st.composite
def stream_aborts(draw):
    if draw(st.booleans()):
        return m.StreamAbort(draw(u32), draw(u32), draw(u64), draw(i64))
    return m.StreamAbort(draw(u32), draw(u32))


def messages(xid=maybe_xid):
    """Any message; ``xid`` decides whether the streamed-only Xid fields are set."""
    return st.one_of(
        st.builds(m.Begin, u64, i64, u32),
        st.builds(m.Message, xid, st.booleans(), u64, names, st.binary(max_size=40)),
        st.builds(m.Commit, flags8, u64, u64, i64),
        st.builds(m.Origin, u64, names),
        relations(xid),
        st.builds(m.Type, xid, u32, names, names),
        st.builds(m.Insert, xid, u32, tuples),
        updates(xid),
        deletes(xid),
        st.builds(m.Truncate, xid, flags8, st.lists(u32, max_size=8).map(tuple)),
        st.builds(m.StreamStart, u32, st.booleans()),
        st.just(m.StreamStop()),
        st.builds(m.StreamCommit, u32, flags8, u64, u64, i64),
        stream_aborts(),
        st.builds(m.BeginPrepare, u64, u64, i64, u32, names),
        st.builds(m.Prepare, flags8, u64, u64, i64, u32, names),
        st.builds(m.CommitPrepared, flags8, u64, u64, i64, u32, names),
        st.builds(m.RollbackPrepared, flags8, u64, u64, i64, i64, u32, names),
        st.builds(m.StreamPrepare, flags8, u64, u64, i64, u32, names),
    )

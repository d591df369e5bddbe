"""The exactly-once rules of the lander, on plain bytes (no PostgreSQL, no Spark)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdc_apply.errors import LandError
from cdc_apply.lander import framing as f
from cdc_apply.lander.sequencer import Sequencer, StreamDiverged
from cdc_apply.lander.state import ResumeState, rebuild_state
from cdc_apply.pgoutput import encode
from cdc_apply.pgoutput import messages as m

REL = 16384


def relation(xid=None):
    return encode(m.Relation(xid, REL, "public", "t", "d", (m.RelationColumn(1, "id", 23, -1),)))


def insert(i, xid=None):
    return encode(m.Insert(xid, REL, (str(i),)))


class Wire:
    """What a walsender sends: ``(lsn, payload)`` with growing LSNs."""

    def __init__(self, start=1000):
        self.lsn = start

    def next(self, step=100):
        self.lsn += step
        return self.lsn

    def txn(self, xid, values, relation_first=True):
        first = self.next()
        out = [(first, encode(m.Begin(0, 1, xid)))]
        if relation_first:
            out.append((0, relation()))
        out += [(self.next(), insert(v)) for v in values]
        commit = self.next()
        end = commit + 16
        out[0] = (first, encode(m.Begin(commit, 1, xid)))
        out.append((end, encode(m.Commit(0, commit, end, 1))))
        self.lsn = end
        return out

    def block(self, xid, values, first, relation_first=False):
        out = [(self.next(), encode(m.StreamStart(xid, first)))]
        if relation_first:
            out.append((0, relation(xid)))
        out += [(self.next(), insert(v, xid)) for v in values]
        out.append((self.next(), encode(m.StreamStop())))
        return out

    def stream_commit(self, xid):
        commit = self.next()
        return [(commit + 16, encode(m.StreamCommit(xid, 0, commit, commit + 16, 1)))]


def feed(seq, messages):
    for lsn, payload in messages:
        seq.feed(lsn, payload)


def kinds(rows):
    return "".join(r[2][:1].decode() for r in rows)


def test_a_fresh_stream_is_numbered_from_zero_and_resumes_after_its_last_commit():
    w = Wire()
    msgs = w.txn(700, [1, 2]) + w.txn(701, [3])
    seq = Sequencer(ResumeState())
    feed(seq, msgs)
    batch = seq.take(1)
    assert [r[0] for r in batch.rows] == list(range(9))
    assert kinds(batch.rows) == "BRIICBRIC"
    assert batch.state.resume_lsn == msgs[-1][0]
    assert batch.state.last_seq == 8 and batch.state.batch == 1 and batch.state.txn is None


def test_transactions_completed_before_the_resume_lsn_are_dropped_and_later_ones_landed():
    w = Wire()
    first, second = w.txn(700, [1]), w.txn(701, [2])
    state = ResumeState(batch=3, last_seq=41, resume_lsn=first[-1][0])
    seq = Sequencer(state)
    feed(seq, first + second)
    batch = seq.take(4)
    assert kinds(batch.rows) == "BRIC"
    assert [r[2] for r in batch.rows] == [p for _, p in second]
    assert batch.rows[0][0] == 42 and seq.replayed == len(first)


def test_a_transaction_cut_by_a_batch_is_matched_and_only_its_tail_landed():
    w = Wire()
    x = w.txn(700, [1, 2, 3, 4])            # B R I I I I C
    seq = Sequencer(ResumeState())
    feed(seq, x[:4])                        # B R I1 I2
    head = seq.take(1)
    assert kinds(head.rows) == "BRII"
    assert head.state.txn is not None and head.state.txn.count == 2
    resumed = Sequencer(head.state)
    feed(resumed, x)                        # the walsender sends the whole transaction again
    tail = resumed.take(2)
    assert [r[2] for r in tail.rows] == [p for _, p in x[4:]]
    assert tail.rows[0][0] == head.rows[-1][0] + 1
    assert tail.state.txn is None and tail.state.resume_lsn == x[-1][0]


def test_a_batch_never_ends_on_a_relation_message():
    w = Wire()
    x = w.txn(700, [1, 2])
    seq = Sequencer(ResumeState())
    feed(seq, x[:2])                        # B R
    batch = seq.take(1)
    assert kinds(batch.rows) == "B" and seq.pending == 1


def test_a_re_sent_transaction_that_differs_from_bronze_is_an_error():
    w = Wire()
    x = w.txn(700, [1, 2, 3])
    seq = Sequencer(ResumeState())
    feed(seq, x[:4])
    state = seq.take(1).state
    other = [x[0], x[1], (x[2][0], insert(99))] + x[3:]
    with pytest.raises(LandError, match="other messages than bronze holds"):
        feed(Sequencer(state), other)


def test_a_re_streamed_transaction_is_matched_across_new_block_boundaries():
    w = Wire()
    blocks = w.block(900, [1, 2], True, relation_first=True)
    small = w.txn(701, [50])
    more = w.block(900, [3], False)
    seq = Sequencer(ResumeState())
    feed(seq, blocks + small + more)
    landed = seq.take(1)
    assert landed.state.streams[0].xid == 900 and landed.state.streams[0].count == 3
    # After a reconnect the walsender streams xid 900 from its first change, in other blocks.
    w2 = Wire(w.lsn)
    again = w2.block(900, [1, 2, 3, 4, 5], True, relation_first=True) + w2.block(900, [6], False)
    again += w2.stream_commit(900)
    resumed = Sequencer(landed.state)
    feed(resumed, again)
    tail = resumed.take(2)
    assert kinds(tail.rows) == "SIIESIEc"
    assert tail.rows[0][2] == f.continued_stream_start(900)
    assert [r[2] for r in tail.rows[1:3]] == [insert(4, 900), insert(5, 900)]
    assert tail.state.streams == () and resumed.replayed == 5      # S R I1 I2 I3
    # The whole of bronze reads as one streamed transaction: 1..6 once each.
    values = [r[2] for r in landed.rows + tail.rows if r[2][:1] == b"I"]
    assert values == [insert(1, 900), insert(2, 900), insert(50)] + [insert(i, 900) for i in (3, 4, 5, 6)]


def test_a_re_streamed_transaction_that_left_out_messages_diverges_and_is_then_landed_whole():
    w = Wire()
    seq = Sequencer(ResumeState())
    feed(seq, w.block(900, [1, 2, 3], True) + w.txn(701, [50]))
    state = seq.take(1).state
    w2 = Wire(w.lsn)
    again = w2.block(900, [1, 3, 4], True) + w2.stream_commit(900)   # 2 was in an aborted subtransaction
    with pytest.raises(StreamDiverged) as err:
        feed(Sequencer(state), again)
    assert err.value.xid == 900
    whole = Sequencer(state, supersede=frozenset({900}))
    feed(whole, again)
    batch = whole.take(2)
    assert kinds(batch.rows) == "ASIIIEc"
    assert batch.rows[0][2] == f.synthetic_stream_abort(900) and batch.rows[0][1] == 0
    assert batch.rows[1][2] == again[0][1]          # the first segment, as the server sent it


def test_a_streamed_transaction_sent_again_as_a_plain_one_voids_the_old_copy_first():
    w = Wire()
    seq = Sequencer(ResumeState())
    feed(seq, w.block(900, [1, 2], True) + w.txn(701, [50]))
    state = seq.take(1).state
    plain = Wire(w.lsn).txn(900, [1, 2, 3])
    resumed = Sequencer(state)
    feed(resumed, plain)
    batch = resumed.take(2)
    assert kinds(batch.rows) == "ABRIIIC"
    assert batch.state.streams == ()


def test_blocks_of_other_streams_wait_until_the_cut_transaction_is_landed_whole():
    w = Wire()
    x = w.txn(700, [1, 2, 3])
    seq = Sequencer(ResumeState())
    feed(seq, x[:3])                             # B R I1
    state = seq.take(1).state
    resumed = Sequencer(state)
    w2 = Wire(w.lsn)
    feed(resumed, w2.block(901, [7, 8], True))   # new stream arrives before the cut transaction
    assert resumed.pending == 0
    feed(resumed, x)
    batch = resumed.take(2)
    assert kinds(batch.rows) == "IICSIIE"


def test_a_batch_never_ends_inside_a_stream_block():
    w = Wire()
    msgs = w.txn(700, [1]) + w.block(900, [1, 2, 3], True)
    seq = Sequencer(ResumeState())
    feed(seq, msgs[:-2])                         # the block is still open
    assert seq.in_block
    batch = seq.take(1)
    assert kinds(batch.rows) == "BRIC" and seq.pending == 3
    feed(seq, msgs[-2:])
    rest = seq.take(2)
    assert kinds(rest.rows) == "SIIIE"
    assert rest.state.streams[0].count == 3


def test_a_prepared_transaction_in_bronze_is_not_landed_again_before_its_commit_prepared():
    b = encode(m.BeginPrepare(1100, 1116, 1, 702, "g1"))
    p = encode(m.Prepare(0, 1100, 1116, 1, 702, "g1"))
    k = encode(m.CommitPrepared(0, 1200, 1216, 2, 702, "g1"))
    seq = Sequencer(ResumeState())
    feed(seq, [(1050, b), (1060, insert(1)), (1116, p)])
    state = seq.take(1).state
    assert state.prepared == (("g1", 1116),)
    resumed = Sequencer(state)
    feed(resumed, [(1050, b), (1060, insert(1)), (1116, p), (1216, k)])
    batch = resumed.take(2)
    assert kinds(batch.rows) == "K" and batch.state.prepared == ()


def test_a_stream_that_aborted_before_it_was_re_sent_is_abandoned_with_a_stream_abort():
    w = Wire()
    seq = Sequencer(ResumeState())
    feed(seq, w.block(900, [1], True) + w.txn(701, [5]))
    state = seq.take(1).state
    resumed = Sequencer(state)
    assert resumed.unresolved_streams() == (900,)
    assert resumed.abandon(900)
    batch = resumed.take(2)
    assert [r[2] for r in batch.rows] == [f.synthetic_stream_abort(900)]
    assert batch.state.streams == ()


def test_the_state_rebuilt_from_rows_equals_the_state_kept_while_landing():
    w = Wire()
    stream = w.block(900, [1, 2], True, relation_first=True) + w.txn(701, [5]) + w.block(900, [3], False)
    x = w.txn(702, [6, 7, 8])
    seq = Sequencer(ResumeState())
    rows, state = [], None
    feed(seq, stream + x[:4])
    for n, more in ((1, x[4:]), (2, [])):
        batch = seq.take(n)
        rows += batch.rows
        state = batch.state
        feed(seq, more)
    # The rows cannot tell how far the slot was confirmed; everything else they do.
    assert rebuild_state(rows, batch=state.batch) == replace(state, confirmed_lsn=None)
    app, back = ResumeState.from_json(state.to_json("cdc_apply-land:pg", "run1"))
    assert app == "cdc_apply-land:pg" and back == state


def _landed_by(feeder, messages, cuts, state=None):
    """The batches and states landing ``messages`` gives, cut after each index in ``cuts``, resumed once."""
    seq, out, start = Sequencer(state or ResumeState()), [], 0
    for batch_no, cut in enumerate(cuts + [len(messages)], 1):
        feeder(seq, messages[start:cut])
        start = cut
        batch = seq.take(batch_no)
        out.append(None if batch is None else (batch.rows, batch.state))
    return out


def test_feeding_many_at_once_lands_the_same_rows_and_states_as_feeding_one_by_one():
    w = Wire()
    msgs = (w.txn(700, [1, 2, 3, 4]) + w.block(701, [5, 6], True) + w.txn(702, [7, 8, 9])
            + w.block(701, [10], False) + w.stream_commit(701) + w.txn(703, list(range(20, 40))))
    one = _landed_by(feed, msgs, [3, 9, 17, 30])
    many = _landed_by(lambda seq, part: seq.feed_many(part), msgs, [3, 9, 17, 30])
    assert many == one
    head = one[0][1]
    assert head.txn is not None and head.txn.count == 1 and head.txn.digest  # the digest is folded at the cut
    # Resumed from a batch that ended inside a transaction: the re-sent head is matched the same way.
    assert (_landed_by(lambda seq, part: seq.feed_many(part), msgs, [12], head)
            == _landed_by(feed, msgs, [12], head))


def test_a_batch_taken_at_a_unit_ends_before_the_open_transaction_with_the_state_after_the_last_commit():
    w = Wire()
    first, second = w.txn(700, [1, 2]), w.txn(701, [3, 4, 5])
    seq = Sequencer(ResumeState())
    feed(seq, first + second[:4])           # the second one's B R I3 I4 arrived, not its end
    batch = seq.take(1, at_unit=True)
    assert [r[2] for r in batch.rows] == [p for _, p in first]
    alone = Sequencer(ResumeState())
    feed(alone, first)
    assert batch.state == alone.take(1).state and batch.state.txn is None
    assert seq.pending == 4
    feed(seq, second[4:])
    rest = seq.take(2, at_unit=True)
    assert kinds(rest.rows) == "BRIIIC" and rest.rows[0][0] == batch.rows[-1][0] + 1
    assert rebuild_state(batch.rows + rest.rows, batch=2) == replace(rest.state, confirmed_lsn=None)


def test_a_batch_taken_at_a_unit_ends_inside_a_transaction_that_is_all_it_holds():
    w = Wire()
    x = w.txn(700, [1, 2, 3])
    seq = Sequencer(ResumeState())
    feed(seq, x[:4])
    batch = seq.take(1, at_unit=True)       # no unit ended: the bound on a batch's size still holds
    assert kinds(batch.rows) == "BRII" and batch.state.txn is not None


def test_a_batch_taken_at_a_unit_ends_inside_a_transaction_holding_a_logical_message():
    w = Wire()
    first = w.txn(700, [1])
    head = [(w.next(), encode(m.Begin(w.lsn + 1000, 1, 701))),
            (w.next(), encode(m.Message(701, True, w.lsn, "app", b"x")))]
    seq = Sequencer(ResumeState())
    feed(seq, first + head)
    batch = seq.take(1, at_unit=True)       # a message may change snapshot requests: cut where the rows end
    assert kinds(batch.rows) == "BRICBM"


def test_every_cut_at_a_unit_lands_the_same_rows_with_states_the_rows_rebuild():
    w = Wire()
    msgs = (w.txn(700, [1, 2]) + w.block(701, [5, 6], True) + w.txn(702, [7, 8, 9])
            + w.block(701, [10], False) + w.stream_commit(701) + w.txn(703, [11]) + w.txn(704, [12, 13]))
    whole = Sequencer(ResumeState())
    feed(whole, msgs)
    expected = whole.take(1).rows
    for cut in range(1, len(msgs)):
        seq = Sequencer(ResumeState())
        seq.feed_many(msgs[:cut])
        rows = []
        first = seq.take(1, at_unit=True)
        if first is not None:
            rows += first.rows
            assert rebuild_state(rows, batch=1) == replace(first.state, confirmed_lsn=None), cut
        seq.feed_many(msgs[cut:])
        rest = seq.take(2, at_unit=True)
        rows += rest.rows
        assert tuple(rows) == expected, cut
        assert rebuild_state(rows, batch=2) == replace(rest.state, confirmed_lsn=None), cut

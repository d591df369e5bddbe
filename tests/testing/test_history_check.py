"""Which recorded source states a slot can show (cdc_apply.testing.history_check.states_since)."""

from cdc_apply.testing.history_check import states_since


def test_states_taken_before_a_slot_collapse_to_the_last_one_read_at_its_consistent_point():
    states = [(100, "empty"), (200, "one row"), (300, "two rows"), (500, "three rows")]
    assert states_since(states, 400) == [(400, "two rows"), (500, "three rows")]


def test_a_state_taken_at_the_consistent_point_itself_is_read_there():
    states = [(100, "empty"), (400, "one row"), (500, "two rows")]
    assert states_since(states, 400) == [(400, "one row"), (500, "two rows")]


def test_states_all_after_the_slot_are_kept_as_taken():
    states = [(100, "empty"), (200, "one row")]
    assert states_since(states, 0) == states
    assert states_since(states, 50) == states

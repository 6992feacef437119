"""The job state machine: every allowed transition passes, every other one raises."""

from __future__ import annotations

import itertools

import pytest

from controller.states import InvalidTransition, check_transition
from mlsched.model import JobState as S

# Written out by hand (not copied from controller.states.ALLOWED) so that a change to the
# table must be made in both places.
EXPECTED_ALLOWED = {
    (S.PENDING, S.STARTING),
    (S.PENDING, S.CANCELLED),
    (S.STARTING, S.RUNNING),
    (S.STARTING, S.SUSPENDING),
    (S.STARTING, S.SUSPENDED),
    (S.STARTING, S.PENDING),
    (S.STARTING, S.COMPLETED),
    (S.STARTING, S.FAILED),
    (S.STARTING, S.CANCELLING),
    (S.RUNNING, S.SUSPENDING),
    (S.RUNNING, S.SUSPENDED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLING),
    (S.SUSPENDING, S.SUSPENDED),
    (S.SUSPENDING, S.COMPLETED),
    (S.SUSPENDING, S.FAILED),
    (S.SUSPENDING, S.CANCELLING),
    (S.SUSPENDED, S.STARTING),
    (S.SUSPENDED, S.COMPLETED),
    (S.SUSPENDED, S.CANCELLED),
    (S.CANCELLING, S.CANCELLED),
}
ALL_PAIRS = list(itertools.product(S, S))
FORBIDDEN = [pair for pair in ALL_PAIRS if pair not in EXPECTED_ALLOWED]


@pytest.mark.parametrize(("current", "new"), sorted(EXPECTED_ALLOWED, key=str))
def test_allowed_transition(current, new):
    check_transition("j-1", current, new)


@pytest.mark.parametrize(("current", "new"), FORBIDDEN)
def test_forbidden_transition(current, new):
    with pytest.raises(InvalidTransition):
        check_transition("j-1", current, new)


def test_error_message_names_the_job_and_both_states():
    with pytest.raises(InvalidTransition, match=r"^job j-42: COMPLETED -> RUNNING is not allowed$"):
        check_transition("j-42", S.COMPLETED, S.RUNNING)


@pytest.mark.parametrize("terminal", [S.COMPLETED, S.FAILED, S.CANCELLED])
def test_terminal_states_are_final(terminal):
    assert terminal.terminal
    for new in S:
        with pytest.raises(InvalidTransition):
            check_transition("j", terminal, new)


def test_no_state_may_transition_to_itself():
    for state in S:
        with pytest.raises(InvalidTransition):
            check_transition("j", state, state)


def test_running_cannot_go_back_to_pending_or_be_cancelled_directly():
    # A running job is cancelled via CANCELLING (its tasks must be killed first).
    for new in (S.PENDING, S.CANCELLED, S.STARTING):
        with pytest.raises(InvalidTransition):
            check_transition("j", S.RUNNING, new)


def test_state_properties():
    assert {s for s in S if s.terminal} == {S.COMPLETED, S.FAILED, S.CANCELLED}
    assert {s for s in S if s.queued} == {S.PENDING, S.SUSPENDED}
    assert {s for s in S if s.active} == {S.STARTING, S.RUNNING}


def test_invalid_transition_is_a_runtime_error():
    assert issubclass(InvalidTransition, RuntimeError)

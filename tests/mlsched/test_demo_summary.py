"""The demo summary's RESUMES column (mlsched/demo.py): a suspension the job resumed from, and
one it never resumed from (stopped while it waited, completed from that checkpoint)."""

from __future__ import annotations

from mlsched.demo import _resume_text
from mlsched.model import ResumeRecord


def test_a_resumed_suspension_shows_where_it_went_and_the_restored_step():
    record = ResumeRecord(10.0, 1428, ("node-a",), 12.0, 1428, ("node-b",))
    assert _resume_text(record) == "step 1428 node-a -> node-b @ 1428"


def test_a_suspension_never_resumed_says_so():
    record = ResumeRecord(40.0, 3644, ("node-b",))
    assert _resume_text(record) == "step 3644 node-b -> not resumed (stopped while suspended)"

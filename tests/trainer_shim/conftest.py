"""Fixtures for the trainer_shim tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# With --import-mode=importlib pytest leaves sys.path alone: make the helper module next to
# this file importable (its name is unique to this directory).
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from shim_testkit import FakeAgent


@pytest.fixture
def agent() -> Iterator[FakeAgent]:
    """A running test peer for the trainer session, on 127.0.0.1 with a kernel-chosen port."""
    peer = FakeAgent().start()
    try:
        yield peer
    finally:
        peer.stop()

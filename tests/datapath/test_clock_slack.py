"""The exactness checks' allowance for a memcached clock that moved during a test (ClockWatch):
widened only by the measured move, on the side it acts, and named."""

from __future__ import annotations

import pytest
from cachewarm.testing.populating import EXPIRY_SLACK, clock_slack, expiry_within


def test_no_move_keeps_issue_21s_rule() -> None:
    s = clock_slack(0.0, 0.0)
    assert (s.early, s.late, s.why) == (EXPIRY_SLACK, 0.0, "")
    assert expiry_within(100.0, 99.0, s) and not expiry_within(100.0, 100.2, s)
    assert not expiry_within(100.0, 98.9, s)


def test_a_destination_ahead_allows_a_shorter_copy_never_a_longer_one() -> None:
    s = clock_slack(0.0, 1.0)
    assert s.early == pytest.approx(EXPIRY_SLACK + 1.0) and s.late == 0.0
    assert "destination's clock moved +1.000 s" in s.why
    assert expiry_within(100.0, 98.02, s)  # CI stop 32: 1.98 s short after a one-second turn
    assert not expiry_within(100.0, 100.2, s)


def test_a_source_ahead_allows_a_later_copy_never_a_shorter_one() -> None:
    s = clock_slack(0.3, 0.0)
    assert s.late == pytest.approx(0.3) and s.early == EXPIRY_SLACK
    assert "source's clock moved +0.300 s" in s.why
    assert expiry_within(100.0, 100.3, s) and not expiry_within(100.0, 98.8, s)


def test_slips_act_the_other_way_and_small_ones_are_not_named() -> None:
    s = clock_slack(-0.02, -0.01)
    assert s.early == pytest.approx(EXPIRY_SLACK + 0.02) and s.late == pytest.approx(0.01)
    assert s.why == ""


def test_records_on_this_hosts_clock_have_no_source_move() -> None:
    s = clock_slack(None, 0.5)
    assert s.early == pytest.approx(EXPIRY_SLACK + 0.5) and s.late == 0.0
    assert "source" not in s.why


def test_a_source_on_this_host_is_held_to_its_ceiling() -> None:
    """Copies moved by the source's ceiling: its clock's moves excuse nothing, and the copy may end
    earlier by how far below the ceiling the source's clock stands now."""
    s = clock_slack(0.99, 0.0, source_headroom=0.4)
    assert s.late == 0.0 and s.early == pytest.approx(EXPIRY_SLACK + 0.4)
    assert "source" not in s.why
    assert expiry_within(100.0, 98.7, s) and not expiry_within(100.0, 100.06, s)

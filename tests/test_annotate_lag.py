"""taco_app/analysis/annotate_lag.py: the second variant is the first with each state's previous
action appended (zeros before the first, the last action after the final state), and the
summary counts every boundary's offset once, on time, late, early or further."""
import numpy as np
import pytest

import taco_sim
from taco_app.analysis import annotate_lag


@pytest.fixture(scope="module")
def dial_demos():
    return taco_sim.get("dial").collect(2, 2, annotate_lag.COLLECT_SEED)


def test_the_previous_action_is_appended_to_each_state(dial_demos):
    d = dial_demos
    out = annotate_lag.with_previous_action(d)
    D, A = d.states.shape[2], d.actions.shape[2]
    assert out.states.shape == d.states.shape[:2] + (D + A,)
    np.testing.assert_array_equal(out.states[:, :, :D], d.states)
    np.testing.assert_array_equal(out.states[:, 0, D:], 0.0)
    np.testing.assert_array_equal(out.states[:, 1:, D:], d.actions[:, :-1])
    for n in range(d.n):
        last = d.actions[n, d.traj_len[n] - 1]
        np.testing.assert_array_equal(out.final_state[n], np.concatenate([d.final_state[n], last]))
    np.testing.assert_array_equal(out.actions, d.actions)
    np.testing.assert_array_equal(out.labels, d.labels)


def test_the_summary_counts_every_boundary_once():
    rows = [{"offset": o, "act_margin_b": 1.0, "act_margin_b+1": 2.0, "stop_b": 0.1, "stop_b+1": 0.9}
            for o in (0, 0, 1, -1, 3, -4)]
    s = annotate_lag.summary(rows)
    assert s["boundaries"] == 6
    assert s["offset"] == {"-1": 1, "0": 2, "1": 1, "other": 2}
    assert s["offset_histogram"] == {"-4": 1, "-1": 1, "0": 2, "1": 1, "3": 1}
    assert s["further_median_abs"] == 3.5
    assert s["stop_b+1"] == [0.9, 0.9, 0.9]
    table = annotate_lag.table({"variants": {"state": s}})
    assert "| state | 6 | 2 | 1 | 1 | 2 (3.5) |" in table

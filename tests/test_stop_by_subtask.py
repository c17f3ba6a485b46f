"""taco_app/analysis/stop_by_subtask.py: a segment's end offset, eager STOP and STOP probabilities are read
at the right steps (a hand-made lattice), and the script runs on a model `taco train` made."""
import os
import sys

import numpy as np
import pytest

from taco_app import cli
from taco_app.analysis import stop_by_subtask

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "spec", "vectors"))
import brute_force as bf  # noqa: E402  (spec/vectors is not a package)


def test_figures_of_a_hand_made_lattice():
    m = stop_by_subtask
    labels = np.array([[0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 2, 2, 2]])   # demo 0: 6 steps, a pad
    traj_len, sketch_len = np.array([6, 7]), np.array([2, 3])
    sketch = np.array([[3, 5, 0], [5, 3, 4]])
    paths = {"forward_argmax": np.array([[0, 0, 1, 1, 1, 1, 9], [0, 0, 0, 1, 2, 2, 2]]),
             "viterbi": labels.copy()}
    p = np.full((2, 7, 3), 0.1)
    p[0, :, 0] = [0.1, 0.6, 0.2, 0.9, 0.1, 0.1, 0.1]    # sub-task 3: eager at step 1, stops at 3
    p[1, :, 0] = [0.1, 0.3, 0.8, 0.1, 0.1, 0.1, 0.1]    # sub-task 5 (position 0): stops at 2
    p[1, :, 1] = [0.1, 0.1, 0.1, 0.6, 0.7, 0.1, 0.1]    # sub-task 3 (position 1): eager on its last step 3
    xi_stop, xi_go = np.zeros((2, 7, 3)), np.zeros((2, 7, 3))
    xi_stop[0, 1:4, 0] = [0.1, 0.3, 0.6]        # demo 0, position 0 (last acting step 2)
    xi_go[0, 2, 0] = 0.6                        # label on step 2: 0.3 / (0.3 + 0.6)
    xi_stop[1, 2:4, 1] = [0.5, 0.5]             # demo 1, position 1 (last acting step 3)
    xi_go[1, 3, 1] = 0.0                        # label on step 3: 0.5 / 0.5
    rows = m.segment_rows(labels, traj_len, sketch, sketch_len, paths, np.log(p), xi_stop, xi_go)
    figs = lambda r: (r.p_last, r.p_stop, r.target_last, r.p_early)
    assert [r.subtask for r in rows] == [3, 5, 5, 3, 4]
    assert rows[0].offsets == {"forward_argmax": -1, "viterbi": 0} and rows[0].eager and not rows[0].eager_on_last
    assert figs(rows[0]) == pytest.approx((0.2, 0.9, 1 / 3, 0.4))
    assert rows[1].offsets == {"forward_argmax": None, "viterbi": None}           # the sketch's last
    assert figs(rows[1])[1:] == (None, None, None)
    assert rows[2].offsets == {"forward_argmax": 1, "viterbi": 0} and not rows[2].eager
    assert rows[2].target_last is None and rows[2].p_early == 0.0    # nothing reaches its last step
    assert figs(rows[3]) == pytest.approx((0.6, 0.7, 1.0, 1.0)) and rows[3].eager and rows[3].eager_on_last
    figures = m.summary(rows)
    assert figures[3]["segments"] == 2 and figures[3]["eager"] == 1.0 and figures[3]["eager_on_last"] == 0.5
    assert figures[5]["eager"] == 0.0 and figures[5]["eager_on_last"] is None
    assert figures[3]["forward_argmax_offset"] == -0.5 and figures[3]["forward_argmax_exact"] == 0.5
    assert figures[3]["p_stop"] == pytest.approx(0.8) and figures[3]["p_last"] == pytest.approx(0.4)
    assert figures[3]["target_last"] == pytest.approx((1 / 3 + 1.0) / 2) and figures[5]["target_last"] is None
    assert figures["all"]["p_early"] == pytest.approx((0.4 + 0.0 + 1.0) / 3)
    assert figures[4]["p_stop"] is None and figures[4]["viterbi_offset"] is None
    assert figures["all"]["segments"] == 5 and figures["all"]["eager"] == 0.4
    assert figures["all"]["forward_argmax_offset"] == 0.0 and figures["all"]["p_stop"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    assert "| 3 | 2 | -0.50 (50%) | +0.00 (100%) | 100% (50%) | 0.40 | 0.80 | 0.67 | 0.70 |" in m.table("x", figures, [str(i) for i in range(6)])
    with pytest.raises(ValueError, match="labels: demonstration 0 has no step at sketch position 2"):
        m.segment_rows(labels[:1], traj_len[:1], sketch[:1], np.array([3]), paths, np.log(p), xi_stop, xi_go)


def test_early_end_and_label_match_enumerated_alignments():
    """P(early end) and the posterior STOP label, from the forward-backward posteriors, equal
    their definitions summed over every alignment of a random lattice (paths enumerated and
    scored by spec/vectors/brute_force.py, independently of taco_ref.align)."""
    from taco_ref import align
    m = stop_by_subtask
    rng = np.random.default_rng(3)
    T, L = 7, 3
    log_act = rng.normal(size=(1, T, L))
    p_stop = rng.uniform(0.05, 0.95, size=(1, T, L))
    log_stop, log_go = np.log(p_stop), np.log1p(-p_stop)
    labels = np.array([[0, 0, 1, 1, 1, 2, 2]])
    fb = align.taco_forward_backward(log_act, log_stop, log_go)
    rows = m.segment_rows(labels, np.array([T]), np.array([[0, 1, 2]]), np.array([L]), {},
                          log_stop, fb.d_stop, fb.d_go)
    paths = [np.array(z) for z in bf.paths(T, L)]
    logp = np.array([bf.path_logprob(z, log_act[0], log_stop[0], log_go[0]) for z in paths])
    w = np.exp(logp - np.logaddexp.reduce(logp))
    for k, last in ((0, 1), (1, 4)):
        early = sum(wi for wi, z in zip(w, paths) if np.flatnonzero(z == k)[-1] < last)
        at = [(wi, z[last] != k) for wi, z in zip(w, paths) if z[last - 1] == k]
        label = sum(wi for wi, moved in at if moved) / sum(wi for wi, _ in at)
        assert rows[k].p_early == pytest.approx(early, abs=1e-12)
        assert rows[k].target_last == pytest.approx(label, abs=1e-12)


@pytest.mark.slow
def test_runs_on_a_trained_model(tmp_path, capsys):
    for name, n, seed in (("nav.npz", 20, 1), ("test.npz", 6, 2)):
        assert cli.main(["collect", "navworld", "--n", str(n), "--sketch-len", "2", "--seed", str(seed),
                         "--out", str(tmp_path / name)]) == 0
    assert cli.main(["train", "--data", str(tmp_path / "nav.npz"), "--out", str(tmp_path / "run"), "--seed", "0",
                     "--set", "epochs=1", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]"]) == 0
    capsys.readouterr()
    assert stop_by_subtask.main(["--model", str(tmp_path / "run" / "model"), "--data", str(tmp_path / "test.npz")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| taco: ") and len([r for r in out if r.startswith("| ") and "|---" not in r]) >= 3
    with pytest.raises(SystemExit):
        stop_by_subtask.main(["--model", "x", "--data", "y", "--stop-threshold", "1.5"])

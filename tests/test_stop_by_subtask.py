"""bench/stop_by_subtask.py: a segment's end offset, eager STOP and STOP probabilities are read
at the right steps (a hand-made lattice), and the script runs on a model `taco train` made."""
import importlib.util
import os

import numpy as np
import pytest

from taco_app import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench():
    spec = importlib.util.spec_from_file_location("stop_by_subtask",
                                                  os.path.join(REPO, "bench", "stop_by_subtask.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figures_of_a_hand_made_lattice():
    m = bench()
    labels = np.array([[0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 2, 2, 2]])   # demo 0: 6 steps, a pad
    traj_len, sketch_len = np.array([6, 7]), np.array([2, 3])
    sketch = np.array([[3, 5, 0], [5, 3, 4]])
    paths = {"forward_argmax": np.array([[0, 0, 1, 1, 1, 1, 9], [0, 0, 0, 1, 2, 2, 2]]),
             "viterbi": labels.copy()}
    p = np.full((2, 7, 3), 0.1)
    p[0, :, 0] = [0.1, 0.6, 0.2, 0.9, 0.1, 0.1, 0.1]    # sub-task 3: eager at step 1, stops at 3
    p[1, :, 0] = [0.1, 0.3, 0.8, 0.1, 0.1, 0.1, 0.1]    # sub-task 5 (position 0): stops at 2
    p[1, :, 1] = [0.1, 0.1, 0.1, 0.4, 0.7, 0.1, 0.1]    # sub-task 3 (position 1): stops at 4
    rows = m.segment_rows(labels, traj_len, sketch, sketch_len, paths, np.log(p))
    assert [r[0] for r in rows] == [3, 5, 5, 3, 4]
    assert rows[0][1] == {"forward_argmax": -1, "viterbi": 0} and rows[0][2] is True
    assert rows[0][3:] == pytest.approx((0.2, 0.9))
    assert rows[1][1] == {"forward_argmax": None, "viterbi": None} and rows[1][4] is None  # last position
    assert rows[2][1] == {"forward_argmax": 1, "viterbi": 0} and rows[2][2] is False
    assert rows[3][3:] == pytest.approx((0.4, 0.7))
    figures = m.summary(rows)
    assert figures[3]["segments"] == 2 and figures[3]["eager"] == 0.5
    assert figures[3]["forward_argmax_offset"] == -0.5 and figures[3]["forward_argmax_exact"] == 0.5
    assert figures[3]["p_stop"] == pytest.approx(0.8) and figures[3]["p_last"] == pytest.approx(0.3)
    assert figures[4]["p_stop"] is None and figures[4]["viterbi_offset"] is None
    assert figures["all"]["segments"] == 5 and figures["all"]["eager"] == 0.2
    assert figures["all"]["forward_argmax_offset"] == 0.0 and figures["all"]["p_stop"] == pytest.approx((0.9 + 0.8 + 0.7) / 3)
    assert "| 3 | 2 | -0.50 (50%) | +0.00 (100%) | 50% | 0.30 | 0.80 |" in m.table("x", figures, [str(i) for i in range(6)])
    with pytest.raises(ValueError, match="labels: demonstration 0 has no step at sketch position 2"):
        m.segment_rows(labels[:1], traj_len[:1], sketch[:1], np.array([3]), paths, np.log(p))


def test_runs_on_a_trained_model(tmp_path, capsys):
    for name, n, seed in (("nav.npz", 20, 1), ("test.npz", 6, 2)):
        assert cli.main(["collect", "navworld", "--n", str(n), "--sketch-len", "2", "--seed", str(seed),
                         "--out", str(tmp_path / name)]) == 0
    assert cli.main(["train", "--data", str(tmp_path / "nav.npz"), "--out", str(tmp_path / "run"), "--seed", "0",
                     "--set", "epochs=1", "--set", "act_hidden=[8]", "--set", "stop_hidden=[8]"]) == 0
    capsys.readouterr()
    assert bench().main(["--model", str(tmp_path / "run" / "model"), "--data", str(tmp_path / "test.npz")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| taco: ") and len([r for r in out if r.startswith("| ") and "|---" not in r]) >= 3
    with pytest.raises(SystemExit):
        bench().main(["--model", "x", "--data", "y", "--stop-threshold", "1.5"])

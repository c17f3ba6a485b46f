"""taco_app.analysis.dial_disturbed, the measurement behind the Dial's robustness fix: its
rollouts are the protocol's validation rollouts under a disturbance, its joint mask only zeroes
noise, its press windows account for every press, and its table of a retrained model against
its predecessor pairs them on the PINs."""
import json
import os

import numpy as np
import pytest

from taco_ref import evaluate, model as model_mod
from taco_sim.dial import disturb
from taco_app.analysis import dial_disturbed

D = disturb.Disturbance
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def velocity_model():
    """The velocity model the diagnosis was made on: the one shipped before the fix."""
    return model_mod.load(os.path.join(ROOT, "results", "archive", "dial-shipped-undisturbed", "models", "dial-velocity"))


def test_noise_on_no_joint_is_no_noise_and_every_press_has_its_window(velocity_model):
    """Masking every joint's noise gives the undisturbed rollouts state for state; an undisturbed
    PIN of L digits gives L presses, the last one the PIN's last, the others stopped after."""
    plain = dial_disturbed.rollouts(velocity_model, None, 2)
    masked = dial_disturbed.rollouts(velocity_model, D(noise=0.05), 2, noise_joints=[])
    assert np.array_equal(plain["states"], masked["states"]) and all(plain["done"])
    outcomes = [r["outcome"] for r in plain["presses"]]
    assert len(outcomes) == 2 * 4 and outcomes.count("last digit") == 2 and outcomes.count("stopped") == 6
    assert all(0 in r and 0 <= r[0]["p"] <= 1 for r in plain["presses"])
    assert len(plain["tracking"]) > 0 and plain["tracking"].shape[1] == 2


def test_finger_noise_moves_only_the_fingers_far_from_the_training_data(velocity_model):
    """Noise on the finger motors (7-9) alone moves the fingers (which the velocity loop holds:
    without noise they stay within a few milliradians) by more than 5 mrad; the arm's joints
    stay within 4 of their training standard deviations."""
    runs = dial_disturbed.rollouts(velocity_model, D(noise=0.02), 1, noise_joints=[6, 7, 8], use_expert=True)
    z = np.abs((runs["states"][:, :9] - velocity_model.params["norm.mean"][:9]) / velocity_model.params["norm.std"][:9])
    fingers_moved = np.abs(runs["states"][:, 6:9] - runs["states"][0, 6:9]).max()
    assert fingers_moved > 0.005 and np.percentile(z[:, :6], 99, axis=0).max() < 4


def _write(folder, name, outcomes):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump({"outcomes": outcomes, "n_tasks": len(outcomes)}, f)


def test_the_retrained_table_pairs_each_condition_on_its_pins(tmp_path):
    """A row per condition: the standard test read from NAME-evaluate.json, the others from
    NAME-test-CONDITION.json; the difference is Newcombe's paired one, signed retrained − before;
    a condition the predecessor never met gets "-", one the retrained model lacks is an error."""
    new, old = str(tmp_path / "new"), str(tmp_path / "old")
    _write(new, "m-evaluate.json", "1111")
    _write(old, "m-evaluate.json", "1111")
    _write(new, "m-test-harder.json", "1110")
    _write(old, "m-test-harder.json", "0100")
    _write(new, "m-test-push.json", "1011")
    rows = dial_disturbed.retrained_table("m", new, old, ["standard", "harder", "push"]).splitlines()[2:]
    assert rows[0].startswith("| `standard` | the standard test | 4 of 4, 100.0 % [") and "| +0.0 [-" in rows[0]
    d, lo, hi = evaluate.paired_difference_interval("1110", "0100")
    assert rows[1].endswith(f"| {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] |") and d == 0.5
    assert f"| {disturb.TESTS['harder'].about} | 1 of 4, 25.0 % [" in rows[1]
    assert rows[2].startswith(f"| `push` | {disturb.TESTS['push'].about} | - | 3 of 4, 75.0 % [") and rows[2].endswith("| - |")
    with pytest.raises(FileNotFoundError, match="'delay'"):
        dial_disturbed.retrained_table("m", new, old, ["delay"])

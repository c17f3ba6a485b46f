"""taco_app.analysis.dial_disturbed, the measurement behind the Dial's robustness fix: its
rollouts are the protocol's validation rollouts under a disturbance, its joint mask only zeroes
noise, and its press windows account for every press."""
import numpy as np
import pytest

from taco_ref import model as model_mod
from taco_sim import shipped_models
from taco_sim.dial import disturb
from taco_app.analysis import dial_disturbed

D = disturb.Disturbance


@pytest.fixture(scope="module")
def velocity_model():
    return model_mod.load(shipped_models()["dial-velocity"])


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

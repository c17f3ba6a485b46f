"""The Dial domain (paper Sec. 5.3): a MuJoCo JACO2 arm dials PINs on a 4 x 3 keypad.

``env`` holds the model (``jaco_dial.xml`` beside it), observation and physics (DialEnv, with
the velocity loop of the velocity variant); ``expert`` the state-based expert, the task
interface (DialTask) and DART collection; ``velocity`` the velocity variant (domain
"dial-velocity": joint velocity targets instead of torques); ``image`` the image variant (domains
"dial-image" and "dial-image-small": the state is a camera picture, paper Sec. 5.3.2).
The Dial needs MuJoCo and SciPy, the `dial` extra; without them its domains are listed and
say what to install.
"""
from taco_sim.domain import requires

DOMAINS = ("dial", "dial-image", "dial-image-small", "dial-velocity")
"""The domains this package registers (listed before the import that needs MuJoCo)."""
requires("mujoco", "scipy", extra="dial", domains=DOMAINS)

from taco_sim.dial.env import (ACTION_DIM, CONTROL_DT, DIGIT_SLOTS, HOME, JOINTS, K, MODEL_PATH,
                               PHYSICS_DT, SLOT_LABELS, SLOTS, STANDARD_LAYOUT, STATE_DIM, SUBSAMPLE,
                               TORQUE_LIMITS, VELOCITY_KV, VELOCITY_LIMITS, VOCAB, DialEnv,
                               key_positions, observation_from_joints, observe, sample_layout)
from taco_sim.dial.expert import (DART_SIGMA, TEST_SKETCH_LEN, TRAIN_SKETCH_LEN, DialTask, budget,
                                  collect, expert_torque, expert_torque_from_obs, sample_sketches,
                                  task_env, validation_env, zero_shot_sketches)

__all__ = ["ACTION_DIM", "CONTROL_DT", "DART_SIGMA", "DIGIT_SLOTS", "HOME", "JOINTS", "K", "MODEL_PATH",
           "PHYSICS_DT", "SLOT_LABELS", "SLOTS", "STANDARD_LAYOUT", "STATE_DIM", "SUBSAMPLE",
           "TEST_SKETCH_LEN", "TORQUE_LIMITS", "TRAIN_SKETCH_LEN", "VELOCITY_KV", "VELOCITY_LIMITS",
           "VOCAB", "DialEnv", "DialTask", "budget", "collect", "expert_torque",
           "expert_torque_from_obs", "key_positions", "observation_from_joints", "observe",
           "sample_layout", "sample_sketches", "task_env", "validation_env", "zero_shot_sketches"]

import numpy as np  # noqa: E402

from taco_sim.domain import Domain, package_file, register  # noqa: E402
from taco_sim.dial.augment import other_key_views, relayout_unused_keys  # noqa: E402
from taco_sim.dial.disturb import named_tests  # noqa: E402
from taco_sim.dial.blas import pinned  # noqa: E402

KERNEL = "Haswell"
"""The OpenBLAS kernels every Dial collection runs under (taco_sim.dial.blas, spec/data.md §6): the
expert's bits follow the kernels, and every x86-64 CPU with AVX2 runs these."""

DOMAIN = register(Domain(
    name="dial", vocab=VOCAB, state_dim=STATE_DIM, action_dim=ACTION_DIM, discrete=False,
    train_sketch_len=TRAIN_SKETCH_LEN, test_sketch_len=TEST_SKETCH_LEN, collect=pinned(collect, KERNEL, "dial"),
    task_env=task_env, sample_sketches=sample_sketches, test_sketches=zero_shot_sketches,
    validation_env=validation_env, augment=relayout_unused_keys, state_views=other_key_views,
    config=package_file("configs", "dial.yaml"),
    models={"default": package_file("dial", "models", "dial")}, renders=True,
    parallel_collect=True, control_dt=CONTROL_DT, one_layout=True,
    tests=named_tests(lambda d: DialTask("standard", d))))
"""The Dial (joint-state variant) on the domain contract; its shipped model is the ROS 2
bridge's default ("default": TACO with sim/taco_sim/configs/dial.yaml, on demonstrations whose
arm met the harder test's disturbances: models/dial/README.md)."""

from taco_sim.dial import velocity  # noqa: E402

VELOCITY_DOMAIN = register(Domain(
    name="dial-velocity", vocab=VOCAB, state_dim=STATE_DIM, action_dim=velocity.ACTION_DIM,
    discrete=False, train_sketch_len=TRAIN_SKETCH_LEN, test_sketch_len=TEST_SKETCH_LEN,
    collect=pinned(velocity.collect, KERNEL, "dial-velocity"), task_env=velocity.task_env, sample_sketches=sample_sketches,
    test_sketches=zero_shot_sketches, validation_env=velocity.validation_env,
    augment=relayout_unused_keys, state_views=other_key_views,
    config=package_file("configs", "dial-velocity.yaml"),
    models={"default": package_file("dial", "models", "dial-velocity")}, renders=True,
    parallel_collect=True, control_dt=CONTROL_DT, one_layout=True,
    tests=named_tests(lambda d: velocity.DialVelocityTask("standard", d))))
"""The Dial's velocity variant (taco_sim.dial.velocity): six arm joint velocity targets per
control step, executed by the simulated arm's velocity loop; its shipped model is the ROS 2
bridge's default for command_interface velocity."""

from taco_sim.dial import image  # noqa: E402


def _image_domain(config, yaml_name):
    def collect(n, sketch_len, seed, dart_sigma=DART_SIGMA, sketches=None, progress=None, workers=1, out=None):
        return image.collect(n, sketch_len, seed, dart_sigma=dart_sigma, sketches=sketches, progress=progress,
                             workers=workers, out=out, config=config)
    collect.__doc__ = f"image.collect at {config.size} x {config.size} (domain {config.name!r})."
    return register(Domain(
        name=config.name, vocab=VOCAB, state_dim=int(np.prod(config.image_shape)), action_dim=ACTION_DIM,
        discrete=False, train_sketch_len=TRAIN_SKETCH_LEN, test_sketch_len=TEST_SKETCH_LEN,
        collect=pinned(collect, KERNEL, config.name), task_env=lambda: image.task_env(config), sample_sketches=sample_sketches,
        test_sketches=zero_shot_sketches, config=package_file("configs", f"{yaml_name}.yaml"), renders=True,
        parallel_collect=True, state_shape=config.image_shape, streams=True, one_layout=True,
        tests=named_tests(lambda d: image.DialImageTask("standard", config.size, d))))


IMAGE_DOMAIN = _image_domain(image.PAPER, "dial-image")
"""The Dial from 112 x 112 camera images (paper Sec. 5.3.2) on the domain contract."""
SMALL_IMAGE_DOMAIN = _image_domain(image.SMALL, "dial-image-small")
"""The same at 64 x 64 (the reduced scale)."""

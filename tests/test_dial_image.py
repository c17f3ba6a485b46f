"""Tests for the image Dial (sim/taco_sim/dial/image.py; spec/dial.md §8).

(a) the camera: images of the configured size, deterministic by seed, showing the arm move;
(b) collection: the joint-state Dial's expert and labels on the standard layout, the same data
    in memory and streamed to a frame directory by worker processes, equal for any workers;
(c) the offscreen-OpenGL choice (EGL, else OSMesa) and the one error where neither works;
(d) smoke: a few epochs of TACO on images and a rollout from the model.
The contract checks of tests/test_domains.py run on both image domains in the slow tier
(4 PINs of length 4 each); here PINs of length 1 keep the quick tier quick.
"""
import os

import numpy as np
import pytest

import taco_sim
from taco_ref import data, evaluate, train
from taco_app import cli, config
from taco_sim.dial import env as env_mod, expert, image
from taco_sim.domain import RenderingUnavailable

SMALL = taco_sim.get("dial-image-small")


def test_both_scales_are_registered_with_their_image_shapes():
    for name, size in (("dial-image", 112), ("dial-image-small", 64)):
        dom = taco_sim.get(name)
        assert dom.obs_shape == (size, size, 3) and dom.state_dim == size * size * 3
        assert dom.streams and dom.renders and dom.vocab == taco_sim.get("dial").vocab
        cfg = config.load(name)
        assert (cfg.conv_channels, cfg.conv_kernels, cfg.conv_strides) == ([10, 5, 3], [5, 5, 3], [2, 2, 1])
        assert cfg.act_hidden == cfg.stop_hidden == [400, 300]          # paper table 2


@pytest.mark.slow
def test_the_camera_sees_the_arm_move_and_is_deterministic():
    task = image.task_env(image.SMALL)
    first = task.reset([3], seed=2)
    assert first.shape == (64, 64, 3) and first.dtype == np.uint8
    assert np.array_equal(first, image.task_env(image.SMALL).reset([3], seed=2))
    assert not np.array_equal(first, image.task_env(image.SMALL).reset([3], seed=3))   # home pose noise
    for _ in range(10):
        after = task.step(expert.expert_torque(task.env, 3))
    assert np.abs(after.astype(int) - first).max() > 50 and task.layout.tolist() == env_mod.STANDARD_LAYOUT.tolist()


@pytest.mark.slow
def test_collection_records_the_joint_state_expert_on_the_standard_layout():
    """Actions are the expert's torques of the joint state behind each image, labels advance at
    the press, the layout is the standard one (paper Sec. 5.3.2: not randomised)."""
    demos = SMALL.collect(2, 1, seed=4, sketches=np.array([[2], [7]]))
    assert demos.states.shape[2:] == (64, 64, 3) and demos.meta["layout"] == "standard"
    assert demos.meta["domain"] == "dial-image-small" and demos.meta["image_size"] == 64
    task = image.task_env(image.SMALL)
    rng = np.random.default_rng(np.random.SeedSequence(np.random.default_rng(4).integers(2 ** 63)).spawn(2)[0])
    first = task.reset([2], seed=int(rng.integers(2 ** 31)))
    assert np.array_equal(first, demos.states[0, 0])
    np.testing.assert_allclose(demos.actions[0, 0], expert.expert_torque(task.env, 2))
    assert (demos.labels[demos.labels >= 0] == 0).all()                 # one digit: one segment


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_streamed_collection_equals_collection_in_memory(tmp_path, workers):
    """The frame directory written chunk by chunk (by worker processes: spawned here, as this
    process has rendered) reads back the data of a single-process collection in memory (same
    fingerprint), lazily."""
    memory = SMALL.collect(5, 1, seed=9)
    streamed = SMALL.collect(5, 1, seed=9, workers=workers, out=tmp_path / "f")
    assert isinstance(streamed.states, data.FrameStates)
    assert streamed.fingerprint() == memory.fingerprint()
    assert data.load(tmp_path / "f").fingerprint() == memory.fingerprint()


class Interrupted(Exception):
    pass


@pytest.mark.slow
def test_an_interrupted_collection_makes_only_its_unfinished_chunks(tmp_path, monkeypatch):
    """spec/data.md §10: a collection into a directory stopped in its second chunk, run again,
    reuses the first chunk (its part names the same job; its frames match their digests), makes
    only the second, and gives the set of an uninterrupted run (same fingerprint) without the
    parts; under another machine record it reuses nothing."""
    made, fail_at = [], [5]
    real = image._demo

    def counting(task, sketch, seed, dart_sigma):
        made.append(seed)
        if len(made) == fail_at[0]:
            raise Interrupted
        return real(task, sketch, seed, dart_sigma)
    monkeypatch.setattr(image, "_demo", counting)
    out = tmp_path / "f"
    with pytest.raises(Interrupted):
        SMALL.collect(5, 1, seed=9, out=out)                         # chunks of 4 and 1: dies in the second
    assert sorted(os.listdir(out)) == [data.chunk_name(0), data.part_name(0)]
    made.clear(), fail_at.clear(), fail_at.append(0)
    resumed = SMALL.collect(5, 1, seed=9, out=out)
    assert len(made) == 1
    made.clear()
    assert resumed.fingerprint() == SMALL.collect(5, 1, seed=9).fingerprint() and len(made) == 5
    assert sorted(os.listdir(out)) == sorted([data.INDEX, data.FINAL, data.chunk_name(0), data.chunk_name(1)])

    made.clear(), fail_at.clear(), fail_at.append(5)
    with pytest.raises(Interrupted):
        SMALL.collect(5, 1, seed=9, out=out)
    made.clear(), fail_at.clear(), fail_at.append(0)
    monkeypatch.setattr(image, "collected_on", lambda: {"cpu": "another machine"})
    SMALL.collect(5, 1, seed=9, out=out)
    assert len(made) == 5


def test_a_chunk_job_key_names_everything_that_decides_its_bytes():
    """The key differs with the scale, a PIN, a seed, DART's sigma, the code and the machine,
    and is the same text for the same job."""
    seeds = np.random.SeedSequence(3).spawn(2)
    base = dict(config=image.SMALL, sketches=np.array([[1, 2], [3, 4]]), seeds=seeds, dart_sigma=0.1,
                code="c", machine={"cpu": "x"})
    key = image._job_key(**base)
    assert key == image._job_key(**dict(base, sketches=[[1, 2], [3, 4]], seeds=np.random.SeedSequence(3).spawn(2)))
    for change in (dict(config=image.PAPER), dict(sketches=np.array([[1, 2], [3, 5]])),
                   dict(seeds=np.random.SeedSequence(4).spawn(2)), dict(seeds=seeds[::-1]),
                   dict(dart_sigma=0.2), dict(code="d"), dict(machine={"cpu": "y"})):
        assert image._job_key(**dict(base, **change)) != key, change


def test_a_part_rebuilds_its_demonstrations_or_is_refused():
    """A part's arrays split back into each demonstration's actions, labels, final image and
    attempts; arrays of other shapes than the chunk's lengths imply give None (made again)."""
    record = {"lengths": np.array([2, 3])}
    part = {"actions": np.arange(5 * 9.0).reshape(5, 9), "labels": np.array([0, 0, 0, 1, 1]),
            "final": np.zeros((2, 8, 8, 3), np.uint8), "attempts": np.array([0, 2])}
    demos = image._from_part(part, record, (8, 8, 3))
    assert [d[1].shape for d in demos] == [(2, 9), (3, 9)] and demos[1][2].tolist() == [0, 1, 1]
    assert demos[1][4] == 2 and demos[0][0] is None
    for name, bad in (("actions", np.zeros((4, 9))), ("labels", np.zeros(6)), ("final", np.zeros((2, 4, 4, 3))),
                      ("attempts", np.zeros(3))):
        assert image._from_part(dict(part, **{name: bad}), record, (8, 8, 3)) is None, name
    assert image._from_part({k: v for k, v in part.items() if k != "final"}, record, (8, 8, 3)) is None


def test_workers_fork_until_the_process_renders_then_spawn(monkeypatch):
    """A process forked after this one created an OpenGL context hangs when it renders (Mesa's
    EGL), so collection forks only while none exists."""
    monkeypatch.setattr(image, "_RENDERED", False)
    assert image._pool_context().get_start_method() == "fork"
    image.Camera(env_mod.load_model()[0], 16).close()
    assert image._pool_context().get_start_method() == "spawn"


def test_without_offscreen_opengl_rendering_fails_with_one_clear_error(monkeypatch, tmp_path, capsys):
    def no_gl(*args, **kwargs):
        raise RuntimeError("an OpenGL platform library has not been loaded into this process")
    monkeypatch.setattr(image.mujoco, "Renderer", no_gl)
    with pytest.raises(RenderingUnavailable, match="offscreen OpenGL is not available.*MUJOCO_GL=.*libegl1"):
        image.task_env(image.SMALL)
    assert cli.main(["collect", "dial-image-small", "--n", "1", "--out", str(tmp_path / "x")]) == cli.EXIT_IO
    err = capsys.readouterr().err.strip().split("\n")[-1]
    assert err.startswith("taco collect: cannot render the Dial's camera images") and "apt-get install" in err


@pytest.mark.parametrize("found, egl_works, user, expected", [
    ({"EGL": "libEGL.so.1", "OSMesa": None}, None, None, "egl"),
    ({"EGL": "libEGL.so.1", "OSMesa": "libOSMesa.so.8"}, True, None, "egl"),
    ({"EGL": "libEGL.so.1", "OSMesa": "libOSMesa.so.8"}, False, None, "osmesa"),
    ({"EGL": None, "OSMesa": "libOSMesa.so.8"}, None, None, "osmesa"),
    ({"EGL": None, "OSMesa": None}, None, None, None),
    ({"EGL": "libEGL.so.1", "OSMesa": "libOSMesa.so.8"}, True, "glfw", "glfw"),
])
def test_the_offscreen_backend_is_egl_else_osmesa(monkeypatch, found, egl_works, user, expected):
    """MuJoCo fixes its backend at import: EGL where it initialises, else OSMesa, else none (the
    render then fails with RenderingUnavailable); a MUJOCO_GL set by the user always wins. The
    EGL probe runs only where OSMesa is there to fall back to."""
    for var in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(var, raising=False)
    if user:
        monkeypatch.setenv("MUJOCO_GL", user)
    monkeypatch.setattr(env_mod.ctypes.util, "find_library", lambda name: found.get(name))
    probes = []
    monkeypatch.setattr(env_mod, "_egl_initialises", lambda lib: probes.append(lib) or egl_works)
    env_mod._offscreen_gl_default()
    assert os.environ.get("MUJOCO_GL") == expected
    assert bool(probes) == (egl_works is not None and user is None)


def test_the_egl_probe_answers_without_raising_or_ending_a_renderer():
    """The probe may run in a process that renders already: the renderer keeps working."""
    camera = image.Camera(env_mod.load_model()[0], 16)
    assert env_mod._egl_initialises("libEGL.so.1") in (True, False)
    assert env_mod._egl_initialises("/no/such/libEGL.so") is False
    model, _ = env_mod.load_model()
    assert camera.render(env_mod.mujoco.MjData(model)).shape == (16, 16, 3)
    camera.close()


@pytest.mark.slow
def test_taco_trains_on_images_and_its_model_dials(tmp_path):
    """Smoke: 2 epochs of TACO (after 1 of warm-up) on 6 streamed demonstrations of one-digit
    PINs at 64 x 64, the loss finite and falling; the model acts on camera images in the task
    environment and aligns held-out demonstrations."""
    demos = SMALL.collect(6, 1, seed=1, out=tmp_path / "f")
    cfg = config.load("dial-image-small", None, ["epochs=2", "warmup_epochs=1", "act_hidden=[16]",
                                                   "stop_hidden=[8]", "batch_size=3"])
    model = train.train(demos, cfg, progress=False)
    history = [h["train_loss"] for h in model.info["history"]]
    assert np.isfinite(history).all() and history[-1] < history[0]
    assert model.policy.image_shape == [64, 64, 3] and model.params["core.W0"].shape == (5, 5, 3, 10)
    out = evaluate.execute(model, SMALL.task_env(), [4], seed=0, budget=5)
    assert out["steps"] >= 1
    acc = evaluate.alignment_accuracies(model, demos)
    assert 0.0 <= acc["position"]["forward_argmax"] <= 1.0

"""Tests for sim/taco_sim/dial (taco_sim.dial): the MuJoCo JACO Dial domain of paper Sec. 5.3.

In three layers (an exact reference, properties, smoke and determinism):
(a) plain references: names resolve in the MJCF; IK poses checked by forward kinematics; the
    observation rebuilt from qpos, fingertip and key positions; recorded actions recomputed;
(b) hypothesis properties: sketches and layouts are valid for any seed;
(c) smoke runs and determinism: one press counts once, the expert dials PINs, same seed => same
    trajectory, collect identical for workers 1 and 2, rendering;
and the velocity variant (taco_sim.dial.velocity, spec/dial.md §7): the velocity loop written
out, its tracking of a target, the velocity expert dialling PINs, its demonstrations.
Symbols: N demonstrations, T control steps, L PIN length, K = 10 digits, D = 39, A = 9 (6 for
the velocity variant). 0-based.
"""
import mujoco
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import taco_sim
from taco_sim import dial
from taco_sim.dial import env as dial_env
from taco_sim.dial import expert, velocity

K = dial.K


def drive(env, q_arm, steps):
    """Hold a P controller (the arm compensates gravity) on arm set-point q_arm (6,) for steps
    control steps."""
    for _ in range(steps):
        q9 = env.qpos
        torque = np.zeros(dial.ACTION_DIM)
        torque[:6] = expert.KP * np.clip(q_arm - q9[:6], -expert.MAX_ERROR, expert.MAX_ERROR)
        torque[6:] = expert.KP_FINGER * (dial_env.FINGERS_CLOSED - q9[6:])
        env.step(torque)


def run_expert(task, sketch, seed, noise=0.0):
    """Run the clean (or noisy) expert on task until done, failed or budget; returns obs (T + 1, D)."""
    obs = [task.reset(sketch, seed=seed)]
    rng = np.random.default_rng(seed)
    while not task.done and not task.failed and task.t < task.budget(len(sketch)):
        torque = dial.expert_torque(task.env, task.target)
        obs.append(task.step(torque + noise * dial.TORQUE_LIMITS * rng.standard_normal(9)))
    return np.array(obs)


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------

def test_model_compiles_and_names_resolve():
    model = mujoco.MjModel.from_xml_path(dial.MODEL_PATH)
    assert model.opt.timestep == dial.PHYSICS_DT and dial.CONTROL_DT == pytest.approx(0.04)
    assert len(dial.JOINTS) == 9 and dial.JOINTS[0] == "j2n6s300_joint_1"
    assert dial.JOINTS[6:] == tuple(f"j2n6s300_joint_finger_{i}" for i in range(1, 4))
    for name, limit in zip(dial.JOINTS, dial.TORQUE_LIMITS):
        assert model.joint(name).type == mujoco.mjtJoint.mjJNT_HINGE
        act = model.actuator(name)
        assert model.actuator_trntype[act.id] == mujoco.mjtTrn.mjTRN_JOINT
        assert act.trnid[0] == model.joint(name).id and act.gear[0] == 1.0
        np.testing.assert_allclose(act.ctrlrange, [-limit, limit])
    assert model.nu == 9 and model.site("fingertip").id >= 0 and model.camera("front").id >= 0
    for s in range(dial.SLOTS):
        assert model.site(f"slot_{s}").id >= 0 and model.sensor(f"key_{s}").dim[0] == 1
    assert model.opt.gravity[2] < 0 and (model.dof_damping[:6] > 0).all()


def test_layouts_and_key_positions():
    np.testing.assert_array_equal(dial.STANDARD_LAYOUT, [10, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    assert [dial_env.SLOT_LABELS[s] for s in dial.STANDARD_LAYOUT] == list(dial.VOCAB)
    slots = dial_env.slot_positions()                                           # (S, 3)
    pitch = np.linalg.norm(slots[1] - slots[0])
    assert 0.06 <= pitch <= 0.08 and np.ptp(slots[:, 2]) == 0
    np.testing.assert_allclose(slots[3] - slots[0], slots[4] - slots[1])       # a regular grid
    rng = np.random.default_rng(0)
    for _ in range(200):
        layout = dial.sample_layout(rng)
        assert not np.array_equal(layout, dial.STANDARD_LAYOUT)
        np.testing.assert_array_equal(np.sort(layout), dial.DIGIT_SLOTS)
        np.testing.assert_array_equal(dial.key_positions(layout), slots[layout])
    with pytest.raises(ValueError):
        dial.key_positions(np.arange(10))                                      # slot 9 is "*"


@pytest.mark.slow
def test_every_slot_reachable_by_ik():
    hover, press = expert.poses()                                              # (S, 6) each
    kin = dial_env.kinematics()
    for s in range(dial.SLOTS):
        for q, height in ((hover[s], expert.HOVER_HEIGHT), (press[s], expert.PRESS_HEIGHT)):
            q9 = np.concatenate([q, dial_env.FINGERS_CLOSED])
            tip = kin.fingertip(q9)
            np.testing.assert_allclose(tip, kin.slot_pos[s] + [0, 0, height], atol=2e-3)
            approach = -kin.data.site_xmat[kin.names.tip].reshape(3, 3)[:, 2]
            assert approach[2] < -0.999                                        # pointing down
        assert np.abs(press[s] - hover[s]).max() < 0.5                         # same IK branch
    model = kin.model
    for name in dial.JOINTS[1:3]:                                              # limited joints
        lo, hi = model.jnt_range[model.joint(name).id]
        j = dial.JOINTS.index(name)
        assert (lo < hover[:, j]).all() and (hover[:, j] < hi).all()


# ----------------------------------------------------------------------------------------------
# The environment
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_observation_layout_and_fk():
    env = dial.DialEnv()
    obs = env.reset(seed=4)
    assert obs.shape == (dial.STATE_DIM,) == (39,) and np.isfinite(obs).all()
    drive(env, expert.poses()[0][3], 5)
    obs = env.obs
    np.testing.assert_array_equal(obs[:9], env.qpos)
    np.testing.assert_array_equal(obs[:9], env.data.qpos[[env.model.joint(n).qposadr[0] for n in dial.JOINTS]])
    tip = env.data.site("fingertip").xpos
    np.testing.assert_allclose(obs[9:].reshape(K, 3), env.key_pos - tip)
    np.testing.assert_allclose(dial.observation_from_joints(obs[:9], env.key_pos), obs, atol=1e-12)
    np.testing.assert_array_equal(dial.observe(env.qpos, tip, env.key_pos), obs)
    o = env.observation()
    assert o["qvel"].shape == (9,) and o["pressed"].shape == (K,) and not o["pressed"].any()
    np.testing.assert_array_equal(o["key_offset"], env.key_pos - o["fingertip"])
    names, pos, vel, eff = env.joint_state()
    assert names == dial.JOINTS and pos.shape == vel.shape == eff.shape == (9,)


def test_the_arm_compensates_its_own_weight():
    """Zero commanded torque holds the arm where it is (gravcomp bodies, like the JACO2's torque
    mode): after 2 s the fingertip has sagged by less than a millimetre."""
    env = dial.DialEnv()
    env.reset(seed=0)
    tip = env.fingertip
    for _ in range(50):
        env.step(np.zeros(dial.ACTION_DIM))
    assert np.linalg.norm(env.fingertip - tip) < 1e-3


def test_torques_are_clipped():
    env = dial.DialEnv()
    env.reset(seed=0, layout="standard")
    env.step(np.full(9, 1e3))
    np.testing.assert_array_equal(env.data.ctrl[[env.model.actuator(n).id for n in dial.JOINTS]],
                                  dial.TORQUE_LIMITS)
    np.testing.assert_allclose(env.joint_state()[3], dial.TORQUE_LIMITS)
    env.step(-np.full(9, 1e3))
    np.testing.assert_allclose(env.joint_state()[3], -dial.TORQUE_LIMITS)
    assert env.t == 2 and env.time == pytest.approx(2 * dial.CONTROL_DT)
    with pytest.raises(ValueError):
        env.step(np.full(9, np.nan))


@pytest.mark.slow
def test_one_press_counts_once_and_rearms_after_release():
    hover, press = expert.poses()
    env = dial.DialEnv()
    env.reset(seed=1, layout="standard")
    slot = dial.STANDARD_LAYOUT[5]
    drive(env, hover[slot], 50)
    assert env.presses == [] and env.new_presses() == []
    drive(env, press[slot], 40)                                                 # press and hold
    assert env.observation()["pressed"][5]
    assert env.presses == [5] and env.new_presses() == [5] and env.new_presses() == []
    drive(env, press[slot], 25)                                                 # still held
    assert env.presses == [5]
    drive(env, hover[slot], 30)                                                 # release
    assert env.key_travel()[slot] > dial_env.RELEASE_DEPTH and env.presses == [5]
    drive(env, press[slot], 40)                                                 # press again
    assert env.presses == [5, 5] and env.new_presses() == [5]


@pytest.mark.slow
def test_same_seed_same_trajectory():
    def trajectory(seed):
        task = dial.DialTask(layout=dial.sample_layout(np.random.default_rng(seed)))
        return run_expert(task, [3, 7], seed, noise=0.05), task.env.layout
    (a, la), (b, lb), (c, _) = trajectory(5), trajectory(5), trajectory(6)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(la, lb)
    assert a.shape != c.shape or not np.array_equal(a, c)
    env = dial.DialEnv()
    o1, l1 = env.reset(seed=9), env.layout
    o2, l2 = env.reset(seed=9), env.layout
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(l1, l2)


# ----------------------------------------------------------------------------------------------
# The expert and the task
# ----------------------------------------------------------------------------------------------

EXPERT_PINS = [(None, (0, 5, 1, 6)), (None, (9, 8, 7)), (None, (2, 0, 2, 4, 1)), (3, (1, 0, 4, 8)),
               (11, (6, 2, 9, 3, 5))]
"""(layout seed or None for the standard layout, PIN) that both experts must dial."""

@pytest.mark.parametrize("layout_seed, sketch", EXPERT_PINS)
def test_expert_dials_pins(layout_seed, sketch):
    layout = "standard" if layout_seed is None else dial.sample_layout(np.random.default_rng(layout_seed))
    task = dial.DialTask(layout=layout)
    run_expert(task, sketch, seed=len(sketch))
    assert task.done and not task.failed and task.progress == len(sketch)
    assert task.env.presses == list(sketch)
    assert task.t <= 0.7 * dial.budget(len(sketch))                           # budget ~ 2x expert mean


def test_expert_torque_is_a_function_of_the_observation():
    task = dial.DialTask(layout=dial.sample_layout(np.random.default_rng(2)))
    obs = run_expert(task, [4, 1], seed=3)
    env = dial.DialEnv()
    env.reset(seed=0, layout=task.env.layout)
    for o in obs[::7]:
        env.data.qpos[env.names.qpos] = o[:9]
        env.data.qvel[:] = np.random.default_rng(0).standard_normal(env.model.nv)  # ignored
        mujoco.mj_forward(env.model, env.data)
        np.testing.assert_allclose(dial.expert_torque(env, 1), dial.expert_torque_from_obs(o, 1))
        assert (np.abs(dial.expert_torque_from_obs(o, 1)) <= dial.TORQUE_LIMITS).all()


def test_task_done_failed_progress():
    """Rules (spec/dial.md §4): presses in PIN order count; a wrong press fails; stop() (a
    sub-policy's STOP) changes nothing, since the keypad judges presses, not STOP decisions."""
    task = dial.DialTask()
    assert (task.vocab, task.state_dim, task.action_dim) == (dial.VOCAB, 39, 9)
    task.reset([1, 2], seed=0)
    assert task.progress == 0 and not task.done and not task.failed and task.target == 1
    task.stop()
    assert task.progress == 0 and not task.failed
    while task.progress == 0 and task.t < 100:                                  # press 1
        task.step(dial.expert_torque(task.env, 1))
    assert task.progress == 1 and task.target == 2 and not task.failed
    task.stop()
    assert task.progress == 1 and task.target == 2 and not task.failed
    while not task.failed and task.t < 200:                                     # then 3, not 2
        task.step(dial.expert_torque(task.env, 3))
    assert task.failed and task.progress == 1 and not task.done and task.target is None
    task.reset([1, 2], seed=0)
    assert not task.failed and task.progress == 0
    run_expert(task, [1, 2], seed=0)
    assert task.done and task.target is None


@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 6), st.integers(1, 20))
def test_sketches_are_valid(seed, sketch_len, n):
    rng = np.random.default_rng(seed)
    s = dial.sample_sketches(n, sketch_len, rng)
    note(f"sketches {s.tolist()}")
    assert s.shape == (n, sketch_len) and s.dtype == np.int64
    assert ((0 <= s) & (s < K)).all() and (s[:, 1:] != s[:, :-1]).all()
    z = dial.zero_shot_sketches(n, rng)
    assert z.shape == (n, 5) and (z[:, 1:] != z[:, :-1]).all()


def test_sample_sketches_excludes():
    rng = np.random.default_rng(0)
    allowed = {(a, b) for a in range(K) for b in range(K) if a != b}
    exclude = sorted(allowed)[:80]
    s = dial.sample_sketches(500, 2, rng, exclude=exclude)
    assert {tuple(r) for r in s.tolist()} == allowed - set(exclude)
    with pytest.raises(ValueError):
        expert._check_sketches([[1, 1, 2]])


# ----------------------------------------------------------------------------------------------
# Collection
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demos():
    return dial.collect(6, 3, seed=7, workers=1)


@pytest.mark.slow
def test_collect_valid_demos(demos):
    d = demos
    assert d.states.shape[0] == 6 and d.states.shape[2] == 39 and d.actions.shape[2] == 9
    assert d.vocab == dial.VOCAB and d.meta["domain"] == "dial" and d.meta["subsample"] == dial.SUBSAMPLE
    assert d.meta["physics_dt"] == dial.PHYSICS_DT and d.meta["action_type"] == "continuous"
    assert (d.traj_len <= dial.budget(3)).all() and (d.sketch[:, 1:] != d.sketch[:, :-1]).all()
    d.validate()
    for n in range(d.n):
        T = d.traj_len[n]
        offsets = np.concatenate([d.states[n, 1:T], d.final_state[n][None]])[:, 9:].reshape(-1, K, 3)
        rises = np.nonzero(np.diff(np.append(d.labels[n, :T], 3)))[0]           # press during step t
        assert len(rises) == 3
        for l, t in enumerate(rises):                                            # key l pushed down
            off = offsets[t, d.sketch[n, l]]                                     # key - fingertip
            assert np.linalg.norm(off[:2]) < 0.02 and off[2] > 0.003
        keys = dial.key_positions(dial.STANDARD_LAYOUT)
        for t in range(0, T, 11):                                                # clean actions
            np.testing.assert_allclose(d.actions[n, t],
                                       dial.expert_torque_from_obs(d.states[n, t], d.sketch[n, d.labels[n, t]]))
        assert not np.allclose(d.states[n, 0, 9:].reshape(K, 3) - d.states[n, 0, 9:].reshape(K, 3).mean(0),
                               keys - keys.mean(0))                              # not the standard pad


@pytest.mark.slow        # a worker pool
def test_collect_same_for_one_and_two_workers(demos):
    calls = []
    two = dial.collect(6, 3, seed=7, workers=2, progress=lambda i, n: calls.append((i, n)))
    assert two.fingerprint() == demos.fingerprint()
    assert calls[-1] == (6, 6) and [c[0] for c in calls] == sorted(c[0] for c in calls)
    other = dial.collect(2, 3, seed=8)
    assert other.fingerprint() != demos.subset([0, 1]).fingerprint()


# ----------------------------------------------------------------------------------------------
# The velocity variant (spec/dial.md §7)
# ----------------------------------------------------------------------------------------------

def test_velocity_torque_is_eq_1_2_written_out():
    """DialEnv.velocity_torque against spec/dial.md eq. (1), (2) computed here from the MJCF's
    damping by joint name: tau = b v* + KV (v* - qdot), v* clamped to the speed limits, fingers
    held closed, all clipped to the torque limits."""
    env = dial.DialEnv()
    env.reset(seed=3, layout="standard")
    env.velocity_step(np.array([0.2, -0.1, 0.3, -0.4, 0.2, 0.1]))                  # moving: qdot != 0
    b = np.array([env.model.dof_damping[env.model.joint(n).dofadr[0]] for n in dial.JOINTS[:6]])
    np.testing.assert_allclose(b, [12, 12, 12, 2, 2, 2])
    qdot = np.array([env.data.qvel[env.model.joint(n).dofadr[0]] for n in dial.JOINTS[:6]])
    qf = np.array([env.data.qpos[env.model.joint(n).qposadr[0]] for n in dial.JOINTS[6:]])
    for target in (np.array([0.3, -0.2, 0.1, 0.5, -0.3, 0.0]), np.array([5.0, -5.0, 0.0, 9.0, 0.0, -9.0])):
        v = np.clip(target, -np.deg2rad([36, 36, 36, 48, 48, 48]), np.deg2rad([36, 36, 36, 48, 48, 48]))
        want = np.concatenate([b * v + dial.VELOCITY_KV * (v - qdot), 2.0 * (1.2 - qf)])
        np.testing.assert_allclose(env.velocity_torque(target), np.clip(want, -dial.TORQUE_LIMITS,
                                                                        dial.TORQUE_LIMITS))
    with pytest.raises(ValueError):
        env.velocity_torque(np.zeros(9))


@pytest.mark.parametrize("target", [np.array([0.3, -0.3, 0.3, 0.5, -0.5, 0.5]),
                                    np.array([-0.1, 0.05, -0.2, 0.0, 0.3, -0.6]),
                                    np.array([2.0, -2.0, 0.0, 3.0, 0.0, -3.0])])
def test_velocity_loop_tracks_a_target(target):
    """spec/dial.md eq. (1) in closed loop. A held target is reached within one 40 ms control step (to 5 % of the speed limit: a jump
    to the limit from rest is torque-limited) and tracked to 1 % (+ 2 % of the limit) from
    then on while the arm moves; a target beyond the JACO2's speed limits moves the
    joint at the limit; the fingers stay closed; zero velocity holds the arm still."""
    env = dial.DialEnv()
    env.reset(seed=0, layout="standard")
    want = np.clip(target, -dial.VELOCITY_LIMITS, dial.VELOCITY_LIMITS)
    q0 = env.qpos
    for step in range(8):
        env.velocity_step(target)
        qdot = env.data.qvel[env.names.arm_dof]
        tolerance = (0.05 * dial.VELOCITY_LIMITS if step == 0
                     else 0.01 * np.abs(want) + 0.02 * dial.VELOCITY_LIMITS)
        assert (np.abs(qdot - want) < tolerance).all(), (step, qdot, want)
        assert (np.abs(env.data.actuator_force[env.names.act]) <= dial.TORQUE_LIMITS + 1e-9).all()
    # the joints travelled at the target: 8 steps x 40 ms, less the first step's ramp
    travelled = env.qpos[:6] - q0[:6]
    np.testing.assert_allclose(travelled, want * 8 * dial.CONTROL_DT, atol=0.02 * np.abs(want).max() + 1e-3)
    np.testing.assert_allclose(env.qpos[6:], dial_env.FINGERS_CLOSED, atol=0.05)
    # zero velocity: the arm stops and holds (2 s, less than a millimetre of drift)
    env.velocity_step(np.zeros(6))
    tip = env.fingertip
    for _ in range(50):
        env.velocity_step(np.zeros(6))
    assert np.linalg.norm(env.fingertip - tip) < 1e-3


def run_velocity_expert(task, sketch, seed):
    obs = task.reset(sketch, seed=seed)
    while not task.done and not task.failed and task.t < task.budget(len(sketch)):
        action = velocity.expert_velocity_from_obs(obs, task.target)
        assert action.shape == (6,) and (np.abs(action) <= dial.VELOCITY_LIMITS).all()
        obs = task.step(action)
    return task


@pytest.mark.slow
@pytest.mark.parametrize("layout_seed, sketch", EXPERT_PINS)
def test_velocity_expert_dials_pins(layout_seed, sketch):
    """spec/dial.md eq. (3): the velocity expert dials PINs on the standard and random layouts."""
    layout = "standard" if layout_seed is None else dial.sample_layout(np.random.default_rng(layout_seed))
    task = velocity.DialVelocityTask(layout=layout)
    run_velocity_expert(task, sketch, seed=len(sketch))
    assert task.done and not task.failed and task.env.presses == list(sketch)
    assert task.t <= 0.7 * dial.budget(len(sketch))


def test_velocity_domain_is_registered():
    dom = taco_sim.get("dial-velocity")
    assert dom.action_dim == velocity.ACTION_DIM == 6 and dom.state_dim == dial.STATE_DIM
    assert dom.vocab == dial.VOCAB and dom.collect.__wrapped__ is velocity.collect      # pinned: spec/data.md §6
    assert isinstance(dom.task_env(), velocity.DialVelocityTask)
    assert dom.models["default"].endswith("dial-velocity")


@pytest.mark.slow
def test_velocity_collect_records_the_clean_expert():
    d = velocity.collect(4, 3, seed=7)
    assert d.actions.shape[2] == 6 and d.meta["domain"] == "dial-velocity" and d.meta["dart_sigma"] == 0.3
    d.validate()
    for n in range(d.n):
        for t in range(0, d.traj_len[n], 13):
            np.testing.assert_allclose(d.actions[n, t], velocity.expert_velocity_from_obs(
                d.states[n, t], d.sketch[n, d.labels[n, t]]))
    assert velocity.collect(4, 3, seed=7, workers=2).fingerprint() == d.fingerprint()


def test_motor_noise_in_collection_widens_the_states_and_keeps_the_clean_expert():
    """motor_noise: each demonstration's motors meet torque noise (the harder test's), so the
    velocity expert's fingers, which its velocity loop holds still, move as the motors' noise
    moves them (their spread grows tenfold); the PINs are the same, the actions still the clean
    expert's, meta says the level; 0 draws nothing more (the default data, bit for bit)."""
    plain = velocity.collect(4, 3, seed=7)
    noisy = velocity.collect(4, 3, seed=7, motor_noise=0.1)
    assert noisy.meta["motor_noise"] == 0.1 and "motor_noise" not in plain.meta
    assert np.array_equal(noisy.sketch, plain.sketch)
    for n in range(noisy.n):
        for t in range(0, noisy.traj_len[n], 17):
            np.testing.assert_allclose(noisy.actions[n, t], velocity.expert_velocity_from_obs(
                noisy.states[n, t], noisy.sketch[n, noisy.labels[n, t]]))

    def finger_spread(d):
        return np.concatenate([d.states[n, :d.traj_len[n], 6:9] for n in range(d.n)]).std(0)
    assert (finger_spread(noisy) > 10 * finger_spread(plain)).all()
    assert velocity.collect(4, 3, seed=7, motor_noise=0.0).fingerprint() == plain.fingerprint()
    for bad in (-0.1, 0.5, True, "0.1"):
        with pytest.raises(ValueError, match="motor_noise: expected"):
            expert.collect(2, 2, seed=0, motor_noise=bad)


def test_collection_under_a_disturbance_draws_each_level_up_to_its_limit():
    """disturbance= (a Disturbance of maxima): each attempt draws start spread in [HOME_NOISE,
    start], noise in [0, noise], an integer delay in [0, delay], push in [0, push]; the standard
    arm draws nothing (None); motor_noise m is disturbance Disturbance(noise=m), bit for bit, and
    meta records the maxima."""
    from taco_sim.dial.disturb import Disturbance, HARDER
    from taco_sim.dial.env import HOME_NOISE
    rng = np.random.default_rng(0)
    draws = [expert.draw_disturbance(rng, HARDER) for _ in range(300)]
    for field, low, high in (("start", HOME_NOISE, HARDER.start), ("noise", 0.0, HARDER.noise),
                             ("delay", 0, HARDER.delay), ("push", 0.0, HARDER.push)):
        values = np.array([getattr(d, field) for d in draws])
        assert low <= values.min() and values.max() <= high and values.std() > 0, field
    assert {d.delay for d in draws} == {0, 1} and all(d.push_steps == HARDER.push_steps for d in draws)
    state = np.random.default_rng(1).bit_generator.state
    rng = np.random.default_rng(1)
    assert expert.draw_disturbance(rng, Disturbance()) is None and rng.bit_generator.state == state
    a = expert.collect(3, 2, seed=4, motor_noise=0.05)
    b = expert.collect(3, 2, seed=4, disturbance=Disturbance(noise=0.05))
    assert a.fingerprint() == b.fingerprint() and b.meta["collection_disturbance"]["noise"] == 0.05
    with pytest.raises(ValueError, match="disturbance: expected"):
        expert.collect(2, 2, seed=0, disturbance="harder")


# ----------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_render_front_camera(offscreen_gl):
    env = dial.DialEnv(render_size=112)
    env.reset(seed=0, layout="standard")
    image = env.render()
    assert image.shape == (112, 112, 3) and image.dtype == np.uint8
    assert image.std() > 5.0
    drive(env, expert.poses()[0][0], 10)
    assert not np.array_equal(env.render(), image)                             # the arm moved
    env.close()


def test_dial_success_rules_judge_each_stop():
    """spec/evaluation.md eq. (10), (11) on a scripted run of PIN 1 5 3: sub-policy 0 stops over
    key 1 after pressing it (both rules count it); sub-policy 1 stops at once, over key 1, 14 cm
    from key 5 (neither rule counts it); sub-policy 2 then presses 5 and 3 with the finger ending
    on 3: the keypad completes the PIN; position 2 counts under both rules (its key went down
    while it was active; judged where the episode ended), position 1 under neither. Then an early STOP 1 cm above key 1, before its
    press: within the paper's 6 cm, so the paper rule counts it; strict does not, although the
    next sub-policy then presses key 1 and the keypad counts it."""
    def press(task, digit):
        start = task.progress
        while not task.failed and task.progress == start and task.t < 300:
            task.step(dial.expert_torque_from_obs(task.env.obs, digit))

    task = dial.DialTask()
    task.reset([1, 5, 3], seed=0)
    press(task, 1)
    task.stop()
    task.stop()
    press(task, 5)
    press(task, 3)
    assert task.done
    verdicts = task.subtask_verdicts()
    assert verdicts["paper"].tolist() == [True, False, True]
    assert verdicts["strict"].tolist() == [True, False, True]

    task.reset([1, 5], seed=0)
    while task.env.fingertip[2] - task.env.key_pos[1][2] > 0.01 or \
            np.linalg.norm(task.env.fingertip[:2] - task.env.key_pos[1][:2]) > expert.PRESS_RADIUS:
        task.step(dial.expert_torque_from_obs(task.env.obs, 1))
    assert task.progress == 0
    task.stop()                                        # 1 cm above key 1, not pressed yet
    press(task, 1)                                     # the next sub-policy presses it
    assert task.progress == 1
    verdicts = task.subtask_verdicts()
    assert verdicts["paper"].tolist() == [True, False]
    assert verdicts["strict"].tolist() == [False, False]


@pytest.mark.slow
def test_dial_failure_details_name_what_the_arm_did():
    """spec/evaluation.md eq. (4) with the Dial's details (spec/dial.md §4), on scripted runs:
    re-pressing the counted key is "pressed its key again"; pressing 2 instead of 1 a neighbouring
    key, 9 instead of 1 a distant one; holding still at home never reaches key 1; hovering over
    key 1 stays over it (and a STOP there is over its key, before pressing it); commanding
    beyond the motors' limits is at a torque limit."""
    hover, _ = expert.poses()

    def press(task, digit):
        start = task.progress
        while not task.failed and task.progress == start and task.t < 300:
            obs = task.step(dial.expert_torque_from_obs(task.env.obs, digit))
        return obs

    task = dial.DialTask()
    task.reset([1, 5], seed=0)
    press(task, 1)
    for _ in range(15):                                   # lift towards 5, then back down on 1
        task.step(dial.expert_torque_from_obs(task.env.obs, 5))
    while not task.failed and task.t < 300:
        task.step(dial.expert_torque_from_obs(task.env.obs, 1))
    assert task.failed and task.progress == 1
    assert task.failure_detail("stopped late", 0, 0, task.t) == "pressed its key again"

    for wrong, detail in ((2, "pressed a neighbouring key"), (9, "pressed a distant key")):
        task.reset([1, 5], seed=0)
        while not task.failed and task.t < 300:
            task.step(dial.expert_torque_from_obs(task.env.obs, wrong))
        assert task.failed and task.progress == 0
        assert task.failure_detail("wrong outcome", 0, 0, task.t) == detail

    task.reset([1, 5], seed=0)
    for _ in range(40):
        task.step(np.zeros(dial.ACTION_DIM))
    assert task.failure_detail("timed out", 0, 0, task.t) == "never reached its key"

    task.reset([1, 5], seed=0)
    for _ in range(120):                                  # drive's P controller, through the task
        q9, torque = task.env.qpos, np.zeros(dial.ACTION_DIM)
        torque[:6] = expert.KP * np.clip(hover[dial.STANDARD_LAYOUT[1]] - q9[:6], -expert.MAX_ERROR, expert.MAX_ERROR)
        torque[6:] = expert.KP_FINGER * (dial_env.FINGERS_CLOSED - q9[6:])
        task.step(torque)
    assert task.progress == 0 and not task.failed
    assert task.failure_detail("timed out", 0, 0, task.t) == "stayed over its key"
    assert task.failure_detail("stopped early", 0, 0, task.t) == "over its key, before pressing it"

    task.reset([1, 5], seed=0)
    for _ in range(10):
        task.step(3.0 * dial.TORQUE_LIMITS)
    assert task.failure_detail("timed out", 0, 0, task.t).endswith(("at a torque limit", "at a joint limit"))
    assert ", at a torque limit" in task.failure_detail("timed out", 0, 0, task.t)


def _layout_states(layout, fingertips, q):
    """(T, D) states of an arm at joints q (9,) whose fingertip moves through fingertips (T, 3),
    on `layout`."""
    keys = dial_env.slot_positions()[layout]
    return np.stack([dial_env.observe(q, f, keys) for f in fingertips])


@given(st.integers(0, 2**31 - 1), st.sets(st.integers(0, 9), min_size=1, max_size=9))
def test_relayout_moves_only_the_keys_the_sketch_never_presses(seed, pressed):
    """spec/dial.md §8: after relayout_unused_keys every step of a demonstration reads as the
    same fingertip and joints on one new layout, a permutation of the digit slots other than the
    standard one, in which the sketch's digits kept their slots; rows past traj_len and the
    joints are untouched; layout_of reads a layout back and refuses a state that is none."""
    from taco_sim.dial import augment
    from taco_ref.data import Demos
    rng = np.random.default_rng(seed)
    layout = dial_env.sample_layout(rng)
    T, q = 7, rng.uniform(-1, 1, 9)
    tips = rng.uniform(-0.2, 0.2, (T, 3)) + np.array([0.0, 0.5, 0.3])
    sketch = np.array(sorted(pressed))
    states = np.zeros((1, T + 2, dial.STATE_DIM))
    states[0, :T] = _layout_states(layout, tips, q)
    demos = Demos(states, np.zeros((1, T + 2, dial.ACTION_DIM)), np.array([T]), sketch[None],
                  np.array([len(sketch)]), np.full((1, T + 2), -1), np.zeros((1, dial.STATE_DIM)),
                  dial.VOCAB, {})
    np.testing.assert_array_equal(augment.layout_of(states[0, 0]), layout)
    augment.relayout_unused_keys(demos, np.random.default_rng(seed + 1))
    new = augment.layout_of(demos.states[0, 0])
    note(f"layout {layout} -> {new}, pressed {sorted(pressed)}")
    np.testing.assert_array_equal(new[sorted(pressed)], layout[sorted(pressed)])
    assert sorted(new.tolist()) == sorted(dial_env.DIGIT_SLOTS.tolist())
    assert not np.array_equal(new, dial_env.STANDARD_LAYOUT)
    np.testing.assert_allclose(demos.states[0, :T], _layout_states(new, tips, q), atol=1e-12)
    assert not demos.states[0, T:].any()
    with pytest.raises(ValueError, match="not the keys of a layout"):
        augment.layout_of(states[0, 0] + np.r_[np.zeros(9), rng.uniform(0.01, 0.02, 30)])


def test_relayout_draws_every_free_slot_for_an_unpressed_key():
    """The unpressed keys' new slots are a uniform draw: over 300 draws each unpressed digit
    lands on every digit slot the pressed ones leave free, each about equally often."""
    from taco_sim.dial import augment
    from taco_ref.data import Demos
    layout = dial_env.sample_layout(np.random.default_rng(3))
    states = _layout_states(layout, np.array([[0.0, 0.5, 0.3]]), np.zeros(9))[None]
    sketch = np.array([[2, 7, 2]])
    free = [s for s in dial_env.DIGIT_SLOTS if s not in (layout[2], layout[7])]
    rng, seen = np.random.default_rng(0), {d: [] for d in range(10)}
    for _ in range(300):
        demos = Demos(states.copy(), np.zeros((1, 1, 9)), np.array([1]), sketch, np.array([3]),
                      np.zeros((1, 1), int), np.zeros((1, 39)), dial.VOCAB, {})
        augment.relayout_unused_keys(demos, rng)
        for d, s in enumerate(augment.layout_of(demos.states[0, 0])):
            seen[d].append(int(s))
    assert set(seen[2]) == {layout[2]} and set(seen[7]) == {layout[7]}
    for d in set(range(10)) - {2, 7}:
        counts = np.bincount(seen[d], minlength=12)[free]
        assert counts.min() >= 20, (d, counts)          # expected 300 / 8 = 37.5 each


@given(st.integers(0, 9), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_other_key_views_rearrange_only_the_keys_a_subtask_does_not_press(k, n, seed):
    """spec/dial.md §9: view 0 is the state; in every view the joints and key k's offset are the
    state's, and the ten offsets are those of the same fingertip on a layout of the same slots
    with k in its slot; the views are a fixed function of (k, n) (same call, same views).
    Checks spec/evaluation.md eq. (8)."""
    from taco_sim.dial import augment
    rng = np.random.default_rng(seed)
    layout = dial_env.sample_layout(rng)
    q, tip = rng.uniform(-1, 1, 9), rng.uniform(-0.2, 0.2, 3) + np.array([0.0, 0.5, 0.3])
    state = _layout_states(layout, tip[None], q)[0]
    views = augment.other_key_views(k, state, n)
    assert views.shape == (n, dial.STATE_DIM)
    np.testing.assert_array_equal(views[0], state)
    np.testing.assert_array_equal(views[:, :9], np.broadcast_to(state[:9], (n, 9)))
    np.testing.assert_array_equal(views[:, 9 + 3 * k:12 + 3 * k], np.broadcast_to(state[9 + 3 * k:12 + 3 * k], (n, 3)))
    for v in views:
        lay = augment.layout_of(v)
        assert lay[k] == layout[k] and sorted(lay.tolist()) == sorted(layout.tolist())
    np.testing.assert_array_equal(augment.other_key_views(k, state, n), views)
    with pytest.raises(ValueError, match="n: expected"):
        augment.other_key_views(k, state, 0)

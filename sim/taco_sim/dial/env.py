"""The Dial domain's physics: a JACO2 6-DoF arm (Kinova j2n6s300) dialling a 4 x 3 keypad (paper Sec. 5.3).

The MJCF model ``jaco_dial.xml`` sits beside this module (its header documents the kinematics,
dynamics and contacts). Joints, actuators, sites and sensors are looked up by name once, when a
model is loaded; index arrays built from those names are used afterwards.

Keypad. Twelve keys in the phone arrangement ``1 2 3 / 4 5 6 / 7 8 9 / * 0 #`` occupy fixed
physical slots s = 3 row + col (row 0 nearest the robot). The ten digit slots are
``DIGIT_SLOTS``; a layout is a permutation, ``layout[d]`` = slot of digit d, and
``STANDARD_LAYOUT`` is the phone's. Relabelling keys moves no geometry, so hover and press
poses are per slot and solved once. The * and # keys move but never mean a digit.

Press detection. Every physics step reads the key travel sensors (``jointpos``, metres, 0 at
rest, negative when pushed): a key that is armed and travels below ``PRESS_DEPTH`` counts one
press and is disarmed; it re-arms only when it returns above ``RELEASE_DEPTH`` (hysteresis).
Holding a key down therefore counts once; press, release, press counts twice.

Observation (D = 39), ``observe``:
  obs[0:6]   arm joint angles q_1..q_6 (rad, Kinova physical convention)
  obs[6:9]   finger joint angles (rad)
  obs[9:39]  (key_pos - fingertip).ravel(): row d (obs[9 + 3 d : 12 + 3 d]) is the (x, y, z)
             offset (m, world frame) from the fingertip to the rest top of digit d's key

Symbol | Shape | Meaning
K      |       | sub-tasks = digits = 10
D      |       | state dimension = 9 + 3 K = 39
A      |       | action dimension = 9 joint torques (N m)
S      |       | key slots = 12
"""
import ctypes.util
import os


def _offscreen_gl_default():
    """Without a display, render offscreen with EGL when its library is installed, else with
    OSMesa when that is. MuJoCo picks its GL backend when it is first imported (and cannot
    switch later), and a MUJOCO_GL naming a missing library makes that import fail, so it is set
    only to a library that exists; where both exist, EGL is kept only if a device display
    initialises (`_egl_initialises`, about 40 ms). A MUJOCO_GL set by the user always wins.
    Where neither exists, rendering raises taco_sim.domain.RenderingUnavailable, saying what to
    install (the image Dial needs it; every other domain runs without rendering)."""
    if "MUJOCO_GL" in os.environ or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    egl, osmesa = ctypes.util.find_library("EGL"), ctypes.util.find_library("OSMesa")
    if egl and (not osmesa or _egl_initialises(egl)):
        os.environ["MUJOCO_GL"] = "egl"
    elif osmesa:
        os.environ["MUJOCO_GL"] = "osmesa"


def _egl_initialises(library):
    """Whether EGL can initialise a display on its first device, as MuJoCo's EGL backend does
    (eglQueryDevicesEXT, eglGetPlatformDisplayEXT, eglInitialize), probed through ctypes without
    loading MuJoCo or PyOpenGL; any failure means no. Safe to call at any time."""
    try:
        egl = ctypes.CDLL(library)
        egl.eglGetProcAddress.restype = ctypes.c_void_p
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        query = egl.eglGetProcAddress(b"eglQueryDevicesEXT")
        platform = egl.eglGetProcAddress(b"eglGetPlatformDisplayEXT")
        if not query or not platform:
            return False
        query = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_int))(query)
        platform = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p)(platform)
        devices, count = (ctypes.c_void_p * 4)(), ctypes.c_int(0)
        if not query(4, devices, ctypes.byref(count)) or count.value < 1:
            return False
        display = platform(0x313F, devices[0], None)                # EGL_PLATFORM_DEVICE_EXT
        egl.eglInitialize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
        major, minor = ctypes.c_int(), ctypes.c_int()
        # left initialised: MuJoCo initialises the same display again (a no-op), whereas an
        # eglTerminate would end it under a renderer already using it
        return bool(display) and bool(egl.eglInitialize(display, ctypes.byref(major), ctypes.byref(minor)))
    except (OSError, AttributeError, ValueError):
        return False


_offscreen_gl_default()

import mujoco  # noqa: E402  (after choosing the GL backend)
from scipy.optimize import least_squares  # noqa: E402
import numpy as np  # noqa: E402

VOCAB = tuple(str(d) for d in range(10))
"""Sub-task names; sub-task k = "press digit k"."""
K = len(VOCAB)
STATE_DIM = 9 + 3 * K
ACTION_DIM = 9

MODEL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jaco_dial.xml")
PHYSICS_DT = 0.002
"""MJCF timestep (s)."""
SUBSAMPLE = 20
"""Physics steps per control step: a torque is held for SUBSAMPLE steps (the paper's sub-sampling)."""
CONTROL_DT = PHYSICS_DT * SUBSAMPLE

JOINTS = tuple([f"j2n6s300_joint_{i}" for i in range(1, 7)]
               + [f"j2n6s300_joint_finger_{i}" for i in range(1, 4)])
"""The 9 actuated joints (the Kinova ROS driver's names): arm 1..6, then fingers 1..3.
Each has a torque motor of the same name."""
TORQUE_LIMITS = np.array([30.5, 30.5, 30.5, 6.8, 6.8, 6.8, 1.5, 1.5, 1.5])
"""(A,) peak torque per joint (N m), = the motors' ctrlrange: large actuators 1-3, small 4-6, fingers."""

VELOCITY_LIMITS = np.deg2rad([36.0, 36.0, 36.0, 48.0, 48.0, 48.0])
"""(6,) the JACO2 6-DoF arm's joint speed limits (rad/s): 36 deg/s for the large actuators 1-3,
48 deg/s for the small ones 4-6 (the joint_velocity_limit of Kinova's j2n6s300 description in
kinova-ros, kinova_description/urdf/j2n6s300.xacro). The velocity loop clamps its targets to them."""
VELOCITY_KV = np.array([100.0, 100.0, 100.0, 20.0, 20.0, 20.0])
"""(6,) velocity-loop gain (N m s / rad) of ``velocity_torque`` (spec/dial.md §7): a time
constant (armature + link inertia) / (KV + damping) of 10 ms or less, stable at the 2 ms step."""
FINGER_HOLD_KP = 2.0
"""Finger P gain (N m / rad) of the velocity mode's gripper loop, which holds FINGERS_CLOSED."""

SLOTS = 12
"""Key slots on the 4 x 3 pad, s = 3 row + col."""
SLOT_LABELS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "0", "#")
"""Printed label of each slot in the standard (phone) layout."""
DIGIT_SLOTS = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 10])
"""(10,) the slots that hold digits (all but * and #), ascending."""
STANDARD_LAYOUT = np.array([SLOT_LABELS.index(str(d)) for d in range(10)])
"""(10,) phone layout: STANDARD_LAYOUT[d] = slot of digit d = (10, 0, 1, ..., 8)."""

PRESS_DEPTH = -0.006
"""A key counts as pressed when its travel goes below this (m; full travel is -0.012)."""
RELEASE_DEPTH = -0.003
"""A pressed key re-arms when its travel returns above this (m)."""
SNAP = 0.75
"""Tactile (snap-action) keys: while a key is down, this share of its spring force is relieved,
so a key that passes PRESS_DEPTH snaps to the bottom of its travel and the finger with it. The
press is then a large, sudden change of the fingertip height, not a 1-2 mm one, which is what
lets a STOP net tell the state at a press from the states just before it."""

FINGERS_CLOSED = np.array([1.2, 1.2, 1.2])
"""(3,) finger angles of the pointing hand (rad): closed, held by the expert's P term."""
HOME = np.array([4.5744, 3.7773, 1.4600, 6.0280, 0.9617, 0.5327])
"""(6,) home arm pose: fingertip pointing straight down 0.15 m above the pad centre. Found once by
``solve_ik`` from Kinova's published home pose (275, 167.5, 57.5, 240, 82.5, 75 deg); every slot's
hover and press pose is solved from it, so all share its elbow-up branch."""
HOME_NOISE = 0.03
"""reset draws each arm joint uniformly within +-HOME_NOISE rad of HOME (fingers +-HOME_NOISE too)."""


def sample_layout(rng):
    """A random layout (10,) int: a permutation of DIGIT_SLOTS, never STANDARD_LAYOUT."""
    while True:
        layout = DIGIT_SLOTS[rng.permutation(10)]
        if not np.array_equal(layout, STANDARD_LAYOUT):
            return layout


def check_layout(layout):
    """layout as a (10,) int64 permutation of DIGIT_SLOTS; "standard" means STANDARD_LAYOUT."""
    if isinstance(layout, str):
        if layout != "standard":
            raise ValueError(f"layout: expected 'standard', None or an array, got {layout!r}")
        return STANDARD_LAYOUT.copy()
    arr = np.asarray(layout)
    if arr.shape != (10,) or arr.dtype.kind not in "iu" or not np.array_equal(np.sort(arr), DIGIT_SLOTS):
        raise ValueError(f"layout: expected a permutation of the digit slots {DIGIT_SLOTS.tolist()}, "
                         f"got {arr.tolist()}")
    return arr.astype(np.int64)


class _Names:
    """Index arrays of one loaded model, resolved by name."""

    def __init__(self, model):
        self.qpos = np.array([model.joint(n).qposadr[0] for n in JOINTS])          # (A,)
        self.dof = np.array([model.joint(n).dofadr[0] for n in JOINTS])            # (A,)
        self.act = np.array([model.actuator(n).id for n in JOINTS])                # (A,)
        self.arm_dof = self.dof[:6]
        self.tip = model.site("fingertip").id
        self.slot_site = np.array([model.site(f"slot_{s}").id for s in range(SLOTS)])  # (S,)
        self.key_sensor = np.array([model.sensor(f"key_{s}").adr[0] for s in range(SLOTS)])  # (S,)
        self.key_qpos = np.array([model.joint(f"key_{s}").qposadr[0] for s in range(SLOTS)])  # (S,)
        self.key_dof = np.array([model.joint(f"key_{s}").dofadr[0] for s in range(SLOTS)])  # (S,)
        first = self.key_sensor[0]
        # the key sensors as a slice (a cheap view) when they are stored contiguously in slot order
        contiguous = np.array_equal(self.key_sensor, first + np.arange(SLOTS))
        self.key_span = slice(first, first + SLOTS) if contiguous else self.key_sensor


def load_model():
    """(model, names) for MODEL_PATH."""
    model = mujoco.MjModel.from_xml_path(MODEL_PATH)
    return model, _Names(model)


class _Kinematics:
    """A private model + data for forward kinematics and IK (one per process)."""

    def __init__(self):
        self.model, self.names = load_model()
        self.data = mujoco.MjData(self.model)
        mujoco.mj_kinematics(self.model, self.data)
        self.slot_pos = self.data.site_xpos[self.names.slot_site].copy()           # (S, 3) rest tops

    def set_q(self, q9):
        self.data.qpos[self.names.qpos] = q9
        mujoco.mj_kinematics(self.model, self.data)

    def fingertip(self, q9):
        """(3,) world fingertip position at joint angles q9 (9,)."""
        self.set_q(q9)
        return self.data.site_xpos[self.names.tip].copy()

    def solve_ik(self, q_seed, target, iters=300, tol=1e-5):
        """Arm angles (6,) putting the fingertip at target (3,) with the hand pointing straight down.

        Bounded nonlinear least squares (scipy.optimize.least_squares, trust region reflective)
        on the error e(q) = (target - tip, a x down), a the hand's approach axis (-z of the
        fingertip site), from q_seed, with the arm's joint limits as bounds and the analytic
        Jacobian: d(target - tip)/dq = -J_p, d(a x down)/dq_i = (J_r,i x a) x down. Yaw about
        the vertical is left free; small first steps from the seed keep it (and the elbow-up
        branch) near the seed. iters bounds the function evaluations. Returns (q (6,), |e|).
        """
        m, d, nm = self.model, self.data, self.names
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        down = np.array([0.0, 0.0, -1.0])

        def full(q6):
            return np.concatenate([q6, FINGERS_CLOSED])

        def approach():
            return -d.site_xmat[nm.tip].reshape(3, 3)[:, 2]

        def error(q6):
            self.set_q(full(q6))
            return np.concatenate([target - d.site_xpos[nm.tip], np.cross(approach(), down)])

        def jacobian(q6):
            self.set_q(full(q6))
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, jacp, jacr, nm.tip)
            Jp, Jr = jacp[:, nm.arm_dof], jacr[:, nm.arm_dof]                      # (3, 6) each
            da = np.cross(Jr.T, approach())                                         # (6, 3)
            return np.vstack([-Jp, np.cross(da, down).T])                           # (6, 6)

        lower, upper = self.arm_bounds
        q0 = np.clip(q_seed, lower, upper)
        # solved for the offset z = q - q0 from 0: the first trust region then has radius
        # x_scale (0.05 rad) around the seed, so the solver stays in the seed's branch (joints
        # 4-6 span 3 turns; a 2 pi jump would be the same pose with other joint angles)
        # 1) with a weak pull REG * z towards the seed, which fixes the free yaw near the seed's
        # (as a minimum-norm step would); 2) without it, from there, to an exact solution
        z = np.zeros(6)
        for reg in (IK_SEED_PULL, 0.0):
            out = least_squares(lambda z: np.concatenate([error(q0 + z), reg * z]), z,
                                jac=lambda z: np.vstack([jacobian(q0 + z), reg * np.eye(6)]),
                                bounds=(lower - q0, upper - q0), method="trf", x_scale=0.05,
                                xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=iters)
            z = out.x
        q = q0 + z
        return q, float(np.linalg.norm(error(q)))

    @property
    def arm_bounds(self):
        """(lower (6,), upper (6,)) joint limits of the arm; +-inf for unlimited joints."""
        m, nm = self.model, self.names
        joints = m.dof_jntid[nm.arm_dof]
        limited = m.jnt_limited[joints].astype(bool)
        lower = np.where(limited, m.jnt_range[joints, 0], -np.inf)
        upper = np.where(limited, m.jnt_range[joints, 1], np.inf)
        return lower, upper


IK_SEED_PULL = 1e-3
"""Weight of the residual (q - q_seed) in the first IK solve (module _Kinematics.solve_ik)."""

_KIN = None


def kinematics():
    """The process-wide _Kinematics (built on first use)."""
    global _KIN
    if _KIN is None:
        _KIN = _Kinematics()
    return _KIN


def slot_positions():
    """(S, 3) world position of each slot's key top at rest."""
    return kinematics().slot_pos.copy()


def key_positions(layout):
    """(K, 3) world rest position of each digit's key top (the press point), digit order 0..9."""
    return slot_positions()[check_layout(layout)]


def observe(qpos9, fingertip_xyz, key_pos):
    """State (D,) = concat(qpos9 (9,), (key_pos (K, 3) - fingertip_xyz (3,)).ravel()); see module docstring."""
    offset = np.asarray(key_pos, dtype=np.float64) - np.asarray(fingertip_xyz, dtype=np.float64)  # (K, 3)
    return np.concatenate([np.asarray(qpos9, dtype=np.float64), offset.ravel()])              # (D,)


def observation_from_joints(qpos9, key_pos):
    """State (D,) from joint angles alone (forward kinematics on the same MJCF): for a node that
    only receives /joint_states."""
    q = np.asarray(qpos9, dtype=np.float64)
    return observe(q, kinematics().fingertip(q), key_pos)


class DialEnv:
    """The JACO arm and keypad. ``reset(seed, layout)``, then ``step(torque)`` per control step.

    Attribute | Shape | Meaning
    model, data |     | the mujoco MjModel / MjData (public)
    layout    | (K,)   | slot of each digit
    key_pos   | (K, 3) | rest top of each digit's key (world, m)
    presses   | list   | digits pressed since reset, in order (debounced, each press once)
    t         |        | control steps since reset
    time      |        | simulated seconds since reset
    obs       | (D,)   | current state (a fresh copy)

    Press events: ``step`` and ``physics_step`` append to ``presses``; ``new_presses()`` returns
    the digits pressed since its previous call (or since reset).
    """

    def __init__(self, render_size=112):
        self.model, self.names = load_model()
        self.data = mujoco.MjData(self.model)
        self.render_size = int(render_size)
        self._renderer = None
        key_joints = [self.model.joint(f"key_{s}").id for s in range(SLOTS)]
        self._key_stiffness = self.model.jnt_stiffness[key_joints].copy()           # (S,)
        self._key_springref = self.model.qpos_spring[self.names.key_qpos].copy()      # (S,)
        self._slot_digit = np.full(SLOTS, -1)
        self.layout = STANDARD_LAYOUT.copy()
        self.key_pos = key_positions(self.layout)
        self.presses = []
        self._read = 0
        self._armed = np.ones(SLOTS, bool)
        self.t = 0

    def reset(self, seed=None, layout=None, home_noise=HOME_NOISE):
        """New episode: layout (None = sample_layout, "standard", or an array) and a home pose
        perturbed by U(-home_noise, home_noise) per joint (HOME_NOISE by default; a wider start
        is one of the harder test's disturbances, taco_sim.dial.disturb), both from
        np.random.default_rng(seed): one draw of the same uniforms at any spread, so a seed
        starts in the same direction at every spread and the rest of the episode's draws are
        the same. Returns the first observation (D,)."""
        rng = np.random.default_rng(seed)
        self.layout = sample_layout(rng) if layout is None else check_layout(layout)
        self.key_pos = key_positions(self.layout)
        self._slot_digit = np.full(SLOTS, -1)
        self._slot_digit[self.layout] = np.arange(K)
        mujoco.mj_resetData(self.model, self.data)
        q = np.concatenate([HOME, FINGERS_CLOSED]) + rng.uniform(-home_noise, home_noise, ACTION_DIM)
        self.data.qpos[self.names.qpos] = q
        mujoco.mj_forward(self.model, self.data)
        self.presses = []
        self._read = 0
        self._armed = np.ones(SLOTS, bool)
        self.t = 0
        return self.obs

    @property
    def time(self):
        return float(self.data.time)

    @property
    def qpos(self):
        return self.data.qpos[self.names.qpos].copy()                                 # (A,)

    @property
    def fingertip(self):
        return self.data.site_xpos[self.names.tip].copy()                            # (3,)

    @property
    def obs(self):
        return observe(self.qpos, self.fingertip, self.key_pos)                      # (D,)

    def key_travel(self):
        """(S,) key travel per slot (m, 0 at rest, negative when pushed), from the sensors."""
        return self.data.sensordata[self.names.key_sensor].copy()

    def observation(self):
        """Dict view: qpos (A,), qvel (A,), fingertip (3,), key_offset (K, 3), pressed (K,) bool
        (digit's key is down: it went below PRESS_DEPTH and has not come back above RELEASE_DEPTH)."""
        return dict(qpos=self.qpos, qvel=self.data.qvel[self.names.dof].copy(), fingertip=self.fingertip,
                    key_offset=self.key_pos - self.fingertip, pressed=~self._armed[self.layout])

    def physics_step(self, torque, n=1):
        """n raw physics steps with torque (A,) clipped to TORQUE_LIMITS; presses are collected."""
        torque = np.asarray(torque, dtype=np.float64)
        if torque.shape != (ACTION_DIM,) or not np.isfinite(torque).all():
            raise ValueError(f"torque: expected {ACTION_DIM} finite numbers, got {torque.tolist()}")
        self.data.ctrl[self.names.act] = np.clip(torque, -TORQUE_LIMITS, TORQUE_LIMITS)
        m, d, sensor, key_dof = self.model, self.data, self.names.key_span, self.names.key_dof
        for _ in range(n):
            mujoco.mj_step(m, d)
            travel = d.sensordata[sensor]                                            # (S,)
            if self._armed.all() and travel.min() >= PRESS_DEPTH:
                continue
            down = self._armed & (travel < PRESS_DEPTH)
            if down.any():
                for s in np.nonzero(down)[0]:
                    if self._slot_digit[s] >= 0:
                        self.presses.append(int(self._slot_digit[s]))
                self._armed &= ~down
            if not self._armed.all():
                self._armed |= travel > RELEASE_DEPTH
            # snap action: relieve SNAP of the spring force of every key that is down
            spring = self._key_stiffness * (travel - self._key_springref)            # (S,)
            d.qfrc_applied[key_dof] = np.where(self._armed, 0.0, SNAP * spring)
        mujoco.mj_kinematics(m, d)      # mj_step leaves poses of the pre-step qpos: refresh for obs

    def step(self, torque):
        """One control step: torque (A,) clipped to TORQUE_LIMITS, held for SUBSAMPLE physics steps.
        Returns the new observation (D,)."""
        self.physics_step(torque, SUBSAMPLE)
        self.t += 1
        return self.obs

    def velocity_torque(self, velocity):
        """Torques (A,) of the velocity loop for arm joint velocity targets (6,) (rad/s), at the
        current state; implements spec/dial.md eq. (1)-(2):

          v*  = clip(velocity, -VELOCITY_LIMITS, VELOCITY_LIMITS)
          tau = clip(b v* + KV (v* - qdot), -TORQUE_LIMITS, TORQUE_LIMITS)     (arm, on top of
                                                                              gravity compensation)
          tau_f = FINGER_HOLD_KP (FINGERS_CLOSED - q_f)                       (fingers: held closed)

        b (6,) is the arm joints' viscous damping in the MJCF (the drives' friction, which a
        firmware compensates with its friction model): with it, a constant target is tracked
        without steady-state error by a P loop alone."""
        v = np.asarray(velocity, dtype=np.float64)
        if v.shape != (6,) or not np.isfinite(v).all():
            raise ValueError(f"velocity: expected 6 finite numbers, got {v.tolist()}")
        v = np.clip(v, -VELOCITY_LIMITS, VELOCITY_LIMITS)                                # (6,)
        qdot = self.data.qvel[self.names.arm_dof]                                        # (6,)
        damping = self.model.dof_damping[self.names.arm_dof]                             # (6,)
        torque = np.empty(ACTION_DIM)
        torque[:6] = damping * v + VELOCITY_KV * (v - qdot)
        torque[6:] = FINGER_HOLD_KP * (FINGERS_CLOSED - self.data.qpos[self.names.qpos[6:]])
        return np.clip(torque, -TORQUE_LIMITS, TORQUE_LIMITS)

    def velocity_physics_step(self, velocity, n=1, torque_noise=None):
        """n physics steps of the velocity loop (velocity_torque re-evaluated every step, like
        an arm's firmware loop) towards arm joint velocity targets (6,) (rad/s). torque_noise
        (A,), if given, is added to every step's loop torque before the motors' limits clip it
        (the harder test's motor noise, taco_sim.dial.disturb)."""
        for _ in range(n):
            torque = self.velocity_torque(velocity)
            self.physics_step(torque if torque_noise is None else torque + torque_noise, 1)

    def velocity_step(self, velocity, torque_noise=None):
        """One control step of the velocity interface: targets (6,) (rad/s) held for SUBSAMPLE
        physics steps of the velocity loop (torque_noise: velocity_physics_step's). Returns the
        new observation (D,)."""
        self.velocity_physics_step(velocity, SUBSAMPLE, torque_noise)
        self.t += 1
        return self.obs

    def new_presses(self):
        """Digits pressed since the previous call (or since reset), in order."""
        out = self.presses[self._read:]
        self._read = len(self.presses)
        return out

    def joint_state(self):
        """(JOINTS, positions (A,), velocities (A,), efforts (A,)): efforts are the applied torques."""
        return (JOINTS, self.qpos, self.data.qvel[self.names.dof].copy(),
                self.data.actuator_force[self.names.act].copy())

    def render(self, camera="front"):
        """(H, W, 3) uint8 image from the named camera, H = W = render_size (needs MUJOCO_GL)."""
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.render_size, self.render_size)
        self._renderer.update_scene(self.data, camera)
        return self._renderer.render()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

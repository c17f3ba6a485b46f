"""The Dial from images (paper Sec. 5.3.2): domains "dial-image" and "dial-image-small".

The same arm, keypad, expert, DART noise, PINs and evaluation as the joint-state Dial (``env``,
``expert``), but the state is an RGB image of the scene from the fixed camera "workspace" of the
MJCF (in front of the pad and to its right, looking down at it, the arm in view), H x W x 3
uint8, rendered by MuJoCo's offscreen renderer. As in the paper, the digits stay on the standard
phone layout in every demonstration and test (randomising them would make the task unsolvable
from a picture of unlabelled keys, and the paper randomises them only to stop the joint-state
policy from ignoring the key offsets), and the joint angles are not in the state: a policy sees
only the picture. The expert still acts on the joint state, which the task keeps.

Two registered scales (``ImageConfig``): "dial-image", the paper's 112 x 112 images, and
"dial-image-small", 64 x 64, the reduced scale whose whole experiment cell runs on one core in
under an hour (README). Collection runs in worker processes and, given an ``out`` directory,
writes every chunk of demonstrations there as it is made (taco_ref.data frame directory), so
that a set far larger than memory is never held whole: 1200 demonstrations of ~230 frames of
112 x 112 x 3 are about 10 GB.

Rendering needs an offscreen OpenGL: EGL (Mesa's, as CI installs it: libegl1 libegl-mesa0
libgl1-mesa-dri), else OSMesa (``env._offscreen_gl_default`` picks one before MuJoCo loads);
where neither works the first render raises RenderingUnavailable, saying what to install.

Symbol | Shape        | Meaning
H, W   |              | image size (ImageConfig.size, square)
obs    | (H, W, 3)    | uint8 RGB image of camera "workspace"
A      |              | 9 joint torques, as the joint-state Dial
"""
import hashlib
import json
import multiprocessing
import os
from dataclasses import dataclass

import mujoco
import numpy as np

import taco_ref.data as data_mod
from taco_ref.data import Demos, collected_on
from taco_sim.domain import RenderingUnavailable
from taco_sim.dial.env import ACTION_DIM, PHYSICS_DT, SUBSAMPLE, TORQUE_LIMITS, VOCAB
from taco_sim.dial.expert import (CHUNK, DART_SIGMA, MAX_ATTEMPTS, DialTask, budget, collection_draws,
                                  expert_torque_from_obs, poses)

CAMERA = "workspace"
"""The MJCF camera whose picture is the state."""


@dataclass(frozen=True)
class ImageConfig:
    """One scale of the image Dial (a registered domain).

    Field  | Meaning
    name   | the domain's name
    size   | H = W of the camera image in pixels (the paper's 112)
    """

    name: str
    size: int

    @property
    def image_shape(self):
        return (self.size, self.size, 3)


PAPER = ImageConfig("dial-image", 112)
"""The paper's scale: 112 x 112 RGB (Sec. 5.3.2)."""
SMALL = ImageConfig("dial-image-small", 64)
"""The reduced scale: 64 x 64 RGB."""


def _gl_hint():
    backend = os.environ.get("MUJOCO_GL") or "none chosen (no display, and neither libEGL nor libOSMesa found)"
    return (f"MUJOCO_GL={backend}. Install an offscreen OpenGL, e.g. Mesa's EGL (Debian/Ubuntu: "
            f"apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) or OSMesa (libosmesa6, with "
            f"MUJOCO_GL=osmesa), or run where a display is available")


_RENDERED = False
"""Whether this process has created an OpenGL context: a process forked after that hangs when it
renders (measured with Mesa's EGL), so collection then spawns its workers instead of forking."""


def _pool_context():
    """fork while this process holds no OpenGL context (fast, and works from any script), else
    spawn (each worker starts afresh and imports the domain)."""
    return multiprocessing.get_context("spawn" if _RENDERED else "fork")


class Camera:
    """MuJoCo's offscreen renderer for one model: render(data) -> (size, size, 3) uint8 from
    CAMERA. Creating it checks that offscreen OpenGL works (RenderingUnavailable otherwise)."""

    def __init__(self, model, size):
        global _RENDERED
        _RENDERED = True
        try:
            self._renderer = mujoco.Renderer(model, size, size)
        except Exception as err:        # MuJoCo raises FatalError, RuntimeError or ImportError here
            raise RenderingUnavailable(f"cannot render the Dial's camera images: offscreen OpenGL is not "
                                       f"available ({' '.join(str(err).split())[:200]}). {_gl_hint()}") from None
        self._camera = model.camera(CAMERA).id

    def render(self, data):
        self._renderer.update_scene(data, self._camera)
        return self._renderer.render()                                # (size, size, 3) uint8, a new array

    def close(self):
        self._renderer.close()


class DialImageTask(DialTask):
    """A DialTask on the standard layout whose observations are camera images (H, W, 3) uint8;
    the expert and failure_detail keep reading the joint state (``self.env``)."""

    def __init__(self, layout="standard", size=PAPER.size, disturbance=None):
        super().__init__(layout, disturbance)
        self.size = int(size)
        self.camera = Camera(self.env.model, self.size)
        self.state_shape = (self.size, self.size, 3)

    def image(self):
        """The camera's picture of the current state, (H, W, 3) uint8."""
        return self.camera.render(self.env.data)

    def reset(self, sketch, seed=None):
        """Start dialling sketch from a home pose drawn from seed; returns the first image."""
        super().reset(sketch, seed)
        return self.image()

    def step(self, action):
        """One control step with torques (A,); returns the new image (H, W, 3)."""
        super().step(action)
        return self.image()

    @property
    def obs(self):
        return self.image()


def task_env(config=PAPER):
    """A DialImageTask of config's image size: the task environment evaluation runs in."""
    return DialImageTask(layout="standard", size=config.size)


def _demo(task, sketch, seed, dart_sigma):
    """One DART demonstration on the standard layout: (frames (T, H, W, 3) uint8, actions (T, A),
    labels (T,), final image (H, W, 3), discarded attempts). Actions are the clean expert
    torques of the joint state at each frame, executed with noise N(0, (level TORQUE_LIMITS)^2),
    level ~ U(0, dart_sigma) per demonstration, as in the joint-state Dial."""
    rng = np.random.default_rng(seed)
    L = len(sketch)
    for attempt in range(MAX_ATTEMPTS):
        image = task.reset(sketch, seed=int(rng.integers(2 ** 31)))
        scale = rng.uniform(0.0, dart_sigma) * TORQUE_LIMITS                       # (A,)
        frames, actions, labels = [], [], []
        while not task.done and not task.failed and task.t < budget(L):
            clean = expert_torque_from_obs(task.env.obs, task.target)
            frames.append(image)
            actions.append(clean)
            labels.append(task.progress)
            image = task.step(clean + scale * rng.standard_normal(ACTION_DIM))
        if task.done:
            return np.array(frames), np.array(actions), np.array(labels), image, attempt
    raise ValueError(f"dart_sigma: a demonstration failed {MAX_ATTEMPTS} times in a row at "
                     f"dart_sigma = {dart_sigma}; lower it")


def _chunk(job):
    """A chunk of demonstrations in one process (a fresh task and renderer each time: a worker
    process must not share an OpenGL context with its parent). With a directory, its frames go
    to frame chunk `index` there, and the rest of each demonstration to the chunk's part under
    the job's key (`_job_key`), and the frames are not returned."""
    config, index, sketches, seeds, dart_sigma, directory, key = job
    task = DialImageTask(size=config.size)
    try:
        demos = [_demo(task, sketch, seed, dart_sigma) for sketch, seed in zip(sketches, seeds)]
    finally:
        task.camera.close()
    record = None
    if directory is not None:
        part = {"actions": np.concatenate([d[1] for d in demos]), "labels": np.concatenate([d[2] for d in demos]),
                "final": np.array([d[3] for d in demos]), "attempts": np.array([d[4] for d in demos], np.int64)}
        record = data_mod.write_frame_chunk(directory, index, [d[0] for d in demos], config.image_shape,
                                            part=(key, part))
        demos = [(None,) + d[1:] for d in demos]
    return index, demos, record


def _from_part(part, record, image_shape):
    """The demonstrations of a reused chunk, as _chunk returns them (frames None), from its part;
    None where the part's arrays are not those of the chunk's demonstrations."""
    lengths = record["lengths"]
    n, total = len(lengths), int(lengths.sum())
    shapes = {"actions": (total, ACTION_DIM), "labels": (total,), "final": (n,) + tuple(image_shape),
              "attempts": (n,)}
    if any(name not in part or part[name].shape != shape for name, shape in shapes.items()):
        return None
    bounds = np.cumsum(lengths)[:-1]
    return [(None, actions, labels, final, int(attempts)) for actions, labels, final, attempts in
            zip(np.split(part["actions"], bounds), np.split(part["labels"], bounds), part["final"], part["attempts"])]


_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _code_digest():
    """SHA-256 of the Dial package's code and scene (its .py and .xml files): what, besides the
    seeds and the machine, decides the demonstrations a chunk holds."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(_PACKAGE)):
        if name.endswith((".py", ".xml")):
            h.update(name.encode() + b"\0")
            with open(os.path.join(_PACKAGE, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _job_key(config, sketches, seeds, dart_sigma, code, machine):
    """The key of one chunk's job (JSON text): everything that decides its bytes (the scale,
    its PINs and seeds, DART's sigma, the code, the library versions and the machine, whose
    BLAS kernels round the expert's arithmetic: taco_ref.plumbing.provenance), so that a chunk is
    reused only by a collection that would have made it bit for bit."""
    return json.dumps({"domain": config.name, "image_size": config.size,
                       "sketches": np.asarray(sketches).tolist(),
                       "seeds": [[int(s.entropy), [int(k) for k in s.spawn_key]] for s in seeds],
                       "dart_sigma": float(dart_sigma), "code": code,
                       "versions": {"numpy": np.__version__, "mujoco": mujoco.__version__},
                       "machine": machine}, sort_keys=True)


def collect(n, sketch_len, seed, dart_sigma=DART_SIGMA, sketches=None, progress=None, workers=1,
            out=None, config=PAPER):
    """n expert demonstrations of the image Dial (config: the scale) with DART noise, as a
    validated Demos whose states are images (N, T, H, W, 3) uint8 (meta["domain"] = config.name).

    The contract of taco_sim.dial.collect (sketches, labels, seeds per demonstration, equal for
    any workers, progress per chunk), on the standard layout. With out (a directory), the
    images are written there chunk by chunk as workers finish them (a frame directory,
    spec/data.md §10) and the returned set reads them lazily; otherwise they are held in memory.
    Collecting into a directory an interrupted collection of the same job left reuses every
    chunk it finished (same PINs, seeds, code, versions and machine: `_job_key`, checked
    against the frames' digests) and makes only the rest.
    workers > 1 uses a pool of worker processes, each with its own OpenGL context (forked while
    this process has rendered nothing, spawned afterwards: `_pool_context`).
    """
    sketches, seeds = collection_draws(n, sketch_len, seed, dart_sigma, sketches, workers)
    writer = None if out is None else data_mod.FrameWriter(out, config.image_shape)
    directory = None if writer is None else writer.directory
    code, machine = (None, None) if writer is None else (_code_digest(), collected_on())
    jobs = [(config, i // CHUNK, sketches[i:i + CHUNK], seeds[i:i + CHUNK], float(dart_sigma), directory,
             None if writer is None else _job_key(config, sketches[i:i + CHUNK], seeds[i:i + CHUNK],
                                                  dart_sigma, code, machine))
            for i in range(0, n, CHUNK)]
    results = [None] * len(jobs)
    done = 0

    def keep(out_chunk):
        nonlocal done
        index, demos, record = out_chunk
        results[index] = demos
        if writer is not None:
            writer.add(index, record)
        done += len(demos)
        if progress is not None:
            progress(done, n)

    pending = []
    for job in jobs:
        part = None if writer is None else writer.reuse(job[1], job[-1])
        reused = None if part is None else _from_part(part, writer.chunks[job[1]], config.image_shape)
        if reused is None:
            pending.append(job)
        else:
            keep((job[1], reused, writer.chunks[job[1]]))
    if workers > 1 and pending:
        poses()                                              # solve IK before forking
        with _pool_context().Pool(workers) as pool:
            for out_chunk in pool.imap(_chunk, pending):
                keep(out_chunk)
    else:
        for job in pending:
            keep(_chunk(job))
    demos = [d for chunk in results for d in chunk]
    traj_len = np.array([len(d[1]) for d in demos], dtype=np.int64)
    T = int(traj_len.max())
    actions = np.zeros((n, T, ACTION_DIM))
    labels = np.full((n, T), -1, dtype=np.int64)
    for i, d in enumerate(demos):
        actions[i, :traj_len[i]], labels[i, :traj_len[i]] = d[1], d[2]
    final = np.array([d[3] for d in demos])                                        # (N, H, W, 3)
    meta = {"domain": config.name, "action_type": "continuous", "sketch_len": int(sketch_len),
            "dart_sigma": float(dart_sigma), "seed": int(seed) if isinstance(seed, (int, np.integer)) else None,
            "discarded": int(sum(d[4] for d in demos)), "subsample": SUBSAMPLE, "physics_dt": PHYSICS_DT,
            "camera": CAMERA, "image_size": config.size, "layout": "standard",
            "collected_on": collected_on()}
    if writer is None:
        states = np.zeros((n, T) + config.image_shape, np.uint8)
        for i, d in enumerate(demos):
            states[i, :traj_len[i]] = d[0]
    else:                 # the index needs the small arrays only: the chunks hold the images
        states = np.zeros((n, T, 1, 1, 3), np.uint8)
    small = Demos(states, actions, traj_len, sketches, np.full(n, sketch_len, dtype=np.int64), labels,
                  final if writer is None else np.zeros((n, 1, 1, 3), np.uint8), VOCAB, meta)
    if writer is None:
        return small.validate()
    return writer.finish(small, final)

"""The domain contract: what taco_ref's applications need from a domain, and the registry.

A domain is a module (or sub-package) of ``taco_sim`` that builds one :class:`Domain` and passes
it to :func:`register` when it is imported, as ``taco_sim.navworld`` and ``taco_sim.dial`` do.
Nothing else names it: :func:`get` imports ``taco_sim.<name>`` on first use and :func:`names`
imports every module of the package, so adding a domain touches no file outside its own (and no
file of taco_ref). ``tests/test_domains.py`` runs the contract's checks over every registered
domain.

A domain depends on taco_ref's core only for the demonstration container
(``taco_ref.data.Demos``); taco_ref's core never imports a domain, its applications (the CLI,
the experiment grid, the ROS bridge) look domains up here.

The task environment (``Domain.task_env()``) is one episode at a time:

Member               | Meaning
reset(sketch, seed)  | start an episode for sketch (L,) sub-task ids; returns the first observation (D,)
step(action)         | apply one action ((A,) floats, or an int when discrete); returns the observation (D,)
stop()               | the active sub-policy emitted STOP in the current state; the env judges it
obs                  | the current observation (D,)
progress             | sub-tasks of the sketch the env has counted so far, in order
done                 | every sub-task counted: the task succeeded
failed               | the task can no longer succeed (a STOP or a press in the wrong place)
budget(L)            | step budget for a sketch of length L
subtask_budget       | steps after which a sub-policy is stopped by force (None: never)
render(camera)       | (H, W, 3) uint8 picture; only when ``Domain.renders``
keypad()             | optional: the state of a keypad too small to read in the picture (the Dial's,
                     | DialTask.keypad), drawn beside each frame of a rollout's contact sheet

Observations are state vectors (D,), or images (H, W, C) uint8 where ``Domain.state_shape``
says so (the image Dial).
"""
import importlib
import importlib.util
import os
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np

from taco_ref.data import MAX_SKETCH_LEN  # noqa: F401  (the longest sketch a domain collects)

_REGISTRY = {}


@dataclass(frozen=True)
class Domain:
    """Everything the applications need to collect, train, evaluate and show a domain.

    Field              | Meaning
    name               | registry key and ``meta.domain`` of its data files
    vocab              | (K,) sub-task names; ids index this tuple
    state_dim          | D
    action_dim         | A: action size (continuous) or number of actions (discrete)
    discrete           | whether actions are ids
    train_sketch_len   | L of the training sketches (None: the domain's own mix of lengths)
    test_sketch_len    | L of the evaluation sketches (None: a mix)
    collect            | collect(n, sketch_len, seed, *, sketches=None, workers=1, progress=None)
                       | -> taco_ref.data.Demos; deterministic by seed, equal for any workers;
                       | progress(done, total) after each chunk
    task_env           | () -> a fresh task environment (module docstring)
    sample_sketches    | sample_sketches(n, sketch_len, rng, exclude=()) -> (n, L) int64
    test_sketches      | test_sketches(n, rng) -> (n, L_test) int64: the evaluation protocol's
                       | sketches (zero-shot for Nav-World and Dial)
    config             | YAML file of the domain's training settings (package data)
    models             | {name: model directory} shipped with the domain
    renders            | whether task environments have render(camera)
    parallel_collect   | whether collect spreads its work over worker processes (workers > 1);
                       | the CLI refuses --workers > 1 for a domain without it
    state_shape        | shape of one observation: (state_dim,) for state vectors (the default,
                       | None), (H, W, C) for images (state_dim = H W C)
    streams            | whether collect(..., out=DIRECTORY) writes the demonstrations there as
                       | it goes and returns them read lazily (taco_ref.data frame directory):
                       | for data larger than memory; `taco collect` and `taco experiment` then
                       | collect into a directory
    control_dt         | seconds between two recorded states (one action each): the frame period
                       | of an exported dataset (`taco export`); None for a domain without time
    validation_env     | () -> a task environment on the training data's distribution (the
                       | Dial: random layouts), for choosing an epoch by rollouts; None: task_env
    augment            | augment(batch, rng): in place, a training minibatch's states moved to
                       | other states of the data's distribution (TrainConfig.augment; the Dial:
                       | taco_sim.dial.augment.relayout_unused_keys); None: the domain has none
    state_views        | state_views(subtask, state, n) -> (n, D): views of one state the
                       | sub-policy should act alike in, the first the state itself
                       | (TrainConfig.views; the Dial: taco_sim.dial.augment.other_key_views);
                       | None: the domain has none
    experts            | {name: make(env)}: the domain's experts as policies the evaluation
                       | protocol runs in a model's place (`taco evaluate --expert NAME`;
                       | taco_ref.evaluate.Expert): make(env) -> an object with stops(k, s) and
                       | action(k, s, rng) for one episode in the task environment env; collect
                       | takes expert=NAME (`taco collect --expert NAME`) and uses the first by
                       | default; empty: the domain has none (its expert reads the simulator)
    expert_before      | the expert of every cell computed before the domain offered a choice:
                       | a cell of that expert keeps the key it had (taco_app.grid.keys), a cell
                       | of another enters the key with its expert's name; None: no choice
    tests              | {name: condition}: named test conditions beside the standard test, each
                       | with make_env() -> a task environment and sketches(n, rng) -> (n, L)
                       | (rows padded with -1) and `about` (the Dial's harder test and its single
                       | disturbances, taco_sim.dial.disturb); empty: the standard test only
    one_layout         | every test task runs on the same layout (the Dial's standard keypad):
                       | the tasks share their sub-task transitions, and an interval counts the
                       | distinct transitions, not the tasks (taco_app.stats.effective_tasks,
                       | spec/evaluation.md eq. (14)); False: each task draws its own layout
    """

    name: str
    vocab: tuple
    state_dim: int
    action_dim: int
    discrete: bool
    train_sketch_len: Optional[int]
    test_sketch_len: Optional[int]
    collect: Callable
    task_env: Callable
    sample_sketches: Callable
    test_sketches: Callable
    config: str
    models: Mapping[str, str] = field(default_factory=dict)
    renders: bool = False
    parallel_collect: bool = False
    state_shape: Optional[tuple] = None
    streams: bool = False
    control_dt: Optional[float] = None
    validation_env: Optional[Callable] = None
    augment: Optional[Callable] = None
    state_views: Optional[Callable] = None
    experts: Mapping[str, Callable] = field(default_factory=dict)
    expert_before: Optional[str] = None
    tests: Mapping[str, Any] = field(default_factory=dict)
    one_layout: bool = False

    def __post_init__(self):
        if not self.name or not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"Domain.name must be a word like 'navworld', got {self.name!r}")
        if len(set(self.vocab)) != len(self.vocab) or not self.vocab:
            raise ValueError(f"Domain.vocab of {self.name}: expected distinct names, got {self.vocab}")
        if self.expert_before is not None and self.expert_before not in self.experts:
            raise ValueError(f"Domain.expert_before of {self.name}: expected one of its experts "
                             f"{tuple(self.experts)}, got {self.expert_before!r}")
        if not os.path.isfile(self.config):
            raise ValueError(f"Domain.config of {self.name}: no file {self.config}")

    @property
    def K(self):
        return len(self.vocab)

    @property
    def default_expert(self):
        """The name of the expert collect uses when none is named (the first of experts), or
        None for a domain with one expert that is not chosen."""
        return next(iter(self.experts), None)

    @property
    def obs_shape(self):
        """Shape of one observation: state_shape, or (state_dim,)."""
        return tuple(self.state_shape) if self.state_shape is not None else (self.state_dim,)


def register(domain):
    """Add domain to the registry (a domain module calls this at import); returns it."""
    if not isinstance(domain, Domain):
        raise TypeError(f"register expects a taco_sim.domain.Domain, got {type(domain).__name__}")
    known = _REGISTRY.get(domain.name)
    if known is not None and known is not domain and known.collect is not domain.collect:
        raise ValueError(f"domain {domain.name!r} is registered twice")
    _REGISTRY[domain.name] = domain
    return domain


class MissingPackage(OSError):
    """An optional Python package is not installed here; the message names it and the extra
    of taco_ref that installs it."""


class DomainUnavailable(MissingPackage):
    """A domain needs a Python package that is not installed here (MuJoCo for the Dial)."""


_UNAVAILABLE = {}
"""{domain name: (missing package, extra)} of the domains requires() found unable to load."""


def requires(*packages, extra, domains):
    """Called first by a domain module whose domains need optional packages: when one of
    packages cannot be imported, the domain names are remembered with the extra that installs
    them (names() lists them, get() says what to install) and DomainUnavailable is raised, which
    ends the module's import before it imports the package itself."""
    for package in packages:
        if importlib.util.find_spec(package) is None:
            for name in domains:
                _UNAVAILABLE[name] = (package, extra)
            raise DomainUnavailable(_unavailable_message(domains[0]))


def _unavailable_message(name):
    package, extra = _UNAVAILABLE[name]
    return (f"domain {name!r} needs the Python package {package!r}, which is not installed: "
            f"pip install 'taco_ref[{extra}]' (or pip install -e '.[{extra}]' in a checkout)")


def _import(module):
    """Import taco_sim.<module>; a domain module without its optional packages is skipped
    (requires() has noted its domains)."""
    try:
        importlib.import_module(f"taco_sim.{module}")
    except DomainUnavailable:
        pass


def names():
    """Names of every domain in the package (importing each module once), sorted; a domain
    whose optional packages are not installed is listed too (get() says what to install)."""
    import taco_sim
    for info in pkgutil.iter_modules(taco_sim.__path__):
        if not info.name.startswith("_") and info.name != "domain":
            _import(info.name)
    return sorted(set(_REGISTRY) | set(_UNAVAILABLE))


def available_names():
    """names() without the domains whose optional packages are missing."""
    names()
    return sorted(_REGISTRY)


def shipped_models():
    """{name: directory} of every model shipped with an installed domain, named by its
    directory (the Dial's: dial, dial-velocity), so a user names one without knowing where pip
    put it."""
    return {os.path.basename(os.path.normpath(path)): path
            for name in available_names() for path in _REGISTRY[name].models.values()}


def get(name):
    """The registered Domain called name; ValueError listing the known ones otherwise."""
    if name not in _REGISTRY:
        module = str(name).split("-")[0]
        if module.isidentifier():
            try:
                _import(module)
            except ModuleNotFoundError as e:
                if e.name != f"taco_sim.{module}":
                    raise
    if name in _UNAVAILABLE:
        raise DomainUnavailable(_unavailable_message(name))
    if name not in _REGISTRY:
        raise ValueError(f"domain must be one of {names()}, got {name!r}")
    return _REGISTRY[name]


class RenderingUnavailable(OSError):
    """This machine cannot render offscreen (no working OpenGL for MuJoCo): a domain whose
    observations are pictures cannot run here. The message says what to install."""


class SketchProgress:
    """done and target of a task environment whose `progress` counts the sketch's sub-tasks in
    order and whose `failed` ends the task (Nav-World, the Dial); it keeps `sketch`,
    `progress` and `failed`."""

    @property
    def done(self):
        return self.progress == len(self.sketch)

    @property
    def target(self):
        """Sub-task id of the current sketch step, or None when done or failed."""
        return None if self.done or self.failed else int(self.sketch[self.progress])


MAX_COLLECT = 100_000
"""Most demonstrations one collect call makes: 100 times the paper's largest sets (Nav-World
1000, the Dial 1200), and about 2 GB of Nav-World arrays (L = 4). A count is checked before
anything is allocated, so a mistyped --n ends in one line instead of an out-of-memory kill."""
MAX_WORKERS = 256
"""Most worker processes a collect (or a local experiment grid) starts."""
MAX_DART_SIGMA = 1.0
"""Largest DART noise level of a continuous domain. The level is relative to the action's own
range (Nav-World: a per-component std in units of MAX_SPEED = 1; the Dial: the largest noise
std as a share of each joint's torque or velocity limit), so at 1 the noise is as large as the
largest action: beyond it the executed action is mostly noise and the expert no longer
finishes. Measured: Nav-World at 1 redraws 2 % of its episodes (20 in 1000), at 2 a chunk's
episodes were still unfinished after 100 redraws; the Dial at 1 discarded 42 attempts for 4
demonstrations."""


def check_dart_sigma(dart_sigma):
    """ValueError naming dart_sigma unless it is a number in [0, MAX_DART_SIGMA]; continuous
    domains' collect call it before collecting."""
    if (isinstance(dart_sigma, bool) or not isinstance(dart_sigma, (int, float, np.integer, np.floating))
            or not 0.0 <= dart_sigma <= MAX_DART_SIGMA):
        raise ValueError(f"dart_sigma: expected a number in [0, {MAX_DART_SIGMA:g}] (a share of the "
                         f"action's range), got {dart_sigma!r}")


def check_collect_args(n, sketch_len, workers, max_sketch_len=MAX_SKETCH_LEN):
    """ValueError naming the argument unless 1 <= n <= MAX_COLLECT, 1 <= sketch_len <=
    max_sketch_len (None allowed: the domain's own mix) and 1 <= workers <= MAX_WORKERS, all
    integers. Every collect calls it first."""
    for name, value, low, high in (("n", n, 1, MAX_COLLECT), ("workers", workers, 1, MAX_WORKERS)):
        if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                or not low <= value <= high):
            raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value!r}")
    if sketch_len is not None and (isinstance(sketch_len, bool) or not isinstance(sketch_len, (int, np.integer))
                                   or not 1 <= sketch_len <= max_sketch_len):
        raise ValueError(f"sketch_len: expected an integer in [1, {max_sketch_len}], got {sketch_len!r}")


def collect_sketches(n, sketch_len, rng, sketches, sample, check):
    """The n sketches a collect works on: sample(n, sketch_len, rng) when sketches is None, else
    the given ones; either way checked by check(sketches, sketch_len) (the domain's rules, which
    returns them as an (n, L) array), and ValueError unless there are n rows."""
    if sketches is None:
        sketches = sample(n, sketch_len, rng)
    sketches = check(sketches, sketch_len)
    if len(sketches) != n:
        raise ValueError(f"sketches: expected {n} rows (n), got {len(sketches)}")
    return sketches


def package_file(*parts):
    """Absolute path of a file shipped inside taco_sim (configs, models, MJCF)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)

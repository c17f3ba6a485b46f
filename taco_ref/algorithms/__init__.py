"""The algorithm registry: what training, the applications and the tests need from an algorithm.

An algorithm is a module of ``taco_ref.algorithms`` that builds one :class:`Algorithm` and passes
it to :func:`register` when it is imported, as ``taco``, ``gtbc``, ``ctcbc`` and ``compile`` do
(the same plain dict as ``taco_sim.domain`` keeps for domains). Nothing else lists their names:
:func:`names` imports every module of the package, the trainer (``taco_ref.train``) runs an
algorithm's stages without knowing which one it is, and ``tests/test_algos.py`` walks every
registered algorithm. Adding one touches no file outside its own module, its spec page and its
tests.

An algorithm declares

Field        | Meaning
name         | registry key, ``TrainConfig.algo`` and ``model.json``'s ``algo``
label        | its name in tables and figures ("CTC-BC (MLP)")
section      | a dataclass of its own config fields, each documented, with ``check(self)``
             | validating them; ``TrainConfig`` is the shared fields plus every section
stages       | stages(cfg) -> tuple of :class:`Stage`, run in order by the trainer
init         | init(learner, demos, rng) -> {name: array} parameters beyond the sub-policies
             | (drawn after them from the same generator), or None
constants    | constants(cfg, demos) -> {name: value} the stages read as learner.constants
             | (CompILE's prior rate), or None
runs         | runs(cfg) -> independent runs kept by training likelihood (TACO's restarts), or None
shapes       | shapes(params, policy_cfg, config) -> {name: shape} of those extra parameters in a
             | saved model (ValueError naming the problem), or None
align        | align(model, demos, decoders) -> {decoder: (B, T) sketch positions}, or None: the
             | TACO lattice of the sub-policies (spec/align.md §7)
extra_alignments | names of alignments ``align`` returns beyond the lattice decoders
ctc_kind     | the CTC classifier it trains ("mlp", "gru") or None: stored in model files
order        | its place in tables and figures (the paper's four first, in the paper's order)

What the paper reports of each method lives with the reports (taco_app.paper), not here.
"""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from taco_ref import nn, optim, policy

_REGISTRY = {}


SUB_POLICIES = policy.TRAINABLE_PREFIXES
"""The parameters of the sub-policies ("act.", "stop.", "core."): every sub-task's action and
STOP nets and, with image states, the convolutional core they share (the trainer leaves "core."
out when the config's train_core is false)."""


def _lr(cfg):
    return cfg.lr


def _epochs(cfg):
    return cfg.epochs


def _always(cfg, epoch):
    return True


@dataclass(frozen=True)
class Learner:
    """What an algorithm's stages read from the trainer, and all they read: the config, the
    model's shape, the parameters being trained (the trainer's own dict: a stage reads them, the
    trainer's optimiser writes them) and the algorithm's constants of this training set."""

    cfg: object                    # the TrainConfig
    policy_cfg: object             # policy.PolicyConfig: sizes of the sub-policies' nets
    params: dict                   # {name: array}: the sub-policies' and the algorithm's own
    discrete: bool                 # discrete actions (ids) or continuous ones
    constants: Mapping = field(default_factory=dict)   # Algorithm.constants(cfg, demos)


@dataclass(frozen=True)
class Stage:
    """One stage of training: one set of parameters, one objective, its own Adam and early
    stopping (spec/training.md §2-5).

    Field      | Meaning
    name       | the stage's name in the history, checkpoints and progress lines
    params     | prefixes of the parameters it trains ("act.", "stop.", "ctc.", ...)
    loss       | loss(learner, batch, rng, epoch, train) -> (loss summed over the batch, grads)
    lr         | lr(cfg) -> Adam's learning rate
    epochs     | epochs(cfg) -> the most epochs it runs
    candidate  | candidate(cfg, epoch) -> whether 0-based epoch takes part in choosing the kept
               | epoch; the others hand their last parameters on (a warm-up, tempered epochs)
    policy     | the sub-policies' stage: lr_decay's schedule, L2 on the nets, the parameter
               | average (ema) and the choice by rollouts (select) apply to it
    sets       | sets(learner, train_set, held_out) -> the (training, held-out) sets it uses, or
               | None: the run's own
    """

    name: str
    params: tuple
    loss: Callable
    lr: Callable = _lr
    epochs: Callable = _epochs
    candidate: Callable = _always
    policy: bool = True
    sets: Optional[Callable] = None


@dataclass(frozen=True)
class Algorithm:
    """An algorithm as the registry holds it (module docstring)."""

    name: str
    label: str
    stages: Callable
    section: Optional[type] = None
    init: Optional[Callable] = None
    constants: Optional[Callable] = None
    runs: Optional[Callable] = None
    shapes: Optional[Callable] = None
    align: Optional[Callable] = None
    extra_alignments: tuple = ()
    ctc_kind: Optional[str] = None
    order: int = 100

    def __post_init__(self):
        if not self.name or not self.name.replace("-", "_").isidentifier():
            raise ValueError(f"Algorithm.name must be a word like 'taco', got {self.name!r}")


def register(algorithm):
    """Add algorithm to the registry (an algorithm module calls this at import); returns it."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"register expects a taco_ref.algorithms.Algorithm, got {type(algorithm).__name__}")
    known = _REGISTRY.get(algorithm.name)
    if known is not None and known.stages is not algorithm.stages:
        raise ValueError(f"algorithm {algorithm.name!r} is registered twice")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def _import_all():
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def names():
    """Names of every registered algorithm in the order of tables and figures (Algorithm.order,
    then name)."""
    _import_all()
    return tuple(sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].order, n)))


def get(name):
    """The registered Algorithm called name; ValueError listing the known ones otherwise."""
    if name not in _REGISTRY:
        _import_all()
    if name not in _REGISTRY:
        raise ValueError(f"algo must be one of {list(names())}, got {name!r}")
    return _REGISTRY[name]


def label(name):
    """The algorithm's label, or its name when it is not registered (a cell of a removed one)."""
    return _REGISTRY[name].label if name in names() else str(name)


def sections():
    """The distinct config sections of the registered algorithms, in names() order."""
    seen = []
    for name in names():
        section = _REGISTRY[name].section
        if section is not None and section not in seen:
            seen.append(section)
    return seen


def stop_dropout(cfg, rng, epoch, train):
    """The STOP nets' dropout of a training batch in epoch (paper appendix A; spec/training.md
    eq. (3)), or None (held-out losses, or a rate of 0)."""
    rate = optim.dropout_rate(cfg.stop_dropout, cfg.dropout_decay, epoch)
    return nn.Dropout(rate, rng) if train and rate > 0 else None

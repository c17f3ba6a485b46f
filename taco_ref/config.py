"""The training config: the fields every algorithm shares, plus each algorithm's own section.

``TrainConfig`` is one flat dataclass (YAML files, ``--set key=value``, model files and
checkpoints all see one namespace), made of :class:`SharedConfig` below and the ``section`` of
every registered algorithm (``taco_ref.algorithms``): TACO's warm-up, tempering and restarts sit
in ``algorithms/taco.py``, CTC-BC's classifier in ``algorithms/ctcbc.py``, and so on. A domain's
YAML file may set any algorithm's fields; a run reads the shared ones and its algorithm's.
Each domain ships its own values (taco_sim/configs/<domain>.yaml, read by the app's config
reader).
"""
import dataclasses
from dataclasses import dataclass, field, fields

from taco_ref import algorithms, optim, policy
from taco_ref.limits import DTYPES, MAX_LAYERS, MAX_WIDTH, check_sizes  # noqa: F401  (re-exported)

LR_DECAYS = ("none", "cosine")
SELECTIONS = ("held_out_loss", "rollouts")
MAX_VIEWS = 256
"""Most views of a state a sub-policy may decide over (TrainConfig.views)."""
PRESTAGES = ("taco", "all")
"""SharedConfig.prestage: TACO alone runs the pre-stage, or every algorithm does."""
PROTOCOLS = {"paper": {"warmup_epochs": 0},
             "recipe": {"prestage": "all"}}
"""The equal-budget protocols of spec/evaluation.md §7 as config overrides: "paper", no
pre-stage for any algorithm (the paper's TACO); "recipe", the same warmup_epochs pre-stage for
every algorithm. `--protocol NAME` on `taco train` and `taco experiment` applies them."""
MAX_STOP_HOLD = 10
"""Most consecutive decisions a STOP may be asked to hold for (TrainConfig.stop_hold)."""


def _coerce(cfg):
    """Numbers from YAML or --set: 1e-3 arrives as a string, 5 as an int; bools stay bools."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.type in (float, "float"):
            try:
                if isinstance(value, bool):
                    raise TypeError
                setattr(cfg, f.name, float(value))
            except (TypeError, ValueError):
                raise ValueError(f"{f.name} must be a number, got {value!r}") from None
        elif f.type in (int, "int") and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{f.name} must be an integer, got {value!r}")
        elif f.type in (bool, "bool") and not isinstance(value, bool):
            raise ValueError(f"{f.name} must be true or false, got {value!r}")


@dataclass
class SharedConfig:
    """The knobs every algorithm reads, each with its generic default."""

    algo: str = "taco"
    """A registered algorithm (taco_ref.algorithms.names()): taco | gtbc | ctcbc-mlp | ctcbc-gru | compile."""
    act_hidden: list = field(default_factory=lambda: [100])
    """Hidden sizes of each action net (paper table 2)."""
    stop_hidden: list = field(default_factory=lambda: [100])
    """Hidden sizes of each STOP net."""
    activation: str = "relu"
    """Hidden activation of the sub-policy nets: relu or tanh."""
    sigma: object = 1.0
    """Gaussian action standard deviation (paper: 1), a positive number; or "learned": each
    sub-policy learns a per-dimension log-std, starting at sigma_init (spec/policy.md eq. (9))."""
    sigma_init: float = 1.0
    """With sigma "learned": the initial standard deviation of every sub-policy and dimension."""
    lr: float = 5e-3
    """Adam learning rate (Nav-World: 5e-3, the original code's setting; the paper gives none)."""
    lr_decay: str = "none"
    """The policy stages' learning rate over epochs: "none" (constant, the original code's) or
    "cosine" (lr * (1 + cos(pi e / epochs)) / 2 in epoch e, spec/training.md eq. (10))."""
    batch_size: int = 10
    """Demonstrations per minibatch (Nav-World: 10, likewise)."""
    epoch_size: int = 0
    """The least number of demonstrations an epoch trains on: an epoch is the fewest whole
    shuffled passes over the training set that reach it (passes_per_epoch); 0 = one pass. It
    gives small data sets the optimiser steps of a larger one while epochs, patience, the rate
    schedule and the dropout decay keep their meaning (spec/training.md §4)."""
    epochs: int = 200
    """Upper bound on epochs per stage (an epoch is one pass over the training set, or
    passes_per_epoch passes with epoch_size)."""
    patience: int = 15
    """Early stopping: stop a stage after this many epochs without a better held-out loss."""
    holdout_fraction: float = 0.1
    """Share of the demonstrations held out for early stopping."""
    ema: float = 0.0
    """Decay beta of an exponential moving average of the policy stage's sub-policy parameters,
    updated after every optimiser step (spec/training.md eq. (14)); the held-out loss, the
    rollouts and the kept parameters are the average's. 0 = off (the last parameters)."""
    select: str = "held_out_loss"
    """How the policy stage's kept epoch is chosen (spec/training.md §5): "held_out_loss" (the
    lowest held-out loss, eq. (5)) or "rollouts" (the most validation sketches completed by the
    sub-policies in the domain's validation environment, eq. (13): the Dial's random layouts,
    never the test condition; no labels are read). "rollouts" needs a domain to roll out in
    (`taco train` on a domain's data, `taco experiment`)."""
    select_tasks: int = 50
    """With select "rollouts": validation sketches per scored epoch (of the training sketches'
    length, from a fixed seed: every epoch and every algorithm of a seed sees the same ones)."""
    select_from: int = 1
    """With select "rollouts": the first policy epoch (counted from 1) whose rollouts are scored;
    earlier epochs are not candidates."""
    seed: int = 0
    """Seeds the split, the initialisation, the minibatch order and dropout."""
    stop_dropout: float = 0.0
    """Initial dropout rate on the hidden layers of the STOP nets (paper appendix A)."""
    dropout_decay: float = 0.95
    """The STOP-net dropout rate is stop_dropout * dropout_decay ** epoch."""
    act_l2: float = 0.0
    """L2 penalty act_l2 / 2 * ||W||^2 on the action nets' weight matrices (not the biases): its
    gradient is added to each batch's per-step gradient (spec/training.md eq. (9)); 0 = none. The
    reported losses and early stopping's criterion stay the plain negative log-likelihood."""
    stop_l2: float = 0.0
    """The same penalty on the STOP nets' weight matrices."""
    terminal_stop: bool = False
    """Train a STOP of the last sub-policy at the final state (spec/align.md eq. (8))."""
    stop_prior: bool = False
    """Initialise the STOP nets' output bias to the data's switch rate (spec/training.md eq. (6))
    instead of 0, i.e. P(STOP) = 1/2 at every step before training. Off by default: the committed
    results were made without it; in a first check (Nav-World, 200 demonstrations) it raised
    TACO's alignment from 72.8 % to 84.2 % on one seed and left another at 81 %."""
    dtype: str = "float32"
    """Precision of the sub-policy nets in training: float32 (the default: float64's accuracy
    within seed noise in half the time) or float64 (parameters, activations, gradients and Adam
    state). The alignment recursion, the CTC classifier and the saved model are float64 either
    way (spec/training.md §4, §9)."""
    normalise_states: bool = True
    """Standardise states with the training set's mean and std (stored in the model); image
    states per colour channel (spec/training.md eq. (1))."""
    augment: bool = field(default=False, metadata={"before": False})
    """Before each training step, move the minibatch's states to other states of the data's
    distribution with the domain's augmentation (Domain.augment, drawn from the run's generator;
    the Dial: the keys a demonstration never presses, to other free slots, spec/dial.md §9).
    Held-out and evaluation data stay as recorded. It reads the sketches, never a label. Needs a
    domain that has one (`taco train` on a domain's data, `taco experiment`); false before it
    existed (its `before` value, which a run's identity leaves out)."""
    warmup_epochs: int = 5
    """Epochs of the pre-stage: behaviour cloning at a constant rate on the best segmentation an
    algorithm is entitled to before its own training (spec/training.md §6, the protocols of
    spec/evaluation.md §7): TACO the even split of every demonstration into its sketch's L
    segments (objectives.even_split_labels; 0 = plain TACO, the paper's), GT-BC the true one,
    CTC-BC its classifier's alignment. Which algorithms run it: prestage. A label-free start
    against TACO's early collapse of the alignment: 5 fixed every Nav-World seed that plain
    TACO collapsed on."""
    prestage: str = field(default="taco", metadata={"before": "taco"})
    """Which algorithms run the warmup_epochs pre-stage: "taco" (TACO alone: every grid before
    this field; the others' budgets are then 5 epochs shorter) or "all" (every algorithm, each
    on its own segmentation: the recipe protocol, spec/evaluation.md §7). CompILE has none."""
    views: int = field(default=1, metadata={"before": 1})
    """Execution, not training: each sub-policy decides STOP and its action from the means over
    this many views of the state (the domain's state_views, the state itself first; the Dial:
    the keys it does not press rearranged, spec/evaluation.md eq. (8)); 1 = the state alone.
    Used by `taco evaluate` (unless --views), `taco experiment` and the ROS bridge from the
    model's config (1 before it existed: its `before` value)."""
    stop_hold: int = field(default=1, metadata={"before": 1})
    """Execution, not training: a sub-policy stops only when P(STOP) exceeds the threshold in
    this many consecutive decisions; until then it acts (spec/evaluation.md eq. (9)); 1 = the
    paper's rule, a STOP in one decision. The same for every algorithm. The Dial sets 2: a press
    takes the key past its click depth within one control step, and a STOP net that fires as
    the key nears that depth is asked again one step later (results/dial/README.md, "Why the
    STOP fires a step early"). Used like views (1 before it existed: its `before` value)."""
    ema_epochs: float = field(default=0.0, metadata={"before": 0.0})
    """The parameter average's horizon in epochs of the policy stage (spec/training.md eq.
    (15)): with E > 0 the average is on and its decay is beta = 1 - 1/(E * the optimiser
    steps of an epoch), whatever ema says, so a run of few steps an epoch averages over as
    many epochs as a run of many. beta = 0.999 was chosen on the joint-state Dial at 180 steps
    an epoch, about 5.5 epochs; at 200 demonstrations (30 steps an epoch) the same beta averages
    over more than half of a 60-epoch run. 0 = beta is ema (the value before it existed, its
    `before`)."""
    conv_channels: list = field(default_factory=list, metadata={"before": []})
    """Image states only: output channels of each layer of the convolutional core shared by all
    sub-policies (paper table 2, Dial images: [10, 5, 3]; spec/policy.md §10); CTC-BC's
    classifier gets a core of its own of the same shape. Empty for state vectors (the value
    before image states existed, its `before`)."""
    conv_kernels: list = field(default_factory=list, metadata={"before": []})
    """Image states only: square kernel size of each conv layer (paper: [5, 5, 3])."""
    conv_strides: list = field(default_factory=list, metadata={"before": []})
    """Image states only: stride of each conv layer (paper: [2, 2, 1])."""
    train_core: bool = field(default=True, metadata={"before": False})
    """Image states only: the stages that train the sub-policies train the convolutional core
    with them (the paper's end-to-end training; spec/training.md §2). false keeps the core at its
    random initialisation (fixed random conv features), which is what every image run computed
    before this field existed (its `before`; inert for state vectors, inert_fields)."""

    def __post_init__(self):
        _coerce(self)
        if self.algo not in algorithms.names():
            raise ValueError(f"algo must be one of {algorithms.names()}, got {self.algo!r}")
        low, high = policy.SIGMA_RANGE
        if self.sigma != "learned":
            try:
                if isinstance(self.sigma, bool):
                    raise TypeError
                self.sigma = float(self.sigma)
            except (TypeError, ValueError):
                raise ValueError(f"sigma must be a positive number or 'learned', got {self.sigma!r}") from None
            if not low <= self.sigma <= high:
                raise ValueError(f"sigma must be a positive number in [{low:g}, {high:g}] "
                                 f"(policy.SIGMA_RANGE) or 'learned', got {self.sigma!r}")
        if not low <= self.sigma_init <= high:
            raise ValueError(f"sigma_init must be a positive number in [{low:g}, {high:g}] "
                             f"(policy.SIGMA_RANGE), got {self.sigma_init!r}")
        if isinstance(self.stop_hold, bool) or not isinstance(self.stop_hold, int) \
                or not 1 <= self.stop_hold <= MAX_STOP_HOLD:
            raise ValueError(f"stop_hold must be an integer in [1, {MAX_STOP_HOLD}], got {self.stop_hold!r}")
        if isinstance(self.warmup_epochs, bool) or not isinstance(self.warmup_epochs, int) or self.warmup_epochs < 0:
            raise ValueError(f"warmup_epochs must be a non-negative integer, got {self.warmup_epochs!r}")
        if self.prestage not in PRESTAGES:
            raise ValueError(f"prestage must be one of {', '.join(PRESTAGES)}, got {self.prestage!r}")
        if not 1 <= self.views <= MAX_VIEWS:
            raise ValueError(f"views must be an integer in [1, {MAX_VIEWS}], got {self.views!r}")
        for name in ("batch_size", "epochs", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.epoch_size < 0:
            raise ValueError(f"epoch_size must be an integer >= 0 (0: one pass per epoch), got {self.epoch_size!r}")
        for name in ("act_hidden", "stop_hidden"):
            check_sizes(name, getattr(self, name))
        for name in ("conv_channels", "conv_kernels", "conv_strides"):   # may be empty: no core
            sizes = getattr(self, name)
            if (not isinstance(sizes, list) or len(sizes) > MAX_LAYERS
                    or not all(isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= MAX_WIDTH
                               for h in sizes)):
                raise ValueError(f"{name} must be a list of at most {MAX_LAYERS} integers in "
                                 f"[1, {MAX_WIDTH}], got {sizes!r}")
        if not len(self.conv_channels) == len(self.conv_kernels) == len(self.conv_strides):
            raise ValueError(f"conv_channels, conv_kernels, conv_strides must have one entry per conv layer, "
                             f"got {self.conv_channels!r}, {self.conv_kernels!r}, {self.conv_strides!r}")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must lie in [0, 1), got {self.holdout_fraction!r}")
        optim.dropout_rate(self.stop_dropout, self.dropout_decay, 0)  # validates both
        for name in ("act_l2", "stop_l2"):
            if not 0.0 <= getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.lr_decay not in LR_DECAYS:
            raise ValueError(f"lr_decay must be one of {LR_DECAYS}, got {self.lr_decay!r}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema must lie in [0, 1) (0: off), got {self.ema!r}")
        if not 0.0 <= self.ema_epochs < float("inf"):
            raise ValueError(f"ema_epochs must be a finite number of epochs >= 0 (0: beta is ema), "
                             f"got {self.ema_epochs!r}")
        if self.select not in SELECTIONS:
            raise ValueError(f"select must be one of {SELECTIONS}, got {self.select!r}")
        for name in ("select_tasks", "select_from"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for section in algorithms.sections():
            section.check(self)

    @classmethod
    def from_dict(cls, values):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known: {sorted(known)}")
        return cls(**values)

    @property
    def algorithm(self):
        """The registered Algorithm of algo."""
        return algorithms.get(self.algo)

    @property
    def ctc_kind(self):
        return self.algorithm.ctc_kind


def section_fields(section):
    """Names of a section's fields (a dataclass of taco_ref.algorithms)."""
    return tuple(f.name for f in fields(section))


def before_values(cfg):
    """{name: value} for the fields added to the config after runs existed without them: the
    value (their metadata "before") at which a run is the run from before the field. Cell keys
    leave such a field out at that value (taco_app.grid.keys) and resuming a checkpoint that
    lacks it accepts it there (checkpoints.config_changes)."""
    return {f.name: f.metadata["before"] for f in fields(cfg) if "before" in f.metadata}


def inert_fields(cfg):
    """The fields of cfg that cannot change its run (a run's identity leaves them out;
    resuming does not compare them, checkpoints.config_changes): sigma_init unless sigma is learned,
    select_tasks and select_from unless epochs are chosen by rollouts, train_core and
    ctc_core_dtype without a convolutional core, prestage for TACO (it warms up either way) and
    CompILE (it never does), warmup_epochs where no pre-stage runs, ema where ema_epochs sets
    the average's decay."""
    names = set()
    if cfg.sigma != "learned":
        names.add("sigma_init")
    if cfg.select != "rollouts":
        names.update(("select_tasks", "select_from"))
    if not cfg.conv_channels:
        names.update(("train_core", "ctc_core_dtype"))
    if cfg.algo == "taco":
        names.add("prestage")                       # TACO runs its warm-up either way
    elif cfg.prestage == "taco" or cfg.algo == "compile":
        names.add("warmup_epochs")                  # no pre-stage for the others, nor CompILE ever
    if cfg.algo == "compile":
        names.add("prestage")
    if cfg.ema_epochs > 0:
        names.add("ema")                            # the horizon decides beta
    return names


def fields_read_by(algo):
    """The TrainConfig fields a run of algo reads: the shared ones and its section's."""
    section = algorithms.get(algo).section
    return tuple(f.name for f in fields(SharedConfig)) + (section_fields(section) if section else ())


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig", [], bases=tuple(reversed(algorithms.sections())) + (SharedConfig,))
TrainConfig.__module__ = __name__
TrainConfig.__doc__ = ("Every knob of a training run: SharedConfig's fields and the section of every "
                       "registered algorithm (taco_ref.algorithms), one flat namespace.")

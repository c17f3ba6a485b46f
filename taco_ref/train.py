"""Training: config, minibatch loop, early stopping, checkpoints and resume; spec/training.md.

One loop serves every algorithm. An algorithm is a list of stages, each training one set of
parameters against one objective with its own Adam and early stopping:
  taco        stage "policy": TACO's joint likelihood (objectives.taco)
  gtbc        stage "policy": modular BC on the ground-truth segmentation (objectives.bc)
  ctcbc-mlp   stage "ctc": the blank-free CTC classifier (MLP), then stage "policy": BC on
  ctcbc-gru   CTC's argmax alignment (or the alpha-weighted variant); bi-GRU classifier
Losses are negative log-likelihoods per valid time step: the batch sum divided by the number
of valid steps in the batch, so the learning rate means the same for any batch and length.
"""
import contextlib
import ctypes
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from taco_ref import data as data_mod
from taco_ref import model as model_mod
from taco_ref import files, nn, objectives, optim, policy

ALGOS = ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")
DTYPES = ("float64", "float32")
MAX_WIDTH, MAX_LAYERS = 65536, 16
"""Bounds on the hidden sizes a config may ask for (the paper's largest layer is 400 wide)."""


@dataclass
class TrainConfig:
    """Every knob of a training run, with its generic default. Each domain ships a YAML file of
    its own values (taco_sim/configs/<domain>.yaml), read by taco_ref.app.config."""

    algo: str = "taco"
    """taco | gtbc | ctcbc-mlp | ctcbc-gru."""
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
    warmup_epochs: int = 5
    """TACO only: epochs of behaviour cloning on the even split of every demonstration into its
    sketch's L segments (objectives.even_split_labels) before the TACO stage; 0 = plain TACO.
    A label-free start against the early collapse of the alignment: 5 fixed every Nav-World
    seed that plain TACO collapsed on (spec/training.md §6)."""
    temperature: float = 1.0
    """TACO only: initial temperature of the tempered alignment (objectives.taco), annealed
    linearly to 1 over temperature_epochs (spec/training.md eq. (7)); 1 = no tempering."""
    temperature_epochs: int = 0
    """TACO only: epochs of the TACO stage over which the temperature falls to 1. Early stopping
    and the best-parameter copy start once it is 1."""
    restarts: int = 1
    """TACO only: independent runs (same split, different initialisation and batch order); the
    model kept is the run with the highest TACO log-likelihood per step on the training set
    (spec/training.md §7)."""
    dtype: str = "float32"
    """Precision of the sub-policy nets in training: float32 (the default: float64's accuracy
    within seed noise in half the time) or float64 (parameters, activations, gradients and Adam
    state). The alignment recursion, the CTC classifier and the saved model are float64 either
    way (spec/training.md §4, §9)."""
    normalise_states: bool = True
    """Standardise states with the training set's mean and std (stored in the model)."""
    ctc_hidden: list = field(default_factory=lambda: [100])
    """CTC-BC classifier: MLP hidden sizes, or [hidden size] of the bi-GRU (exactly one)."""
    ctc_lr: float = 5e-3
    """Adam learning rate of the CTC classifier."""
    ctc_weighting: str = "argmax"
    """CTC-BC's use of the alignment: argmax (paper Sec. 4.1) or alpha (appendix C)."""
    ctc_decoder: str = "forward_argmax"
    """CTC-BC's argmax alignment: forward_argmax (paper), posterior_argmax or viterbi."""

    def __post_init__(self):
        for f in fields(self):  # numbers from YAML or --set: 1e-3 arrives as a string, 5 as an int
            value = getattr(self, f.name)
            if f.type in (float, "float"):
                try:
                    if isinstance(value, bool):
                        raise TypeError
                    setattr(self, f.name, float(value))
                except (TypeError, ValueError):
                    raise ValueError(f"{f.name} must be a number, got {value!r}") from None
            elif f.type in (int, "int") and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
            elif f.type in (bool, "bool") and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be true or false, got {value!r}")
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
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
        for name in ("batch_size", "epochs", "patience", "restarts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.epoch_size < 0:
            raise ValueError(f"epoch_size must be an integer >= 0 (0: one pass per epoch), got {self.epoch_size!r}")
        for name in ("act_hidden", "stop_hidden", "ctc_hidden"):
            sizes = getattr(self, name)
            if (not isinstance(sizes, list) or not 1 <= len(sizes) <= MAX_LAYERS
                    or not all(isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= MAX_WIDTH
                               for h in sizes)):
                raise ValueError(f"{name} must be a list of 1 to {MAX_LAYERS} integers in "
                                 f"[1, {MAX_WIDTH}], got {sizes!r}")
        if self.algo == "ctcbc-gru" and len(self.ctc_hidden) != 1:
            raise ValueError(f"ctc_hidden must be one hidden size [H] for ctcbc-gru (its bi-GRU has "
                             f"one layer), got {self.ctc_hidden!r}")
        for name in ("warmup_epochs", "temperature_epochs"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {getattr(self, name)!r}")
        if not 1.0 <= self.temperature < float("inf"):
            raise ValueError(f"temperature must be a finite number >= 1, got {self.temperature!r}")
        if self.temperature_epochs >= self.epochs:
            raise ValueError(f"temperature_epochs must be below epochs ({self.epochs}) so that TACO "
                             f"trains at temperature 1 at the end, got {self.temperature_epochs!r}")
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
        if self.select not in SELECTIONS:
            raise ValueError(f"select must be one of {SELECTIONS}, got {self.select!r}")
        for name in ("select_tasks", "select_from"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.ctc_weighting not in ("argmax", "alpha"):
            raise ValueError(f"ctc_weighting must be 'argmax' or 'alpha', got {self.ctc_weighting!r}")
        if self.ctc_decoder not in ("forward_argmax", "posterior_argmax", "viterbi"):
            raise ValueError(f"ctc_decoder must be forward_argmax, posterior_argmax or viterbi, "
                             f"got {self.ctc_decoder!r}")

    @classmethod
    def from_dict(cls, values):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known: {sorted(known)}")
        return cls(**values)

    @property
    def ctc_kind(self):
        return {"ctcbc-mlp": "mlp", "ctcbc-gru": "gru"}.get(self.algo)


# ----------------------------------------------------------------------------------------
# Objectives per stage
# ----------------------------------------------------------------------------------------

class _Job:
    """The model being trained and the loss of each stage on a batch."""

    def __init__(self, cfg, demos, rng):
        self.cfg = cfg
        self.vocab = demos.vocab
        self.discrete = demos.discrete
        A = demos.meta["n_actions"] if self.discrete else demos.actions.shape[2]
        self.policy_cfg = policy.PolicyConfig(
            state_dim=demos.states.shape[2], n_subtasks=len(demos.vocab), action_dim=int(A),
            discrete=self.discrete, act_hidden=list(cfg.act_hidden), stop_hidden=list(cfg.stop_hidden),
            sigma=cfg.sigma_init if cfg.sigma == "learned" else cfg.sigma, activation=cfg.activation,
            learn_sigma=cfg.sigma == "learned" and not self.discrete)
        self.params = policy.init_params(self.policy_cfg, rng)
        if cfg.stop_prior:
            # STOP nets start at the data's switch rate instead of sigma(0) = 1/2 per step,
            # spec/training.md eq. (6)
            last = len(self.policy_cfg.stop_hidden)
            self.params[f"stop.b{last}"][:] = stop_prior_logit(demos)
        if cfg.normalise_states:
            mean, std = state_statistics(demos)
            self.params["norm.mean"], self.params["norm.std"] = mean, std
        for name in policy.trainable(self.params):   # drawn in float64, then rounded
            self.params[name] = self.params[name].astype(cfg.dtype, copy=False)
        if cfg.ctc_kind:
            input_dim = demos.states.shape[2] + self.policy_cfg.action_dim
            self.params.update(objectives.init_ctc_params(rng, cfg.ctc_kind, input_dim,
                                                          cfg.ctc_hidden, len(demos.vocab)))
        if cfg.ctc_kind:
            self.stages = ["ctc", "policy"]
        elif cfg.algo == "taco" and cfg.warmup_epochs:
            self.stages = ["warmup", "policy"]
        else:
            self.stages = ["policy"]

    def names(self, stage):
        prefix = ("ctc.",) if stage == "ctc" else policy.TRAINABLE_PREFIXES
        return [k for k in self.params if k.startswith(prefix)]

    def lr(self, stage):
        return self.cfg.ctc_lr if stage == "ctc" else self.cfg.lr

    def max_epochs(self, stage):
        return self.cfg.warmup_epochs if stage == "warmup" else self.cfg.epochs

    def tracks_best(self, stage, epoch):
        """Whether epoch (0-based, just run) of stage takes part in early stopping. The warm-up
        hands on its last parameters; the tempered epochs of TACO are a schedule, not a
        candidate (spec/training.md §6)."""
        if stage == "warmup":
            return False
        return not (stage == "policy" and self.cfg.algo == "taco"
                    and epoch < self.cfg.temperature_epochs)

    def stage_sets(self, stage, train_set, held_out):
        """The (training, held-out) sets a stage trains and stops on. For CTC-BC's policy stage
        with argmax weighting, the same demonstrations relabelled once with the frozen
        classifier's alignment (the classifier does not change in that stage, so aligning every
        batch of every epoch again would give the same labels); BC then reads batch.labels."""
        if stage == "policy" and self.cfg.ctc_kind and self.cfg.ctc_weighting == "argmax":
            return self._relabel(train_set), self._relabel(held_out)
        return train_set, held_out

    def _relabel(self, demos, batch_size=64):
        labels = np.full_like(demos.labels, -1)                              # (N, T)
        for idx in data_mod.batch_indices(demos.n, batch_size):
            batch = demos.subset(idx)
            path, _ = objectives.ctc_alignment(self.params, self.cfg.ctc_kind, batch, self.discrete,
                                               self.policy_cfg.action_dim, self.cfg.ctc_decoder)
            labels[idx, :path.shape[1]] = np.where(
                np.arange(path.shape[1])[None, :] < batch.traj_len[:, None], path, -1)
        return replace(demos, labels=labels)

    def loss(self, stage, batch, rng, epoch, train):
        """(summed loss, grads) of one batch for one stage."""
        cfg, p = self.cfg, self.params
        if stage == "ctc":
            return objectives.ctc(p, cfg.ctc_kind, batch, self.discrete, self.policy_cfg.action_dim)
        rate = optim.dropout_rate(cfg.stop_dropout, cfg.dropout_decay, epoch)
        common = dict(stop_dropout=nn.Dropout(rate, rng) if train and rate > 0 else None)
        if stage == "warmup":
            labels = objectives.even_split_labels(batch.traj_len, batch.sketch_len, batch.states.shape[1])
            return objectives.bc(p, self.policy_cfg, batch, labels, cfg.terminal_stop, **common)
        if cfg.algo == "taco":
            temp = temperature(cfg, epoch) if train else 1.0
            return objectives.taco(p, self.policy_cfg, batch, cfg.terminal_stop, temperature=temp,
                                   **common)
        if cfg.algo == "gtbc" or cfg.ctc_weighting == "argmax":   # (taco returned above)
            # GT-BC on the ground truth; CTC-BC on the classifier's labels (stage_sets)
            return objectives.bc(p, self.policy_cfg, batch, batch.labels, cfg.terminal_stop, **common)
        _, weights = objectives.ctc_alignment(p, cfg.ctc_kind, batch, self.discrete,
                                              self.policy_cfg.action_dim, cfg.ctc_decoder)
        targets = objectives.ctc_soft_targets(weights, batch.sketch_len)
        return objectives.soft_bc(p, self.policy_cfg, batch, weights, targets, **common)

    def optimiser(self, stage):
        """A fresh Adam over the parameters stage trains, at its learning rate."""
        return optim.adam_for(self.params, self.names(stage), self.lr(stage))

    def model(self, info):
        """The trained model, every array float64 (float32 weights widen exactly)."""
        params = {k: v.astype(np.float64) for k, v in self.params.items()}
        return model_mod.Model(params, self.policy_cfg, self.vocab, self.cfg.algo,
                               self.cfg.ctc_kind, asdict(self.cfg), info)


def passes_per_epoch(epoch_size, n_train):
    """Whole passes over a training set of n_train demonstrations that make one epoch of at
    least epoch_size (TrainConfig.epoch_size): ceil(epoch_size / n_train), at least 1;
    spec/training.md eq. (11)."""
    return max(1, -(-epoch_size // n_train))


LR_DECAYS = ("none", "cosine")
SELECTIONS = ("held_out_loss", "rollouts")


def lr_factor(cfg, stage, epoch):
    """The learning rate of epoch (0-based) of stage, as a fraction of the stage's rate;
    spec/training.md eq. (10): with lr_decay "cosine", (1 + cos(pi epoch / cfg.epochs)) / 2 in the
    "policy" stage (TACO's, GT-BC's, CTC-BC's second), 1 at epoch 0 and near 0 at the last; 1
    otherwise, and always in the warm-up and CTC stages."""
    if cfg.lr_decay == "none" or stage in ("warmup", "ctc"):
        return 1.0
    return 0.5 * (1.0 + np.cos(np.pi * epoch / cfg.epochs))


def temperature(cfg, epoch):
    """Temperature of TACO's alignment in epoch (0-based) of the TACO stage; spec/training.md
    eq. (7): 1 + (temp_0 - 1) max(0, 1 - epoch / E), falling linearly from cfg.temperature at
    epoch 0 to 1 at epoch E = cfg.temperature_epochs and staying there."""
    if cfg.temperature_epochs == 0:
        return 1.0
    return 1.0 + (cfg.temperature - 1.0) * max(0.0, 1.0 - epoch / cfg.temperature_epochs)


def stop_prior_logit(demos):
    """logit of the empirical STOP rate: sum_n (L_n - 1) switches over sum_n (T_n - 1) steps
    that could switch (clipped to [1e-3, 0.5]); spec/training.md eq. (6)."""
    switches = float((demos.sketch_len - 1).sum())
    chances = float((demos.traj_len - 1).sum())
    rate = min(max(switches / max(chances, 1.0), 1e-3), 0.5)
    return float(np.log(rate) - np.log1p(-rate))


def state_statistics(demos):
    """Mean and std (D,) of the states inside the trajectories, std floored at 1e-6;
    spec/training.md eq. (1)."""
    in_t = np.arange(demos.states.shape[1])[None, :] < demos.traj_len[:, None]
    s = demos.states[in_t]                                                   # (sum T_n, D)
    return s.mean(axis=0), np.maximum(s.std(axis=0), 1e-6)


def mean_loss(job, stage, demos, batch_size=64):
    """Per-step loss of a stage over a whole data set (no dropout); spec/training.md eq. (4)."""
    total, steps = 0.0, 0
    for batch in data_mod.batches(demos, batch_size):
        loss, _ = job.loss(stage, batch, None, 0, train=False)
        total += loss
        steps += int(batch.traj_len.sum())
    return total / steps


# ----------------------------------------------------------------------------------------
# Checkpoints: everything needed to continue a run exactly where it stopped.
# ----------------------------------------------------------------------------------------

CHECKPOINT_META = "checkpoint.json"


def _save_checkpoint(out_dir, job, state, adam, best, average=None):
    """Arrays go to one of two files in turn, then the JSON (the commit point) names that file
    and its SHA-256: a crash at any moment leaves the previous checkpoint intact and usable."""
    arrays = {f"param.{k}": v for k, v in job.params.items()}
    arrays.update({f"best.{k}": v for k, v in best.items()})
    arrays.update({f"ema.{k}": v for k, v in (average or {}).items()})
    adam_arrays, adam_meta = adam.state()
    arrays.update(adam_arrays)
    blob, sha256 = files.npz_blob(arrays)
    name = f"checkpoint-{state['saves'] % 2}.npz"
    files.write_bytes(os.path.join(out_dir, name), blob)
    meta = dict(state, adam=adam_meta, config=asdict(job.cfg), arrays_file=name, arrays_sha256=sha256)
    files.write_bytes(os.path.join(out_dir, CHECKPOINT_META), json.dumps(meta, indent=1, sort_keys=True).encode())


_CHECKPOINT_FIELDS = {"stage": int, "epoch": int, "bad_epochs": int, "saves": int, "history": list,
                      "config": dict, "adam": dict, "rng": dict, "arrays_file": str,
                      "arrays_sha256": str}


def _number(x):
    """Whether x is a finite JSON number (not a bool; an integer too large for a float is not)."""
    try:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    except OverflowError:
        return False


def _check_progress(meta, path, job):
    """ValueError ("cannot resume: ...") unless the counters, history, optimiser record and
    generator state of checkpoint.json are what a run writes: each a value the loop can use."""
    def bad(field, expected):
        raise ValueError(f"cannot resume: {path}: field {field!r} must be {expected}, "
                         f"got {_one_line_repr(meta.get(field))}")
    if meta["saves"] < 1:
        bad("saves", "a positive integer")
    if meta.get("best_loss") is not None and not _number(meta.get("best_loss")):
        bad("best_loss", "null or a finite number")
    if meta.get("best_score") is not None and not (_number(meta["best_score"]) and 0 <= meta["best_score"] <= 1):
        bad("best_score", "null or a share in [0, 1]")
    if meta["bad_epochs"] > meta["epoch"]:
        bad("bad_epochs", f"at most the epochs run in the stage ({meta['epoch']})")
    for entry in meta["history"]:
        if (not isinstance(entry, dict) or entry.get("stage") not in job.stages
                or not isinstance(entry.get("epoch"), int) or isinstance(entry.get("epoch"), bool)
                or not all(_number(entry.get(k)) for k in ("train_loss", "held_out_loss"))):
            bad("history", f"a list of {{stage, epoch, train_loss, held_out_loss}} records, one of "
                           f"{list(job.stages)} and finite numbers each")
    stages = [job.stages.index(entry["stage"]) for entry in meta["history"]]
    current = sum(s == meta["stage"] for s in stages)
    if (stages != sorted(stages) or (stages and stages[-1] > meta["stage"])
            or (meta["stage"] < len(job.stages) and current != meta["epoch"])):
        bad("history", f"one record per epoch run, stage by stage: {meta['epoch']} of stage "
                       f"{meta['stage']} so far")
    step_count = meta["adam"].get("step_count")
    if isinstance(step_count, bool) or not isinstance(step_count, int) or step_count < 0:
        bad("adam", "an object with step_count a non-negative integer")
    probe = np.random.default_rng(0).bit_generator
    try:
        probe.state = meta["rng"]
        written = probe.state == meta["rng"]          # what the run wrote reads back the same
    except (TypeError, ValueError, KeyError, OverflowError):
        written = False
    if not written:
        bad("rng", f"the state of a {type(probe).__name__} generator, as the run wrote it")


def _one_line_repr(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _load_checkpoint(out_dir, job, data_sha256):
    path = os.path.join(out_dir, CHECKPOINT_META)
    meta = files.read_json(path)
    for name, kind in _CHECKPOINT_FIELDS.items():
        if not isinstance(meta.get(name), kind) or isinstance(meta.get(name), bool):
            raise ValueError(f"cannot resume: {path}: field {name!r} missing or not a {kind.__name__}")
    if not (0 <= meta["stage"] <= len(job.stages) and meta["epoch"] >= 0 and meta["bad_epochs"] >= 0
            and meta["epoch"] <= max(cfg_epochs(job.cfg), 0)):
        raise ValueError(f"cannot resume: {path}: stage {meta['stage']}, epoch {meta['epoch']} are "
                         f"outside this run's {len(job.stages)} stages and {cfg_epochs(job.cfg)} epochs")
    if meta.get("data_sha256") != data_sha256:
        raise ValueError(f"cannot resume: the checkpoint in {out_dir} was made on different data")
    if meta["config"] != asdict(job.cfg):
        changed = sorted(k for k in meta["config"] if meta["config"][k] != asdict(job.cfg).get(k))
        raise ValueError(f"cannot resume: the checkpoint in {out_dir} was made with a different "
                         f"config (differs in {changed})")
    _check_progress(meta, path, job)
    arrays = files.read_npz(os.path.join(out_dir, os.path.basename(meta["arrays_file"])),
                            meta["arrays_sha256"], recorded_in=f"{CHECKPOINT_META} (cannot resume)")
    for k in job.params:
        for key in (f"param.{k}", f"best.{k}"):
            got = arrays.get(key)
            if got is None or got.dtype != job.params[k].dtype or got.shape != job.params[k].shape:
                have = "missing" if got is None else f"{got.dtype} {got.shape}"
                raise ValueError(f"cannot resume: {path}: {key} is {have}, this run needs "
                                 f"{job.params[k].dtype} {job.params[k].shape}")
            if not np.isfinite(got).all():
                raise ValueError(f"cannot resume: {path}: {key} holds non-finite values")
        job.params[k] = arrays[f"param.{k}"]
    if meta["stage"] < len(job.stages):             # the optimiser state of the stage under way
        for name in job.names(job.stages[meta["stage"]]):
            for key in (f"adam.m.{name}", f"adam.v.{name}"):
                got = arrays.get(key)
                want = job.params[name]
                if got is None or got.dtype != want.dtype or got.shape != want.shape:
                    have = "missing" if got is None else f"{got.dtype} {got.shape}"
                    raise ValueError(f"cannot resume: {path}: {key} is {have}, this run needs "
                                     f"{want.dtype} {want.shape}")
                if not np.isfinite(got).all() or (key.startswith("adam.v.") and (got < 0).any()):
                    raise ValueError(f"cannot resume: {path}: {key} holds non-finite"
                                     f"{' or negative' if key.startswith('adam.v.') else ''} values")
    best = {k[len("best."):]: v for k, v in arrays.items() if k.startswith("best.")}
    return meta, arrays, best


# ----------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------

def cfg_epochs(cfg):
    """The most epochs any stage of a run with cfg may have."""
    return max(cfg.epochs, cfg.warmup_epochs)


class DivergedError(ValueError):
    """Training produced a non-finite or astronomically large loss (e.g. far too high lr)."""


DIVERGED_LOSS = 1e6
"""A per-step training loss above this (a negative log-likelihood per step; a Gaussian action
model's is a few units) means the nets' outputs left the data's scale: the run stops with
DivergedError and no model is saved."""


def prepare_out_dir(out_dir, resume=False, overwrite=False):
    """Check out_dir before any work: it must be a directory or not exist; a run already there
    (a checkpoint or a finished model) is continued only with resume and replaced only with
    overwrite, never silently. Removes temporary files a killed writer left behind."""
    if out_dir is None:
        return
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"--out: {out_dir} exists and is not a directory")
    has_run = any(os.path.exists(os.path.join(out_dir, name))
                  for name in (CHECKPOINT_META, os.path.join("model", "model.json"),
                               os.path.join("restart-0", CHECKPOINT_META)))
    if has_run and not (resume or overwrite):
        raise ValueError(f"--out: {out_dir} already holds a training run; pass --resume to continue "
                         "it or --overwrite to start again")
    for folder in (out_dir, os.path.join(out_dir, "model")):
        files.remove_stale_temporaries(folder)


def keep_freed_memory():
    """Let the C allocator keep freed memory for reuse (glibc: mallopt M_MMAP_THRESHOLD 32 MiB,
    M_TRIM_THRESHOLD 1 GiB); spec/training.md §4. True if set, False where there is no glibc.

    Every training step allocates the same activation and gradient arrays (MBs each) and frees
    them. By default glibc serves such blocks with fresh mmap'd pages and hands them back on
    free, so each step zero-fills them anew: 20-45 thousand page faults and ~20 % of a
    Dial-sized step (bench/bench_train.py). With these settings the freed blocks stay in the
    heap and the next step reuses them. Process-wide and idempotent; the cost is that the
    process keeps its peak heap until it exits.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20) and mallopt(M_TRIM_THRESHOLD, 1 << 30))


def train(demos, cfg, out_dir=None, resume=False, log=sys.stderr, progress=True, stop_after=None,
          overwrite=False, validate=None):
    """Train on demos (a validated Demos); return the Model (the kept epoch's parameters: best
    held-out loss, or with cfg.select "rollouts" the best validate(model) score).

    validate(model) -> share of validation sketches completed (a float in [0, 1]): needed with
    cfg.select "rollouts" (taco_ref.app.experiment.rollout_validator builds it from a domain).

    With out_dir, a checkpoint is written atomically at the start and after every epoch and the
    final model is saved to out_dir/model; resume=True continues from the checkpoint found there
    (same config and data), so an interrupted run ends exactly as an uninterrupted one would.
    A run already in out_dir is replaced only with overwrite=True (prepare_out_dir).
    stop_after=N returns None after N epochs of this call, leaving the checkpoint to resume from.
    DivergedError if the loss stops being finite or exceeds DIVERGED_LOSS per step.

    TACO with cfg.restarts = N > 1 trains N runs one after the other (run r checkpoints in
    out_dir/restart-r) and keeps the one with the highest training log-likelihood per step;
    spec/training.md §7. The returned model's info lists every run's figures.
    """
    if cfg.select == "rollouts" and validate is None:
        raise ValueError("select: 'rollouts' needs a domain to roll out in (taco train on a domain's "
                         "data, or taco experiment); this run has none")
    prepare_out_dir(out_dir, resume, overwrite)
    keep_freed_memory()
    runs = cfg.restarts if cfg.algo == "taco" else 1
    if runs == 1:
        model, _ = _train_run(demos, cfg, 0, out_dir, resume, log, progress, stop_after, validate)
    else:
        if resume and not os.path.exists(os.path.join(out_dir or "", "restart-0", CHECKPOINT_META)):
            raise FileNotFoundError(f"--resume: no checkpoint in {out_dir}/restart-0")
        candidates, budget = [], stop_after
        for r in range(runs):
            sub = None if out_dir is None else os.path.join(out_dir, f"restart-{r}")
            if sub is not None:
                os.makedirs(sub, exist_ok=True)
            again = resume and os.path.exists(os.path.join(sub, CHECKPOINT_META))
            model, used = _train_run(demos, cfg, r, sub, again, log, progress, budget, validate)
            if model is None:
                return None
            budget = None if budget is None else budget - used
            candidates.append(model)
        model = select_restart(candidates)
    if model is not None and out_dir is not None:
        model_mod.save(model, os.path.join(out_dir, "model"))
    return model


def select_restart(models):
    """The model with the highest training log-likelihood per step (ties: the first), with
    info["restarts"] listing every run and info["restart"] the index kept; spec/training.md §7,
    eq. (8)."""
    best = max(range(len(models)), key=lambda r: (models[r].info["train_loglik"], -r))
    summary = [{"restart": r, "seed": m.info["run_seed"], "train_loglik": m.info["train_loglik"],
                "best_held_out_loss": min(h["held_out_loss"] for h in m.info["history"]
                                          if h["stage"] == "policy"),
                "epochs": len(m.info["history"])} for r, m in enumerate(models)]
    chosen = models[best]
    chosen.info = dict(chosen.info, restarts=summary, restart=best,
                       seconds=sum(m.info["seconds"] for m in models))
    return chosen


def run_seed(seed, restart):
    """Seed of the generator that initialises run `restart` (after the split, which always comes
    from default_rng(seed)): run 0 continues that generator, so restarts = 1 is the plain run;
    run r >= 1 uses default_rng([seed, r])."""
    return seed if restart == 0 else [seed, restart]


def _train_run(demos, cfg, restart, out_dir, resume, log, progress, stop_after, validate=None):
    """One training run; returns (Model or None if stopped by stop_after, epochs run here).

    Stages run in order (job.stages); each runs epochs until its epoch budget or patience is
    spent, then hands its best parameters to the next; a checkpoint follows every epoch and
    every change of stage.
    """
    run = _Run(demos, cfg, restart, out_dir, validate)
    if resume:
        run.resume()
    else:
        run.checkpoint()                          # a run stopped before its first epoch resumes too
    epochs = 0
    while run.stage_index < len(run.job.stages):
        if stop_after is not None and epochs >= stop_after:
            if progress and epochs:
                print(file=log)                   # end the progress line
            return None, epochs
        if run.stage_done():
            run.next_stage()
            if progress:
                print(file=log)
        else:
            run.epoch()
            epochs += 1
            if progress:
                print(f"\r{run.progress_line()}", end="", file=log, flush=True)
        run.checkpoint()
    return run.model(), epochs


class _Run:
    """The state of one training run: the job, the optimiser, the generator, the stage, epoch,
    early-stopping counters, history and best parameters; everything a checkpoint holds."""

    def __init__(self, demos, cfg, restart, out_dir, validate=None):
        self.cfg, self.restart, self.out_dir, self.demos = cfg, restart, out_dir, demos
        self.validate = validate
        self.rng = np.random.default_rng(cfg.seed)
        self.train_set, self.held_out = data_mod.split(demos, cfg.holdout_fraction, self.rng)
        if self.held_out.n == 0:
            self.held_out = self.train_set
        if restart:
            self.rng = np.random.default_rng(run_seed(cfg.seed, restart))
        self.job = _Job(cfg, self.train_set, self.rng)
        self.state = {"stage": 0, "epoch": 0, "best_loss": None, "best_score": None, "bad_epochs": 0,
                      "history": [], "saves": 0}
        self.best = {k: v.copy() for k, v in self.job.params.items()}
        self.adam = self.job.optimiser(self.job.stages[0])
        self.average = None                       # the policy stage's EMA of the trainable arrays
        self.fingerprint = demos.fingerprint() if out_dir is not None else None
        self.sets = {}                            # stage -> (training set, held-out set)
        self.t0 = time.time()

    @property
    def stage_index(self):
        return self.state["stage"]

    @property
    def stage(self):
        return self.job.stages[self.state["stage"]]

    def resume(self):
        if self.out_dir is None or not os.path.exists(os.path.join(self.out_dir, CHECKPOINT_META)):
            raise FileNotFoundError(f"--resume: no checkpoint in {self.out_dir}")
        meta, arrays, self.best = _load_checkpoint(self.out_dir, self.job, self.fingerprint)
        self.state = {k: meta.get(k) for k in self.state}
        if self.stage_index < len(self.job.stages):   # else the run had finished
            self.adam = self.job.optimiser(self.stage)
            self.adam.load_state(arrays, meta["adam"])
        self.rng.bit_generator.state = meta["rng"]
        saved = {k[len("ema."):]: v for k, v in arrays.items() if k.startswith("ema.")}
        if saved:
            names = policy.trainable(self.job.params)
            if set(saved) != set(names) or any(saved[k].shape != self.job.params[k].shape
                                               or saved[k].dtype != np.float64 for k in names):
                raise ValueError(f"cannot resume: {self.out_dir}: its ema.* arrays are not the "
                                 "float64 averages of this run's parameters")
            self.average = saved

    def stage_done(self):
        return (self.state["epoch"] >= self.job.max_epochs(self.stage)
                or self.state["bad_epochs"] >= self.cfg.patience)

    def epoch(self):
        """passes_per_epoch passes over the stage's training set (each in a fresh random order),
        then its held-out loss and early stopping.

        NumPy's floating-point warnings (overflow, invalid, divide) are off during the epoch:
        they arise only on the way to a diverged run, and the check at its end reports that as
        DivergedError, one line, instead of a screenful of RuntimeWarnings before it."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            total, steps, held = self._passes()
        # both losses are checked (max() would pass over a NaN), and the parameters themselves
        bad = [x for x in (total / steps, held) if not (np.isfinite(x) and x <= DIVERGED_LOSS)]
        if bad or not all(np.isfinite(p).all() for p in self.job.params.values()):
            what = f"loss per step {bad[0]:.3g}" if bad else "non-finite parameters"
            raise DivergedError(f"training diverged in the {self.stage} stage at epoch {self.state['epoch'] + 1}: "
                                f"{what} (lower lr: it is {self.job.lr(self.stage):g}{self._scale_hint()})")
        self._early_stopping(total, steps, held)

    def _scale_hint(self):
        """A second suspect for a diverged run: continuous actions far larger than sigma (a
        residual of 1e6 at sigma 1 costs 5e11 nats per step, beyond DIVERGED_LOSS at once)."""
        if self.demos.discrete:
            return ""
        in_t = np.arange(self.demos.actions.shape[1])[None, :] < self.demos.traj_len[:, None]
        largest = float(np.abs(self.demos.actions[in_t]).max())
        sigma = self.cfg.sigma_init if self.cfg.sigma == "learned" else self.cfg.sigma
        if largest <= 1e3 * sigma:
            return ""
        return f"; or rescale the actions: they reach {largest:.3g}, against sigma {sigma:g}"

    def _passes(self):
        """(summed training loss, steps, held-out loss per step) of one epoch's passes."""
        job, state, stage = self.job, self.state, self.stage
        if stage not in self.sets:
            self.sets[stage] = job.stage_sets(stage, self.train_set, self.held_out)
        stage_train, stage_held = self.sets[stage]
        total, steps = 0.0, 0
        self.adam.lr = job.lr(stage) * lr_factor(self.cfg, stage, state["epoch"])
        passes = passes_per_epoch(self.cfg.epoch_size, stage_train.n)
        for batch in (b for _ in range(passes)
                      for b in data_mod.batches(stage_train, self.cfg.batch_size, self.rng)):
            n = int(batch.traj_len.sum())
            loss, grads = job.loss(stage, batch, self.rng, state["epoch"], train=True)
            for g in grads.values():              # per-step gradient, in place
                g /= n
            if stage != "ctc":                    # the sub-policies' nets, not CTC's classifier
                optim.add_l2(grads, job.params, {"act": self.cfg.act_l2, "stop": self.cfg.stop_l2})
            self.adam.step(job.params, grads)
            self._average_step()
            total, steps = total + loss, steps + n
        with self._averaged():
            return total, steps, mean_loss(job, stage, stage_held)

    def _averaging(self):
        return self.cfg.ema > 0 and self.stage == "policy"

    def _average_step(self):
        """spec/training.md eq. (14): avg <- beta avg + (1 - beta) theta after a step of the policy
        stage (avg = theta at the stage's first step), in float64."""
        if not self._averaging():
            return
        names = policy.trainable(self.job.params)
        if self.average is None:
            self.average = {k: self.job.params[k].astype(np.float64) for k in names}
            return
        beta = self.cfg.ema
        for k in names:
            avg = self.average[k]
            avg *= beta
            avg += (1.0 - beta) * self.job.params[k]

    @contextlib.contextmanager
    def _averaged(self):
        """Inside the block the job holds the averaged parameters (in the nets' dtype), when
        averaging; then its own again."""
        if not self._averaging() or self.average is None:
            yield
            return
        own = {k: self.job.params[k] for k in self.average}
        self.job.params.update({k: v.astype(own[k].dtype) for k, v in self.average.items()})
        try:
            yield
        finally:
            self.job.params.update(own)

    def _early_stopping(self, total, steps, held):
        job, state, stage = self.job, self.state, self.stage
        state["epoch"] += 1
        record = {"stage": stage, "epoch": state["epoch"], "train_loss": total / steps,
                  "held_out_loss": held}
        if not job.tracks_best(stage, state["epoch"] - 1):
            # warm-up or tempered epoch: hand on the latest parameters, count nothing
            self.best = {k: v.copy() for k, v in job.params.items()}
        elif stage == "policy" and self.cfg.select == "rollouts":
            # spec/training.md eq. (13): the most validation sketches completed; ties go to the
            # later epoch. Epochs before select_from are not candidates and count nothing.
            if state["epoch"] >= self.cfg.select_from:
                with self._averaged():
                    score = record["rollout_score"] = float(self.validate(job.model({})))
                if state["best_score"] is None or score >= state["best_score"]:
                    state["best_score"], state["bad_epochs"] = score, 0
                    self._keep()
                else:
                    state["bad_epochs"] += 1
        elif state["best_loss"] is None or held < state["best_loss"] - 1e-9:
            # early stopping, spec/training.md eq. (5)
            state["best_loss"], state["bad_epochs"] = held, 0
            self._keep()
        else:
            state["bad_epochs"] += 1
        state["history"].append(record)

    def _keep(self):
        """The best parameters <- the current ones (the average, when averaging)."""
        with self._averaged():
            self.best = {k: v.copy() for k, v in self.job.params.items()}

    def next_stage(self):
        """The stage is over: keep its best parameters and start the next one."""
        self.job.params.update({k: v.copy() for k, v in self.best.items()})
        self.average = None
        self.state["stage"] += 1
        self.state.update(epoch=0, best_loss=None, best_score=None, bad_epochs=0)
        if self.stage_index < len(self.job.stages):
            self.adam = self.job.optimiser(self.stage)

    def checkpoint(self):
        if self.out_dir is not None:
            self.state["saves"] += 1
            _save_checkpoint(self.out_dir, self.job, dict(self.state, rng=self.rng.bit_generator.state,
                                                          data_sha256=self.fingerprint),
                             self.adam, self.best, self.average)

    def progress_line(self):
        cfg, state, last = self.cfg, self.state, self.state["history"][-1]
        label = f"{cfg.algo} r{self.restart + 1}/{cfg.restarts}" if cfg.algo == "taco" and cfg.restarts > 1 else cfg.algo
        best = "     -  " if state["best_loss"] is None else f"{state['best_loss']:8.4f}"
        if state["best_score"] is not None:
            best = f"rollouts {100 * last.get('rollout_score', float('nan')):5.1f} % (best {100 * state['best_score']:5.1f} %)"
        return (f"[{label} {last['stage']}] epoch {state['epoch']:3d}  train {last['train_loss']:8.4f}"
                f"  held-out {last['held_out_loss']:8.4f}  best {best}  {time.time() - self.t0:6.1f}s")

    def model(self):
        info = {"history": self.state["history"], "train_size": self.train_set.n,
                "held_out_size": self.held_out.n, "data": self.demos.meta,
                "seconds": time.time() - self.t0, "run_seed": run_seed(self.cfg.seed, self.restart)}
        if self.cfg.algo == "taco":
            info["train_loglik"] = -mean_loss(self.job, "policy", self.train_set)
        return self.job.model(info)

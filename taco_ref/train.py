"""Training: the minibatch loop and early stopping; spec/training.md (checkpoints and resume:
taco_ref.plumbing.checkpoints).

One loop serves every algorithm. An algorithm (taco_ref.algorithms) is a list of stages, each
training one set of parameters against one objective with its own Adam and early stopping; the
loop reads what a stage declares (its parameters, loss, learning rate, epochs, which epochs are
candidates, whether it is the sub-policies' stage) and never which algorithm it runs. The config
is taco_ref.config.TrainConfig.
Losses are negative log-likelihoods per valid time step: the batch sum divided by the number
of valid steps in the batch, so the learning rate means the same for any batch and length.
"""
import contextlib
import os
import sys
import time
from dataclasses import asdict

import numpy as np

from taco_ref import algorithms
from taco_ref import data as data_mod
from taco_ref import model as model_mod
from taco_ref import nn, optim, policy
from taco_ref.plumbing import checkpoints
from taco_ref.plumbing.checkpoints import CHECKPOINT_META, NO_TIME, prepare_out_dir
from taco_ref.config import TrainConfig  # noqa: F401  (train.TrainConfig: the trainer's config)

ALGOS = algorithms.names()
"""The registered algorithms (taco_ref.algorithms), in table order."""


# ----------------------------------------------------------------------------------------
# Objectives per stage
# ----------------------------------------------------------------------------------------

class _Job:
    """The model being trained, its algorithm's stages (by name) and each stage's loss on a batch."""

    def __init__(self, cfg, demos, rng):
        self.cfg = cfg
        self.algorithm = cfg.algorithm
        self.vocab = demos.vocab
        self.discrete = demos.discrete
        A = demos.meta["n_actions"] if self.discrete else demos.actions.shape[2]
        image = demos.image_shape
        if image is None and cfg.conv_channels:
            raise ValueError(f"conv_channels: a convolutional core reads image states; these states are "
                             f"vectors (D = {demos.states.shape[2]}), so leave conv_* empty")
        if image is not None and not cfg.conv_channels:
            raise ValueError(f"conv_channels: the states are images {list(image)}; give the convolutional "
                             f"core (conv_channels, conv_kernels, conv_strides; paper: [10, 5, 3], [5, 5, 3], "
                             f"[2, 2, 1])")
        self.policy_cfg = policy.PolicyConfig(
            state_dim=int(np.prod(demos.states.shape[2:])), n_subtasks=len(demos.vocab), action_dim=int(A),
            discrete=self.discrete, act_hidden=list(cfg.act_hidden), stop_hidden=list(cfg.stop_hidden),
            sigma=cfg.sigma_init if cfg.sigma == "learned" else cfg.sigma, activation=cfg.activation,
            learn_sigma=cfg.sigma == "learned" and not self.discrete,
            image_shape=None if image is None else list(image), conv_channels=list(cfg.conv_channels),
            conv_kernels=list(cfg.conv_kernels), conv_strides=list(cfg.conv_strides))
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
        constants = {} if self.algorithm.constants is None else self.algorithm.constants(cfg, demos)
        self.learner = algorithms.Learner(cfg, self.policy_cfg, self.params, self.discrete, constants)
        if self.algorithm.init is not None:          # the algorithm's own nets, drawn next
            self.params.update(self.algorithm.init(self.learner, demos, rng))
        self.specs = {stage.name: stage for stage in self.algorithm.stages(cfg)}
        self.stages = list(self.specs)

    def names(self, stage):
        """The parameters the stage trains: those of its prefixes, less the shared
        convolutional core when the config freezes it (train_core false)."""
        frozen = () if self.cfg.train_core else ("core.",)
        return [k for k in self.params if k.startswith(self.specs[stage].params) and not k.startswith(frozen)]

    def lr(self, stage):
        return self.specs[stage].lr(self.cfg)

    def max_epochs(self, stage):
        return self.specs[stage].epochs(self.cfg)

    def is_policy(self, stage):
        """Whether stage is the sub-policies' stage (schedule, L2, averaging, rollouts apply)."""
        return self.specs[stage].policy

    def tracks_best(self, stage, epoch):
        """Whether epoch (0-based, just run) of stage takes part in early stopping. A warm-up
        hands on its last parameters; the tempered epochs of TACO are a schedule, not a
        candidate (spec/training.md §6)."""
        return self.specs[stage].candidate(self.cfg, epoch)

    def stage_sets(self, stage, train_set, held_out):
        """The (training, held-out) sets a stage trains and stops on (CTC-BC's policy stage:
        the demonstrations relabelled by its classifier)."""
        sets = self.specs[stage].sets
        return (train_set, held_out) if sets is None else sets(self.learner, train_set, held_out)

    def loss(self, stage, batch, rng, epoch, train):
        """(summed loss, grads) of one batch for one stage."""
        return self.specs[stage].loss(self.learner, batch, rng, epoch, train)

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


def average_decay(cfg, n_train):
    """beta of the policy stage's parameter average (spec/training.md eq. (15)) for a stage
    training set of n_train demonstrations: cfg.ema, or with cfg.ema_epochs = E > 0,
    1 - 1/(E * S) for the S optimiser steps of an epoch (passes_per_epoch whole passes of
    ceil(n_train / batch_size) minibatches), 0 where E * S <= 1 (the average is the last
    step's parameters)."""
    if cfg.ema_epochs <= 0:
        return cfg.ema
    steps = passes_per_epoch(cfg.epoch_size, n_train) * -(-n_train // cfg.batch_size)
    return 1.0 - 1.0 / max(1.0, cfg.ema_epochs * steps)


def lr_factor(cfg, stage, epoch):
    """The learning rate of epoch (0-based) of stage (an algorithms.Stage), as a fraction of the
    stage's rate; spec/training.md eq. (10): with lr_decay "cosine", (1 + cos(pi epoch /
    cfg.epochs)) / 2 in the sub-policies' stage (Stage.policy: TACO's, GT-BC's, CTC-BC's second,
    CompILE's), 1 at epoch 0 and near 0 at the last; 1 otherwise, and always in the other stages
    (TACO's warm-up, CTC-BC's classifier)."""
    if cfg.lr_decay == "none" or not stage.policy:
        return 1.0
    return 0.5 * (1.0 + np.cos(np.pi * epoch / cfg.epochs))


def stop_prior_logit(demos):
    """logit of the empirical STOP rate: sum_n (L_n - 1) switches over sum_n (T_n - 1) steps
    that could switch (clipped to [1e-3, 0.5]); spec/training.md eq. (6)."""
    switches = float((demos.sketch_len - 1).sum())
    chances = float((demos.traj_len - 1).sum())
    rate = min(max(switches / max(chances, 1.0), 1e-3), 0.5)
    return float(np.log(rate) - np.log1p(-rate))


def state_statistics(demos):
    """Mean and std (D,) of the states inside the trajectories, std floored at 1e-6;
    spec/training.md eq. (1). Image states: per colour channel (C,), over every pixel
    (data.image_statistics, read a few demonstrations at a time)."""
    if demos.image_shape is not None:
        return data_mod.image_statistics(demos)
    in_t = np.arange(demos.states.shape[1])[None, :] < demos.traj_len[:, None]
    s = demos.states[in_t]                                                   # (sum T_n, D)
    return s.mean(axis=0), np.maximum(s.std(axis=0), 1e-6)


def mean_loss(job, stage, demos, batch_size=64, workspace=None):
    """Per-step loss of a stage over a whole data set (no dropout); spec/training.md eq. (4).
    Batches of batch_size demonstrations, fewer with image states (data.pass_batch_size).
    workspace: the run's nn.Workspace, whose memory each batch reuses (the training steps' own:
    a run holds one set of the core's arrays, not one for training and one for this pass)."""
    total, steps = 0.0, 0
    for batch in data_mod.batches(demos, data_mod.pass_batch_size(demos, batch_size)):
        with workspace.step() if workspace is not None else contextlib.nullcontext():
            loss, _ = job.loss(stage, batch, None, 0, train=False)
        total += loss
        steps += int(batch.traj_len.sum())
    return total / steps


# ----------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------

def cfg_epochs(cfg, algorithm):
    """The most epochs any stage of a run of algorithm with cfg may have."""
    return max(stage.epochs(cfg) for stage in algorithm.stages(cfg))


class DivergedError(ValueError):
    """Training produced a non-finite or astronomically large loss (e.g. far too high lr)."""


DIVERGED_LOSS = 1e6
"""A per-step training loss above this (a negative log-likelihood per step; a Gaussian action
model's is a few units) means the nets' outputs left the data's scale: the run stops with
DivergedError and no model is saved."""


def train(demos, cfg, out_dir=None, resume=False, log=sys.stderr, progress=True, stop_after=None,
          overwrite=False, validate=None, augment=None):
    """Train on demos (a validated Demos); return the Model (the kept epoch's parameters: best
    held-out loss, or with cfg.select "rollouts" the best validate(model) score).

    validate(model) -> share of validation sketches completed (a float in [0, 1]): needed with
    cfg.select "rollouts" (taco_ref.evaluate.validation_rollouts builds it from a domain).
    augment(batch, rng): the domain's augmentation (taco_sim Domain.augment), needed with
    cfg.augment; it changes a training minibatch's states in place, drawing from the run's
    generator (so a resumed run draws what the uninterrupted one would).

    With out_dir, a checkpoint is written atomically at the start and after every epoch and the
    final model is saved to out_dir/model; resume=True continues from the checkpoint found there
    (same config and data), so an interrupted run ends exactly as an uninterrupted one would.
    A run already in out_dir is replaced only with overwrite=True (prepare_out_dir).
    stop_after=N returns None after N epochs of this call, leaving the checkpoint to resume from.
    progress: True rewrites one line on log after every epoch (a terminal's progress line), a
    callable is called with that line instead (one call per epoch: a log file's, or a grid
    cell's, which prefixes its name), False says nothing.
    DivergedError if the loss stops being finite or exceeds DIVERGED_LOSS per step.

    TACO with cfg.restarts = N > 1 trains N runs one after the other (run r checkpoints in
    out_dir/restart-r) and keeps the one with the highest training log-likelihood per step;
    spec/training.md §7. The returned model's info lists every run's figures.
    """
    if cfg.select == "rollouts" and validate is None:
        raise ValueError("select: 'rollouts' needs a domain to roll out in (taco train on a domain's "
                         "data, or taco experiment); this run has none")
    if cfg.augment and augment is None:
        raise ValueError("augment: true needs the domain's augmentation (taco train on a domain's data, "
                         "or taco experiment, with a domain that has one); this run has none")
    prepare_out_dir(out_dir, resume, overwrite)
    nn.workspace.keep_freed_memory()
    algorithm = cfg.algorithm
    runs = 1 if algorithm.runs is None else algorithm.runs(cfg)
    if runs == 1:
        model, _ = _train_run(demos, cfg, 0, out_dir, resume, log, progress, stop_after, validate, augment)
    else:
        if resume and not os.path.exists(os.path.join(out_dir or "", "restart-0", CHECKPOINT_META)):
            raise FileNotFoundError(f"--resume: no checkpoint in {out_dir}/restart-0")
        candidates, budget = [], stop_after
        for r in range(runs):
            sub = None if out_dir is None else os.path.join(out_dir, f"restart-{r}")
            if sub is not None:
                os.makedirs(sub, exist_ok=True)
            again = resume and os.path.exists(os.path.join(sub, CHECKPOINT_META))
            model, used = _train_run(demos, cfg, r, sub, again, log, progress, budget, validate, augment)
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
                                          if h["stage"] == m.info["history"][-1]["stage"]),
                "epochs": len(m.info["history"])} for r, m in enumerate(models)]
    chosen = models[best]
    chosen.info = dict(chosen.info, restarts=summary, restart=best,
                       **{k: sum(m.info[k] for m in models) for k in ("seconds", "cpu_seconds")},
                       processes=max(m.info["processes"] for m in models),   # the runs follow each other
                       earlier={"seconds": sum(m.info["earlier"]["seconds"] for m in models),
                                "cpu_seconds": sum(m.info["earlier"]["cpu_seconds"] for m in models),
                                "processes": max(m.info["earlier"]["processes"] for m in models)})
    return chosen


def run_seed(seed, restart):
    """Seed of the generator that initialises run `restart` (after the split, which always comes
    from default_rng(seed)): run 0 continues that generator, so restarts = 1 is the plain run;
    run r >= 1 uses default_rng([seed, r])."""
    return seed if restart == 0 else [seed, restart]


def _train_run(demos, cfg, restart, out_dir, resume, log, progress, stop_after, validate=None, augment=None):
    """One training run; returns (Model or None if stopped by stop_after, epochs run here).

    Stages run in order (job.stages); each runs epochs until its epoch budget or patience is
    spent, then hands its best parameters to the next; a checkpoint follows every epoch and
    every change of stage.
    """
    run = _Run(demos, cfg, restart, out_dir, validate, augment)
    if resume:
        run.resume()
    else:
        run.checkpoint()                          # a run stopped before its first epoch resumes too
    epochs = 0
    while run.stage_index < len(run.job.stages):
        rewrite = progress and not callable(progress)  # a line rewritten in place on log
        if stop_after is not None and epochs >= stop_after:
            if rewrite and epochs:
                print(file=log)                   # end the progress line
            return None, epochs
        if run.stage_done():
            run.next_stage()
            if rewrite:
                print(file=log)
        else:
            run.epoch()
            epochs += 1
            if callable(progress):
                progress(run.progress_line())
            elif progress:
                print(f"\r{run.progress_line()}", end="", file=log, flush=True)
        run.checkpoint()
    return run.model(), epochs


class _Run:
    """The state of one training run: the job, the optimiser, the generator, the stage, epoch,
    early-stopping counters, history and best parameters; everything a checkpoint holds."""

    def __init__(self, demos, cfg, restart, out_dir, validate=None, augment=None):
        self.cfg, self.restart, self.out_dir, self.demos = cfg, restart, out_dir, demos
        self.validate = validate
        self.augment = augment if cfg.augment else None
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
        self.beta = cfg.ema                       # its decay, set each epoch (average_decay)
        self.fingerprint = demos.fingerprint() if out_dir is not None else None
        self.sets = {}                            # stage -> (training set, held-out set)
        self.workspace = nn.Workspace()           # memory the steps' convolutional core reuses
        self.t0, self.cpu0 = time.time(), time.process_time()
        self.earlier = dict(NO_TIME)              # what processes before this one spent on the run

    @property
    def stage_index(self):
        return self.state["stage"]

    @property
    def stage(self):
        return self.job.stages[self.state["stage"]]

    def resume(self):
        if self.out_dir is None or not os.path.exists(os.path.join(self.out_dir, CHECKPOINT_META)):
            raise FileNotFoundError(f"--resume: no checkpoint in {self.out_dir}")
        meta, arrays, self.best = checkpoints.load(self.out_dir, self.job, self.fingerprint)
        self.state = {k: meta.get(k) for k in self.state}
        if self.stage_index < len(self.job.stages):   # else the run had finished
            self.adam = self.job.optimiser(self.stage)
            self.adam.load_state(arrays, meta["adam"])
        self.rng.bit_generator.state = meta["rng"]
        self.earlier = dict(meta.get("spent") or NO_TIME)
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
        self.adam.lr = job.lr(stage) * lr_factor(self.cfg, job.specs[stage], state["epoch"])
        self.beta = average_decay(self.cfg, stage_train.n)
        passes = passes_per_epoch(self.cfg.epoch_size, stage_train.n)
        for batch in (b for _ in range(passes)
                      for b in data_mod.batches(stage_train, self.cfg.batch_size, self.rng)):
            if self.augment is not None:          # a copy of the data's rows (Demos.subset)
                self.augment(batch, self.rng)
            n = int(batch.traj_len.sum())
            with self.workspace.step():           # the core's arrays: last step's memory (nn.workspace)
                loss, grads = job.loss(stage, batch, self.rng, state["epoch"], train=True)
            for g in grads.values():              # per-step gradient, in place
                g /= n
            # on the sub-policies' weight matrices, where the stage trains them
            optim.add_l2(grads, job.params, {"act": self.cfg.act_l2, "stop": self.cfg.stop_l2})
            self.adam.step(job.params, grads)
            self._average_step()
            total, steps = total + loss, steps + n
        with self._averaged():
            return total, steps, mean_loss(job, stage, stage_held, workspace=self.workspace)

    def _averaging(self):
        return (self.cfg.ema > 0 or self.cfg.ema_epochs > 0) and self.job.is_policy(self.stage)

    def _average_step(self):
        """spec/training.md eq. (14): avg <- beta avg + (1 - beta) theta after a step of the policy
        stage (avg = theta at the stage's first step), in float64; beta from eq. (15)
        (average_decay, set for the epoch by _passes)."""
        if not self._averaging():
            return
        names = policy.trainable(self.job.params)
        if self.average is None:
            self.average = {k: self.job.params[k].astype(np.float64) for k in names}
            return
        beta = self.beta
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
        elif job.is_policy(stage) and self.cfg.select == "rollouts":
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
            checkpoints.save(self.out_dir, self.job, dict(self.state, rng=self.rng.bit_generator.state,
                                                          data_sha256=self.fingerprint, spent=self.spent()),
                             self.adam, self.best, self.average)

    def spent(self):
        """What the run has cost so far, over every process that worked on it (each to its last
        checkpoint: the work of a process stopped later is lost, and not counted):
        {seconds (wall), cpu_seconds (process CPU time), processes}."""
        return {"seconds": self.earlier["seconds"] + time.time() - self.t0,
                "cpu_seconds": self.earlier["cpu_seconds"] + time.process_time() - self.cpu0,
                "processes": self.earlier["processes"] + 1}

    def progress_line(self):
        cfg, state, last = self.cfg, self.state, self.state["history"][-1]
        runs = self.job.algorithm.runs(cfg) if self.job.algorithm.runs else 1
        label = f"{cfg.algo} r{self.restart + 1}/{runs}" if runs > 1 else cfg.algo
        best = "     -  " if state["best_loss"] is None else f"{state['best_loss']:8.4f}"
        if state["best_score"] is not None:
            best = f"rollouts {100 * last.get('rollout_score', float('nan')):5.1f} % (best {100 * state['best_score']:5.1f} %)"
        return (f"[{label} {last['stage']}] epoch {state['epoch']:3d}  train {last['train_loss']:8.4f}"
                f"  held-out {last['held_out_loss']:8.4f}  best {best}  {time.time() - self.t0:6.1f}s")

    def model(self):
        spent = self.spent()
        info = {"history": self.state["history"], "train_size": self.train_set.n,
                "held_out_size": self.held_out.n, "data": self.demos.meta,
                "seconds": spent["seconds"], "cpu_seconds": spent["cpu_seconds"],
                "processes": spent["processes"], "earlier": dict(self.earlier),
                "run_seed": run_seed(self.cfg.seed, self.restart)}
        if self.job.algorithm.runs is not None:   # runs are kept by this (select_restart)
            info["train_loglik"] = -mean_loss(self.job, self.job.stages[-1], self.train_set,
                                              workspace=self.workspace)
        return self.job.model(info)

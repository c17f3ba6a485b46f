"""TACO (paper Sec. 4, eq. (8)): the sub-policies trained on the joint likelihood of sketch and
actions through the alignment core, after a label-free warm-up; spec/objectives.md eq. (1),
spec/training.md §6-7.

Stages: "warmup" (warmup_epochs of BC on the even split of every demonstration into its
sketch's L segments, objectives.even_split_labels; its last parameters are handed on), then
"policy" (objectives.taco, tempered over its first temperature_epochs; objectives.taco_viterbi
with taco_targets "viterbi"); restarts runs are kept
by training likelihood (spec/training.md eq. (8)).
"""
from dataclasses import dataclass, field


from taco_ref import objectives
from taco_ref.algorithms import SUB_POLICIES, Algorithm, Stage, register, stop_dropout

TARGETS = ("posterior", "viterbi")


@dataclass
class TacoConfig:
    """TACO's own config fields."""

    temperature: float = 1.0
    """Initial temperature of the tempered alignment (objectives.taco), annealed linearly to 1
    over temperature_epochs (spec/training.md eq. (7)); 1 = no tempering."""
    temperature_epochs: int = 0
    """Epochs of the TACO stage over which the temperature falls to 1. Early stopping and the
    best-parameter copy start once it is 1."""
    taco_targets: str = field(default="posterior", metadata={"before": "posterior"})
    """What the TACO stage trains each sub-policy on: "posterior", every step weighted by the
    alignment posterior (objectives.taco, the paper's eq. (8)); "viterbi", hard EM on the
    lattice's own best alignment of each minibatch (objectives.taco_viterbi), an ablation that
    takes the posterior's spread out of the STOP nets' labels. Held-out losses, early stopping
    and the choice among restarts use the marginal likelihood either way."""
    restarts: int = 1
    """Independent runs (same split, different initialisation and batch order); the model kept
    is the run with the highest TACO log-likelihood per step on the training set
    (spec/training.md §7)."""

    def check(self):
        if self.restarts < 1:
            raise ValueError(f"restarts must be a positive integer, got {self.restarts!r}")
        if self.temperature_epochs < 0:
            raise ValueError(f"temperature_epochs must be a non-negative integer, got {self.temperature_epochs!r}")
        if self.taco_targets not in TARGETS:
            raise ValueError(f"taco_targets must be one of {', '.join(TARGETS)}, got {self.taco_targets!r}")
        if self.taco_targets == "viterbi" and self.temperature_epochs:
            raise ValueError("taco_targets 'viterbi' trains on one alignment, which tempering does not "
                             f"change: set temperature_epochs to 0, got {self.temperature_epochs!r}")
        if not 1.0 <= self.temperature < float("inf"):
            raise ValueError(f"temperature must be a finite number >= 1, got {self.temperature!r}")
        if self.temperature_epochs >= self.epochs:
            raise ValueError(f"temperature_epochs must be below epochs ({self.epochs}) so that TACO "
                             f"trains at temperature 1 at the end, got {self.temperature_epochs!r}")


def temperature(cfg, epoch):
    """Temperature of TACO's alignment in epoch (0-based) of the TACO stage; spec/training.md
    eq. (7): 1 + (temp_0 - 1) max(0, 1 - epoch / E), falling linearly from cfg.temperature at
    epoch 0 to 1 at epoch E = cfg.temperature_epochs and staying there."""
    if cfg.temperature_epochs == 0:
        return 1.0
    return 1.0 + (cfg.temperature - 1.0) * max(0.0, 1.0 - epoch / cfg.temperature_epochs)


def _warmup_loss(learner, batch, rng, epoch, train):
    labels = objectives.even_split_labels(batch.traj_len, batch.sketch_len, batch.states.shape[1])
    return objectives.bc(learner.params, learner.policy_cfg, batch, labels, learner.cfg.terminal_stop,
                         stop_dropout=stop_dropout(learner.cfg, rng, epoch, train))


def _taco_loss(learner, batch, rng, epoch, train):
    if train and learner.cfg.taco_targets == "viterbi":
        return objectives.taco_viterbi(learner.params, learner.policy_cfg, batch, learner.cfg.terminal_stop,
                                       stop_dropout=stop_dropout(learner.cfg, rng, epoch, train))
    temp = temperature(learner.cfg, epoch) if train else 1.0
    return objectives.taco(learner.params, learner.policy_cfg, batch, learner.cfg.terminal_stop, temperature=temp,
                           stop_dropout=stop_dropout(learner.cfg, rng, epoch, train))


WARMUP = Stage("warmup", SUB_POLICIES, _warmup_loss, epochs=lambda cfg: cfg.warmup_epochs,
               candidate=lambda cfg, epoch: False, policy=False)
POLICY = Stage("policy", SUB_POLICIES, _taco_loss,
               candidate=lambda cfg, epoch: epoch >= cfg.temperature_epochs)


def stages(cfg):
    return (WARMUP, POLICY) if cfg.warmup_epochs else (POLICY,)


register(Algorithm(
    name="taco", label="TACO", section=TacoConfig, stages=stages, runs=lambda cfg: cfg.restarts, order=0))


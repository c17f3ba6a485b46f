"""GT-BC (paper Sec. 5): modular behaviour cloning on the ground-truth segmentation, the upper
reference that TACO is measured against; spec/objectives.md eq. (2).

Stages: "policy", objectives.bc on batch.labels (the sketch position of every step); with
prestage "all" (the recipe protocol, spec/evaluation.md §7) a "warmup" of warmup_epochs of the
same loss at a constant rate before it.
"""
from taco_ref import objectives
from taco_ref.algorithms import SUB_POLICIES, Algorithm, Stage, register, stop_dropout


def _loss(learner, batch, rng, epoch, train):
    return objectives.bc(learner.params, learner.policy_cfg, batch, batch.labels, learner.cfg.terminal_stop,
                         stop_dropout=stop_dropout(learner.cfg, rng, epoch, train))


WARMUP = Stage("warmup", SUB_POLICIES, _loss, epochs=lambda cfg: cfg.warmup_epochs,
               candidate=lambda cfg, epoch: False, policy=False)
POLICY = Stage("policy", SUB_POLICIES, _loss)


def stages(cfg):
    """With prestage "all", warmup_epochs of the same BC at a constant rate first (its last
    parameters handed on), as TACO's warm-up runs before TACO: the recipe protocol."""
    return (WARMUP, POLICY) if cfg.prestage == "all" and cfg.warmup_epochs else (POLICY,)


register(Algorithm(
    name="gtbc", label="GT-BC", stages=stages, order=1))

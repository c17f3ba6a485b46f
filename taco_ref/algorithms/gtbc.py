"""GT-BC (paper Sec. 5): modular behaviour cloning on the ground-truth segmentation, the upper
reference that TACO is measured against; spec/objectives.md eq. (2).

One stage, "policy": objectives.bc on batch.labels (the sketch position of every step).
"""
from taco_ref import objectives
from taco_ref.algorithms import SUB_POLICIES, Algorithm, Stage, register, stop_dropout


def _loss(job, batch, rng, epoch, train):
    return objectives.bc(job.params, job.policy_cfg, batch, batch.labels, job.cfg.terminal_stop,
                         stop_dropout=stop_dropout(job.cfg, rng, epoch, train))


POLICY = Stage("policy", SUB_POLICIES, _loss)

register(Algorithm(
    name="gtbc", label="GT-BC", stages=lambda cfg: (POLICY,),
    paper={"navworld": (94.6, 94.6), "craft": (99.4, 99.4), "dial": (97.3, 98.7),
           "dial-image": (98.2, 98.2), "dial-image-small": (98.2, 98.2)},
    order=1, demo_order=3))

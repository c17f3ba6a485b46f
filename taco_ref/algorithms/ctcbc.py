"""CTC-BC (paper Sec. 4.1, appendix C): a classifier p(k | s_t, a_t) trained with the blank-free
CTC on the sketch, then behaviour cloning on its alignment; spec/objectives.md eq. (3)-(5).

Two algorithms share this section: ctcbc-mlp (an MLP classifier) and ctcbc-gru (a bi-GRU).
Stages: "ctc" (the classifier, at ctc_lr, every epoch a candidate), with prestage "all" a
"warmup" of warmup_epochs (the policy stage's loss at a constant rate), then "policy": BC on the
frozen classifier's argmax alignment (ctc_weighting "argmax", the paper's; the labels computed
once per demonstration) or on its normalised forward variables (ctc_weighting "alpha",
appendix C).
"""
from dataclasses import dataclass, field, replace

import numpy as np

from taco_ref import align, data, nn, objectives, policy
from taco_ref.algorithms import SUB_POLICIES, Algorithm, Stage, register, stop_dropout
from taco_ref.limits import DTYPES, check_sizes

WEIGHTINGS = ("argmax", "alpha")


@dataclass
class CtcConfig:
    """CTC-BC's own config fields (both classifiers)."""

    ctc_hidden: list = field(default_factory=lambda: [100])
    """CTC-BC classifier: MLP hidden sizes, or [hidden size] of the bi-GRU (exactly one)."""
    ctc_lr: float = 5e-3
    """Adam learning rate of the CTC classifier."""
    ctc_weighting: str = "argmax"
    """CTC-BC's use of the alignment: argmax (paper Sec. 4.1) or alpha (appendix C)."""
    ctc_decoder: str = "forward_argmax"
    """CTC-BC's argmax alignment: one of the decoders of taco_ref.align.DECODER_NAMES
    (forward_argmax, the paper's; posterior_argmax; viterbi)."""
    ctc_core_dtype: str = field(default="float64", metadata={"before": "float64"})
    """Image states only: the precision the classifier's own convolutional core trains in,
    float64 (the classifier's; what every CTC-BC image run computed before this field existed:
    cell keys leave it out) or float32 (as the sub-policies' core; about half the CPU of a
    classifier step at 112 x 112, sim/taco_sim/configs/dial-image.yaml; its douts flushed of
    subnormals, spec/training.md eq. (12)). The classifier after the core, the CTC recursion
    and the saved model stay float64."""

    def check(self):
        check_sizes("ctc_hidden", self.ctc_hidden)
        if self.algo == "ctcbc-gru" and len(self.ctc_hidden) != 1:
            raise ValueError(f"ctc_hidden must be one hidden size [H] for ctcbc-gru (its bi-GRU has "
                             f"one layer), got {self.ctc_hidden!r}")
        if self.ctc_weighting not in WEIGHTINGS:
            raise ValueError(f"ctc_weighting must be 'argmax' or 'alpha', got {self.ctc_weighting!r}")
        if self.ctc_core_dtype not in DTYPES:
            raise ValueError(f"ctc_core_dtype must be 'float64' or 'float32', got {self.ctc_core_dtype!r}")
        if self.ctc_decoder not in align.DECODER_NAMES:
            raise ValueError(f"ctc_decoder must be {', '.join(align.DECODER_NAMES[:-1])} or "
                             f"{align.DECODER_NAMES[-1]}, got {self.ctc_decoder!r}")


def _init(learner, demos, rng):
    """The classifier's parameters ("ctc."), drawn after the sub-policies'; with image states
    also its own convolutional core ("ctc.core.", of the sub-policies' core's shape; spec/policy.md
    §10), drawn in float64 and rounded to ctc_core_dtype."""
    cfg = learner.cfg
    input_dim = learner.policy_cfg.feature_dim + learner.policy_cfg.action_dim
    params = objectives.init_ctc_params(rng, cfg.ctc_kind, input_dim, cfg.ctc_hidden, len(demos.vocab))
    if demos.image_shape is not None:
        for i, (W, b) in enumerate(nn.conv_init(rng, demos.image_shape[2], cfg.conv_channels, cfg.conv_kernels)):
            params[f"ctc.core.W{i}"] = W.astype(cfg.ctc_core_dtype, copy=False)
            params[f"ctc.core.b{i}"] = b.astype(cfg.ctc_core_dtype, copy=False)
    return params


def _ctc_loss(learner, batch, rng, epoch, train):
    return objectives.ctc(learner.params, learner.cfg.ctc_kind, batch, learner.discrete, learner.policy_cfg.action_dim,
                          image_cfg=learner.policy_cfg)


def _policy_loss(learner, batch, rng, epoch, train):
    cfg, p = learner.cfg, learner.params
    dropout = stop_dropout(cfg, rng, epoch, train)
    if cfg.ctc_weighting == "argmax":              # the classifier's labels, set by _sets
        return objectives.bc(p, learner.policy_cfg, batch, batch.labels, cfg.terminal_stop, stop_dropout=dropout)
    _, weights = objectives.ctc_alignment(p, cfg.ctc_kind, batch, learner.discrete, learner.policy_cfg.action_dim,
                                          cfg.ctc_decoder, image_cfg=learner.policy_cfg)
    targets = objectives.ctc_soft_targets(weights, batch.sketch_len)
    return objectives.soft_bc(p, learner.policy_cfg, batch, weights, targets, stop_dropout=dropout)


def _relabel(learner, demos, batch_size=64):
    labels = np.full_like(demos.labels, -1)                              # (N, T)
    for idx in data.batch_indices(demos.n, data.pass_batch_size(demos, batch_size)):
        batch = demos.subset(idx)
        path, _ = objectives.ctc_alignment(learner.params, learner.cfg.ctc_kind, batch, learner.discrete,
                                           learner.policy_cfg.action_dim, learner.cfg.ctc_decoder,
                                           image_cfg=learner.policy_cfg)
        labels[idx, :path.shape[1]] = np.where(
            np.arange(path.shape[1])[None, :] < batch.traj_len[:, None], path, -1)
    return replace(demos, labels=labels)


def _sets(learner, train_set, held_out):
    """With argmax weighting, the policy stage trains and stops on the same demonstrations
    relabelled once with the frozen classifier's alignment (the classifier does not change in
    that stage, so aligning every batch of every epoch again would give the same labels)."""
    if learner.cfg.ctc_weighting == "argmax":
        return _relabel(learner, train_set), _relabel(learner, held_out)
    return train_set, held_out


def _shapes(params, policy_cfg, config, kind):
    """{name: shape} of the CTC classifier of kind whose hidden sizes the weights show (and,
    where it names them, config.ctc_hidden): its input is a state (image states: its own
    core's features) and an action (one-hot when discrete), its output one score per sub-task. ValueError naming the problem otherwise."""
    def shape(name, ndim):
        arr = params.get(name)
        if arr is None or arr.ndim != ndim or min(arr.shape, default=1) < 1:
            raise ValueError(f"the CTC {kind} classifier needs {name} ({ndim}-d), "
                             f"got {'nothing' if arr is None else arr.shape}")
        return arr.shape
    if kind == "mlp":
        layers = 0
        while f"ctc.W{layers}" in params:
            layers += 1
        hidden = [shape(f"ctc.W{i}", 2)[1] for i in range(layers - 1)]
        if not hidden:
            raise ValueError(f"the CTC mlp classifier needs ctc.W0, ctc.W1, ... (at least one hidden "
                             f"layer), got {layers} weight matrices")
    else:
        hidden = [shape("ctc.fwd.W_h", 2)[0]]
    if "ctc_hidden" in config and list(config["ctc_hidden"]) != hidden:
        raise ValueError(f"the CTC classifier's hidden sizes are {hidden}, config.ctc_hidden "
                         f"{config['ctc_hidden']!r}")
    shapes = objectives.ctc_param_shapes(kind, policy_cfg.feature_dim + policy_cfg.action_dim, hidden,
                                         policy_cfg.n_subtasks)
    if policy_cfg.image_shape is not None:       # the classifier's own convolutional core
        shapes.update(policy.core_shapes(policy_cfg.image_shape, policy_cfg.conv_channels,
                                         policy_cfg.conv_kernels, prefix="ctc.core."))
    return shapes


def _align(model, demos, decoders):
    """CTC-BC aligns with its classifier, as in the paper (spec/evaluation.md §2)."""
    feats = objectives.ctc_features(model.params, demos, demos.discrete, model.policy.action_dim,
                                    image_cfg=model.policy)
    log_p = objectives.ctc_log_p(model.params, model.ctc_kind, feats, demos.traj_len)[0]   # (B, T, K)
    return {d: align.CTC_DECODERS[d](log_p, demos.sketch, demos.traj_len, demos.sketch_len)
            for d in decoders}


CTC = Stage("ctc", ("ctc.",), _ctc_loss, lr=lambda cfg: cfg.ctc_lr, policy=False)
WARMUP = Stage("warmup", SUB_POLICIES, _policy_loss, epochs=lambda cfg: cfg.warmup_epochs,
               candidate=lambda cfg, epoch: False, policy=False, sets=_sets)
POLICY = Stage("policy", SUB_POLICIES, _policy_loss, sets=_sets)


def _stages(cfg):
    """The classifier, then (prestage "all") warmup_epochs of the policy stage's BC at a constant
    rate, its last parameters handed on, then the policy stage."""
    if cfg.prestage == "all" and cfg.warmup_epochs:
        return (CTC, WARMUP, POLICY)
    return (CTC, POLICY)


for _kind, _name, _label, _order in (("mlp", "ctcbc-mlp", "CTC-BC (MLP)", 2), ("gru", "ctcbc-gru", "CTC-BC (GRU)", 3)):
    register(Algorithm(
        name=_name, label=_label, section=CtcConfig, stages=_stages, init=_init,
        shapes=lambda params, policy_cfg, config, kind=_kind: _shapes(params, policy_cfg, config, kind),
        align=_align, ctc_kind=_kind, order=_order))

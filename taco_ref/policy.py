"""K modular sub-policies, each an action net and a separate STOP net (paper appendix A).

Implements spec/policy.md. A sub-policy k maps a state s to
  - an action distribution: N(mu_k(s), sigma^2 I) for continuous actions (sigma = 1 in the paper),
    or a categorical with logits f_k(s) for discrete actions;
  - a STOP probability sigma(g_k(s)) from one logit, so that log pi_k(STOP | s) = log sigma(g)
    and log(1 - pi_k(STOP | s)) = log sigma(-g) are both computed stably.

The networks of all K sub-tasks are stored stacked, one array per layer with a leading K axis,
and evaluated only where they are needed: `evaluate` takes a boolean mask over (b, t, l) (which
sketch step l of trajectory b is scored at time t) and runs each sub-task's nets once on all
the states that need it, gathered across the batch.

Symbol | Shape     | Meaning
B, T   |           | batch, (padded) time
L      |           | (padded) sketch length
K      |           | number of sub-tasks
D, A   |           | state dimension; action dimension (continuous) or number of actions (discrete)
"""
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, Optional

import numpy as np

from taco_ref import nn


@dataclass
class PolicyConfig:
    """Architecture of the K sub-policies (stored with every model)."""

    state_dim: int
    """D: length of the state vector."""
    n_subtasks: int
    """K: number of sub-tasks in the vocabulary."""
    action_dim: int
    """A: action dimension (continuous) or number of discrete actions."""
    discrete: bool = False
    """Categorical actions (True) or Gaussian actions (False)."""
    act_hidden: list = field(default_factory=lambda: [100])
    """Hidden layer sizes of each action net (paper table 2: Nav-World [100], Dial [300, 200, 100])."""
    stop_hidden: list = field(default_factory=lambda: [100])
    """Hidden layer sizes of each STOP net."""
    sigma: float = 1.0
    """Standard deviation of the Gaussian action model (paper: 1; the original code used 0.6 on
    normalised actions)."""
    activation: str = "relu"
    """Hidden activation: relu or tanh."""

    def __post_init__(self):
        for name in ("state_dim", "n_subtasks", "action_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("act_hidden", "stop_hidden"):
            sizes = list(getattr(self, name))
            if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in sizes):
                raise ValueError(f"{name} must be a list of positive integers, got {sizes!r}")
            setattr(self, name, sizes)
        if not self.sigma > 0:
            raise ValueError(f"sigma must be positive, got {self.sigma!r}")
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {self.activation!r}")

    def to_dict(self):
        return asdict(self)


def init_params(cfg, rng):
    """Stacked parameters {"act.W0": (K, D, H0), "act.b0": (K, H0), ..., "stop.W*", "stop.b*"}.

    Each sub-task's nets are initialised independently by nn.mlp_init; input normalisation
    ("norm.mean", "norm.std", (D,)) starts as the identity and is set from data by the trainer.
    """
    D, K = cfg.state_dim, cfg.n_subtasks
    heads = {"act": [D] + cfg.act_hidden + [cfg.action_dim], "stop": [D] + cfg.stop_hidden + [1]}
    params = {}
    for head, sizes in heads.items():
        per_task = [nn.mlp_init(rng, sizes, cfg.activation) for _ in range(K)]
        for i in range(len(sizes) - 1):
            params[f"{head}.W{i}"] = np.stack([layers[i][0] for layers in per_task])   # (K, in, out)
            params[f"{head}.b{i}"] = np.stack([layers[i][1] for layers in per_task])   # (K, out)
    params["norm.mean"] = np.zeros(D)
    params["norm.std"] = np.ones(D)
    return params


def param_shapes(cfg):
    """{name: shape} of every array init_params(cfg, rng) makes, computed without allocating
    (model files are checked against it before their weights are read)."""
    D, K = cfg.state_dim, cfg.n_subtasks
    heads = {"act": [D] + cfg.act_hidden + [cfg.action_dim], "stop": [D] + cfg.stop_hidden + [1]}
    shapes = {}
    for head, sizes in heads.items():
        for i in range(len(sizes) - 1):
            shapes[f"{head}.W{i}"] = (K, sizes[i], sizes[i + 1])
            shapes[f"{head}.b{i}"] = (K, sizes[i + 1])
    shapes["norm.mean"] = shapes["norm.std"] = (D,)
    return shapes


TRAINABLE_PREFIXES = ("act.", "stop.")


def trainable(params):
    """Names of the parameters the optimiser updates (not the normalisation)."""
    return [k for k in params if k.startswith(TRAINABLE_PREFIXES)]


def _layers(params, head, k):
    n = sum(1 for name in params if name.startswith(f"{head}.W"))
    return [(params[f"{head}.W{i}"][k], params[f"{head}.b{i}"][k]) for i in range(n)]


class Inputs(NamedTuple):
    """What evaluate reads of a batch, for callers that hold plain arrays (shapes: evaluate)."""

    states: np.ndarray
    actions: np.ndarray
    sketch: np.ndarray
    final_state: Optional[np.ndarray] = None


def normalise(params, states):
    return (states - params["norm.mean"]) / params["norm.std"]


def evaluate(params, cfg, batch, mask, final_mask=None, stop_dropout=None):
    """Score sub-policies on the (b, t, l) entries of mask; spec/policy.md eq. (1)-(3).

    Symbol            | Shape              | Meaning
    batch.states      | (B, T, D)          | raw states (normalised here with the stored statistics)
    batch.actions     | (B, T, A) or (B, T)| demonstrated actions (float, or int ids when discrete)
    batch.sketch      | (B, L) int         | sub-task id of each sketch step (padding: anything)
    batch.final_state | (B, D)             | states at which a terminal STOP is scored (read only
                      |                    | with final_mask)
    mask              | (B, T, L) bool     | which entries to score
    final_mask        | (B, L) bool        | which sketch steps get a terminal STOP score, or None
    stop_dropout      |                    | an nn.Dropout for the STOP nets' hidden layers (paper
                      |                    | appendix A; spec/policy.md eq. (4)), or None
    returns           | (scores, cache)    | scores: {log_act, log_stop, log_go: (B, T, L),
                      |                    | log_final_stop: (B, L) with final_mask}, 0 outside
                      |                    | the mask; the cache feeds `backward`

    batch is a taco_ref.data.Demos or anything with those fields (policy.Inputs).
    """
    states, actions, sketch = batch.states, batch.actions, batch.sketch
    final_states = None if final_mask is None else batch.final_state
    B, T, L = mask.shape
    x_all = normalise(params, states)                                        # (B, T, D)
    out = {name: np.zeros((B, T, L)) for name in ("log_act", "log_stop", "log_go")}
    if final_states is not None:
        out["log_final_stop"] = np.zeros((B, L))
        x_final = normalise(params, final_states)                            # (B, D)
    groups = []
    for k in np.unique(sketch[mask.any(axis=1) | (final_mask if final_states is not None else False)]):
        b, t, l = np.nonzero(mask & (sketch == k)[:, None, :])               # (n,) each
        x = x_all[b, t]                                                      # (n, D)
        n = x.shape[0]
        if final_states is not None:
            fb, fl = np.nonzero(final_mask & (sketch == k))
            x = np.concatenate([x, x_final[fb]])                             # (n + nf, D)
        else:
            fb = fl = np.zeros(0, dtype=np.int64)
        # action net on the n scored steps
        head, act_cache = nn.mlp_forward(_layers(params, "act", k), x[:n], cfg.activation)
        if cfg.discrete:
            logp, dist_cache = nn.categorical_logp_forward(head, actions[b, t])
        else:
            logp, dist_cache = nn.gaussian_logpdf_forward(head, actions[b, t], cfg.sigma)
        out["log_act"][b, t, l] = logp                                       # (n,)
        # STOP net on the scored steps and the terminal states
        logit, stop_cache = nn.mlp_forward(_layers(params, "stop", k), x, cfg.activation,
                                           dropout=stop_dropout)
        log_stop, log_go = nn.log_sigmoid_pair(logit[:, 0])                  # (n + nf,)
        out["log_stop"][b, t, l] = log_stop[:n]
        out["log_go"][b, t, l] = log_go[:n]
        if final_states is not None:
            out["log_final_stop"][fb, fl] = log_stop[n:]
        groups.append((k, b, t, l, fb, fl, act_cache, dist_cache, stop_cache, logit[:, 0]))
    return out, (groups, cfg, params)


def backward(grads_in, cache):
    """spec/policy.md eq. (5)-(7): gradients of an objective w.r.t. the trainable parameters,
    given its gradients w.r.t. the scores: grads_in has "log_act", "log_stop", "log_go" (B, T, L) and optionally
    "log_final_stop" (B, L). Returns {name: array} for every trainable parameter.
    """
    groups, cfg, params = cache
    grads = {name: np.zeros_like(params[name]) for name in trainable(params)}
    d_final = grads_in.get("log_final_stop")
    for k, b, t, l, fb, fl, act_cache, dist_cache, stop_cache, logit in groups:
        # action net: d logp -> d head -> layer gradients
        d_head = (nn.categorical_logp_backward if cfg.discrete else nn.gaussian_logpdf_backward)(
            grads_in["log_act"][b, t, l], dist_cache)
        _, layer_grads = nn.mlp_backward(d_head, act_cache, input_grad=False)
        _accumulate(grads, "act", k, layer_grads)
        # STOP net: d log sigma(g)/dg = sigma(-g), d log sigma(-g)/dg = -sigma(g)
        d_stop = grads_in["log_stop"][b, t, l]
        d_go = grads_in["log_go"][b, t, l]
        if d_final is not None and fb.size:
            d_stop = np.concatenate([d_stop, d_final[fb, fl]])
            d_go = np.concatenate([d_go, np.zeros(fb.size)])
        p_stop = nn.sigmoid(logit)                                           # (n + nf,)
        d_logit = d_stop * (1.0 - p_stop) - d_go * p_stop
        _, layer_grads = nn.mlp_backward(d_logit[:, None], stop_cache, input_grad=False)
        _accumulate(grads, "stop", k, layer_grads)
    return grads


def _accumulate(grads, head, k, layer_grads):
    for i, (dW, db) in enumerate(layer_grads):
        grads[f"{head}.W{i}"][k] += dW
        grads[f"{head}.b{i}"][k] += db


# ----------------------------------------------------------------------------------------
# Acting: the policy maths used by evaluation and by the ROS bridge, testable without ROS.
# ----------------------------------------------------------------------------------------

def act(params, cfg, subtask, state, stop_threshold=0.5):
    """One control decision of sub-policy `subtask` in `state` (D,); spec/policy.md eq. (8).

    Returns (stop, action): stop is True when pi_k(STOP | s) > stop_threshold; action is the
    mean action (continuous) or the most probable action (discrete) — deterministic execution.
    """
    x = normalise(params, np.asarray(state, dtype=np.float64))[None]         # (1, D)
    logit, _ = nn.mlp_forward(_layers(params, "stop", subtask), x, cfg.activation)
    head, _ = nn.mlp_forward(_layers(params, "act", subtask), x, cfg.activation)
    stop = bool(nn.sigmoid(logit[0, 0]) > stop_threshold)
    action = int(np.argmax(head[0])) if cfg.discrete else head[0]
    return stop, action

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
import numbers
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, Optional

import numpy as np

from taco_ref import nn

NETS = nn.mlp_fast
"""The implementation of the nets training and execution run: nn.mlp_fast (in place, the two first
layers as one product, float32 subnormals flushed). nn.mlp is the same maths written plainly, as
spec/policy.md does; tests/test_nn.py checks the two agree, and setting NETS = nn.mlp runs the
plain one (float64 to rounding, a float32 run to the tests' tolerance)."""

SIGMA_RANGE = (1e-4, 1e4)
"""The Gaussian action model's fixed standard deviation (and a learned one's initial value) lies
in this range: sigma is in the actions' own units, where the shipped configs use 0.1 to 1. At
1e-4 a unit residual already costs 5e7 nats per step, beyond the divergence bound of training
(train.DIVERGED_LOSS); at 1e4 the action term no longer moves the alignment (STOP alone decides
it). TrainConfig and every model file are held to it."""


def _positive_ints(value):
    return (isinstance(value, (list, tuple)) and
            all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in value))


def check_core(image_shape, channels, kernels, strides):
    """ValueError naming the field unless the convolutional core is well-formed: no conv layers
    without images; with images [H, W, C], one or more layers, the three lists of equal length
    and of positive integers, and every kernel fitting the map it reads."""
    if image_shape is None:
        if channels or kernels or strides:
            raise ValueError("conv_channels, conv_kernels, conv_strides: a convolutional core reads image "
                             "states; these states are vectors, so leave them empty")
        return
    if not _positive_ints(image_shape) or len(image_shape) != 3:
        raise ValueError(f"image_shape must be [H, W, C], three positive integers, got {image_shape!r}")
    for name, value in (("conv_channels", channels), ("conv_kernels", kernels), ("conv_strides", strides)):
        if not _positive_ints(value) or not value:
            raise ValueError(f"{name} must be a non-empty list of positive integers for image states, "
                             f"got {value!r}")
    if not len(channels) == len(kernels) == len(strides):
        raise ValueError(f"conv_channels, conv_kernels, conv_strides must have one entry per conv layer, "
                         f"got {len(channels)}, {len(kernels)}, {len(strides)}")
    H, W = image_shape[:2]
    for i, (k, s) in enumerate(zip(kernels, strides)):
        if k > H or k > W:
            raise ValueError(f"conv_kernels: layer {i + 1}'s kernel {k} does not fit its {H} x {W} input "
                             f"(images {list(image_shape)})")
        H, W = nn.conv_output_size(H, k, s), nn.conv_output_size(W, k, s)


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
    normalised actions); with learn_sigma, the initial value of every sub-policy's sigma."""
    activation: str = "relu"
    """Hidden activation: relu or tanh."""
    learn_sigma: bool = False
    """Learn a per-dimension log standard deviation "act.logstd" (K, A) with the rest
    (spec/policy.md eq. (9)-(10)); continuous actions only."""
    image_shape: Optional[list] = None
    """[H, W, C] of image states (state_dim = H W C), read through the convolutional core; None
    for state vectors."""
    conv_channels: list = field(default_factory=list)
    """The core's output channels per conv layer (paper table 2, Dial images: [10, 5, 3]); empty
    without images."""
    conv_kernels: list = field(default_factory=list)
    """Square kernel size per conv layer (paper: [5, 5, 3])."""
    conv_strides: list = field(default_factory=list)
    """Stride per conv layer (paper: [2, 2, 1])."""

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
        if (isinstance(self.sigma, bool) or not isinstance(self.sigma, numbers.Real)
                or not SIGMA_RANGE[0] <= self.sigma <= SIGMA_RANGE[1]):
            raise ValueError(f"sigma must be a positive number in [{SIGMA_RANGE[0]:g}, {SIGMA_RANGE[1]:g}], "
                             f"got {self.sigma!r}")
        if not isinstance(self.discrete, bool):
            raise ValueError(f"discrete must be true or false, got {self.discrete!r}")
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {self.activation!r}")
        if not isinstance(self.learn_sigma, bool) or (self.learn_sigma and self.discrete):
            raise ValueError(f"learn_sigma must be true or false, and false for discrete actions, "
                             f"got {self.learn_sigma!r}")
        check_core(self.image_shape, self.conv_channels, self.conv_kernels, self.conv_strides)
        self.conv_channels, self.conv_kernels, self.conv_strides = (
            list(self.conv_channels), list(self.conv_kernels), list(self.conv_strides))
        if self.image_shape is not None:
            self.image_shape = [int(v) for v in self.image_shape]
            if self.state_dim != int(np.prod(self.image_shape)):
                raise ValueError(f"state_dim must be H W C = {int(np.prod(self.image_shape))} for images "
                                 f"{self.image_shape}, got {self.state_dim}")

    @property
    def feature_dim(self):
        """F: what the action and STOP nets read; the core's output size with images, else D."""
        if self.image_shape is None:
            return self.state_dim
        return int(np.prod(nn.convnet_output_shape(self.image_shape, self.conv_channels,
                                                   self.conv_kernels, self.conv_strides)))

    def to_dict(self):
        return asdict(self)


def init_params(cfg, rng):
    """Stacked parameters {"act.W0": (K, F, H0), "act.b0": (K, H0), ..., "stop.W*", "stop.b*"},
    and with images the core's "core.W{i}" (k_i, k_i, C_i, O_i), "core.b{i}" (O_i,).

    Each sub-task's nets are initialised independently by nn.mlp_init, then the core by
    nn.conv_init; input normalisation ("norm.mean", "norm.std": (D,), or (C,) per channel of
    images) starts as the identity and is set from data by the trainer.
    """
    D, K, F = cfg.state_dim, cfg.n_subtasks, cfg.feature_dim
    heads = {"act": [F] + cfg.act_hidden + [cfg.action_dim], "stop": [F] + cfg.stop_hidden + [1]}
    params = {}
    for head, sizes in heads.items():
        per_task = [nn.mlp_init(rng, sizes, cfg.activation) for _ in range(K)]
        for i in range(len(sizes) - 1):
            params[f"{head}.W{i}"] = np.stack([layers[i][0] for layers in per_task])   # (K, in, out)
            params[f"{head}.b{i}"] = np.stack([layers[i][1] for layers in per_task])   # (K, out)
    if cfg.learn_sigma:
        params["act.logstd"] = np.full((K, cfg.action_dim), float(np.log(cfg.sigma)))
    norm_dim = D
    if cfg.image_shape is not None:
        for i, (W, b) in enumerate(nn.conv_init(rng, cfg.image_shape[2], cfg.conv_channels, cfg.conv_kernels)):
            params[f"core.W{i}"], params[f"core.b{i}"] = W, b
        norm_dim = cfg.image_shape[2]
    params["norm.mean"] = np.zeros(norm_dim)
    params["norm.std"] = np.ones(norm_dim)
    return params


def core_shapes(image_shape, channels, kernels, prefix="core."):
    """{name: shape} of a convolutional core's arrays."""
    shapes, C = {}, image_shape[2]
    for i, (O, k) in enumerate(zip(channels, kernels)):
        shapes[f"{prefix}W{i}"], shapes[f"{prefix}b{i}"] = (k, k, C, O), (O,)
        C = O
    return shapes


def param_shapes(cfg):
    """{name: shape} of every array init_params(cfg, rng) makes, computed without allocating
    (model files are checked against it before their weights are read)."""
    D, K, F = cfg.state_dim, cfg.n_subtasks, cfg.feature_dim
    heads = {"act": [F] + cfg.act_hidden + [cfg.action_dim], "stop": [F] + cfg.stop_hidden + [1]}
    shapes = {}
    for head, sizes in heads.items():
        for i in range(len(sizes) - 1):
            shapes[f"{head}.W{i}"] = (K, sizes[i], sizes[i + 1])
            shapes[f"{head}.b{i}"] = (K, sizes[i + 1])
    if cfg.learn_sigma:
        shapes["act.logstd"] = (K, cfg.action_dim)
    if cfg.image_shape is not None:
        shapes.update(core_shapes(cfg.image_shape, cfg.conv_channels, cfg.conv_kernels))
        D = cfg.image_shape[2]
    shapes["norm.mean"] = shapes["norm.std"] = (D,)
    return shapes


TRAINABLE_PREFIXES = ("act.", "stop.", "core.")


def trainable(params):
    """Names of the parameters the optimiser updates (the nets and the core; not the
    normalisation)."""
    return [k for k in params if k.startswith(TRAINABLE_PREFIXES)]


def _layers(params, head, k, cfg):
    n = len(cfg.act_hidden if head == "act" else cfg.stop_hidden) + 1
    return [(params[f"{head}.W{i}"][k], params[f"{head}.b{i}"][k]) for i in range(n)]


class Inputs(NamedTuple):
    """What evaluate reads of a batch, for callers that hold plain arrays (shapes: evaluate)."""

    states: np.ndarray
    actions: np.ndarray
    sketch: np.ndarray
    final_state: Optional[np.ndarray] = None


def normalise(params, states):
    return (states - params["norm.mean"]) / params["norm.std"]


def core_layers(params, cfg, prefix="core."):
    """[(W_i, b_i), ...] of the convolutional core (prefix "ctc.core." for CTC-BC's classifier)."""
    return [(params[f"{prefix}W{i}"], params[f"{prefix}b{i}"]) for i in range(len(cfg.conv_channels))]


def image_input(params, images, dtype, scope=None):
    """Images (n, H, W, C) as the core's input: normalised per channel with the stored
    statistics, (x - m_c) / sigma_c, in dtype; computed in place on one fresh array (or one of
    a training step's workspace scope, nn.workspace).

    Computed as x / sigma_c - m_c / sigma_c (two passes over a (n H, W C) view, the statistics
    tiled along a row: a ufunc broadcasting a (C,) operand runs its inner loop C = 3 elements
    at a time, three to four times slower). float32 subnormals (spec/training.md
    eq. (12)) are flushed, a pass skipped where none can arise: for integer pixels and every
    |m_c| either 0 or >= 2^-40 (a mean of pixel counts is) with sigma_c <= 1e6 (< 2^20), both
    terms are 0 or at least 2^-60, and a nonzero difference of two such float32 numbers is at
    least the spacing at 2^-60, 2^-83: far from 2^-100."""
    images = np.asarray(images)
    mean, std = params["norm.mean"].astype(dtype), params["norm.std"]
    scale = (1.0 / std).astype(dtype)
    x = nn.workspace.array(scope, "input", images.shape, dtype)   # (n, H, W, C) C order, ours to write
    np.copyto(x, images, casting="unsafe")               # the pixels in dtype: astype's cast
    rows = x.reshape(-1, x.shape[-2] * x.shape[-1])      # (n H, W C) a view
    rows *= np.tile(scale, x.shape[-2])                  # x / sigma, in dtype: one pass
    rows -= np.tile(mean * scale, x.shape[-2])           # (x - m) / sigma: a second
    a = np.abs(mean)
    safe = images.dtype.kind in "iu" and bool(((a == 0) | (a >= 2.0 ** -40)).all() and (std <= 1e6).all())
    return x if safe else nn.flush_subnormals(x)


def features(params, cfg, states, dtype=None, prefix="core."):
    """What the nets read for states (n,) + state shape: (n, F) features of the core with images
    (and the core's cache), the normalised state vectors otherwise (cache None). Inside a
    training step (nn.workspace.Workspace.step) the core's arrays are the step's to reuse."""
    dtype = net_dtype(params) if dtype is None else dtype
    if cfg.image_shape is None:
        return nn.flush_subnormals(normalise(params, states).astype(dtype, copy=False)), None
    scope = nn.workspace.active_scope()
    return nn.convnet_forward(core_layers(params, cfg, prefix), cfg.conv_strides,
                              image_input(params, states, dtype, scope), cfg.activation, scope)


def net_dtype(params):
    """The precision the sub-policy nets compute in: that of their parameters (float32 or
    float64, TrainConfig.dtype); scores handed to the alignment core are float64 either way."""
    return params["act.W0"].dtype


def _rows(mask_k):
    """The distinct (b, t) rows of the entries (b, t, l) in mask_k (B, T, L), in C order, and
    each entry's row: (b, t) (n,) each, entries (eb, et, el) (m,) each, row (m,) or None when
    every (b, t) has one entry (row = arange: the common case, a sketch naming k once)."""
    eb, et, el = np.nonzero(mask_k)                                          # (m,) each
    if eb.size < 2 or not (np.diff(eb * mask_k.shape[1] + et) == 0).any():
        return eb, et, (eb, et, el), None
    flat = eb * mask_k.shape[1] + et                                         # (m,) sorted
    first = np.concatenate([[True], flat[1:] != flat[:-1]])                  # (m,)
    return eb[first], et[first], (eb, et, el), np.cumsum(first) - 1


def _sum_rows(values, row, n):
    """Per-row sums of per-entry values: the identity when row is None (one entry per row)."""
    return values if row is None else np.bincount(row, values, minlength=n)


class CoreCache(NamedTuple):
    """The image core's part of evaluate's cache: the core's cache and where its features went."""
    cache: object          # nn.ConvnetCache of the m + mf images
    rows: np.ndarray       # (m,) flat b * T + t of the scored steps' images
    final_b: np.ndarray    # (mf,) b of the terminal states' images, after them
    B: int
    T: int


class GroupCache(NamedTuple):
    """One sub-task k's part of evaluate's cache: the n distinct (b, t) rows its nets read (and
    nf terminal states), the entries that read them, and its nets' caches."""
    k: int
    n: int                 # rows read by both nets
    entries: tuple         # (b, t, l) index arrays of the mask's entries of k
    row: object            # (entries,) the row each entry reads, or None (one entry a row)
    final_b: np.ndarray    # (terminal entries,) b and l of the final_mask's entries of k
    final_l: np.ndarray
    final_row: np.ndarray  # the terminal row each of them reads
    nf: int                # distinct terminal states (rows n: of the STOP net's input)
    nets: object           # the pair cache of the action and STOP nets (NETS.mlp_pair_forward)
    dist: object           # the action distribution's cache
    logit: np.ndarray      # (n + nf,) the STOP logits
    x_rows: np.ndarray     # (n,) flat b * T + t of the rows (for the image core's gradient)
    final_rows: np.ndarray  # (nf,) b of the terminal rows


class ScoreCache(NamedTuple):
    """evaluate's cache for backward."""
    groups: list           # [GroupCache] per sub-task scored
    cfg: object
    params: dict
    core: object           # CoreCache, or None for state vectors


def evaluate(params, cfg, batch, mask, final_mask=None, stop_dropout=None, keep_cache=True):
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
    keep_cache        |                    | False when no gradient follows (scoring only): each
                      |                    | sub-task's activations are freed once its scores are
                      |                    | out, and the cache returned is None
    returns           | (scores, cache)    | scores: {log_act, log_stop, log_go: (B, T, L),
                      |                    | log_final_stop: (B, L) with final_mask}, float64,
                      |                    | 0 outside the mask; the cache feeds `backward`

    batch is a taco_ref.data.Demos or anything with those fields (policy.Inputs). Each sub-task's
    two nets run once on the distinct states that need them (spec/policy.md §4), in the
    precision of the parameters (net_dtype).
    """
    states, actions, sketch = batch.states, batch.actions, batch.sketch
    final_states = None if final_mask is None else batch.final_state
    B, T, L = mask.shape
    dtype = net_dtype(params)
    out = {name: np.zeros((B, T, L)) for name in ("log_act", "log_stop", "log_go")}
    if final_states is not None:
        out["log_final_stop"] = np.zeros((B, L))
    # the nets' inputs, flushed of float32 subnormals (spec/training.md eq. (12))
    core = None
    if cfg.image_shape is None:
        x_all = features(params, cfg, states, dtype)[0].reshape(B * T, -1)                 # (B*T, D)
        x_final = None if final_states is None else features(params, cfg, final_states, dtype)[0]  # (B, D)
    else:
        # the core runs once on every distinct image a mask entry reads (spec/policy.md §10)
        rows_b, rows_t = np.nonzero(mask.any(axis=2))                                        # (m,)
        f_b = (np.nonzero(final_mask.any(axis=1))[0] if final_states is not None
               else np.zeros(0, np.int64))                                                   # (mf,)
        images = states[rows_b, rows_t]                                                      # (m, H, W, C)
        if f_b.size:
            images = np.concatenate([images, np.asarray(final_states[f_b])])
        feats, core_cache = features(params, cfg, images, dtype)                            # (m + mf, F)
        x_all = np.zeros((B * T, feats.shape[1]), dtype)                                     # (B*T, F)
        x_all[rows_b * T + rows_t] = feats[:rows_b.size]
        x_final = np.zeros((B, feats.shape[1]), dtype)                                       # (B, F)
        x_final[f_b] = feats[rows_b.size:]
        core = CoreCache(core_cache, rows_b * T + rows_t, f_b, B, T)
    # the first layers of the action and STOP nets read the same states: one (K, D, H_a + H_s) stack
    first = (np.concatenate([params["act.W0"], params["stop.W0"]], axis=2),
             np.concatenate([params["act.b0"], params["stop.b0"]], axis=1))
    groups = []
    for k in np.unique(sketch[mask.any(axis=1) | (final_mask if final_states is not None else False)]):
        is_k = sketch == k                                                   # (B, L)
        b, t, entries, row = _rows(mask & is_k[:, None, :])                  # (n,) rows
        x = x_all[b * T + t]                                                 # (n, D)
        n = x.shape[0]
        if final_states is not None:
            fb, fl = np.nonzero(final_mask & is_k)                           # (mf,) entries
            f_rows, f_row = np.unique(fb, return_inverse=True)               # (nf,) distinct b
            x = np.concatenate([x, x_final[f_rows]])                         # (n + nf, D)
        else:
            fb = fl = f_rows = f_row = np.zeros(0, dtype=np.int64)
        # both nets of k; the action net on the n scored rows, the STOP net also on the terminal
        head, logit, net_cache = NETS.mlp_pair_forward(
            _layers(params, "act", k, cfg), _layers(params, "stop", k, cfg), x, n, cfg.activation,
            dropout_b=stop_dropout, first=(first[0][k], first[1][k]))       # (n, A), (n + nf, 1)
        a = actions[b, t]                                                    # (n, A) or (n,)
        if cfg.discrete:
            logp, dist_cache = nn.categorical_logp_forward(head, a)
        elif cfg.learn_sigma:
            logp, dist_cache = nn.gaussian_logstd_forward(head, a, params["act.logstd"][k])
        else:
            logp, dist_cache = nn.gaussian_logpdf_forward(head, a, cfg.sigma)
        log_stop, log_go = nn.log_sigmoid_pair(logit[:, 0])                  # (n + nf,)
        # scatter each row's scores to every entry that reads it
        for name, value in (("log_act", logp), ("log_stop", log_stop[:n]), ("log_go", log_go[:n])):
            out[name][entries] = value if row is None else value[row]
        if final_states is not None:
            out["log_final_stop"][fb, fl] = log_stop[n:][f_row]
        if keep_cache:
            groups.append(GroupCache(k, n, entries, row, fb, fl, f_row, f_rows.size, net_cache, dist_cache,
                                     logit[:, 0], b * T + t, f_rows))
    return out, (ScoreCache(groups, cfg, params, core) if keep_cache else None)


def backward(grads_in, cache):
    """spec/policy.md eq. (5)-(7): gradients of an objective w.r.t. the trainable parameters,
    given its gradients w.r.t. the scores: grads_in has "log_act", "log_stop", "log_go" (B, T, L) and optionally
    "log_final_stop" (B, L). Returns {name: array} for every trainable parameter, in the
    parameters' dtype. A row read by several entries (a sketch naming k twice) gets the sum of
    their gradients.
    """
    cfg, params, core = cache.cfg, cache.params, cache.core
    dtype = net_dtype(params)
    grads = {name: np.zeros_like(params[name]) for name in trainable(params)}
    d_final = grads_in.get("log_final_stop")
    if core is not None:            # the features' gradient, summed over every group that read them
        F = params["act.W0"].shape[1]
        d_all, d_fin = np.zeros((core.B * core.T, F), dtype), np.zeros((core.B, F), dtype)
    for g in cache.groups:
        k, n, entries, row, nf = g.k, g.n, g.entries, g.row, g.nf
        # action net: d logp -> d head
        # float64 gradients become float32 here: flushed of subnormals (spec/training.md eq. (12))
        d_act = nn.flush_subnormals(_sum_rows(grads_in["log_act"][entries], row, n).astype(dtype, copy=False))
        if cfg.learn_sigma:
            d_head, d_logstd = nn.gaussian_logstd_backward(d_act, g.dist)   # (n, A), (A,)
            grads["act.logstd"][k] += d_logstd
        else:
            d_head = (nn.categorical_logp_backward if cfg.discrete else nn.gaussian_logpdf_backward)(
                d_act, g.dist)                                           # (n, A)
        # STOP net: d log sigma(g)/dg = sigma(-g), d log sigma(-g)/dg = -sigma(g)
        d_stop = _sum_rows(grads_in["log_stop"][entries], row, n)            # (n,)
        d_go = _sum_rows(grads_in["log_go"][entries], row, n)                # (n,)
        if d_final is not None and nf:
            d_stop = np.concatenate([d_stop, np.bincount(g.final_row, d_final[g.final_b, g.final_l], minlength=nf)])
            d_go = np.concatenate([d_go, np.zeros(nf)])
        d_stop = nn.flush_subnormals(d_stop.astype(dtype, copy=False))
        d_go = nn.flush_subnormals(d_go.astype(dtype, copy=False))
        p_stop = nn.sigmoid(g.logit)                                           # (n + nf,)
        d_logit = d_stop * (1.0 - p_stop) - d_go * p_stop
        # both nets at once; their first layers share one GEMM
        if core is None:
            act_grads, stop_grads = NETS.mlp_pair_backward(d_head, d_logit[:, None], g.nets)
        else:
            act_grads, stop_grads, dx = NETS.mlp_pair_backward(d_head, d_logit[:, None], g.nets,
                                                             input_grad=True)       # dx (n + nf, F)
            d_all[g.x_rows] += dx[:n]           # the group's rows are distinct (b, t)
            d_fin[g.final_rows] += dx[n:]
        _accumulate(grads, "act", k, act_grads)
        _accumulate(grads, "stop", k, stop_grads)
    if core is not None:            # one backward through the shared core, spec/policy.md eq. (16)
        d_feats = np.concatenate([d_all[core.rows], d_fin[core.final_b]])                  # (m + mf, F)
        _, core_grads = nn.convnet_backward(d_feats, core.cache)
        for i, (dW, db) in enumerate(core_grads):
            grads[f"core.W{i}"] += dW
            grads[f"core.b{i}"] += db
    return grads


def _accumulate(grads, head, k, layer_grads):
    for i, (dW, db) in enumerate(layer_grads):
        grads[f"{head}.W{i}"][k] += dW
        grads[f"{head}.b{i}"][k] += db


# ----------------------------------------------------------------------------------------
# Acting: the policy maths used by evaluation and by the ROS bridge, testable without ROS.
# ----------------------------------------------------------------------------------------

def _one_input(params, cfg, state):
    """(1, F) what the nets read for one state: the normalised vector (D,), or the core's
    features of one image (H, W, C)."""
    if cfg.image_shape is None:
        return normalise(params, np.asarray(state, dtype=np.float64))[None]
    image = np.asarray(state)
    if image.shape != tuple(cfg.image_shape):
        raise ValueError(f"state: expected an image of shape {tuple(cfg.image_shape)}, got {image.shape}")
    return features(params, cfg, image[None])[0]


def view_decision(params, cfg, subtask, views):
    """(pi_STOP, action) of sub-policy `subtask` averaged over views (n, D) of one state, state
    vectors with continuous actions only; spec/evaluation.md eq. (8): the mean of
    pi_k(STOP | v) over the views and the mean of the action means. One forward pass per net
    for all n rows."""
    if cfg.image_shape is not None or cfg.discrete:
        raise ValueError("views: only for state vectors with continuous actions")
    views = np.asarray(views, dtype=np.float64)
    if views.ndim != 2 or views.shape[1] != cfg.state_dim or not len(views):
        raise ValueError(f"views: expected an (n, {cfg.state_dim}) array with n >= 1, got {views.shape}")
    x = normalise(params, views)                                             # (n, D)
    logit, _ = NETS.mlp_forward(_layers(params, "stop", subtask, cfg), x, cfg.activation)   # (n, 1)
    head, _ = NETS.mlp_forward(_layers(params, "act", subtask, cfg), x, cfg.activation)     # (n, A)
    return float(nn.sigmoid(logit[:, 0]).mean()), head.mean(axis=0)


def act(params, cfg, subtask, state, stop_threshold=0.5, rng=None):
    """One control decision of sub-policy `subtask` in `state` (D,); spec/policy.md eq. (8).

    Returns (stop, action) = (stops(...), action(...)): see those two.
    """
    return stops(params, cfg, subtask, state, stop_threshold), action(params, cfg, subtask, state, rng)


def stops(params, cfg, subtask, state, stop_threshold=0.5):
    """True when sub-policy `subtask` emits STOP in `state` (D,): pi_k(STOP | s) > stop_threshold."""
    return stop_probability(params, cfg, subtask, state) > stop_threshold


def stop_probability(params, cfg, subtask, state):
    """pi_k(STOP | s) of sub-policy k = `subtask` in `state` (D,), or an image (H, W, C), a float;
    spec/policy.md eq. (8)."""
    x = _one_input(params, cfg, state)                                       # (1, F)
    logit, _ = NETS.mlp_forward(_layers(params, "stop", subtask, cfg), x, cfg.activation)
    return float(nn.sigmoid(logit[0, 0]))


def action_head(params, cfg, subtask, states):
    """(n, A) the action net f_k of sub-policy k = `subtask` on states (n,) + the state shape:
    the means (continuous) or the logits (discrete) of pi_k(a | s); spec/policy.md eq. (1)."""
    x = features(params, cfg, np.asarray(states))[0]                        # (n, F)
    head, _ = NETS.mlp_forward(_layers(params, "act", subtask, cfg), x, cfg.activation)
    return head                                                              # (n, A)


def action(params, cfg, subtask, state, rng=None):
    """The action of sub-policy `subtask` in `state` (D,): the mean (continuous, shape (A,)); for
    discrete actions (an int) the most probable one (rng None) or one draw from pi_k(a | s) with
    the numpy Generator rng, exactly one rng.choice per call (a deterministic policy in a grid
    world loops for ever once it revisits a state; spec/evaluation.md §1)."""
    x = _one_input(params, cfg, state)                                       # (1, F)
    head, _ = NETS.mlp_forward(_layers(params, "act", subtask, cfg), x, cfg.activation)
    if not cfg.discrete:
        return head[0]
    if rng is None:
        return int(np.argmax(head[0]))
    p = np.exp(head[0] - head[0].max())                                      # (A,)
    return int(rng.choice(p.size, p=p / p.sum()))

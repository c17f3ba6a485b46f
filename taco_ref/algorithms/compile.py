"""CompILE (Kipf et al., "CompILE: Compositional Imitation Learning and Execution", ICML 2019),
with the sketch as its latents; spec/compile.md.

CompILE segments a demonstration with soft boundaries: boundary i (where segment i + 1 starts)
is a relaxed categorical sample over time steps (Gumbel-softmax), each step belongs to segment
i with the soft mask built from the cumulative boundary distributions, segment i's decoder
reconstructs the actions weighted by that mask, and a KL term pulls the first segment's length
towards a Poisson prior. Given a sketch, segment i's latent is known: sub-task tau_i, whose
sub-policy (action and STOP nets) is the decoder. The boundary model is a net of its own
("cmp.", an MLP on concat(normalised s_t, a_t) with one score per sub-task): boundary i reads the
score of tau_i, masked softly by the earlier boundaries as CompILE's encoder is masked by them.
Trained jointly with the sub-policies in one stage, "policy" (spec/compile.md eq. (1)-(8)).

Symbol | Shape     | Meaning
B, T   |           | batch, padded time
L      |           | padded sketch length (segments); boundaries i = 0 .. L_b - 2
K      |           | sub-tasks
u      | (B, T, K) | boundary scores of the net
y      | (L-1, B, T) | relaxed boundary samples y_i(t): segment i + 1 starts at t
C      | (L-1, B, T) | cumulative sums of y (segment i + 1 has started by t)
m      | (B, T, L) | soft segment masks
S, G   | (B, T, L) | soft STOP and GO weights of the transition into t
"""
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from taco_ref import lattice, nn, objectives, policy
from taco_ref.algorithms import SUB_POLICIES, Algorithm, Stage, register, stop_dropout
from taco_ref.limits import check_sizes

PREFIX = "cmp."
EPS = 1e-6
"""Floor inside log(C_j + EPS), the earlier boundaries' mask on boundary i's scores (eq. (2)):
before boundary j a later boundary's score drops by up to -log(EPS) = 13.8."""
NEG = -1e30
"""Score of a time step where a boundary cannot be (t = 0, t >= T_b, or no boundary)."""


@dataclass
class CompileConfig:
    """CompILE's own config fields."""

    compile_hidden: list = field(default_factory=lambda: [64])
    """Hidden sizes of the boundary net (an MLP on the normalised state and the action)."""
    compile_beta: float = 0.1
    """Weight beta_b of the KL term of the first boundary against the Poisson length prior
    (spec/compile.md eq. (7)); CompILE's default 0.1."""
    compile_temperature: float = 1.0
    """Temperature of the Gumbel-softmax relaxation of the boundaries (eq. (1)); CompILE's 1."""
    compile_prior_rate: float = 0.0
    """Rate lambda of the Poisson prior on a segment's length in steps; 0 = the training set's
    mean T_b / L_b (a length prior in the data's own units)."""

    def check(self):
        check_sizes("compile_hidden", self.compile_hidden)
        if not 0.0 <= self.compile_beta < float("inf"):
            raise ValueError(f"compile_beta must be a finite number >= 0, got {self.compile_beta!r}")
        if not 1e-3 <= self.compile_temperature <= 1e3:
            raise ValueError(f"compile_temperature must be a number in [0.001, 1000], got "
                             f"{self.compile_temperature!r}")
        if not 0.0 <= self.compile_prior_rate <= 1e6:
            raise ValueError(f"compile_prior_rate must be a number in [0, 1e6] (0: the data's mean "
                             f"segment length), got {self.compile_prior_rate!r}")


# ----------------------------------------------------------------------------------------
# The boundary net: u = MLP(concat(normalised s_t, a_t)), one score per sub-task.
# ----------------------------------------------------------------------------------------

def _layers(params):
    n = sum(1 for k in params if k.startswith(PREFIX + "W"))
    return [(params[f"{PREFIX}W{i}"], params[f"{PREFIX}b{i}"]) for i in range(n)]


def scores_forward(params, batch, discrete, n_actions):
    """u (B, T, K) float64 and the cache for scores_backward; spec/compile.md eq. (2)."""
    feats = objectives.ctc_features(params, batch, discrete, n_actions)     # (B, T, D + A)
    return nn.mlp_forward(_layers(params), feats, "relu")


def scores_backward(du, cache):
    """{cmp.W<i>, cmp.b<i>} gradients from d loss / du (B, T, K)."""
    _, layer_grads = nn.mlp_backward(du, cache, input_grad=False)
    grads = {}
    for i, (dW, db) in enumerate(layer_grads):
        grads[f"{PREFIX}W{i}"], grads[f"{PREFIX}b{i}"] = dW, db
    return grads


# ----------------------------------------------------------------------------------------
# Soft segmentation: boundaries -> masks -> STOP and GO weights, and back.
# ----------------------------------------------------------------------------------------

def segment_weights(C, y, traj_len, L):
    """m, S, G (B, T, L) from the cumulative boundaries C and the boundaries y (L-1, B, T);
    spec/compile.md eq. (3)-(5):
      m_i(t) = (1 - C_i(t)) prod_{j<i} C_j(t)    (C_i = 0 where boundary i does not exist)
      S_i(t) = m_i(t-1) y_i(t),  G_i(t) = m_i(t-1) m_i(t)   for 1 <= t < T_b.
    For one-hot y these are the indicators of the hard segmentation's path (objectives.bc)."""
    B, T = traj_len.shape[0], C.shape[2]
    in_t = (np.arange(T)[None, :] < traj_len[:, None]).astype(float)        # (B, T)
    m = np.zeros((B, T, L))
    prod = np.ones((B, T))                                                    # prod_{j<i} C_j
    for i in range(L):
        own = 1.0 - C[i] if i < C.shape[0] else 1.0
        m[:, :, i] = own * prod * in_t
        if i < C.shape[0]:
            prod = prod * C[i]
    S, G = np.zeros_like(m), np.zeros_like(m)
    if C.shape[0]:
        S[:, 1:, :C.shape[0]] = m[:, :-1, :C.shape[0]] * np.moveaxis(y[:, :, 1:], 0, 2)
    G[:, 1:] = m[:, :-1] * m[:, 1:]
    return m, S, G


def segment_weights_backward(dm, dS, dG, C, y, m, traj_len):
    """(dC, dy) (L-1, B, T) from the gradients of m, S, G (B, T, L); the chain rule of
    segment_weights, spec/compile.md eq. (9)."""
    n, B, T = C.shape
    L = m.shape[2]
    in_t = (np.arange(T)[None, :] < traj_len[:, None]).astype(float)        # (B, T)
    dm = dm.copy()
    dy = np.zeros_like(y)
    # S_i(t) = m_i(t-1) y_i(t)
    dm[:, :-1, :n] += dS[:, 1:, :n] * np.moveaxis(y[:, :, 1:], 0, 2)
    dy[:, :, 1:] += np.moveaxis(dS[:, 1:, :n] * m[:, :-1, :n], 2, 0)
    # G_i(t) = m_i(t-1) m_i(t)
    dm[:, :-1] += dG[:, 1:] * m[:, 1:]
    dm[:, 1:] += dG[:, 1:] * m[:, :-1]
    # m_i = in_t (1 - C_i) prod_{j<i} C_j
    dC = np.zeros_like(C)
    for i in range(L):
        g = dm[:, :, i] * in_t                                               # (B, T)
        own = 1.0 - C[i] if i < n else 1.0
        if i < n:
            dC[i] -= g * np.prod(C[:i], axis=0) if i else g
        for j in range(min(i, n)):
            others = np.prod(np.delete(C[:i], j, axis=0), axis=0) if i > 1 else 1.0
            dC[j] += g * own * others
    return dC, dy


def _poisson_log_prior(rate, traj_len, T):
    """(B, T) log of the Poisson(rate) prior on the first segment's length t, normalised over
    1 <= t < T_b (NEG elsewhere); spec/compile.md eq. (6)."""
    t = np.arange(T, dtype=float)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, T, dtype=float)))])   # (T,) log t!
    logp = t * np.log(rate) - rate - log_factorial                          # (T,)
    ok = (t[None, :] >= 1) & (t[None, :] < traj_len[:, None])               # (B, T)
    logp = np.where(ok, logp[None, :], NEG)
    top = logp.max(axis=1, keepdims=True)
    return np.where(ok, logp - top - np.log(np.exp(logp - top).sum(axis=1, keepdims=True)), NEG)


class SegmentsCache(NamedTuple):
    """segments_forward's cache for segments_backward."""
    z: np.ndarray          # (L-1, B, T) each boundary's scores before noise and temperature
    y: np.ndarray          # (L-1, B, T) the relaxed boundaries
    C: np.ndarray          # (L-1, B, T) their cumulative sums
    m: np.ndarray          # (B, T, L) the segment masks
    sketch: np.ndarray
    traj_len: np.ndarray
    sketch_len: np.ndarray
    temperature: float
    K: int


def segments_forward(u, sketch, traj_len, sketch_len, noise, temperature):
    """The relaxed boundaries y and cumulative sums C (L-1, B, T), masks and weights m, S, G
    (B, T, L), and a cache; spec/compile.md eq. (1)-(5).

    z_i(t) = u_t[tau_i] + sum_{j<i} log(C_j(t) + EPS) on 1 <= t < T_b (boundary i exists when
    i < L_b - 1); y_i = softmax((z_i + noise_i) / temperature) over t; C_i = cumsum_t y_i.
    noise: (L-1, B, T) Gumbel noise, or None (zeros: the held-out loss, deterministic)."""
    B, T, K = u.shape
    L = sketch.shape[1]
    n = max(L - 1, 0)
    t = np.arange(T)
    y, C, z = np.zeros((n, B, T)), np.zeros((n, B, T)), np.zeros((n, B, T))
    rows = np.arange(B)
    for i in range(n):
        ok = (t[None, :] >= 1) & (t[None, :] < traj_len[:, None]) & (i < sketch_len - 1)[:, None]   # (B, T)
        zi = u[rows, :, np.clip(sketch[:, i], 0, K - 1)]                     # (B, T)
        for j in range(i):
            zi = zi + np.log(C[j] + EPS)
        z[i] = np.where(ok, zi, NEG)
        w = (z[i] + (0.0 if noise is None else noise[i])) / temperature
        w = np.where(ok, w, NEG)
        w = w - w.max(axis=1, keepdims=True)
        e = np.where(ok, np.exp(w), 0.0)
        y[i] = e / np.maximum(e.sum(axis=1, keepdims=True), 1e-300)         # 0 on rows without boundary i
        C[i] = np.cumsum(y[i], axis=1)
    m, S, G = segment_weights(C, y, traj_len, L)
    return (y, C, m, S, G), SegmentsCache(z, y, C, m, sketch, traj_len, sketch_len, temperature, K)


def segments_backward(dm, dS, dG, cache, d_z0=None):
    """d loss / du (B, T, K) from the gradients of m, S, G (and, when given, a direct gradient
    d_z0 (B, T) of boundary 0's scores: the KL term); spec/compile.md eq. (9)-(10)."""
    z, y, C, m, sketch, traj_len, sketch_len, temperature, K = cache
    n, B, T = y.shape
    dC, dy = segment_weights_backward(dm, dS, dG, C, y, m, traj_len)
    du = np.zeros((B, T, K))
    rows = np.arange(B)
    for i in reversed(range(n)):
        dyi = dy[i] + np.cumsum(dC[i][:, ::-1], axis=1)[:, ::-1]             # C_i = cumsum y_i
        dz = y[i] * (dyi - (y[i] * dyi).sum(axis=1, keepdims=True)) / temperature   # softmax
        if i == 0 and d_z0 is not None:
            dz = dz + d_z0
        np.add.at(du, (rows[:, None], np.arange(T)[None, :], np.clip(sketch[:, i], 0, K - 1)[:, None]), dz)
        for j in range(i):                                                   # the mask log(C_j + EPS)
            dC[j] += dz / (C[j] + EPS)
    return du


def kl_forward(z0, traj_len, sketch_len, rate):
    """(L_b - 1) KL(q_0 || prior) per demonstration summed, with q_0 = softmax(z_0) over
    1 <= t < T_b (no noise), and the gradient d KL / d z_0 (B, T); spec/compile.md eq. (7), (10)."""
    B, T = z0.shape
    ok = (np.arange(T)[None, :] >= 1) & (np.arange(T)[None, :] < traj_len[:, None]) & (sketch_len >= 2)[:, None]
    w = np.where(ok, z0, NEG)
    w = w - w.max(axis=1, keepdims=True)
    log_q = w - np.log(np.where(ok, np.exp(w), 0.0).sum(axis=1, keepdims=True).clip(1e-300))
    q = np.where(ok, np.exp(log_q), 0.0)
    r = np.where(ok, log_q - _poisson_log_prior(rate, traj_len, T), 0.0)     # (B, T)
    scale = np.maximum(sketch_len - 1, 0).astype(float)[:, None]             # (B, 1)
    kl = float((scale * q * r).sum())
    d_z0 = scale * q * (r - (q * r).sum(axis=1, keepdims=True))
    return kl, d_z0


# ----------------------------------------------------------------------------------------
# The objective and its stage
# ----------------------------------------------------------------------------------------

def loss(params, policy_cfg, batch, discrete, rate, beta, temperature, noise=None, stop_dropout=None):
    """CompILE's negative ELBO with the sketch as latents, summed over the batch, and its
    gradient; spec/compile.md eq. (8):
      -sum_{t,i} [m_i(t) log pi(a_t) + S_i(t) log STOP + G_i(t) log GO] + beta KL."""
    u, u_cache = scores_forward(params, batch, discrete, policy_cfg.action_dim)
    (y, C, m, S, G), seg_cache = segments_forward(u, batch.sketch, batch.traj_len, batch.sketch_len,
                                                  noise, temperature)
    mask = (m > 0) | (S > 0) | (G > 0)
    scores, p_cache = policy.evaluate(params, policy_cfg, batch, mask, stop_dropout=stop_dropout)
    nll = -float((m * scores["log_act"]).sum() + (S * scores["log_stop"]).sum() + (G * scores["log_go"]).sum())
    grads = policy.backward({"log_act": -m, "log_stop": -S, "log_go": -G}, p_cache)
    kl, d_z0 = (0.0, None)
    if y.shape[0]:
        kl, d_z0 = kl_forward(seg_cache.z[0], batch.traj_len, batch.sketch_len, rate)
        d_z0 = beta * d_z0
    du = segments_backward(-scores["log_act"], -scores["log_stop"], -scores["log_go"], seg_cache, d_z0)
    grads.update(scores_backward(du, u_cache))
    return nll + beta * kl, grads


def decode(params, batch, discrete, n_actions):
    """CompILE's hard segmentation (B, T) sketch positions: boundary i at the argmax over
    1 <= t < T_b of z_i with the earlier boundaries' masks hard (C_j(t) = [t >= boundary j]),
    the zero-temperature limit of eq. (1)-(2); spec/compile.md eq. (11)."""
    u, _ = scores_forward(params, batch, discrete, n_actions)
    B, T, K = u.shape
    L = batch.sketch.shape[1]
    t = np.arange(T)
    hard = []
    positions = np.zeros((B, T), dtype=np.int64)
    rows = np.arange(B)
    for i in range(max(L - 1, 0)):
        exists = i < batch.sketch_len - 1                                    # (B,)
        ok = (t[None, :] >= 1) & (t[None, :] < batch.traj_len[:, None])
        zi = u[rows, :, np.clip(batch.sketch[:, i], 0, K - 1)]
        for H in hard:
            zi = zi + np.log(H + EPS)
        start = np.argmax(np.where(ok, zi, NEG), axis=1)                     # (B,)
        H = (t[None, :] >= start[:, None]).astype(float) * exists[:, None]  # (B, T)
        hard.append(H)
        positions += H.astype(np.int64)
    positions = np.minimum(positions, np.maximum(batch.sketch_len - 1, 0)[:, None])
    return np.where(t[None, :] < batch.traj_len[:, None], positions, -1)


def _init(learner, demos, rng):
    """The boundary net ("cmp."), drawn after the sub-policies. It reads state vectors: image
    states are refused (no convolutional core of its own is defined for it)."""
    cfg = learner.cfg
    if demos.image_shape is not None:
        raise ValueError(f"algo compile: its boundary net reads state vectors, these states are images "
                         f"{list(demos.image_shape)}; train taco, gtbc, ctcbc-mlp or ctcbc-gru on them")
    sizes = [demos.states.shape[2] + learner.policy_cfg.action_dim] + list(cfg.compile_hidden) + [len(demos.vocab)]
    params = {}
    for i, (W, b) in enumerate(nn.mlp_init(rng, sizes)):
        params[f"{PREFIX}W{i}"], params[f"{PREFIX}b{i}"] = W, b
    return params


def _constants(cfg, demos):
    """The Poisson prior's rate (spec/compile.md): compile_prior_rate, or the training set's
    mean steps per sub-task."""
    return {"rate": cfg.compile_prior_rate or float(np.mean(demos.traj_len / demos.sketch_len))}


def _loss(learner, batch, rng, epoch, train):
    cfg = learner.cfg
    dropout = stop_dropout(cfg, rng, epoch, train)
    noise = None
    if train and rng is not None:
        noise = rng.gumbel(size=(max(batch.sketch.shape[1] - 1, 0),) + batch.states.shape[:2])
    return loss(learner.params, learner.policy_cfg, batch, learner.discrete, learner.constants["rate"], cfg.compile_beta,
                cfg.compile_temperature, noise, dropout)


def _shapes(params, policy_cfg, config):
    """{name: shape} of the boundary net whose hidden sizes the weights show."""
    layers = 0
    while f"{PREFIX}W{layers}" in params:
        layers += 1
    if layers < 2:
        raise ValueError(f"the CompILE boundary net needs {PREFIX}W0, {PREFIX}W1, ... (at least one "
                         f"hidden layer), got {layers} weight matrices")
    hidden = [params[f"{PREFIX}W{i}"].shape[-1] for i in range(layers - 1)]
    if "compile_hidden" in config and list(config["compile_hidden"]) != hidden:
        raise ValueError(f"the CompILE boundary net's hidden sizes are {hidden}, config.compile_hidden "
                         f"{config['compile_hidden']!r}")
    sizes = [policy_cfg.state_dim + policy_cfg.action_dim] + hidden + [policy_cfg.n_subtasks]
    shapes = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        shapes[f"{PREFIX}W{i}"], shapes[f"{PREFIX}b{i}"] = (fan_in, fan_out), (fan_out,)
    return shapes


def _align(model, demos, decoders):
    """The sub-policies' TACO lattice under every decoder (as GT-BC's), and CompILE's own hard
    segmentation as "boundaries" (spec/compile.md eq. (11))."""
    out = lattice.lattice_alignments(model, demos, decoders)
    out["boundaries"] = decode(model.params, demos, demos.discrete, model.policy.action_dim)
    return out


POLICY = Stage("policy", SUB_POLICIES + (PREFIX,), _loss)

register(Algorithm(
    name="compile", label="CompILE", section=CompileConfig, stages=lambda cfg: (POLICY,), init=_init,
    constants=_constants, shapes=_shapes, align=_align, extra_alignments=("boundaries",), order=4))

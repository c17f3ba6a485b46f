"""Training objectives: TACO, GT-BC, and the two stages of CTC-BC; spec/objectives.md.

Every objective returns the loss summed over the batch and its gradient with respect to the
parameters; the trainer divides both by the number of valid time steps in the batch, so losses
are per-step negative log-likelihoods, comparable across batch sizes and trajectory lengths.

Symbol | Shape     | Meaning
B, T   |           | batch, padded time
L      |           | padded sketch length
K      |           | number of sub-tasks
"""
from typing import NamedTuple

import numpy as np

from taco_ref import align, nn, policy


def valid_mask(batch):
    """(B, T, L) bool: t < T_b and l < L_b."""
    T, L = batch.states.shape[1], batch.sketch.shape[1]
    in_t = np.arange(T)[None, :, None] < batch.traj_len[:, None, None]
    in_l = np.arange(L)[None, None, :] < batch.sketch_len[:, None, None]
    return in_t & in_l


def _final_mask(batch, terminal_stop):
    """(B, L) sketch steps that get a terminal STOP score, or None when the option is off."""
    if not terminal_stop:
        return None
    return np.arange(batch.sketch.shape[1])[None, :] < batch.sketch_len[:, None]


# ----------------------------------------------------------------------------------------
# TACO: maximise log p(tau, a | s) (paper eq. (8)) through the alignment core.
# ----------------------------------------------------------------------------------------

def taco(params, cfg, batch, terminal_stop=False, stop_dropout=None, temperature=1.0):
    """-sum_b log p(tau_b, a_b | s_b) and its gradient; spec/objectives.md eq. (1).

    The alignment core returns d loglik / d (log act, log stop, log go) as posteriors; the
    policy's backward chains them to the parameters.

    temperature > 1 gives the tempered objective of spec/objectives.md eq. (7):
    -sum_b temp * log sum_z exp(log p(z) / temp), whose gradient with respect to each score is
    minus the posterior of the tempered lattice (scores divided by temp): the same posterior
    machinery, flatter over alignments. temperature = 1 is eq. (1) exactly.
    """
    if not temperature >= 1.0:
        raise ValueError(f"temperature must be >= 1, got {temperature!r}")
    scores, cache = policy.evaluate(params, cfg, batch, valid_mask(batch),
                                    _final_mask(batch, terminal_stop), stop_dropout)
    inv = 1.0 / temperature
    log_final = scores.get("log_final_stop")
    res = align.taco_forward_backward(scores["log_act"] * inv, scores["log_stop"] * inv,
                                      scores["log_go"] * inv, batch.traj_len, batch.sketch_len,
                                      None if log_final is None else log_final * inv)
    # d (temp * loglik(x / temp)) / dx = loglik'(x / temp): the tempered posteriors, unscaled
    d = {"log_act": -res.d_act, "log_stop": -res.d_stop, "log_go": -res.d_go}
    if terminal_stop:
        d["log_final_stop"] = -res.d_final_stop
    return -temperature * res.loglik.sum(), policy.backward(d, cache)


def taco_viterbi(params, cfg, batch, terminal_stop=False, stop_dropout=None):
    """Hard-EM TACO: each sub-policy trained on the lattice's own most probable alignment;
    spec/objectives.md eq. (9): -sum_b max_z s_b(z) and its gradient.

    One pass of the nets scores every valid entry as objectives.taco does; align.align_viterbi
    decodes the best path from those scores, and the gradient is minus that path's indicators
    (path_indicators), handed to the same backward. The path is piecewise constant in the
    parameters, so away from ties this is the exact gradient of the max (and BC on the decoded
    path, objectives.bc, gives the same loss and gradient with a second pass of the nets).
    """
    scores, cache = policy.evaluate(params, cfg, batch, valid_mask(batch),
                                    _final_mask(batch, terminal_stop), stop_dropout)
    path = align.align_viterbi(scores["log_act"], scores["log_stop"], scores["log_go"],
                               batch.traj_len, batch.sketch_len)
    indicators = path_indicators(path, batch.traj_len, batch.sketch_len, batch.sketch.shape[1], terminal_stop)
    loglik, d = _indicated(scores, *indicators, terminal_stop)
    return -loglik, policy.backward(d, cache)


def even_split_labels(traj_len, sketch_len, T):
    """The label-free warm-up's segmentation; spec/objectives.md eq. (8).

    Each demonstration's T_b steps are cut into its sketch's L_b segments of (nearly) equal
    length: y_t = floor(t L_b / T_b) for 0 <= t < T_b, -1 in padding. Segments differ in length
    by at most one step, every one is non-empty when T_b >= L_b, and the labels are monotone
    from 0 to L_b - 1, so they are an alignment path (spec/align.md eq. (1)).

    Symbol     | Shape  | Meaning
    traj_len   | (B,)   | T_b
    sketch_len | (B,)   | L_b
    returns    | (B, T) | sketch position per step
    """
    t = np.arange(T)[None, :]                                                # (1, T)
    labels = (t * sketch_len[:, None]) // np.maximum(traj_len[:, None], 1)   # (B, T)
    return np.where(t < traj_len[:, None], labels, -1)


# ----------------------------------------------------------------------------------------
# Behavioural cloning on a given segmentation: GT-BC (ground truth) and CTC-BC (CTC's).
# ----------------------------------------------------------------------------------------

def path_indicators(labels, traj_len, sketch_len, L, terminal_stop=False):
    """Which scores a labelled segmentation uses; spec/objectives.md eq. (2).

    labels (B, T) sketch positions per step. At t = 0 the labelled sub-policy acts; at t >= 1
    it acts, and the transition is a STOP of the previous step's sub-policy when the label
    changed, a GO of the current one otherwise. For a monotone labelling this is exactly the
    path's log-probability in the TACO lattice (spec/align.md eq. (2)); a non-monotone one (an
    argmax alignment may be) is scored by the same rule. Returns float (B, T, L) indicator
    arrays act, stop, go and (B, L) final.
    """
    B, T = labels.shape
    in_t = np.arange(T)[None, :] < traj_len[:, None]                         # (B, T)
    b, t = np.nonzero(in_t)
    act = np.zeros((B, T, L))
    act[b, t, labels[b, t]] = 1.0
    stop, go = np.zeros((B, T, L)), np.zeros((B, T, L))
    b, t = np.nonzero(in_t[:, 1:])
    t = t + 1
    prev, cur = labels[b, t - 1], labels[b, t]
    moved = prev != cur
    stop[b[moved], t[moved], prev[moved]] = 1.0
    go[b[~moved], t[~moved], cur[~moved]] = 1.0
    final = np.zeros((B, L))
    if terminal_stop:
        rows = np.arange(B)
        final[rows, labels[rows, traj_len - 1]] = 1.0
    return act, stop, go, final


def bc(params, cfg, batch, labels, terminal_stop=False, stop_dropout=None):
    """Modular BC on the segmentation `labels`; spec/objectives.md eq. (2) (paper eq. (2), with
    the STOP action of Sec. 3.2): -sum of the labelled scores, and its gradient. GT-BC passes
    batch.labels."""
    L = batch.sketch.shape[1]
    act, stop, go, final = path_indicators(labels, batch.traj_len, batch.sketch_len, L, terminal_stop)
    mask = (act + stop + go) > 0
    scores, cache = policy.evaluate(params, cfg, batch, mask, final > 0 if terminal_stop else None,
                                    stop_dropout)
    loglik, d = _indicated(scores, act, stop, go, final, terminal_stop)
    return -loglik, policy.backward(d, cache)


def _indicated(scores, act, stop, go, final, terminal_stop):
    """The log-likelihood of the scores path_indicators selects, and its gradient with respect
    to each score array (the indicators; d is handed negated, for the loss)."""
    loglik = (act * scores["log_act"]).sum() + (stop * scores["log_stop"]).sum() \
        + (go * scores["log_go"]).sum()
    d = {"log_act": -act, "log_stop": -stop, "log_go": -go}
    if terminal_stop:
        loglik += (final * scores["log_final_stop"]).sum()
        d["log_final_stop"] = -final
    return loglik, d


def soft_bc(params, cfg, batch, weights, stop_targets, stop_dropout=None):
    """The alpha-weighted CTC-BC of paper appendix C; spec/objectives.md eq. (4)-(5).

    weights (B, T, L): p_t(l), the normalised CTC forward variables; stop_targets (B, T, L):
    the target probability that sub-policy l does *not* stop at t. Loss:
    -sum_{t,l} p_t(l) log pi_l(a_t|s_t) + p_{t-1}(l) [q log pi_l(GO|s_t) + (1 - q) log pi_l(STOP|s_t)]
    (the STOP term for t >= 1, weighted by the probability that l was active when it decided).
    """
    w_stop = np.zeros_like(weights)              # the sub-policy active at t-1 decides at s_t
    w_stop[:, 1:] = weights[:, :-1] * (np.arange(1, weights.shape[1]) < batch.traj_len[:, None])[..., None]
    mask = (weights > 0) | (w_stop > 0)
    scores, cache = policy.evaluate(params, cfg, batch, mask, stop_dropout=stop_dropout)
    d_act = -weights
    d_go = -w_stop * stop_targets
    d_stop = -w_stop * (1.0 - stop_targets)
    loss = (d_act * scores["log_act"]).sum() + (d_go * scores["log_go"]).sum() \
        + (d_stop * scores["log_stop"]).sum()
    return loss, policy.backward({"log_act": d_act, "log_stop": d_stop, "log_go": d_go}, cache)


def ctc_soft_targets(weights, sketch_len):
    """Stop targets of paper appendix C, eq. (ctc_pl_prob_targets), from p_t(l);
    spec/objectives.md eq. (5).

    With q_l = pi_l(GO | s_{t+1}): p_{t+1}(1) = p_t(1) q_1 and
    p_{t+1}(l+1) = p_t(l+1) q_{l+1} + p_t(l) (1 - q_l), solved for q from l = 1 upward. (The
    appendix prints the l = 1 ratio inverted; this is the solution of its own eq. for p_{t+1}.)
    Targets are clipped to [0, 1] since normalised forward variables satisfy the relations only
    approximately. Returns (B, T, L) with the target for the transition into t at index t.
    """
    B, T, L = weights.shape
    q = np.ones((B, T, L))
    tiny = 1e-12
    for l in range(L):
        prev_p, next_p = weights[:, :-1, l], weights[:, 1:, l]
        if l == 0:
            target = next_p / np.maximum(prev_p, tiny)
        else:
            inflow = weights[:, :-1, l - 1] * (1.0 - q[:, 1:, l - 1])
            target = (next_p - inflow) / np.maximum(prev_p, tiny)
        q[:, 1:, l] = np.clip(target, 0.0, 1.0)
    q[np.broadcast_to(np.arange(L)[None, None, :] >= sketch_len[:, None, None], q.shape)] = 1.0
    return q


# ----------------------------------------------------------------------------------------
# CTC-BC stage 1: a classifier p(k | s_t, a_t) trained with the blank-free CTC (Sec. 4.1).
# ----------------------------------------------------------------------------------------

def ctc_features(params, batch, discrete, n_actions, image_cfg=None, with_cache=False):
    """concat(normalised s_t, a_t) (B, T, D + A); discrete actions as one-hot; 0 in padding
    (the classifier runs on every step, so padding must hold finite numbers). With image
    states (image_cfg: the PolicyConfig, whose image_shape is set), s_t is replaced by the
    features (F,) of the classifier's own convolutional core ("ctc.core.*", computed in its
    weights' dtype: float64, or float32 with ctc_core_dtype) on each valid frame, widened to
    float64: (B, T, F + A). with_cache returns (features, core cache or None)."""
    core = None
    if image_cfg is None or image_cfg.image_shape is None:
        s = policy.normalise(params, batch.states)
    else:
        B, T = batch.states.shape[:2]
        rows_b, rows_t = np.nonzero(np.arange(T)[None, :] < batch.traj_len[:, None])   # (m,) valid
        f, core_cache = policy.features(params, image_cfg, batch.states[rows_b, rows_t],
                                        params["ctc.core.W0"].dtype, prefix="ctc.core.")  # (m, F)
        s = np.zeros((B, T, f.shape[1]))
        s[rows_b, rows_t] = f
        core = CTCCore(core_cache, rows_b, rows_t)
    if discrete:
        a = np.eye(n_actions)[np.clip(batch.actions, 0, n_actions - 1)]
    else:
        a = batch.actions
    feats = np.concatenate([s, a], axis=-1)                                  # (B, T, D + A)
    feats[np.arange(feats.shape[1])[None, :] >= batch.traj_len[:, None]] = 0.0
    return (feats, core) if with_cache else feats


def init_ctc_params(rng, kind, input_dim, hidden, n_subtasks):
    """Classifier parameters under the prefix "ctc.": an MLP (kind "mlp", hidden sizes) or a
    bidirectional GRU with one hidden size followed by a linear read-out (kind "gru")."""
    params = {}
    if kind == "mlp":
        for i, (W, b) in enumerate(nn.mlp_init(rng, [input_dim] + list(hidden) + [n_subtasks])):
            params[f"ctc.W{i}"], params[f"ctc.b{i}"] = W, b
    elif kind == "gru":
        H = hidden[0]
        for direction in ("fwd", "bwd"):
            for name, value in nn.gru_init(rng, input_dim, H).items():
                params[f"ctc.{direction}.{name}"] = value
        (W, b), = nn.mlp_init(rng, [2 * H, n_subtasks])
        params["ctc.out.W"], params["ctc.out.b"] = W, b
    else:
        raise ValueError(f"ctc kind must be 'mlp' or 'gru', got {kind!r}")
    return params


CTC_KINDS = ("mlp", "gru")


def ctc_param_shapes(kind, input_dim, hidden, n_subtasks):
    """{name: shape} of every array init_ctc_params(rng, kind, input_dim, hidden, n_subtasks)
    makes, computed without allocating (model files are checked against it)."""
    if kind == "mlp":
        sizes = [input_dim] + list(hidden) + [n_subtasks]
        shapes = {}
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            shapes[f"ctc.W{i}"], shapes[f"ctc.b{i}"] = (fan_in, fan_out), (fan_out,)
        return shapes
    if kind == "gru":
        H = hidden[0]
        shapes = {f"ctc.{direction}.{name}": shape for direction in ("fwd", "bwd") for name, shape in
                  (("W_x", (input_dim, 3 * H)), ("W_h", (H, 3 * H)), ("b_x", (3 * H,)), ("b_h", (3 * H,)))}
        shapes["ctc.out.W"], shapes["ctc.out.b"] = (2 * H, n_subtasks), (n_subtasks,)
        return shapes
    raise ValueError(f"ctc kind must be 'mlp' or 'gru', got {kind!r}")


def _sub(params, prefix):
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


class CTCCache(NamedTuple):
    """ctc_log_p's cache for ctc_backward."""
    kind: str              # "mlp" or "gru"
    net: object            # mlp_forward's cache, or (bigru_forward's cache, the output layer's)
    softmax: object        # log_softmax_forward's cache


class CTCCore(NamedTuple):
    """ctc_features' image core: its cache and the (b, t) of the valid frames it read."""
    cache: object          # nn.ConvnetCache
    rows_b: np.ndarray     # (m,)
    rows_t: np.ndarray     # (m,)


def ctc_log_p(params, kind, features, traj_len):
    """Per-step class log-probabilities (B, T, K) and a cache for ctc_backward."""
    if kind == "mlp":
        n = sum(1 for k in params if k.startswith("ctc.W"))
        layers = [(params[f"ctc.W{i}"], params[f"ctc.b{i}"]) for i in range(n)]
        logits, net_cache = nn.mlp_forward(layers, features, "relu")
    else:
        h, gru_cache = nn.bigru_forward(_sub(params, "ctc.fwd."), _sub(params, "ctc.bwd."),
                                        features, traj_len)
        logits, out_cache = nn.linear_forward(h, params["ctc.out.W"], params["ctc.out.b"])
        net_cache = (gru_cache, out_cache)
    log_p, sm_cache = nn.log_softmax_forward(logits)
    return log_p, CTCCache(kind, net_cache, sm_cache)


def ctc_backward(d_log_p, cache, params, core=None):
    """The classifier's gradients; with core (the image core's cache from ctc_features), the
    features' gradient goes on through the classifier's convolutional core ("ctc.core.*")."""
    kind, net_cache = cache.kind, cache.net
    d_logits = nn.log_softmax_backward(d_log_p, cache.softmax)
    grads = {}
    if kind == "mlp":
        d_x, layer_grads = nn.mlp_backward(d_logits, net_cache, input_grad=core is not None)
        for i, (dW, db) in enumerate(layer_grads):
            grads[f"ctc.W{i}"], grads[f"ctc.b{i}"] = dW, db
    else:
        gru_cache, out_cache = net_cache
        d_h, grads["ctc.out.W"], grads["ctc.out.b"] = nn.linear_backward(d_logits, out_cache)
        d_x, d_fwd, d_bwd = nn.bigru_backward(d_h, gru_cache)
        grads.update({f"ctc.fwd.{k}": v for k, v in d_fwd.items()})
        grads.update({f"ctc.bwd.{k}": v for k, v in d_bwd.items()})
    if core is not None:
        core_cache, rows_b, rows_t = core.cache, core.rows_b, core.rows_t
        F = int(np.prod(core_cache.out_shape[1:]))                             # the core's output size Ho Wo O
        dtype = params["ctc.core.W0"].dtype
        d_f = d_x[rows_b, rows_t, :F]                                          # (m, F) float64
        if dtype != d_f.dtype:   # into a float32 core: flushed of subnormals (spec/training.md eq. (12))
            d_f = nn.flush_subnormals(d_f.astype(dtype))
        _, core_grads = nn.convnet_backward(d_f, core_cache)
        for i, (dW, db) in enumerate(core_grads):
            grads[f"ctc.core.W{i}"], grads[f"ctc.core.b{i}"] = dW, db
    return grads


def ctc(params, kind, batch, discrete, n_actions, image_cfg=None):
    """-sum_b log p(tau_b | rho_b) of the blank-free CTC and its gradient; spec/objectives.md
    eq. (3) (paper eq. (3)-(7)). image_cfg: see ctc_features."""
    feats, core = ctc_features(params, batch, discrete, n_actions, image_cfg, with_cache=True)
    log_p, cache = ctc_log_p(params, kind, feats, batch.traj_len)
    res = align.ctc_forward_backward(log_p, batch.sketch, batch.traj_len, batch.sketch_len)
    return -res.loglik.sum(), ctc_backward(-res.d_log_p, cache, params, core)


def ctc_alignment(params, kind, batch, discrete, n_actions, decoder="forward_argmax", image_cfg=None):
    """CTC-BC's segmentation of a batch: (B, T) sketch positions (paper Sec. 4.1 uses the argmax
    of the forward variables), and the normalised forward-variable weights p_t(l) (B, T, L)."""
    log_p, _ = ctc_log_p(params, kind, ctc_features(params, batch, discrete, n_actions, image_cfg),
                         batch.traj_len)
    args = (log_p, batch.sketch, batch.traj_len, batch.sketch_len)
    labels = align.CTC_DECODERS[decoder](*args)
    return labels, align.ctc_forward_probabilities(*args)

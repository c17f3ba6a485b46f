"""Per-frame sub-task labels for demonstrations annotated only with their sketches.

Implements spec/interop.md §3: a trained model's TACO lattice on each demonstration gives the
labels (one of the decoders of spec/align.md §7), the posterior of every sketch position, the
posterior probability that a sub-task ends at each step, and one confidence per demonstration;
`segments` cuts a label row into its runs, the unit the dataset formats store.
Plain NumPy, like the rest of the core: the dataset formats live in taco_app.interop.

Symbol | Shape     | Meaning
B      |           | demonstrations in the batch
T      |           | padded trajectory length; row b uses T_b = traj_len[b]
L      |           | padded sketch length; row b uses L_b = sketch_len[b]
"""
from typing import NamedTuple

import numpy as np

from taco_ref import align, evaluate

DECODERS = tuple(align.DECODERS)
"""The decoders a caller may pick (spec/align.md §7); "viterbi" is the default: its labels are
always an alignment path, so every sketch step gets one contiguous, non-empty segment."""
DEFAULT_DECODER = "viterbi"


class Annotation(NamedTuple):
    """What `annotate` finds for a batch of demonstrations (spec/interop.md eq. (1)-(3))."""

    positions: np.ndarray   # (B, T) int64  decoded sketch position per step, -1 in padding
    posterior: np.ndarray   # (B, T, L)     gamma_t(l) = P(z_t = l | tau, actions, states); 0 in padding
    stop: np.ndarray        # (B, T)        P(z_t = z_{t-1} + 1): a sub-task ends before step t; 0 at t = 0
    confidence: np.ndarray  # (B,)          mean over t < T_b of gamma_t(positions[t]), eq. (3)
    loglik: np.ndarray      # (B,)          log p(tau, actions | states) per demonstration
    monotone: np.ndarray    # (B,) bool     positions form an alignment path (spec/data.md eq. (1))


def check_model(model):
    """ValueError unless model aligns with the TACO lattice of its sub-policies (TACO and GT-BC
    models; a CTC-BC model aligns with its classifier, which has no STOP posterior)."""
    if model.ctc_kind:
        raise ValueError(f"--model: a {model.algo} model aligns with its CTC classifier, not with "
                         "sub-policies; annotate with a TACO (or GT-BC) model")


def annotate(model, demos, decoder=DEFAULT_DECODER):
    """The model's labels, posteriors and confidence on demos; spec/interop.md eq. (1)-(3).

    model: a taco_ref.model.Model whose sub-policies score the data (check_model,
    evaluate.check_compatible); demos: a taco_ref.data.Demos (its labels are not read);
    decoder: one of DECODERS. Returns an Annotation.
    """
    check_model(model)
    evaluate.check_compatible(model, demos)
    return annotate_lattice(*evaluate.scores(model, demos), demos.traj_len, demos.sketch_len, decoder)


def annotate_lattice(log_act, log_stop, log_go, traj_len, sketch_len, decoder=DEFAULT_DECODER):
    """annotate on given lattice inputs (as align.taco_forward_backward takes them, (B, T, L)
    each): posterior gamma (spec/align.md eq. (12)), the STOP posterior of spec/interop.md
    eq. (2), the decoder's positions and the confidence of eq. (3). Every row must have an
    alignment (L_b <= T_b and finite scores); ValueError naming the first that has none."""
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {list(DECODERS)}, got {decoder!r}")
    lattice, lengths = (log_act, log_stop, log_go), (traj_len, sketch_len)
    fb = align.taco_forward_backward(*lattice, *lengths)
    if not np.isfinite(fb.loglik).all():
        b = int(np.nonzero(~np.isfinite(fb.loglik))[0][0])
        raise ValueError(f"demonstration {b}: the model gives its sketch no alignment "
                         f"(log-likelihood {fb.loglik[b]}); is the sketch right for it?")
    positions = align.DECODERS[decoder](*lattice, *lengths)                  # (B, T)
    B, T, L = fb.posterior.shape
    traj_len = np.asarray(traj_len)
    stop = fb.d_stop.sum(axis=2)                                             # (B, T), eq. (2)
    valid = np.arange(T)[None, :] < traj_len[:, None]                        # (B, T)
    picked = np.take_along_axis(fb.posterior, np.maximum(positions, 0)[:, :, None], axis=2)[:, :, 0]
    confidence = np.where(valid, picked, 0.0).sum(axis=1) / traj_len         # (B,), eq. (3)
    return Annotation(positions, fb.posterior, stop, confidence, fb.loglik,
                      is_alignment(positions, traj_len, np.asarray(sketch_len)))


def is_alignment(positions, traj_len, sketch_len):
    """(B,) bool: row b's first T_b positions start at 0, rise by 0 or 1 per step and end at
    L_b - 1 (spec/data.md eq. (1)), as Viterbi's always do and the argmax decoders' almost always."""
    positions = np.asarray(positions)
    B, T = positions.shape
    valid = np.arange(T)[None, :] < traj_len[:, None]
    steps = np.diff(positions, axis=1)
    ok = ~valid[:, 1:] | (steps == 0) | (steps == 1)
    last = positions[np.arange(B), traj_len - 1]
    return (positions[:, 0] == 0) & ok.all(axis=1) & (last == sketch_len - 1)


def segments(positions):
    """Runs of equal labels in one row (padding -1 excluded): a list of (start, stop, position)
    with frames start..stop-1 at that sketch position, in time order. For an alignment path
    there is exactly one run per sketch position."""
    row = np.asarray(positions)
    row = row[row >= 0]
    if row.size == 0:
        return []
    cuts = np.nonzero(np.diff(row))[0] + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [row.size]])
    return [(int(a), int(b), int(row[a])) for a, b in zip(starts, stops)]


def labels_from_segments(starts, length):
    """A label row (length,) int64 from the first frames of its segments (starts[0] = 0,
    strictly increasing, all < length): frames starts[l]..starts[l+1]-1 get position l."""
    starts = np.asarray(starts, dtype=np.int64)
    out = np.zeros(length, dtype=np.int64)
    out[starts[1:]] = 1
    return np.cumsum(out)

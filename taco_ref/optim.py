"""Adam, the L2 penalty on weight matrices, and the exponentially decaying dropout rate of the
STOP nets (paper appendix A)."""
import numpy as np

from taco_ref.nn import flush_subnormals


class Adam:
    """Adam (Kingma & Ba, 2015) on a dict of arrays, updated in place; spec/training.md eq. (2).

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
    p <- p - lr * (m / (1 - b1^n)) / (sqrt(v / (1 - b2^n)) + eps)
    The state (m, v, step count) round-trips through `state()` / `load_state()` for resuming.
    m, v and the update are in each parameter's dtype (float32 or float64); the update runs block
    by block (BLOCK entries) in scratch buffers reused from step to step, with the same
    operations in the same order as the formula above. For float32 parameters m and v are
    flushed after they are updated and the update before it is applied (spec/training.md
    eq. (12)): m and v of a parameter whose gradient stays 0 decay geometrically into the
    subnormal range, where every operation on them would take a microcode assist on Intel cores.
    """

    BLOCK = 2 ** 15
    """Entries updated at a time: the update's ~20 passes run over a block of each parameter
    (128 KiB of float32) while it is in the core's cache, not over whole arrays of MBs: a third
    less time than whole-array passes on the bench's nets (9.6 -> 6.3 ms a float32 step; smaller
    blocks lose it again to the calls, 2^12 entries took 10.9 ms)."""

    def __init__(self, names, shapes, lr, beta1=0.9, beta2=0.999, eps=1e-8, dtypes=None):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        dtypes = dtypes or [np.float64] * len(names)
        self.m = {n: np.zeros(s, d) for n, s, d in zip(names, shapes, dtypes)}
        self.v = {n: np.zeros(s, d) for n, s, d in zip(names, shapes, dtypes)}
        self._scratch = {}                                # dtype -> block-sized buffers
        self.step_count = 0

    def _buffers(self, dtype):
        """Scratch for one block: t, u (dtype), |x| (dtype) and a boolean mask, reused."""
        if dtype not in self._scratch:
            self._scratch[dtype] = (np.empty(self.BLOCK, dtype), np.empty(self.BLOCK, dtype),
                                    np.empty(self.BLOCK, dtype), np.empty(self.BLOCK, bool))
        return self._scratch[dtype]

    def step(self, params, grads):
        """Descend: params[name] -= update(grads[name]) for every name the optimiser owns."""
        self.step_count += 1
        c1 = 1.0 - self.beta1 ** self.step_count
        c2 = 1.0 - self.beta2 ** self.step_count
        for name, m in self.m.items():
            p = params[name]
            if not p.flags.c_contiguous:
                raise ValueError(f"Adam: parameter {name!r} must be a C-contiguous array")
            v = self.v[name]
            g = np.ravel(grads[name])
            m, v, p = m.reshape(-1), v.reshape(-1), p.reshape(-1)   # views
            buffers = self._buffers(p.dtype)
            for i in range(0, p.size, self.BLOCK):
                cut = slice(i, i + self.BLOCK)
                self._update(p[cut], g[cut], m[cut], v[cut], c1, c2,
                             *(b[:len(p[cut])] for b in buffers))

    def _update(self, p, g, m, v, c1, c2, t, u, magnitude, keep):
        """The update of one block, in place; spec/training.md eq. (2)."""
        flush = p.dtype == np.float32
        m *= self.beta1
        np.multiply(1.0 - self.beta1, g, out=t)
        m += t                                            # m = b1 m + (1 - b1) g
        if flush:
            flush_subnormals(m, (magnitude, keep))
        v *= self.beta2
        np.multiply(1.0 - self.beta2, g, out=t)
        t *= g
        v += t                                            # v = b2 v + ((1 - b2) g) g
        if flush:
            flush_subnormals(v, (magnitude, keep))
        np.divide(v, c2, out=t)
        np.sqrt(t, out=t)
        t += self.eps                                     # t = sqrt(v / c2) + eps
        np.divide(m, c1, out=u)
        u *= self.lr
        u /= t                                            # u = lr (m / c1) / t
        if flush:
            flush_subnormals(u, (magnitude, keep))
        p -= u

    def state(self):
        arrays = {f"adam.m.{n}": a for n, a in self.m.items()}
        arrays.update({f"adam.v.{n}": a for n, a in self.v.items()})
        return arrays, {"step_count": self.step_count, "lr": self.lr}

    def load_state(self, arrays, meta):
        for n in self.m:
            self.m[n][...] = arrays[f"adam.m.{n}"]
            self.v[n][...] = arrays[f"adam.v.{n}"]
        self.step_count = int(meta["step_count"])


def adam_for(params, names, lr):
    """The one way an optimiser is built: Adam over params[name] for name in names, at lr."""
    return Adam(names, [params[n].shape for n in names], lr,
                dtypes=[params[n].dtype for n in names])


def add_l2(grads, params, coefs):
    """Add the gradient of the L2 penalty sum_net coefs[net] / 2 * ||W||^2 over net's weight
    matrices (params "<net>.W<i>"; biases and other parameters are not penalised) to grads, in
    place; returns the penalty. spec/training.md eq. (9). coefs: {"act": c_a, "stop": c_s}."""
    penalty = 0.0
    for net, coef in coefs.items():
        if not coef:
            continue
        for name in grads:
            if name.startswith(net + ".W"):
                grads[name] += coef * params[name]
                penalty += 0.5 * coef * float(np.sum(np.square(params[name], dtype=np.float64)))
    return penalty


def dropout_rate(initial, decay, epoch):
    """Dropout rate at `epoch`: initial * decay**epoch, a probability in [0, 1); spec/training.md eq. (3).

    Paper appendix A: dropout on the STOP nets "greatly improved results", with the rate
    decreased exponentially toward 0 during training.
    """
    if not 0.0 <= initial < 1.0:
        raise ValueError(f"stop_dropout must lie in [0, 1), got {initial!r}")
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"dropout_decay must lie in [0, 1], got {decay!r}")
    return initial * decay ** epoch

"""Memory kept from one training step to the next for the convolutional core's large arrays.

A training step on image states makes arrays of hundreds of MB (an image batch of 1360 frames
of 112 x 112 x 3 in float32 is 205 MB, the first layer's activations 159 MB, the second layer's
input gradient by phases as much again). Each is fresh memory: the allocator maps it from the
kernel, which faults it in page by page and zeroes it, every step. On this project's AMD EPYC
the core's backward pass of a 112 x 112 TACO epoch took 10.99 s of CPU with fresh arrays and
6.49 s with them reused, the whole epoch 20.86 and 17.48 s (bench/bench_image_epoch.py;
docs/speed.md).

A `Workspace` keeps those buffers. The trainer opens ``with workspace.step():`` around each
step's loss and gradients; inside it every forward pass of the core (`policy.features`) gets
the next `Scope` of the step, whose arrays are the buffers of the same forward pass of the
previous step, grown when a batch needs more. Nothing is computed differently: the arrays only
live in memory that was already mapped. Outside a step (evaluation, held-out losses, every
direct call of the nn functions) nothing is kept and each array is fresh, as before.

Which arrays may come from a scope: only those that die with the step (activations and their
cache, the backward pass's temporaries). Gradients handed to the optimiser and anything a
caller may keep are always fresh. A backward pass whose forward ran in an earlier step (its
arrays since reused) raises instead of reading them.
"""
import contextlib
import contextvars
import ctypes

import numpy as np

_ACTIVE = contextvars.ContextVar("taco_ref.nn.workspace", default=None)

GROWTH = 1.25
"""A buffer too small for a step is replaced by one GROWTH times larger than it was (or just
large enough, if that is more): batch sizes vary from step to step (sequences of different
lengths), and a buffer sized to the first batch would otherwise be replaced at every larger one."""


class Workspace:
    """Buffers reused from one training step to the next (see the module's docstring).

    ``with ws.step():`` makes ws the active workspace of this thread (context) for the block;
    `active_scope()` then hands each forward pass of the core its own `Scope`, the first, the
    second, ... of the step, the same ones again in the next step."""

    def __init__(self):
        self._buffers = {}            # (scope index, name) -> 1-D uint8 buffer
        self.generation = 0           # steps opened so far
        self._scopes = 0              # scopes handed out in the current step

    @contextlib.contextmanager
    def step(self):
        """One training step: the block's forward passes reuse the previous step's arrays."""
        self.generation += 1
        self._scopes = 0
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def scope(self):
        """The next scope of the current step."""
        scope = Scope(self, self._scopes, self.generation)
        self._scopes += 1
        return scope

    def nbytes(self):
        """Bytes the workspace holds."""
        return sum(b.nbytes for b in self._buffers.values())

    def _array(self, key, shape, dtype):
        dtype = np.dtype(dtype)
        need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = self._buffers.get(key)
        if buf is None or buf.nbytes < need:
            size = need if buf is None else max(need, int(GROWTH * buf.nbytes))
            buf = self._buffers[key] = np.empty(size, np.uint8)
        return buf[:need].view(dtype).reshape(shape)


class Scope:
    """The arrays of one forward pass (and its backward pass) in one step of a Workspace; a
    name prefix (`sub`) keeps the layers' arrays apart."""

    def __init__(self, workspace, index, generation, prefix=""):
        self.workspace, self.index, self.generation, self.prefix = workspace, index, generation, prefix

    def sub(self, prefix):
        """The same scope, its names prefixed (one layer's arrays)."""
        return Scope(self.workspace, self.index, self.generation, self.prefix + prefix)

    def check(self):
        """Raise unless the scope's step is the workspace's current one (its arrays intact)."""
        if self.generation != self.workspace.generation:
            raise RuntimeError(f"a backward pass of a forward pass from workspace step {self.generation}, "
                               f"whose arrays step {self.workspace.generation} has reused: run the backward "
                               f"pass in the same `with workspace.step()` block as its forward pass")

    def array(self, name, shape, dtype, zero=False):
        """An array of shape and dtype (its values undefined unless zero) that stays this
        scope's until the same forward pass of the next step."""
        self.check()
        a = self.workspace._array((self.index, self.prefix + name), tuple(shape), dtype)
        if zero:
            a.fill(0)
        return a


def active_scope():
    """A fresh scope of the active workspace's current step, or None outside a step."""
    ws = _ACTIVE.get()
    return None if ws is None else ws.scope()


def array(scope, name, shape, dtype, zero=False):
    """scope's array `name`, or a fresh one (np.empty / np.zeros) when scope is None."""
    if scope is None:
        return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
    return scope.array(name, shape, dtype, zero)


def keep_freed_memory():
    """Let the C allocator keep freed memory for reuse (glibc: mallopt M_MMAP_THRESHOLD 32 MiB,
    M_TRIM_THRESHOLD 1 GiB); spec/training.md §4. True if set, False where there is no glibc.

    Every training step allocates the same activation and gradient arrays (MBs each) and frees
    them. By default glibc serves such blocks with fresh mmap'd pages and hands them back on
    free, so each step zero-fills them anew: 20-45 thousand page faults and ~20 % of a
    Dial-sized step (bench/bench_train.py). With these settings the freed blocks stay in the
    heap and the next step reuses them. Process-wide and idempotent; the cost is that the
    process keeps its peak heap until it exits.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20) and mallopt(M_TRIM_THRESHOLD, 1 << 30))

"""Neural-network building blocks as forward/backward pairs, one module per kind of layer
(layers, dropout, mlp, conv, gru, distributions; workspace, the memory a training step's
convolutional core reuses), all importable from here. The MLPs come twice: nn.mlp is the plain
reference, as spec/policy.md writes it; nn.mlp_fast the same maths in place, fused and flushed,
which training and execution run (nn.mlp_forward, nn.mlp_pair_forward, ... are its functions)
and which tests/test_nn.py checks against the reference: linear, ReLU, tanh, dropout, MLP,
2-D convolution and the convolutional core, GRU and bidirectional GRU, log-softmax,
log-sigmoid, and the two action log-likelihoods.

Every ``*_forward(...)`` returns ``(out, cache)`` and sits directly above its
``*_backward(dout, cache)``, which returns the gradient of ``sum(dout * out)`` with respect to the
forward's array inputs (and parameters). Plain NumPy, no autodiff at run time; the tests
check every backward against autograd. Parameters are plain arrays in lists and dicts.

Precision: float32 and float64 arrays keep their dtype through every layer (the sub-policy nets
train in either, spec/training.md §1 `dtype`); anything else (ints, lists) is read as float64.
Mixed inputs follow NumPy's promotion (float32 with float64 gives float64).

Subnormal float32 values never enter the nets' matrix products (spec/training.md eq. (12)):
every float32 array an MLP multiplies (its input rows, each hidden activation, each backward
dout) has its entries with |x| < 2^-100 (the subnormals, below 2^-126, and the tiny normals
whose products would be subnormal) replaced by zero where it is made (`flush_subnormals`; in
the ReLU, fused into its mask). Intel cores take a microcode assist of ~100 cycles for every
instruction with a subnormal operand or result; AMD cores do not. float64 arrays are never
touched. Every product goes through `matmul`, which a `subnormal_census()` counts (tests,
bench/bench_train.py).

Symbol | Shape | Meaning
N      |       | rows: any number of leading axes (...) flattened together
I      |       | input width of a layer
O      |       | output width of a layer
B      |       | batch size (sequences)
T      |       | padded sequence length; row b uses T_b = lengths[b]
Hd     |       | GRU hidden width (H is the GRU output array)
A      |       | action dimension (Gaussian policy)
K      |       | number of classes (categorical policy)

The tuning constants live in their modules and are set there (nn.layers.ELEMENTWISE_BLOCK_BYTES,
nn.conv.CONV_CHUNK_BYTES, nn.conv.FOLD_MAX_K); a name imported from here is a copy.
"""

from taco_ref.nn.layers import (  # noqa: F401
    FLUSH_BELOW, SubnormalCensus, TINY32, count_subnormal, flush_subnormals, linear_backward,
    linear_forward, log_sigmoid_pair, log_sigmoid_pair_backward, matmul, relu_backward,
    relu_forward, relu_inplace, sigmoid, subnormal_census, tanh_backward, tanh_forward, tanh_inplace)
from taco_ref.nn.dropout import Dropout, dropout_backward, dropout_forward  # noqa: F401
from taco_ref.nn import mlp, mlp_fast  # noqa: F401  (the plain reference; the fast path)
from taco_ref.nn.mlp import mlp_init  # noqa: F401
from taco_ref.nn.mlp_fast import (  # noqa: F401  (what training and execution run)
    mlp_backward, mlp_forward, mlp_pair_backward, mlp_pair_forward)
from taco_ref.nn.conv import (  # noqa: F401
    GEMM_WIDTH, conv2d_backward, conv2d_forward, conv_init, conv_output_size, convnet_backward,
    convnet_forward, convnet_output_shape)
from taco_ref.nn.workspace import Workspace  # noqa: F401
from taco_ref.nn.gru import bigru_backward, bigru_forward, gru_backward, gru_forward, gru_init  # noqa: F401
from taco_ref.nn.distributions import (  # noqa: F401
    categorical_logp_backward, categorical_logp_forward, gaussian_logpdf_backward,
    gaussian_logpdf_forward, gaussian_logstd_backward, gaussian_logstd_forward,
    log_softmax_backward, log_softmax_forward)

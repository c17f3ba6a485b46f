"""taco_ref's alignment core beside OMPN's published TACO code (Ordered-Memory-RL/ompn_craft).

    python tests/compare_ompn.py --ompn PATH/TO/ompn_craft        # needs torch

Nothing of OMPN is vendored: the script reads PATH/taco/core.py at run time and takes from it
only the two recursions (``tac_forward_log`` for training, ``tac_forward`` for decoding) and
their constants, without running the file's imports (its Craft environment and model are not
needed). It prints, for the record in spec/peers.md:

1. agreement under the mapping: OMPN's ``stop_logprobs[..., 0]`` is our log_go and ``[..., 1]``
   our log_stop, read at the same t; no terminal STOP; OMPN's loss
   -sum_b log alpha_{T_b}(L_b) / sum_b T_b. log Z on ordinary rows and on a T = 1000 row, and
   the gradients (torch autograd through OMPN's recursion against our hand-derived posteriors),
   with torch's default dtype float32 (as the published code runs: its initial log alpha is
   created in the default dtype, so the first step is rounded to float32 even for float64
   inputs) and float64;
2. the known differences, each on a case that shows it: the decoder's 1e-32 padding of the
   shifted STOP term (a spurious path), -1e8 standing for log 0 (an impossible row gets
   log Z ~ -1e8 and non-zero gradients), NaN in padding (NaN gradients), and alignment accuracy
   by sub-task id against ours by sketch position (they differ when a sketch repeats a sub-task).
"""
import argparse
import ast
import os

import numpy as np

from taco_ref import align  # noqa: E402


def load_ompn(path):
    """{name: object} of OMPN's tac_forward_log, tac_forward, NEG_INF and ZERO, compiled from
    PATH/taco/core.py's source with only torch in scope."""
    import torch
    source_path = os.path.join(path, "taco", "core.py")
    with open(source_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), source_path)
    wanted = {"tac_forward_log", "tac_forward", "NEG_INF", "ZERO"}
    body = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name in wanted)
            or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) in wanted for t in node.targets))]
    namespace = {"torch": torch, "np": np}
    exec(compile(ast.Module(body=body, type_ignores=[]), source_path, "exec"), namespace)
    missing = wanted - set(namespace)
    if missing:
        raise SystemExit(f"--ompn: {source_path} lacks {sorted(missing)}")
    return namespace


def ompn_loglik_and_grads(ompn, act, stop, go, traj_len, sketch_len):
    """OMPN's per-row log Z and d(sum_b log Z_b) / d(act, stop, go) by torch autograd."""
    import torch
    a = torch.tensor(act, dtype=torch.float64, requires_grad=True)
    s = torch.tensor(stop, dtype=torch.float64, requires_grad=True)
    g = torch.tensor(go, dtype=torch.float64, requires_grad=True)
    stop_logprobs = torch.stack([g, s], dim=-1)                    # [..., 0] = go, [..., 1] = stop
    lengths = torch.tensor(traj_len)
    sub = torch.tensor(sketch_len)
    log_alphas = ompn["tac_forward_log"](a, stop_logprobs, lengths, sub)
    rows = torch.arange(act.shape[0])
    log_z = log_alphas[rows, lengths - 1, sub - 1]
    log_z.sum().backward()
    return log_z.detach().numpy(), a.grad.numpy(), s.grad.numpy(), g.grad.numpy()


def ompn_decode(ompn, act, stop, go, traj_len, sketch_len):
    import torch
    stop_logprobs = torch.stack([torch.tensor(go), torch.tensor(stop)], dim=-1)
    alphas, _ = ompn["tac_forward"](torch.tensor(act), stop_logprobs, torch.tensor(traj_len),
                                    torch.tensor(sketch_len))
    return alphas.argmax(-1).numpy()


def random_case(rng, B, T, L):
    traj_len = rng.integers(max(L, 2), T + 1, size=B)
    traj_len[0] = T
    sketch_len = rng.integers(1, L + 1, size=B)
    sketch_len[0] = L
    act = rng.normal(-1.0, 1.0, size=(B, T, L))
    p_stop = rng.uniform(0.02, 0.98, size=(B, T, L))
    return act, np.log(p_stop), np.log1p(-p_stop), traj_len, sketch_len


def valid(traj_len, sketch_len, T, L):
    return ((np.arange(T)[None, :, None] < traj_len[:, None, None])
            & (np.arange(L)[None, None, :] < sketch_len[:, None, None]))


def agreement(ompn, rng):
    import torch
    default = torch.get_default_dtype()
    for dtype in (torch.float32, torch.float64):
        torch.set_default_dtype(dtype)
        print(f"1. agreement, float64 inputs, torch default dtype {str(dtype)[6:]}: max |difference|")
        _agreement(ompn, np.random.default_rng(0))
    torch.set_default_dtype(default)


def _agreement(ompn, rng):
    for label, (B, T, L) in (("ordinary rows", (16, 40, 5)), ("T = 1000", (2, 1000, 6))):
        act, stop, go, tl, sl = random_case(rng, B, T, L)
        ours = align.taco_forward_backward(act, stop, go, tl, sl)
        theirs = ompn_loglik_and_grads(ompn, act, stop, go, tl, sl)
        mask = valid(tl, sl, T, L)
        d_z = np.abs(ours.loglik - theirs[0]).max()
        d_g = max(np.abs(np.where(mask, o, 0) - np.where(mask, t, 0)).max()
                  for o, t in zip((ours.d_act, ours.d_stop, ours.d_go), theirs[1:]))
        print(f"   {label:14s} B={B} T={T} L={L}: log Z {d_z:.2g} (|log Z| up to "
              f"{np.abs(ours.loglik).max():.3g}), gradients {d_g:.2g}")


def differences(ompn):
    print("2. known differences")
    # (a) the decoder's 1e-32 padding
    act = np.array([[[0.0, 0.0], [0.0, 0.0], [0.0, -100.0]]])
    go = np.full((1, 3, 2), np.log(0.5))
    stop = np.full((1, 3, 2), np.log(0.5))
    go[0, 1, 0], stop[0, 1, 0] = -200.0, 0.0
    tl, sl = np.array([3]), np.array([2])
    ours = align.DECODERS["forward_argmax"](act, stop, go, tl, sl)[0].tolist()
    theirs = ompn_decode(ompn, act, stop, go, tl, sl)[0].tolist()
    print(f"   (a) decoder, B=1 T=3 L=2 case of spec/peers.md: taco_ref {ours}, OMPN {theirs}")
    # (b) an impossible row (L_b > T_b) and (c) NaN in padding
    rng = np.random.default_rng(1)
    act, stop, go, _, _ = random_case(rng, 1, 4, 3)
    tl, sl = np.array([2]), np.array([3])
    ours = align.taco_forward_backward(act, stop, go, tl, sl)
    theirs = ompn_loglik_and_grads(ompn, act, stop, go, tl, sl)
    grad_ours = max(np.abs(g).max() for g in (ours.d_act, ours.d_stop, ours.d_go))
    grad_theirs = max(np.abs(g).max() for g in theirs[1:])
    print(f"   (b) impossible row (T_b = 2 < L_b = 3): log Z taco_ref {ours.loglik[0]}, OMPN "
          f"{theirs[0][0]:.6g}; largest |gradient| taco_ref {grad_ours}, OMPN {grad_theirs:.3g}")
    act, stop, go, _, _ = random_case(rng, 1, 6, 2)
    tl, sl = np.array([4]), np.array([2])
    for arr in (act, stop, go):
        arr[0, 4:] = np.nan                                      # padding beyond T_b
    ours = align.taco_forward_backward(act, stop, go, tl, sl)
    theirs = ompn_loglik_and_grads(ompn, act, stop, go, tl, sl)
    print(f"   (c) NaN in padding: gradients finite? taco_ref "
          f"{all(np.isfinite(g).all() for g in (ours.d_act, ours.d_stop, ours.d_go))}, OMPN "
          f"{all(np.isfinite(g).all() for g in theirs[1:])}")
    # (d) the accuracy metric when a sketch repeats a sub-task
    sketch = np.array([3, 5, 3])
    truth = np.array([0, 0, 0, 1, 2])                            # sketch positions
    decoded = np.array([0, 1, 2, 2, 2])
    by_position = float((decoded == truth).mean())
    by_subtask = float((sketch[decoded] == sketch[truth]).mean())
    print(f"   (d) sketch {sketch.tolist()}, truth {truth.tolist()}, decoded {decoded.tolist()}: "
          f"accuracy by position {by_position:.3f}, by sub-task id {by_subtask:.3f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ompn", required=True, help="a checkout of Ordered-Memory-RL/ompn_craft")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("this comparison needs torch: pip install torch")
    ompn = load_ompn(args.ompn)
    agreement(ompn, np.random.default_rng(0))
    differences(ompn)


if __name__ == "__main__":
    main()

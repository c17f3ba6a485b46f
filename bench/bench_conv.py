"""Benchmark of the convolutional core of the image policies: taco_ref against PyTorch, same run.

What is timed: one forward and one backward pass of the paper's core (appendix A, table 2: conv
channels [10, 5, 3], kernels [5, 5, 3], strides [2, 2, 1], each conv followed by a ReLU), on a
batch of F normalised RGB frames, channels-last, with a random upstream gradient on the
flattened features; the frames are data, so no gradient w.r.t. them (the first layer's dx is
not computed on either side). Per frame, median of interleaved rounds after a warm-up round
(bench/_timing.py), wall time and process CPU time.

- taco_ref  ``nn.convnet_forward`` + ``nn.convnet_backward`` (im2col + GEMM through
            ``nn.matmul``, dx by sub-pixel phases: spec/policy.md §10).
- torch     ``torch.nn.functional.conv2d`` + ``relu`` per layer, then ``backward`` with the same
            upstream gradient, two memory formats: NCHW ("nchw") and channels-last
            ("channels_last", NHWC in memory like ours); the ratio is taken against the faster.

Before timing, every torch side must agree with taco_ref: the features and every weight and bias
gradient to rtol 1e-8 in float64 and 1e-4 in float32 (atol the same, scaled by the largest
gradient entry for the gradients).

Cases: the paper's 112 x 112 frames (dial-image) and the reduced 64 x 64 (dial-image-small).
Useful FLOPs per frame: 2 K O per output pixel and layer for the forward, as much for dW, as
much again for dx except in the first layer. The GEMM limit is bench/_timing.py's (np.matmul of
two 2000 x 2000 matrices), the one bench/bench_train.py reports.

Targets, float32, 1 thread: taco_ref / torch (faster variant) <= 1.0, and taco_ref's useful
GFLOP/s >= 50 % of the float32 GEMM limit. float64 is reported, not judged.

Usage::

    python bench/bench_conv.py              # 256 frames per batch
    python bench/bench_conv.py --quick      # fewer rounds, for smoke testing
    python bench/bench_conv.py --frames 64 --json out.json

The exit code is 0 whether or not the targets are met; the last line says which.
"""
import os
import sys

import _timing

THREADS = 1
_timing.preamble(THREADS)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from taco_ref import nn  # noqa: E402
from _timing import (GEMM_N, cpu_model, gemm_limit, import_torch, interleaved_medians,  # noqa: E402
                     numpy_blas_parts)

torch, TORCH_SKIP_REASON = import_torch(THREADS)

CHANNELS, KERNELS, STRIDES = [10, 5, 3], [5, 5, 3], [2, 2, 1]
CASES = {"paper 112x112": (112, 112, 3), "reduced 64x64": (64, 64, 3)}
RATIO_TARGET = 1.0       # taco_ref float32 / torch float32 (faster variant) <= this
GEMM_TARGET = 0.5        # taco_ref float32 useful GFLOP/s / float32 GEMM limit >= this
JUDGED = "float32"
SEED = 0


def useful_flops(image_shape):
    """FLOPs per frame of the forward, dW and dx (all but the first layer) products."""
    H, W, C = image_shape
    total = 0
    for i, (O, k, s) in enumerate(zip(CHANNELS, KERNELS, STRIDES)):
        H, W = nn.conv_output_size(H, k, s), nn.conv_output_size(W, k, s)
        per_product = 2 * H * W * k * k * C * O
        total += per_product * (2 if i == 0 else 3)
        C = O
    return total


def make_sides(image_shape, frames, dtype, rng):
    """{name: callable} running one forward + backward of each side, and the check lines."""
    x = rng.standard_normal((frames,) + image_shape).astype(dtype)            # (F, H, W, C)
    layers = [(W.astype(dtype), b.astype(dtype)) for W, b in
              nn.conv_init(rng, image_shape[2], CHANNELS, KERNELS)]
    layers = [(W, (0.1 * rng.standard_normal(b.shape)).astype(dtype)) for W, b in layers]
    feats, cache = nn.convnet_forward(layers, STRIDES, x)
    R = rng.standard_normal(feats.shape).astype(dtype)                       # (F, Ho Wo O)

    def ours():
        out, c = nn.convnet_forward(layers, STRIDES, x)
        return out, nn.convnet_backward(R, c)[1]

    sides = {"taco_ref": ours}
    checks = []
    if torch is None:
        return sides, checks
    Ho, Wo, O = nn.convnet_output_shape(image_shape, CHANNELS, KERNELS, STRIDES)
    tdtype = getattr(torch, np.dtype(dtype).name)
    Wt = [torch.tensor(W.transpose(3, 2, 0, 1).copy(), dtype=tdtype, requires_grad=True) for W, _ in layers]
    bt = [torch.tensor(b, dtype=tdtype, requires_grad=True) for _, b in layers]
    Rt = torch.tensor(R.reshape(frames, Ho, Wo, O).transpose(0, 3, 1, 2).copy(), dtype=tdtype)

    def torch_side(memory_format):
        xt = torch.tensor(x.transpose(0, 3, 1, 2).copy(), dtype=tdtype).contiguous(memory_format=memory_format)
        Ws = [w.detach().contiguous(memory_format=memory_format).requires_grad_(True) for w in Wt]
        Rm = Rt.contiguous(memory_format=memory_format)

        def run():
            for w in Ws + bt:
                w.grad = None
            h = xt
            for w, b, s in zip(Ws, bt, STRIDES):
                h = torch.relu(torch.nn.functional.conv2d(h, w, b, stride=s))
            h.backward(Rm)
            return h, [(w.grad, b.grad) for w, b in zip(Ws, bt)]
        return run

    sides["torch nchw"] = torch_side(torch.contiguous_format)
    sides["torch channels_last"] = torch_side(torch.channels_last)
    rtol = 1e-8 if dtype == np.float64 else 1e-4
    ref_feats, ref_grads = ours()
    for name in ("torch nchw", "torch channels_last"):
        h, grads = sides[name]()
        got = h.detach().permute(0, 2, 3, 1).reshape(frames, -1).numpy()
        np.testing.assert_allclose(got, ref_feats, rtol=rtol, atol=rtol, err_msg=f"{name} features")
        for i, ((dW, db), (gW, gb)) in enumerate(zip(ref_grads, grads)):
            scale = max(1.0, float(np.abs(dW).max()))
            np.testing.assert_allclose(gW.permute(2, 3, 1, 0).numpy(), dW, rtol=rtol, atol=rtol * scale,
                                       err_msg=f"{name} dW layer {i}")
            np.testing.assert_allclose(gb.numpy(), db, rtol=rtol, atol=rtol * scale, err_msg=f"{name} db layer {i}")
        checks.append(f"{name} {np.dtype(dtype).name}: features and every dW, db agree with taco_ref "
                      f"(rtol {rtol:g})")
    return sides, checks


def layer_profile(image_shape, frames, dtype, rng, repeats):
    """Per layer of taco_ref's core: (forward ms, backward ms, GEMMs-alone ms) per frame."""
    x = rng.standard_normal((frames,) + image_shape).astype(dtype)
    layers = nn.conv_init(rng, image_shape[2], CHANNELS, KERNELS)
    rows = []
    for i, ((W, b), s) in enumerate(zip(layers, STRIDES)):
        W, b = W.astype(dtype), b.astype(dtype)
        out, cache = nn.conv2d_forward(x, W, b, s)
        R = rng.standard_normal(out.shape).astype(dtype)
        fwd = lambda: nn.conv2d_forward(x, W, b, s)                           # noqa: E731
        bwd = lambda: nn.conv2d_backward(R, cache, input_grad=i > 0)          # noqa: E731
        with nn.subnormal_census():               # record the products' shapes by spying matmul
            shapes = []
            real = nn.conv.matmul                 # the name the convolution calls

            def spy(a, b_, out=None):
                shapes.append((a.shape, b_.shape, a.dtype))
                return real(a, b_, out=out)
            nn.conv.matmul = spy
            try:
                fwd()
                bwd()
            finally:
                nn.conv.matmul = real
        # one operand pair per distinct shape, reused: the implementation's patch matrix is one
        # buffer rebuilt in place (cache-resident), so fresh operands per call would time DRAM
        pairs = {(sa, sb, dt): (rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt))
                 for sa, sb, dt in set(shapes)}
        operands = [pairs[key] for key in shapes]
        gemms = lambda: [a @ b_ for a, b_ in operands]                        # noqa: E731
        (t_f, t_b, t_g), _ = interleaved_medians([fwd, bwd, gemms], repeats)
        rows.append((i, t_f / frames * 1e3, t_b / frames * 1e3, t_g / frames * 1e3))
        x = np.maximum(out, 0)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--frames", type=int, default=256, help="frames per batch (F)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    repeats = 5 if args.quick else 15
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs | python {platform.python_version()} | "
          f"numpy {np.__version__} | torch {torch.__version__ if torch else 'not available'} | "
          f"1-min load average at start {os.getloadavg()[0]:.2f}")
    print("threads: " + " | ".join(numpy_blas_parts() + [f"torch {torch.get_num_threads() if torch else '-'}"]))
    print(f"core: conv channels {CHANNELS}, kernels {KERNELS}, strides {STRIDES}, ReLU after each; "
          f"{args.frames} frames per batch; median of {repeats} interleaved rounds")
    limits = {d: gemm_limit(d, 8) for d in ("float32", "float64")}
    print(f"GEMM limit (1 thread, np.matmul ({GEMM_N}, {GEMM_N}) @ ({GEMM_N}, {GEMM_N}), best of 8): "
          f"float32 {limits['float32'][0]:.1f} GFLOP/s, float64 {limits['float64'][0]:.1f} GFLOP/s "
          f"(on CPU time {limits['float32'][1]:.1f}, {limits['float64'][1]:.1f})")
    if torch is None:
        print(f"torch sides skipped: {TORCH_SKIP_REASON}")
    rng = np.random.default_rng(SEED)
    rows, checks, profiles = [], [], []
    for case, shape in CASES.items():
        flops = useful_flops(shape)
        for dtype in ("float32", "float64"):
            sides, case_checks = make_sides(shape, args.frames, np.dtype(dtype), rng)
            checks += [f"{case}: {c}" for c in case_checks]
            names = list(sides)
            wall, cpu = interleaved_medians([sides[n] for n in names], repeats)
            for name, w, c in zip(names, wall, cpu):
                rows.append(dict(case=case, dtype=dtype, side=name, ms=w / args.frames * 1e3,
                                 cpu_ms=c / args.frames * 1e3, gflops=flops * args.frames / w / 1e9,
                                 cpu_gflops=flops * args.frames / c / 1e9))
        profiles.append((case, layer_profile(shape, args.frames, np.float32, rng, max(3, repeats // 3))))
    for line in checks:
        print(f"check passed: {line}")
    print()
    print(f"{'case':<14} {'dtype':<8} {'side':<20} {'ms/frame':>8} {'CPU ms':>7} {'GFLOP/s':>8} "
          f"{'% GEMM':>6} {'ratio':>6} {'CPU ratio':>9}")
    verdicts = []
    for case in CASES:
        for dtype in ("float32", "float64"):
            mine = {r["side"]: r for r in rows if r["case"] == case and r["dtype"] == dtype}
            peers = [r for n, r in mine.items() if n != "taco_ref"]
            best = min(peers, key=lambda r: r["ms"]) if peers else None
            best_cpu = min(peers, key=lambda r: r["cpu_ms"]) if peers else None
            for name, r in mine.items():
                share = r["gflops"] / limits[dtype][0]
                ratio = r["ms"] / best["ms"] if best else float("nan")
                cpu_ratio = r["cpu_ms"] / best_cpu["cpu_ms"] if best_cpu else float("nan")
                print(f"{case:<14} {dtype:<8} {name:<20} {r['ms']:8.3f} {r['cpu_ms']:7.3f} "
                      f"{r['gflops']:8.1f} {100 * share:5.0f}% {ratio:6.2f} {cpu_ratio:9.2f}")
                if name == "taco_ref":
                    verdicts.append(dict(case=case, dtype=dtype, ratio=ratio, cpu_ratio=cpu_ratio,
                                         share=share, cpu_share=r["cpu_gflops"] / limits[dtype][1],
                                         peer=best["side"] if best else None))
    print("(ms/frame: median wall time per frame; ratio: taco_ref / the faster torch variant, "
          "rows of the same case and dtype; % GEMM: useful GFLOP/s / the GEMM limit)")
    print()
    print("taco_ref float32 per layer, ms per frame (the layer alone; GEMMs alone = its products "
          "replayed on random operands of the same shapes, one reused pair per shape):")
    for case, prof in profiles:
        for i, f, b, g in prof:
            print(f"  {case:<14} layer {i + 1}: forward {f:6.3f}  backward {b:6.3f}  GEMMs alone "
                  f"{g:6.3f}  rest {f + b - g:6.3f}")
    print(f"1-min load average at end {os.getloadavg()[0]:.2f}"
          + ("  (other processes were using the CPUs: absolute times are inflated; interleaving "
             "keeps the ratios fair)" if os.getloadavg()[0] > 0.5 else ""))
    print()
    missed = []
    for v in verdicts:
        judged = v["dtype"] == JUDGED
        r_ok, g_ok = v["ratio"] <= RATIO_TARGET, v["share"] >= GEMM_TARGET
        tail = (f"targets <= {RATIO_TARGET:g}: {'ok' if r_ok else 'MISS'}, >= {100 * GEMM_TARGET:.0f} %: "
                f"{'ok' if g_ok else 'MISS'}") if judged else "info (not judged)"
        print(f"  {v['case']:<14} {v['dtype']:<8} taco_ref / {v['peer']} = {v['ratio']:.2f} (CPU "
              f"{v['cpu_ratio']:.2f}); {100 * v['share']:.0f} % of the GEMM limit (CPU "
              f"{100 * v['cpu_share']:.0f} %)  {tail}")
        if judged:
            missed += ([f"{v['case']} ratio {v['ratio']:.2f}"] if not r_ok else []) + \
                      ([f"{v['case']} GEMM share {100 * v['share']:.0f} %"] if not g_ok else [])
    n_judged = 2 * sum(v["dtype"] == JUDGED for v in verdicts)
    print()
    print(f"FAIL vs targets ({n_judged - len(missed)}/{n_judged} met): " + "; ".join(missed) if missed
          else f"PASS vs targets ({n_judged}/{n_judged} met)")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(limits=limits, rows=rows, verdicts=verdicts,
                                                   profiles=profiles, checks=checks,
                                                   frames=args.frames, time=time.time()), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pictures (optional: needs matplotlib, `pip install 'taco_ref[plot]'`).

alignment: one demonstration's normalised forward variables p_t(l) and posterior gamma_t(l) as
heat maps over (sketch step, time), with the ground-truth segmentation drawn on top — the
picture of the paper's figure 3b.
rollout: one sketch executed by a model in a domain that renders (the Dial pad), as a contact
sheet PNG (and optionally an animated GIF), each frame titled with the active sub-task; for a
domain whose states are camera images (the image Dial) each frame shows, beside the scene, the
picture the policy saw; for a domain with a keypad (the Dial's keys are a few pixels in the
picture) each frame shows, beside it, the pad drawn large: the key pushed in now or pressed
since the previous frame shown, the keys pressed before and the next key to press.
"""
import numpy as np

from taco_ref import algorithms, align, evaluate


def alignment(model, demos, index, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not 0 <= index < demos.n:
        raise ValueError(f"index must lie in [0, {demos.n}), got {index}")
    one = demos.subset([index])
    T, L = int(one.traj_len[0]), int(one.sketch_len[0])
    if model.ctc_kind:
        log_p = evaluate.ctc_log_probs(model, one)
        forward = align.ctc_forward_probabilities(log_p, one.sketch, one.traj_len, one.sketch_len)
        posterior = align.ctc_forward_backward(log_p, one.sketch, one.traj_len, one.sketch_len).posterior
        source = f"CTC-BC ({model.ctc_kind}) classifier"
    else:
        lattice = evaluate.scores(model, one)
        forward = align.forward_probabilities(*lattice, one.traj_len, one.sketch_len)
        posterior = align.taco_forward_backward(*lattice, one.traj_len, one.sketch_len).posterior
        source = f"{model.algo} sub-policies"
    names = [model.vocab[k] for k in one.sketch[0, :L]]
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, T / 12), 1.2 + 0.5 * L * 2), sharex=True)
    for ax, values, title in zip(axes, (forward, posterior),
                                 ("forward variables p_t(l) (normalised alpha)", "posterior gamma_t(l)")):
        ax.imshow(values[0, :T, :L].T, aspect="auto", origin="lower", cmap="viridis",
                  vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.step(np.arange(T), one.labels[0, :T], where="mid", color="red", lw=1.5, label="ground truth")
        ax.set_yticks(range(L), names)
        ax.set_title(title, fontsize=10)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[1].set_xlabel("time step t")
    fig.suptitle(f"demonstration {index}: alignment by the {source}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PAD_COLOURS = {"now": "#ff7f0e", "counted": "#98df8a", "wrong": "#ff9896", "key": "#f4f4f4", "other": "#cfcfcf",
               "target": "#1f77b4"}
"""The keypad picture's colours: a key pushed in now or pressed since the previous frame shown,
a key pressed before that counted (dialled the PIN), one that did not, any other key, the *
and # keys, the outline of the next key to press."""


def draw_keypad(ax, pad, since):
    """The keypad state pad (a task env's keypad(): cols, labels, down, presses, target) on ax,
    slot 0 at the top left as in the front camera's picture; presses after step since are new."""
    from matplotlib.patches import Rectangle
    cols = pad["cols"]
    rows = -(-len(pad["labels"]) // cols)
    last = {}                                    # slot -> (step, counted) of its latest press
    for t, slot, counted in pad["presses"]:
        last[slot] = (t, counted)
    for slot, label in enumerate(pad["labels"]):
        r, c = divmod(slot, cols)
        pressed = last.get(slot)
        if pad["down"][slot] or (pressed is not None and pressed[0] > since):
            face, weight = PAD_COLOURS["now"], "bold"
        elif pressed is not None:
            face, weight = PAD_COLOURS["counted" if pressed[1] else "wrong"], "normal"
        else:
            face, weight = PAD_COLOURS["key" if label.isdigit() else "other"], "normal"
        target = slot == pad["target"]
        ax.add_patch(Rectangle((c + 0.07, r + 0.07), 0.86, 0.86, facecolor=face,
                               edgecolor=PAD_COLOURS["target"] if target else "#555555", lw=2.2 if target else 0.6))
        ax.text(c + 0.5, r + 0.52, label, ha="center", va="center", fontsize=10, weight=weight)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect("equal")
    ax.axis("off")


def rollout(model, env, sketch, seed, path, every=10, gif=None):
    """Execute sketch (sub-task ids) in env with model's sub-policies, rendering every step;
    writes a contact sheet of every `every`-th frame (and the last) to path, and every frame
    to the GIF gif if given. Returns evaluate.execute's dict."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if every < 1:
        raise ValueError(f"every must be a positive number of steps, got {every}")
    frames, captions, pads = [], [], []
    sees = getattr(env, "image", None)            # the policy's own input, when it is a picture
    keypad = getattr(env, "keypad", None)         # a keypad too small to read in the picture

    def observe(env, active):
        frame = env.render()
        if sees is not None:    # the camera's picture, nearest-neighbour scaled to the scene's height
            seen = sees()
            H = frame.shape[0]
            W = max(1, round(seen.shape[1] * H / seen.shape[0]))
            seen = seen[np.arange(H) * seen.shape[0] // H][:, np.arange(W) * seen.shape[1] // W]
            frame = np.concatenate([frame, np.full((H, 2, 3), 255, np.uint8), seen], axis=1)
        frames.append(frame)
        if keypad is not None:
            pads.append(keypad())
        name = model.vocab[sketch[active]] if active < len(sketch) else "-"
        captions.append(f"t={len(frames) - 1} {name} ({env.progress}/{len(sketch)})")

    out = evaluate.execute(model, env, list(sketch), seed, observer=observe)
    picks = sorted(set(range(0, len(frames), every)) | {len(frames) - 1})
    scene_w = 1.6 * frames[0].shape[1] / frames[0].shape[0]           # inches per panel
    pad_w = 1.25 if keypad is not None else 0.0
    cols = max(1, min(len(picks), int(13.5 // (scene_w + pad_w))))
    rows = -(-len(picks) // cols)
    panels = 2 if keypad is not None else 1
    fig = plt.figure(figsize=((scene_w + pad_w) * cols, 1.95 * rows))
    grid = fig.add_gridspec(rows, cols * panels, width_ratios=([scene_w, pad_w] if panels == 2 else [scene_w]) * cols)
    for n, i in enumerate(picks):
        r, c = divmod(n, cols)
        ax = fig.add_subplot(grid[r, c * panels])
        ax.imshow(frames[i])
        ax.axis("off")
        if keypad is not None:
            ax_pad = fig.add_subplot(grid[r, c * panels + 1])
            since = picks[n - 1] if n else -1
            draw_keypad(ax_pad, pads[i], since)
            new = [pads[i]["labels"][s] for t, s, _ in pads[i]["presses"] if since < t <= i]
            ax.set_title(captions[i] + (f"; pressed {' '.join(new)}" if new else ""), fontsize=8, loc="left")
        else:
            ax.set_title(captions[i], fontsize=7)
    names = " ".join(model.vocab[k] for k in sketch)
    seen = " (left: the scene; right: what the policy's camera sees)" if sees is not None else ""
    title = (f"{model.algo}: sketch {names} — {'done' if out['success'] else 'not done'} "
             f"after {out['steps']} steps{seen}")
    if keypad is not None:
        title += ("\nbeside each frame, its keypad: orange = pressed since the previous frame shown (or pushed "
                  "in now),\ngreen = pressed before, red = a press that did not dial the PIN, blue outline = the "
                  "next key to press")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    if gif:
        from PIL import Image   # matplotlib depends on Pillow
        images = [Image.fromarray(f) for f in frames]
        images[0].save(gif, save_all=True, append_images=images[1:], duration=40, loop=0)
    return out


# --- figures of a grid's cells (taco report) ---------------------------------------------------

ALGOS = algorithms.names()
LABELS = {name: algorithms.label(name) for name in ALGOS}


def _spread(n, width):
    """n offsets in [-width, width] that keep one algorithm's per-seed points apart from another's."""
    return np.linspace(-width, width, n) if n > 1 else np.zeros(1)


SIZE_MARGIN = 0.15
"""Decades of log axis left either side of the smallest and largest dataset size."""


def size_limits(sizes):
    """The x range (log axis) of a plot against dataset size: the sizes with SIZE_MARGIN either
    side, so that the algorithms' offsets (_spread) stay small beside it; matplotlib's own limits
    put one size's points at the two edges of the axes."""
    return min(sizes) / 10 ** SIZE_MARGIN, max(sizes) * 10 ** SIZE_MARGIN


def plot(results, path):
    """Task and alignment accuracy against dataset size, one line per algorithm: mean ± std over
    seeds as error bars, every seed as a point (paper figures 4, 5, 7; PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    sizes = sorted({r["size"] for r in results})
    algos = [a for a in ALGOS if any(r["algo"] == a for r in results)]
    offsets = _spread(len(algos), 0.04)
    for algo, off in zip(algos, offsets):
        for ax, key in zip(axes, ("task_accuracy", "align_forward_argmax")):
            pts = {s: [100 * r[key] for r in results if r["algo"] == algo and r["size"] == s] for s in sizes}
            pts = {s: p for s, p in pts.items() if p}       # sizes this algorithm has cells for
            x = np.array(list(pts)) * 10 ** off            # shifted on the log axis, not overlapping
            line = ax.errorbar(x, [np.mean(p) for p in pts.values()], yerr=[np.std(p) for p in pts.values()],
                               marker="o", capsize=3, label=LABELS[algo])
            for xi, p in zip(x, pts.values()):
                ax.scatter([xi] * len(p), p, s=10, alpha=0.5, color=line[0].get_color())
    axes[0].set_title("zero-shot task accuracy")
    axes[1].set_title("alignment accuracy (argmax of forward variables)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlim(*size_limits(sizes))
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("demonstrations")
        ax.set_ylabel("% (mean ± std over seeds; dots: seeds)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def lengths_of(r, rule=None):
    """A cell's task accuracy by L_test, {str(L): accuracy}, under the task environment's own
    verdict (rule None) or one of its other success rules (the Dial's "paper", "strict"); None
    where the cell did not measure it."""
    if rule is None:
        return r.get("task_accuracy_by_length")
    return r.get("rules", {}).get(rule, {}).get("task_accuracy_by_length")


def plot_lengths(results, path, rule=None):
    """Task accuracy against the test sketch length L_test, one line per algorithm and dataset
    size, mean ± std over seeds and every seed as a point (paper figure 8; PNG); rule: as
    lengths_of (the title names it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    groups = [(a, s) for a in ALGOS for s in sorted({r["size"] for r in results})
              if any(r["algo"] == a and r["size"] == s and lengths_of(r, rule) for r in results)]
    for (algo, size), off in zip(groups, _spread(len(groups), 0.15)):
        rows = [lengths_of(r, rule) for r in results
                if r["algo"] == algo and r["size"] == size and lengths_of(r, rule)]
        lengths = sorted(rows[0], key=int)
        acc = 100 * np.array([[row[L] for L in lengths] for row in rows])     # (seeds, lengths)
        x = np.array([int(L) for L in lengths]) + off
        line = ax.errorbar(x, acc.mean(0), yerr=acc.std(0), marker="o", capsize=3, label=f"{LABELS[algo]} ({size})")
        for row in acc:
            ax.scatter(x, row, s=10, alpha=0.5, color=line[0].get_color())
    if rule is not None:
        ax.set_title(f"success by the {rule} rule", fontsize=9)
    ax.set_xlabel("test sketch length L_test")
    ax.set_ylabel("task accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

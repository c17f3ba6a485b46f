"""Pictures (optional: needs matplotlib, `pip install 'taco_ref[plot]'`).

alignment: one demonstration's normalised forward variables p_t(l) and posterior gamma_t(l) as
heat maps over (sketch step, time), with the ground-truth segmentation drawn on top — the
picture of the paper's figure 3b.
"""
import numpy as np

from taco_ref import align, evaluate


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

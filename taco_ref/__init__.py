"""taco_ref: a NumPy reference implementation of TACO (Shiarlis et al., ICML 2018).

The alignment core lives in :mod:`taco_ref.align`; spec/ derives every equation it uses.

Reading path: the paper is in these modules, in this order, each citing its spec equations:
align (the forward-backward recursion and its gradients, spec/align.md), objectives (the
losses, spec/objectives.md), nn.layers, nn.mlp and nn.distributions (the plain nets; nn.gru and
nn.conv for CTC-BC's GRU and image states), policy (the K sub-policies, spec/policy.md),
algorithms (one module per method: taco, gtbc, ctcbc, compile), optim (Adam), train (the stages
and the epoch loop: `_Run.epoch`, spec/training.md) and evaluate (executing sketches,
alignment accuracy, spec/evaluation.md).

Skippable on a first reading (storage, safety and speed, not the method): the subpackage
plumbing (files: atomic writes and checked .npz reads; provenance: what machine computed a
file; checkpoints: a run's checkpoint and folder), the subpackage conformance (the kit that
checks other implementations against spec/vectors), data's frame store (FrameStates,
FrameWriter, the chunked image files), lengths (the per-row lengths' check), model's load
checks, nn.workspace (memory kept between steps), the nets as training runs them in
nn.mlp_fast (tested equal to nn.mlp), runner (the step-by-step executor the ROS bridge drives)
and annotate (labels for other datasets).

Quick start: collect demonstrations, train TACO on them, align held-out ones, execute unseen
sketches, and run a shipped model (docs/python.md says more; tests/test_quickstart.py runs
this as a doctest)::

    >>> import io
    >>> import taco_sim
    >>> from taco_ref import evaluate, model, train
    >>> nav = taco_sim.get("navworld")
    >>> demos = nav.collect(40, 2, 0)          # 40 demonstrations of 2 sub-tasks each, seed 0
    >>> held_out = nav.collect(10, 2, 1)
    >>> cfg = train.TrainConfig(algo="taco", act_hidden=[32], stop_hidden=[32], epochs=5)
    >>> m = train.train(demos, cfg, log=io.StringIO())
    >>> aligned = evaluate.alignments(m, held_out)   # {decoder: (N, T) sketch position per step}
    >>> aligned["forward_argmax"].shape == held_out.labels.shape
    True
    >>> accuracy = evaluate.alignment_accuracies(m, held_out)["position"]["forward_argmax"]
    >>> 0.5 < accuracy <= 1.0                  # share of steps at the right sketch position
    True
    >>> result = evaluate.protocol(m, nav, n_tasks=5, seed=0)   # 5 unseen sketches executed
    >>> result["n_tasks"], len(result["outcomes"])              # and task_accuracy, failures, ...
    (5, 5)
    >>> dial = model.load(taco_sim.shipped_models()["dial"])   # the shipped joint-space Dial model
    >>> evaluate.protocol(dial, taco_sim.get("dial"), n_tasks=3, seed=0,
    ...                   stop_hold=dial.config["stop_hold"])["task_accuracy"]
    1.0
"""
__version__ = "0.1.0"

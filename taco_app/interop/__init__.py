"""TACO on the ecosystem's robot datasets: `taco annotate` and `taco export`; spec/interop.md.

    taco export data/nav.npz --format lerobot --out nav-lerobot           # true labels, + sketches
    taco annotate nav-lerobot --sketches nav-lerobot.sketches.yaml --out nav-annotated --config navworld
    taco annotate demos.hdf5 --sketches sketches.yaml --model runs/x/model --out demos-annotated.hdf5

A dataset is recognised by content: a folder with meta/info.json is a LeRobot v3 dataset, a
file with the HDF5 signature a robomimic one. Reading needs the `interop` extra (pyarrow for
LeRobot's Parquet, h5py for HDF5); nothing here imports torch or lerobot, and nothing in the
core imports this package. Annotation streams: it holds one chunk of episodes at a time (plus,
when it trains, the demonstrations the training needs).
"""
import json
import os
import re
import sys
import time

import numpy as np

from taco_ref import algorithms, annotate as annotate_mod, data, evaluate, model as model_mod, train
from taco_ref.plumbing import checkpoints
from taco_ref.objectives import even_split_labels
from taco_app.interop.labels import EpisodeLabels, InteropError, read_sketches, write_sketches

FORMATS = ("lerobot", "robomimic")
DEFAULT_CHUNK = 64
"""Episodes decoded together: large enough that the nets' products amortise, small enough that
a chunk of Dial-length episodes stays a few MB."""
DEFAULT_REVIEW = 20
"""Episodes named in the review list (the least confident)."""
MAX_CHUNK = 4096


def _module(fmt):
    """The format module, importing its optional dependency with one clear error line."""
    try:
        if fmt == "lerobot":
            from taco_app.interop import lerobot as mod
        else:
            from taco_app.interop import robomimic as mod
    except ImportError as err:
        need = "pyarrow" if fmt == "lerobot" else "h5py"
        raise InteropError(f"{fmt} datasets need {need} ({err.name} is missing): "
                           "pip install 'taco_ref[interop]'") from None
    return mod


def detect(path):
    """"lerobot" or "robomimic", by content; InteropError otherwise."""
    if not os.path.exists(path):
        raise InteropError(f"{path}: no such file or folder")
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "meta", "info.json")):
            return "lerobot"
        raise InteropError(f"{path}: a folder without meta/info.json, so not a LeRobot v3 dataset")
    if not os.path.isfile(path):                  # a FIFO's read would block forever
        raise InteropError(f"{path}: not a regular file or folder (a pipe, device or socket); "
                           "expected a LeRobot v3 folder or a robomimic HDF5 file")
    with open(path, "rb") as f:
        head = f.read(8)
    if head == b"\x89HDF\r\n\x1a\n":
        return "robomimic"
    raise InteropError(f"{path}: neither a LeRobot v3 folder (meta/info.json) nor an HDF5 file (robomimic)")


def open_dataset(path, state_keys=None, action_key=None):
    """The opened dataset (lerobot.Dataset or robomimic.Dataset) at path."""
    fmt = detect(path)
    return _module(fmt).Dataset(path, state_keys=state_keys, action_key=action_key)


# ------------------------------------------------------------------------------------------
# Sketches and demonstrations
# ------------------------------------------------------------------------------------------

def plan_sketches(dataset, sketches=None, vocab=None):
    """{episode key: sub-task names}: from the sketches mapping by each episode's task string,
    else from the annotation already in the dataset; every sketch no longer than its episode
    and, given vocab (a model's), made of names in it. InteropError naming the episode otherwise;
    task strings missing from the sketches mapping are all named at once."""
    where = getattr(dataset, "root", None) or dataset.path
    if sketches is not None:
        missing = sorted({info.task for info in dataset.describe() if info.task is not None} - set(sketches))
        if missing:
            raise InteropError(f"{where}: {len(missing)} task string(s) not in the sketches file: "
                               + "; ".join(repr(t) for t in missing[:8]) + (" ..." if len(missing) > 8 else "")
                               + " (taco annotate DATASET --sketches-template OUT.yaml lists them all)")
    plan = {}
    for info in dataset.describe():
        what = f"{where}: episode {info.key}"
        if sketches is not None:
            if info.task is None:
                raise InteropError(f"{where}: {info.task_problem}")
            if info.task not in sketches:
                known = sorted(sketches)
                raise InteropError(f"{what}: task {info.task!r} is not in the sketches file (it maps "
                                   f"{known[:5]}{' ...' if len(known) > 5 else ''})")
            sketch = sketches[info.task]
        elif info.sketch is not None:
            sketch = info.sketch
        else:
            raise InteropError(f"{what}: no sketch: pass --sketches (a YAML mapping of task string to "
                               "sub-task names), or annotate a dataset that already has sub-task labels")
        if len(sketch) > info.length:
            raise InteropError(f"{what}: its sketch has {len(sketch)} sub-tasks but the episode only "
                               f"{info.length} frames (every sub-task needs at least one)")
        if vocab is not None:
            unknown = [n for n in sketch if n not in vocab]
            if unknown:
                raise InteropError(f"{what}: sub-task {unknown[0]!r} is not one the model knows "
                                   f"({list(vocab)})")
        plan[info.key] = list(sketch)
    return plan


def sketches_template(path, out, state_keys=None, action_key=None):
    """Write {task string: sketch} for every task of the dataset at path to out (YAML): the
    dataset's own sketch where its episodes of that task are annotated (the first one's), else
    an empty list, which read_sketches refuses until it is filled in. Returns a small report."""
    from taco_app.interop.labels import write_sketches
    if os.path.exists(out):
        raise InteropError(f"--sketches-template: {out} exists; choose a new file")
    dataset = open_dataset(path, state_keys, action_key)
    infos = dataset.describe()
    where = getattr(dataset, "root", None) or dataset.path
    problems = [info.task_problem for info in infos if info.task is None]
    if problems:
        raise InteropError(f"{where}: {problems[0]}")
    table = {}
    for info in infos:
        if info.sketch is not None and not table.get(info.task):
            table[info.task] = list(info.sketch)
        table.setdefault(info.task, [])
    write_sketches(out, table, header=(
        f"# The task strings of {where} (taco annotate --sketches-template): each maps to its\n"
        "# sub-task names in order. Fill in every empty list [], then:\n"
        f"#   taco annotate {where} --sketches {os.fspath(out)} --out ANNOTATED\n"))
    return {"out": os.fspath(out), "tasks": len(table), "episodes": len(infos),
            "known": sum(1 for v in table.values() if v)}


def vocabulary(plan):
    """The sub-task names of a plan in order of first appearance."""
    return tuple(dict.fromkeys(name for sketch in plan.values() for name in sketch))


def to_demos(episodes, plan, vocab, discrete, n_actions=None, meta=None, dataset=None):
    """A validated Demos of episodes with their planned sketches (ids into vocab). labels: the
    annotation already in the dataset where its sketch is the planned one and its labels an
    alignment path (an argmax decoder's may not be), else the even split (spec/objectives.md
    eq. (8); TACO never reads labels)."""
    B = len(episodes)
    T = max(ep.length for ep in episodes)
    D = episodes[0].states.shape[1]
    L = max(len(plan[ep.key]) for ep in episodes)
    states = np.zeros((B, T, D))
    actions = np.zeros((B, T), dtype=np.int64) if discrete else np.zeros((B, T, episodes[0].actions.shape[1]))
    sketch = np.full((B, L), -1, dtype=np.int64)
    traj_len = np.array([ep.length for ep in episodes], dtype=np.int64)
    sketch_len = np.array([len(plan[ep.key]) for ep in episodes], dtype=np.int64)
    labels = even_split_labels(traj_len, sketch_len, T)
    final = np.stack([ep.final_state for ep in episodes])
    index = {name: k for k, name in enumerate(vocab)}
    for b, ep in enumerate(episodes):
        states[b, :ep.length] = ep.states
        actions[b, :ep.length] = ep.actions
        sketch[b, :sketch_len[b]] = [index[n] for n in plan[ep.key]]
        if ep.labels is not None and ep.sketch == plan[ep.key] and annotate_mod.is_alignment(
                ep.labels[None], traj_len[b:b + 1], sketch_len[b:b + 1])[0]:
            labels[b, :ep.length] = ep.labels
    meta = dict(meta or {})
    if discrete:
        meta["n_actions"] = int(n_actions)
    demos = data.Demos(states, actions, traj_len, sketch, sketch_len, labels, final, tuple(vocab), meta)
    try:
        return demos.validate()
    except data.DataError as err:
        raise InteropError(_located(err, episodes, dataset)) from None


def _located(err, episodes, dataset=None):
    """A Demos validation error of episodes as one line that names the dataset's file, its own
    episode key, the frame and the dataset's fields (the state and action keys), not the index
    into this chunk: "ds: episode 20, frame 92: observation.state: expected finite values ...,
    got states[20, 92, 7] = nan"."""
    text = str(err)
    where = (getattr(dataset, "root", None) or getattr(dataset, "path", None)) if dataset is not None else None
    m = re.search(r"\b(states|actions|final_state|labels|traj_len|sketch_len)\[(\d+)(?:, (\d+))?", text)
    if m is None or int(m.group(2)) >= len(episodes):
        first, last = episodes[0].key, episodes[-1].key
        return f"{where + ': ' if where else ''}episodes {first}..{last}: {text}"
    field, b = m.group(1), int(m.group(2))
    frame = f", frame {m.group(3)}" if m.group(3) is not None and field in ("states", "actions", "labels") else ""
    keys = {"states": "+".join(getattr(dataset, "state_keys", ()) or ()),
            "final_state": "+".join(getattr(dataset, "state_keys", ()) or ()),
            "actions": getattr(dataset, "action_key", "")}.get(field)
    named = f"{keys} ({field})" if keys else field
    return (f"{where + ': ' if where else ''}episode {episodes[b].key}{frame}: {named}: "
            f"{text.split(': ', 1)[1] if text.startswith(field + ':') else text}")


def read_all(dataset, plan, vocab, chunk, n_actions=None, meta=None):
    """Every episode as one Demos (training needs them all)."""
    episodes = [ep for part in dataset.episodes(chunk) for ep in part]
    if dataset.discrete and n_actions is None:
        n_actions = int(max(int(ep.actions.max()) for ep in episodes)) + 1
        if np.any([ep.actions.min() < 0 for ep in episodes]):
            raise InteropError("actions: discrete action ids must be >= 0")
    return to_demos(episodes, plan, vocab, dataset.discrete, n_actions, meta, dataset)


# ------------------------------------------------------------------------------------------
# taco annotate
# ------------------------------------------------------------------------------------------

class Labeller:
    """label_fn for a writer: annotates each chunk with the model and keeps what the summary
    and the review list need, and the agreement with labels already in the dataset."""

    def __init__(self, model, plan, decoder, dataset=None, recorder=None):
        self.model, self.plan, self.decoder, self.dataset = model, plan, decoder, dataset
        self.recorder = recorder          # review.Recorder for --report, or None
        self.lagged = {}                  # key -> (boundaries one frame after the action change, boundaries)
        self.moments = None               # streaming sums for previous_action_keys
        self.confidence, self.monotone = {}, {}
        self.agree = self.compared = 0
        self.frames = 0

    def __call__(self, episodes):
        n_actions = self.model.policy.action_dim if self.model.policy.discrete else None
        demos = to_demos(episodes, self.plan, self.model.vocab, self.model.policy.discrete, n_actions,
                         dataset=self.dataset)
        ann = annotate_mod.annotate(self.model, demos, self.decoder)
        out = []
        for b, ep in enumerate(episodes):
            T, L = ep.length, len(self.plan[ep.key])
            positions = ann.positions[b, :T]
            out.append(EpisodeLabels(self.plan[ep.key], positions, ann.posterior[b, :T, :L].astype(np.float32),
                                     ann.stop[b, :T].astype(np.float32), float(ann.confidence[b])))
            self.confidence[ep.key] = float(ann.confidence[b])
            self.monotone[ep.key] = bool(ann.monotone[b])
            if not self.model.policy.discrete:
                self.lagged[ep.key] = lagging_boundaries(ep.actions, positions)
                self._moments(ep.states, ep.actions)
            if self.recorder is not None:
                self.recorder.add(ep.key, ep.task, self.plan[ep.key], positions, ann.posterior[b, :T, :L],
                                  ann.confidence[b], ann.monotone[b])
            self.frames += T
            if ep.labels is not None and ep.sketch == self.plan[ep.key]:
                self.agree += int((ep.labels == positions).sum())
                self.compared += T
        return out

    def _moments(self, states, actions):
        """Add an episode's (s_t, a_{t-1}) and (s_t, a_t) pairs to the streaming sums."""
        if len(actions) < 2:
            return
        x = np.asarray(states[1:], dtype=np.float64)                        # (T-1, D)
        prev, now = np.asarray(actions[:-1], np.float64), np.asarray(actions[1:], np.float64)  # (T-1, A)
        if self.moments is None:
            D, A = x.shape[1], prev.shape[1]
            self.moments = {"n": 0, "x": np.zeros(D), "xx": np.zeros(D), "p": np.zeros(A), "pp": np.zeros(A),
                            "q": np.zeros(A), "qq": np.zeros(A), "xp": np.zeros((D, A)), "xq": np.zeros((D, A))}
        m = self.moments
        m["n"] += len(x)
        m["x"] += x.sum(0)
        m["xx"] += (x * x).sum(0)
        m["p"] += prev.sum(0)
        m["pp"] += (prev * prev).sum(0)
        m["q"] += now.sum(0)
        m["qq"] += (now * now).sum(0)
        m["xp"] += x.T @ prev
        m["xq"] += x.T @ now

    def previous_action_dims(self):
        """[(state dim, action dim, r with a_{t-1}, r with a_t)] of the state dimensions that
        track the previous action (|r| >= PREVIOUS_ACTION_R with a_{t-1}, above their |r| with
        a_t): a state key such as observation.velocity that holds the last command. With one,
        a sub-task's end shows in the state a frame late and TACO's boundaries follow it."""
        m = self.moments
        if m is None or m["n"] < 3:
            return []
        n = m["n"]

        def corr(xy, y, yy):
            cov = xy / n - np.outer(m["x"] / n, y / n)
            sx = np.sqrt(np.maximum(m["xx"] / n - (m["x"] / n) ** 2, 0.0))
            sy = np.sqrt(np.maximum(yy / n - (y / n) ** 2, 0.0))
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.nan_to_num(cov / np.outer(sx, sy))                  # (D, A)
        r_prev, r_now = corr(m["xp"], m["p"], m["pp"]), corr(m["xq"], m["q"], m["qq"])
        hits = np.argwhere((np.abs(r_prev) >= PREVIOUS_ACTION_R) & (np.abs(r_prev) > np.abs(r_now)))
        return [(int(d), int(j), float(r_prev[d, j]), float(r_now[d, j])) for d, j in hits]

    def review(self, n):
        """The n least confident episodes, least first, and every one whose labels are not an
        alignment path (an argmax decoder's can skip or revisit a sketch step) or whose
        boundaries mostly come one frame after the actions change (lagging_boundaries)."""
        order = sorted(self.confidence, key=lambda k: (self.confidence[k], str(k)))
        lagging = {k for k, (late, total) in self.lagged.items() if total and late >= LAG_SHARE * total}
        picked = order[:n] + [k for k in order[n:] if not self.monotone[k] or k in lagging]

        def note(k):
            notes = ([] if self.monotone[k] else ["labels are not an alignment path"])
            if k in lagging:
                late, total = self.lagged[k]
                notes.append(f"{late} of {total} boundaries one frame after the actions change")
            return {"note": "; ".join(notes)} if notes else {}
        return [{"episode": _jsonable(k), "confidence": round(self.confidence[k], 6), **note(k)} for k in picked]


PREVIOUS_ACTION_R = 0.98
"""|correlation| of a state dimension with the previous action above which it counts as a
copy of it (Labeller.previous_action_dims)."""
LAG_SHARE = 2 / 3
"""An episode is listed for review when at least this share of its boundaries lag the actions."""


def lagging_boundaries(actions, positions):
    """(boundaries one frame after the actions change, boundaries) of one episode with
    continuous actions (T, A) and labels (T,): a boundary at frame b lags when the action jump
    into frame b - 1 is more than twice the jump into b and more than three times the episode's
    median jump, i.e. the new sub-task's actions began a frame before its label."""
    a = np.asarray(actions, dtype=np.float64).reshape(len(actions), -1)      # (T, A)
    jump = np.concatenate([[0.0], np.linalg.norm(np.diff(a, axis=0), axis=1)])   # (T,) into frame t
    bounds = np.nonzero(np.diff(np.asarray(positions)))[0] + 1
    bounds = bounds[bounds >= 2]
    if not len(bounds):
        return 0, 0
    typical = np.median(jump[1:]) if len(jump) > 1 else 0.0
    late = (jump[bounds - 1] > 2 * jump[bounds]) & (jump[bounds - 1] > 3 * typical)
    return int(late.sum()), int(len(bounds))


def _jsonable(key):
    return int(key) if isinstance(key, (int, np.integer)) else str(key)


def default_model_dir(out):
    """Where a model trained by taco annotate goes when --save-model is not given: beside the
    output, named after it (OUT.taco-model; OUT's .hdf5 or .h5 dropped)."""
    base, ext = os.path.splitext(os.path.abspath(out))
    return (base if ext.lower() in (".hdf5", ".h5") else os.path.abspath(out)) + ".taco-model"


def annotate_dataset(path, out=None, sketches=None, model=None, decoder=annotate_mod.DEFAULT_DECODER,
                     in_place=False, state_keys=None, action_key=None, chunk=DEFAULT_CHUNK,
                     review=DEFAULT_REVIEW, config=None, overrides=(), seed=None, save_model=None,
                     log=sys.stderr, report_html=None, review_below=None):
    """`taco annotate`: sub-task labels, posteriors and confidences for every episode of the
    dataset at path, written to a new dataset out (or into path with in_place).

    sketches: a YAML file (task string -> sub-task names) or None (the dataset's own annotation);
    model: a model directory, or None to train TACO on the dataset first (with config, overrides
    and seed as `taco train` takes them; saved in save_model, default default_model_dir(out)).
    report_html: also write the review page there (taco_app.interop.review); review_below: the
    confidence below which the page lists an episode first (None: review.REVIEW_BELOW).
    Returns the report printed by the command line (a dict)."""
    if in_place == (out is not None):
        raise InteropError("--out: give a new dataset to write, or --in-place to rewrite DATASET (not both)")
    if out is not None and os.path.isdir(path):
        inside = os.path.relpath(os.path.abspath(out), os.path.abspath(path))
        if not inside.startswith(os.pardir):
            raise InteropError(f"--out: {out} is inside DATASET {path}; write the new dataset elsewhere")
    if not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise InteropError(f"--chunk: expected an integer in [1, {MAX_CHUNK}], got {chunk!r}")
    if report_html is not None and os.path.exists(report_html):
        raise InteropError(f"--report: {report_html} exists; choose a new file")
    if report_html is not None:        # the page must not land on or inside a dataset (the output
        page = os.path.abspath(report_html)   # does not exist yet: "exists" cannot see it)
        for name, target in (("--out", out), ("DATASET", path)):
            if target is not None and (page == os.path.abspath(target)
                                       or page.startswith(os.path.abspath(target) + os.sep)):
                where = "is" if page == os.path.abspath(target) else "lies inside"
                raise InteropError(f"--report: {report_html} {where} {name} {target}; write the review page "
                                   "elsewhere")
    t0 = time.time()
    table = read_sketches(sketches) if sketches else None
    dataset = open_dataset(path, state_keys, action_key)
    try:
        fmt = dataset.format
        trained = None
        if model is not None:
            loaded = model_mod.load(model)
            annotate_mod.check_model(loaded)
            plan = plan_sketches(dataset, table, loaded.vocab)
        else:
            plan = plan_sketches(dataset, table)
        vocab = loaded.vocab if model is not None else vocabulary(plan)
        if model is None:
            demos = read_all(dataset, plan, vocab, chunk, meta={"source": os.path.abspath(path), "format": fmt})
            from taco_app import config as config_mod
            cfg = config_mod.load(None, config, overrides, seed=seed)
            if algorithms.get(cfg.algo).ctc_kind:
                raise InteropError(f"--set algo={cfg.algo}: a CTC-BC model aligns with its classifier, not "
                                   "with sub-policies; annotate with taco (or gtbc, which needs true labels)")
            run_dir = save_model or default_model_dir(out or path)
            try:
                checkpoints.prepare_out_dir(run_dir)
            except ValueError as err:
                raise InteropError(f"--save-model: {str(err).removeprefix('--out: ')}; annotate with "
                                   f"--model {os.path.join(run_dir, 'model')} to reuse it") from None
            print(f"taco annotate: training {cfg.algo} on {demos.n} episodes of {path} "
                  f"(model in {os.path.join(run_dir, 'model')})", file=log)
            loaded = train.train(demos, cfg, out_dir=run_dir, log=log)
            trained = os.path.join(run_dir, "model")
            model = trained
            del demos
        evaluate.check_compatible(loaded, _shape_probe(dataset, plan, loaded), f"{path}")
        recorder = None
        if report_html is not None:
            from taco_app.interop import review as review_mod
            recorder = review_mod.Recorder()
        labeller = Labeller(loaded, plan, decoder, dataset, recorder)
        width = max(len(s) for s in plan.values())

        def summary():
            return {"tool": "taco_ref", "decoder": decoder, "model": os.path.abspath(model),
                    "model_algo": loaded.algo, "trained_here": trained is not None,
                    "source": os.path.abspath(path), "vocab": list(loaded.vocab),
                    "episodes": len(labeller.confidence),
                    "mean_confidence": float(np.mean(list(labeller.confidence.values()))),
                    "review": labeller.review(review),
                    "confidence": {str(_jsonable(k)): round(v, 6) for k, v in labeller.confidence.items()}}
        unparsable = dataset.write_labelled(out, labeller, vocab=loaded.vocab, posterior_width=width,
                                            summary_fn=summary, chunk=chunk, in_place=in_place)
        page = None
        if recorder is not None:
            meta = {"dataset": os.path.abspath(path), "written to": os.path.abspath(path if in_place else out),
                    "model": os.path.abspath(model), "decoder": decoder, "episodes": len(labeller.confidence),
                    "mean confidence": f"{np.mean(list(labeller.confidence.values())):.4f}",
                    "lowest confidence": f"{min(labeller.confidence.values()):.4f}"}
            images = getattr(dataset, "frame_images", None)
            page = review_mod.write_page(
                report_html, recorder, labeller.review(review), meta,
                images=images if images is not None and dataset.has_images() else None, vocab=loaded.vocab,
                threshold=review_mod.REVIEW_BELOW if review_below is None else review_below, limit=review,
                agreement=(labeller.agree, labeller.compared))
    finally:
        if hasattr(dataset, "close"):
            dataset.close()
    conf = np.array(list(labeller.confidence.values()))
    tracking = _key_names(labeller.previous_action_dims(), dataset)
    report = {"format": fmt, "episodes": len(conf), "frames": labeller.frames, "decoder": decoder,
              "model": os.path.abspath(model), "trained": trained is not None,
              "out": os.path.abspath(path if in_place else out), "seconds": round(time.time() - t0, 2),
              "mean_confidence": float(conf.mean()), "min_confidence": float(conf.min()),
              "review": labeller.review(review), "mimicgen_unparsable": [_jsonable(k) for k in unparsable],
              "not_alignment_paths": sum(not v for v in labeller.monotone.values())}
    if labeller.compared:
        report["agreement_with_existing_labels"] = labeller.agree / labeller.compared
    if page is not None:
        report["page"] = page
    if tracking:
        report["previous_action_keys"] = tracking
    lagging = [r for r in report["review"] if "one frame after" in r.get("note", "")]
    report["lagging_episodes"] = len(lagging)
    return report


def _key_names(dims, dataset):
    """previous_action_dims' hits as [{"key", "dim", "action_dim", "r_previous", "r_current"}],
    the state dimension named by the dataset's state key (and the index within it)."""
    widths = list(getattr(dataset, "state_dims", []) or [])
    keys = list(getattr(dataset, "state_keys", []) or [])
    starts = np.cumsum([0] + widths)
    out = []
    for d, j, r_prev, r_now in dims:
        k = int(np.searchsorted(starts, d, side="right") - 1) if widths else -1
        name = f"{keys[k]}[{d - starts[k]}]" if 0 <= k < len(keys) else f"state[{d}]"
        out.append({"key": name, "action_dim": j, "r_previous": round(r_prev, 4), "r_current": round(r_now, 4)})
    return out


def _shape_probe(dataset, plan, model):
    """A one-frame Demos with the dataset's state and action sizes (for check_compatible before
    anything is read in full)."""
    D = dataset.state_dim
    discrete = dataset.discrete
    A = None if discrete else dataset.action_dim
    actions = np.zeros((1, 1), dtype=np.int64) if discrete else np.zeros((1, 1, A))
    meta = {"n_actions": model.policy.action_dim} if discrete else {}
    first = next(iter(plan.values()))
    return data.Demos(np.zeros((1, 1, D)), actions, np.ones(1, np.int64),
                      np.array([[list(model.vocab).index(first[0])]]), np.ones(1, np.int64),
                      np.zeros((1, 1), np.int64), np.zeros((1, D)), tuple(model.vocab), meta)


# ------------------------------------------------------------------------------------------
# taco export
# ------------------------------------------------------------------------------------------

def task_string(domain, sketch):
    """The task string an export gives a sketch: "DOMAIN: name, name, ..."."""
    return f"{domain or 'task'}: " + ", ".join(sketch)


def default_sketches_path(out):
    """Where export writes the sketches file: beside OUT, OUT.sketches.yaml (.hdf5 dropped)."""
    base, ext = os.path.splitext(os.path.abspath(out))
    return (base if ext.lower() in (".hdf5", ".h5") else os.path.abspath(out)) + ".sketches.yaml"


def export_demos(data_path, fmt, out, fps=None, sketches_out=None):
    """`taco export`: the demonstrations in data_path (a taco_ref .npz) as a LeRobot v3 dataset
    or a robomimic file with their true labels, and the sketches file that maps each task
    string to its sketch. Returns the report printed by the command line."""
    if fmt not in FORMATS:
        raise InteropError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
    mod = _module(fmt)
    demos = data.load(data_path)
    domain = demos.meta.get("domain")
    sketches = [[demos.vocab[k] for k in demos.sketch[n, :demos.sketch_len[n]]] for n in range(demos.n)]
    tasks = [task_string(domain, s) for s in sketches]
    if os.path.lexists(out):
        raise InteropError(f"--out: {out} exists; choose a new path (an export never replaces one)")
    if sketches_out is not None and os.path.lexists(sketches_out):
        raise InteropError(f"--sketches-out: {sketches_out} exists; choose another path")
    if sketches_out is None:
        sketches_out = default_sketches_path(out)
        if os.path.lexists(sketches_out):
            raise InteropError(f"--out: the sketches file written beside it, {sketches_out}, exists (left from "
                               f"an earlier export?); remove it, or choose another place with --sketches-out")
    unparsable = []
    if fmt == "lerobot":
        if fps is None:
            fps = _domain_fps(domain)
        mod.export(demos, out, fps, tasks)
    else:
        unparsable = mod.export(demos, out, tasks, domain)
    write_sketches(sketches_out, dict(zip(tasks, sketches)))
    return {"format": fmt, "episodes": demos.n, "frames": int(demos.traj_len.sum()), "out": os.path.abspath(out),
            "sketches": os.path.abspath(sketches_out), "fps": fps,
            "mimicgen_unparsable": unparsable}


def _domain_fps(domain):
    """Frames per second of a domain's data: 1 / its control_dt, which must be whole for LeRobot."""
    import taco_sim
    if domain not in taco_sim.names():
        raise InteropError(f"--fps: the data's domain ({domain!r}) is not a taco_sim domain; give --fps")
    dt = taco_sim.get(domain).control_dt
    if dt is None:
        return 1
    fps = 1.0 / dt
    if abs(fps - round(fps)) > 1e-9:
        raise InteropError(f"--fps: {domain}'s control period {dt} s is not a whole number of frames per "
                           "second; give --fps")
    return int(round(fps))


def dumps(report):
    return json.dumps(report, indent=1)

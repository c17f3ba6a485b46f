"""Evaluation: execute sketches with the learned sub-policies; alignment accuracy; spec/evaluation.md.

Execution (paper Sec. 4): the active sub-policy acts until it emits STOP; the next one then
acts in the same state. A sub-policy acts at least once before it may stop (every sketch step
covers at least one time step in the data). Every STOP is reported to the environment
(`env.stop()`), which judges it (Nav-World: the sub-task counts if the agent is within RADIUS of
its destination, else the task fails; Dial: ignored, the keypad judges presses). The episode
ends when the last sub-policy stops, when the environment reports every sub-task done
(`env.done`) or the task failed (`env.failed`: a STOP away from a Nav-World destination, a wrong
digit on the dial pad), or when the step budget runs out.

Metrics (paper Sec. 5): task accuracy = share of sketches whose sub-tasks were all completed,
in order; sub-task accuracy = completed sub-tasks / attempted; alignment accuracy = share of
valid time steps of held-out demonstrations whose decoded sketch position equals the ground
truth, for each decoder (the paper's is the argmax of the forward variables).
"""
from dataclasses import dataclass
from typing import Callable

import numpy as np

from taco_ref import algorithms, align, data, objectives, policy, runner
from taco_ref.lattice import lattice_alignments, scores  # noqa: F401  (evaluate.scores is public)
from taco_ref.objectives import valid_mask

DECODERS = align.DECODER_NAMES


ACTION_STREAM = 1
"""Discrete actions of the episode with seed `seed` are drawn from default_rng([seed, ACTION_STREAM])."""


FAILURE_KINDS = {
    "stopped early": "the active sub-policy said STOP before the environment counted its sub-task",
    "stopped late": "its sub-task was counted but it never said STOP; the episode then failed "
                    "or ran out of steps",
    "wrong outcome": "the environment ended the task while the right sub-policy was active "
                     "(the Dial: a wrong key pressed)",
    "timed out": "the step budget ran out while the active sub-policy's sub-task was not done",
    "non-finite action": "the active sub-policy produced a NaN or infinite action",
}
"""Why a sketch failed, decided from the episode alone (spec/evaluation.md eq. (4)); a domain's
task environment may refine each kind with a detail (`failure_detail`, the Dial's keys)."""


@dataclass(frozen=True)
class Expert:
    """A domain's expert in a model's place: execute, task_accuracy and protocol run it through
    the machine that runs a trained model's sub-policies (runner.SketchRunner, expert=), so its
    figures are the protocol's (`taco evaluate --expert`; spec/evaluation.md §1).

    Field  | Meaning
    name   | its name among the domain's experts (taco_sim Domain.experts)
    vocab  | (K,) sub-task names, the domain's
    policy | a policy.PolicyConfig of the domain's shapes (D, K, A, discrete); there are no nets
    make   | make(env) -> the expert of one episode in env: stops(k, s) -> bool and
           | action(k, s, rng) -> an action; an expert of the observation alone ignores env
    """

    name: str
    vocab: tuple
    policy: policy.PolicyConfig
    make: Callable
    params = None


def domain_expert(domain, name=None):
    """The Expert called name among domain.experts (None: the first, the domain's default);
    ValueError naming expert when the domain has none or none of that name."""
    experts = dict(domain.experts)
    if not experts:
        raise ValueError(f"expert: domain {domain.name} has no expert that acts through the evaluation "
                         "protocol")
    name = next(iter(experts)) if name is None else name
    if name not in experts:
        raise ValueError(f"expert: domain {domain.name}'s experts are {', '.join(experts)}, got {name!r}")
    cfg = policy.PolicyConfig(state_dim=int(domain.state_dim), n_subtasks=len(domain.vocab),
                              action_dim=int(domain.action_dim), discrete=bool(domain.discrete))
    return Expert(name, tuple(domain.vocab), cfg, experts[name])


def classify_failure(sketch_len, progress, n_stops, failed, error=False):
    """(kind, position) of an unsuccessful episode, or None for a successful one;
    spec/evaluation.md eq. (4).

    With f = progress (the first sub-task not counted) and a = n_stops (the sketch position
    active at the end): a > f "stopped early" at f (sub-policy f stopped, its sub-task never
    counted); a < f "stopped late" at a (sub-task a was counted, sub-policy a never stopped);
    a = f: "non-finite action" (error), "wrong outcome" (the env failed the task) or
    "timed out", at f.
    """
    if progress >= sketch_len:
        return None
    if n_stops > progress:
        return "stopped early", progress
    if n_stops < progress:
        return "stopped late", n_stops
    if error:
        return "non-finite action", progress
    return ("wrong outcome" if failed else "timed out"), progress


def execute(model, env, sketch, seed, budget=None, stop_threshold=0.5, observer=None, sample=True,
            views=None, stop_hold=1):
    """Run one sketch (a sequence of sub-task ids) in env; returns a dict with
    success, progress (sub-tasks the env counted), steps, stop_times (step of each STOP),
    progress_times (step at which each counted sub-task was counted) and failure (None, or
    {kind, position, detail}: classify_failure, and env.failure_detail's text where the env
    has one, else ""); where the env judges sub-tasks by other rules too (the Dial's
    subtask_verdicts, spec/evaluation.md eq. (10)-(11)), verdicts {rule: (L,) bool}.
    observer(env, active), if given, is called after the reset and after every step.

    env: a task env on taco_sim's domain contract (reset(sketch, seed), step(action), stop(),
    done, failed, progress, budget(L), subtask_budget: a sub-policy that acted that many times is
    stopped by force, and the env judges that STOP like any other). The decisions are taco_ref.runner.SketchRunner's (the ROS 2 policy node runs the
    same machine), stepped with the step count as its clock; this loop adds the env and the
    budget. A STOP is decided in the state obs given to run.step, before the returned action is
    applied, so env.stop() is called right after run.step and before env.step, also for the last
    sub-policy's STOP (after which run.step returns None). spec/evaluation.md §1.
    Discrete actions are drawn from the sub-policy's categorical (sample False: its argmax), with
    a generator seeded by the episode's seed, so an episode is a function of (model, sketch, seed).
    views(k, s) -> (n, D): decide over views of each state (SketchRunner, spec/evaluation.md
    eq. (8)); None: the state alone. stop_hold: a sub-policy stops in the stop_hold-th consecutive
    decision above stop_threshold (SketchRunner; spec/evaluation.md eq. (9)).
    model may be an Expert: its make(env) then decides in place of the nets, by the same rules.
    """
    obs = env.reset(sketch, seed=seed)
    budget = env.budget(len(sketch)) if budget is None else budget
    rng = np.random.default_rng([seed, ACTION_STREAM]) if sample and model.policy.discrete else None
    expert = model.make(env) if isinstance(model, Expert) else None
    run = runner.SketchRunner(model.params, model.policy, model.vocab, stop_threshold=stop_threshold,
                              max_subtask_steps=env.subtask_budget, rng=rng, views=views,
                              stop_hold=stop_hold, expert=expert)
    run.start(sketch, now=0)
    if observer:
        observer(env, run.active)
    progress_times = []

    def count():
        progress_times.extend([run.steps] * (int(env.progress) - len(progress_times)))

    while run.steps < budget and not env.done and not env.failed:
        stops = len(run.stop_steps)
        action = run.step(obs, now=run.steps)
        if len(run.stop_steps) > stops:   # the active sub-policy stopped in obs: the env judges
            env.stop()
            count()
        if action is None:          # the last sub-policy stopped (or a non-finite action)
            break
        obs = env.step(action)
        count()
        if observer:
            observer(env, run.active)
    out = {"success": bool(env.done), "progress": int(env.progress), "steps": run.steps,
           "stop_times": list(run.stop_steps), "progress_times": progress_times, "failure": None}
    verdicts = getattr(env, "subtask_verdicts", None)
    if verdicts is not None:      # the env's other success rules, per sketch position
        out["verdicts"] = {rule: [bool(v) for v in counted] for rule, counted in verdicts().items()}
    failure = classify_failure(len(sketch), out["progress"], len(run.stop_steps), bool(env.failed),
                               error=run.state == "error")
    if failure is not None:
        kind, position = failure
        start = 0 if position == 0 else run.stop_steps[position - 1]
        end = run.stop_steps[position] if position < len(run.stop_steps) else run.steps
        explain = getattr(env, "failure_detail", None)
        out["failure"] = {"kind": kind, "position": position,
                          "detail": explain(kind, position, start, end) if explain else ""}
    return out


def unpad(sketch):
    """A sketch row as a list of ids, without the -1 padding of a batch of sketches of mixed
    lengths (as data.md pads them); ValueError if -1 is followed by an id."""
    ids = [int(k) for k in sketch]
    n = ids.index(-1) if -1 in ids else len(ids)
    if any(k != -1 for k in ids[n:]) or n == 0:
        raise ValueError(f"sketch: expected ids followed only by -1 padding, got {ids}")
    return ids[:n]


def task_accuracy(model, make_env, sketches, seed=0, progress=None, stop_threshold=0.5, views=None,
                  stop_hold=1):
    """Execute every sketch (one seed each, derived from seed); task and sub-task accuracy,
    spec/evaluation.md eq. (1), and why the others failed. sketches: rows of ids, each possibly
    padded with -1 (mixed lengths). stop_threshold: a sub-policy stops when pi_k(STOP | s)
    exceeds it (execute; 0.5, the default, is the more probable decision). views, stop_hold:
    execute's.

    Returns task_accuracy, subtask_accuracy, n_tasks, outcomes (a string of "1" for each
    sketch completed and "0" for each failed, in order: for paired comparisons), task_progress and
    task_lengths (the sub-tasks completed of each sketch and its length, in order: the accuracies
    of any prefix of the sketches, e.g. the image Dial's first 25 of 100), failures
    ({kind: count}, FAILURE_KINDS) and failure_details ({"kind: detail": count}, where the
    environment gives details)."""
    seeds = np.random.default_rng(seed).integers(0, 2**31, size=len(sketches))
    done = completed = attempted = 0
    outcomes, failures, details, progress_of, lengths = [], {}, {}, [], []
    rules = {}                                       # {rule: [(L,) verdicts of each sketch]}
    for i, (row, s) in enumerate(zip(sketches, seeds)):
        sketch = unpad(row)
        out = execute(model, make_env(), sketch, int(s), stop_threshold=stop_threshold, views=views,
                      stop_hold=stop_hold)
        done += out["success"]
        completed += out["progress"]
        attempted += len(sketch)
        outcomes.append("1" if out["success"] else "0")
        progress_of.append(out["progress"])
        lengths.append(len(sketch))
        for rule, counted in out.get("verdicts", {}).items():
            rules.setdefault(rule, []).append(counted)
        if out["failure"] is not None:
            kind, detail = out["failure"]["kind"], out["failure"]["detail"]
            failures[kind] = failures.get(kind, 0) + 1
            if detail:
                details[f"{kind}: {detail}"] = details.get(f"{kind}: {detail}", 0) + 1
        if progress:
            progress(i + 1, len(sketches))
    out = {"task_accuracy": done / len(sketches), "subtask_accuracy": completed / attempted,
           "n_tasks": len(sketches), "outcomes": "".join(outcomes), "task_progress": progress_of,
           "task_lengths": lengths, "subtask_success": subtask_success(sketches, progress_of),
           "failures": dict(sorted(failures.items())), "failure_details": dict(sorted(details.items()))}
    if rules:
        out["rules"] = {rule: rule_figures(verdicts) for rule, verdicts in sorted(rules.items())}
    return out


def rule_figures(verdicts):
    """Task and sub-task accuracy under one of an env's other success rules, spec/evaluation.md
    eq. (10)-(11): verdicts, one (L,) list of bools per sketch (whether each sketch position
    counted). A sketch succeeds when all its positions count; outcomes as task_accuracy's."""
    if not verdicts or any(len(v) == 0 for v in verdicts):
        raise ValueError("verdicts: expected one non-empty list of bools per sketch")
    ok = [all(v) for v in verdicts]
    return {"task_accuracy": sum(ok) / len(verdicts),
            "subtask_accuracy": sum(map(sum, verdicts)) / sum(map(len, verdicts)),
            "outcomes": "".join("1" if x else "0" for x in ok)}


def subtask_success(sketches, task_progress):
    """{str(k): [completed, reached]} per sub-task id k, spec/evaluation.md eq. (7): a sketch
    *reached* position i when its first i sub-tasks were completed (i <= progress); it completed
    position i when i < progress. Sorted by id; ids no sketch reached are absent.

    One failing sub-policy shows here as one low entry, where task accuracy only falls: with
    every sketch run on one layout (the Dial's standard keypad), a sub-policy that fails at its
    one key there fails every sketch that reaches it."""
    if len(sketches) != len(task_progress):
        raise ValueError(f"task_progress: expected one entry per sketch ({len(sketches)}), "
                         f"got {len(task_progress)}")
    counts = {}
    for row, progress in zip(sketches, task_progress):
        sketch = unpad(row)
        if not 0 <= progress <= len(sketch):
            raise ValueError(f"task_progress: {progress} is outside [0, {len(sketch)}] for sketch {sketch}")
        for i, k in enumerate(sketch[:progress + 1]):
            c = counts.setdefault(int(k), [0, 0])
            c[0] += i < progress
            c[1] += 1
    return {str(k): counts[k] for k in sorted(counts)}


def wilson_interval(successes, n, z=1.959963984540054):
    """The Wilson score interval (lo, hi) of a proportion, successes out of n trials, at the
    normal quantile z (95 % by default); spec/evaluation.md eq. (5). Unlike p +- z se it stays
    inside [0, 1] and is not empty at 0 or n successes."""
    if not (isinstance(n, (int, np.integer)) and n >= 1 and 0 <= successes <= n):
        raise ValueError(f"wilson_interval: expected 0 <= successes <= n, n >= 1, got {successes}, {n}")
    return _wilson(successes / n, n, z)


def _wilson(p, n, z):
    """Eq. (5) for the share p of n trials, n any positive number (an effective count, eq. (14))."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))


def paired_difference_interval(outcomes_a, outcomes_b, z=1.959963984540054, effective=None):
    """(difference, lo, hi): the difference p_a - p_b of two success rates on the same tasks
    and its 95 % interval by Newcombe's hybrid score method for paired data (1998, method 10);
    spec/evaluation.md eq. (6). outcomes_*: sequences of 0/1 (or the "0"/"1" strings of
    task_accuracy), task j being the same task in both. effective: the number of independent
    tasks the outcomes are worth, at most their count (tasks that share structure,
    spec/evaluation.md eq. (14)): the four counts are scaled to it, the shares kept; None:
    every task independent."""
    a_ = np.array([int(c) for c in outcomes_a], dtype=np.int64)
    b_ = np.array([int(c) for c in outcomes_b], dtype=np.int64)
    if a_.shape != b_.shape or a_.size == 0 or not np.isin(np.concatenate([a_, b_]), (0, 1)).all():
        raise ValueError(f"paired_difference_interval: expected two equally long 0/1 sequences, "
                         f"got {a_.size} and {b_.size} entries")
    if effective is not None and not 1 <= effective <= a_.size:
        raise ValueError(f"paired_difference_interval: effective must lie in [1, {a_.size}] (the tasks), "
                         f"got {effective!r}")
    scale = 1.0 if effective is None else effective / a_.size
    n = a_.size * scale
    both, only_a = np.sum(a_ & b_) * scale, np.sum(a_ & (1 - b_)) * scale
    only_b, neither = np.sum((1 - a_) & b_) * scale, np.sum((1 - a_) & (1 - b_)) * scale
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = _wilson(p1, n, z)
    l2, u2 = _wilson(p2, n, z)
    denom = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    cross = both * neither - only_a * only_b
    if denom == 0:
        phi = 0.0
    else:                                          # Newcombe's continuity-corrected correlation
        phi = (max(cross - n / 2, 0.0) if cross > 0 else cross) / np.sqrt(float(denom))
    d = p1 - p2
    lower = np.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    upper = np.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return float(d), float(max(-1.0, d - lower)), float(min(1.0, d + upper))


def failure_table(result):
    """The failure kinds of a task_accuracy (or protocol) result as text lines: count and share
    of the failed sketches, each kind's details indented below it."""
    failed = sum(result.get("failures", {}).values())
    lines = [f"{result['n_tasks'] - failed} of {result['n_tasks']} sketches completed; "
             f"{failed} failed:"]
    for kind in FAILURE_KINDS:
        n = result.get("failures", {}).get(kind, 0)
        if not n:
            continue
        lines.append(f"  {kind:<18} {n:5d}  {100 * n / failed:5.1f} %   ({FAILURE_KINDS[kind]})")
        for key, m in sorted(result.get("failure_details", {}).items(), key=lambda kv: -kv[1]):
            if key.startswith(kind + ": "):
                lines.append(f"      {key[len(kind) + 2:]:<40} {m:5d}")
    return lines


RULES = {
    "paper": "a sub-task counts when its STOP fires within 0.06 m (L1) of its key's top: the "
             "original code's rule",
    "strict": "a sub-task counts when its key is registered while its own sub-policy is active: "
              "an early STOP fails it even if the next sub-policy presses the key",
}
"""The Dial's success rules beside the keypad's (spec/evaluation.md eq. (10)-(11))."""


def rule_lines(result):
    """A result's other success rules (its "rules", where the env has them) as text lines:
    the keypad's figures first, then each rule's task and sub-task accuracy."""
    if "rules" not in result:
        return []
    lines = [f"success rules      task    sub-task",
             f"  keypad        {100 * result['task_accuracy']:6.1f} %  {100 * result['subtask_accuracy']:6.1f} %"
             "   (the keypad registered the PIN)"]
    for rule, fig in result["rules"].items():
        lines.append(f"  {rule:<12}  {100 * fig['task_accuracy']:6.1f} %  {100 * fig['subtask_accuracy']:6.1f} %"
                     f"   ({RULES.get(rule, '')})")
    return lines


def subtask_lines(result, vocab):
    """A task_accuracy (or protocol) result's subtask_success as text lines: per sub-task, its
    name, the share of the sketches that reached it which completed it, and how many reached it;
    [] when the result has none."""
    success = result.get("subtask_success") or {}
    if not success:
        return []
    lines = ["sub-task success, completed / reached (spec/evaluation.md eq. (7)):"]
    for k, (done, reached) in success.items():
        lines.append(f"  {vocab[int(k)]:<18} {100 * done / reached:5.1f} %  of {reached:5d}")
    return lines


MAX_TASKS = 100_000
"""Most test tasks protocol draws: 100 times the experiments' 1000, checked before the sketches
are drawn (1e9 of them ask for tens of GB: an out-of-memory kill before)."""
TEST_SKETCH_SEED = 30_000
"""The test sketches of evaluation seed s are drawn from np.random.default_rng(30_000 + s)."""
EPISODE_SEED = 40_000
"""Their episodes' layouts from task_accuracy(..., seed=40_000 + s)."""
VALIDATION_TASK_SEED = 80_000
"""The validation tasks of seed s (split "validation"): sketches from default_rng(80_000 + s)."""
VALIDATION_TASK_EPISODE_SEED = 90_000
"""Their episodes' layouts from task_accuracy(..., seed=90_000 + s)."""
SPLITS = {"test": (TEST_SKETCH_SEED, EPISODE_SEED),
          "validation": (VALIDATION_TASK_SEED, VALIDATION_TASK_EPISODE_SEED)}
"""The two splits of tasks a model is executed on (spec/evaluation.md §6, "Seeds"): each the
(sketch seed, episode seed) offsets its tasks are drawn from. The same protocol, the same
distribution of tasks (sketch lengths, task environment, budget), disjoint seeds: settings are
chosen on "validation", figures reported on "test"."""


def split_seeds(split, seed):
    """(sketch seed, episode seed) of the split's tasks for evaluation seed `seed`; ValueError
    naming split for a name not in SPLITS."""
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    sketches, episodes = SPLITS[split]
    return sketches + seed, episodes + seed


def check_vocab(model, vocab, what="the domain"):
    """ValueError unless the model's sub-task names are vocab, in order (ids index names)."""
    if tuple(model.vocab) != tuple(vocab):
        raise ValueError(f"model: its vocabulary {list(model.vocab)} is not {what}'s {list(vocab)}")


def check_compatible(model, demos, what="the data"):
    """ValueError unless demos can be scored by model: the same sub-task names in the same order
    (sketch ids index them, so a permuted or renamed vocabulary would silently mean other
    sub-tasks), the same state size, and the same kind and size of actions."""
    check_vocab(model, demos.vocab, what)
    cfg = model.policy
    if cfg.image_shape is not None or demos.image_shape is not None:
        if demos.image_shape != (None if cfg.image_shape is None else tuple(cfg.image_shape)):
            raise ValueError(f"{what}: states of shape {tuple(demos.states.shape[2:])}, the model "
                             f"expects {tuple(cfg.image_shape) if cfg.image_shape else (cfg.state_dim,)}")
    elif demos.states.shape[2] != cfg.state_dim:
        raise ValueError(f"{what}: states have {demos.states.shape[2]} dimensions, the model "
                         f"expects {cfg.state_dim}")
    if demos.discrete != cfg.discrete:
        kinds = {True: "discrete", False: "continuous"}
        raise ValueError(f"{what}: {kinds[demos.discrete]} actions, the model's are {kinds[cfg.discrete]}")
    if not demos.discrete and demos.actions.shape[2] != cfg.action_dim:
        raise ValueError(f"{what}: actions have {demos.actions.shape[2]} dimensions, the model "
                         f"expects {cfg.action_dim}")
    if demos.discrete and demos.actions.size and demos.actions.max() >= cfg.action_dim:
        raise ValueError(f"{what}: action ids up to {demos.actions.max()}, the model has "
                         f"{cfg.action_dim} actions")


def protocol(model, domain, n_tasks, seed=0, sketch_len=None, lengths=(), progress=None,
             stop_threshold=0.5, views=1, stop_hold=1, split="test", test=None):
    """The evaluation protocol of spec/evaluation.md §3, the one used by `taco evaluate`, the
    experiment grid and the ROS bridge's offline check.

    domain: a taco_sim Domain (test_sketches, sample_sketches, task_env, vocab). The n_tasks
    sketches are domain.test_sketches(n_tasks, rng) (or, with sketch_len, sample_sketches of that
    length) with rng = default_rng(S + seed), executed by task_accuracy with seed E + seed, where
    (S, E) are the split's offsets (SPLITS: test 30_000, 40_000; validation 80_000, 90_000); for
    each L of lengths, sample_sketches(n_tasks, L, default_rng([S + seed, L])) with the same
    episode seed. Returns task_accuracy, subtask_accuracy, n_tasks and, with lengths,
    task_accuracy_by_length {str(L): accuracy}. progress(label) -> callback, if given.
    stop_threshold: task_accuracy's. views: how many views of each state a sub-policy decides
    over (domain.state_views; 1: the state alone; spec/evaluation.md eq. (8)). stop_hold:
    consecutive decisions above stop_threshold a STOP needs (spec/evaluation.md eq. (9)).
    split: "test" (the figures a result reports) or "validation" (the tasks settings are chosen
    on: `validation`). test: a named test condition of the domain (domain.tests: the Dial's
    harder test and its single disturbances, spec/evaluation.md §9) in place of the standard
    test: its task environment, its own sketches (their lengths drawn as it says) from the same
    seeds, and its STOP hold where it names one (an ablation); None: the standard test.
    """
    if (isinstance(n_tasks, bool) or not isinstance(n_tasks, (int, np.integer))
            or not 1 <= n_tasks <= MAX_TASKS):
        raise ValueError(f"n_tasks: expected an integer in [1, {MAX_TASKS}], got {n_tasks!r}")
    sketch_seed, episode_seed = split_seeds(split, seed)
    condition = None if test is None else test_condition(domain, test)
    make_env = domain.task_env if condition is None else condition.make_env
    if condition is not None and condition.stop_hold is not None:
        stop_hold = condition.stop_hold                                 # an ablation of the hold
    if test is not None and (lengths or sketch_len is not None):
        raise ValueError(f"test: {test} draws its own sketch lengths; leave out lengths and sketch_len")
    check_vocab(model, domain.vocab, f"domain {domain.name}")
    view_fn = state_views(domain, views)
    sketches = protocol_sketches(domain, n_tasks, seed, sketch_len, split, test)
    report = progress("evaluate" if test is None else f"evaluate {test}") if progress else None
    out = task_accuracy(model, make_env, sketches, seed=episode_seed, progress=report,
                        stop_threshold=stop_threshold, views=view_fn, stop_hold=stop_hold)
    by_length, rules_by_length = {}, {}
    for L in lengths or ():
        sketches = domain.sample_sketches(n_tasks, L, np.random.default_rng([sketch_seed, L]))
        report = progress(f"evaluate L_test = {L}") if progress else None
        res = task_accuracy(model, domain.task_env, sketches, seed=episode_seed, progress=report,
                            stop_threshold=stop_threshold, views=view_fn, stop_hold=stop_hold)
        by_length[str(L)] = res["task_accuracy"]
        for rule, fig in res.get("rules", {}).items():
            rules_by_length.setdefault(rule, {})[str(L)] = fig["task_accuracy"]
    if by_length:
        out["task_accuracy_by_length"] = by_length
    for rule, accs in rules_by_length.items():
        out["rules"][rule]["task_accuracy_by_length"] = accs
    return out


def validation(model, domain, n_tasks, seed=0, **kwargs):
    """The validation split: `protocol` on validation tasks, the tasks every setting of this
    project is chosen on (spec/evaluation.md §6, "Seeds"; the selection log, spec/selection.md).
    The same distribution of tasks as the test split (sketch lengths, the domain's task
    environment, budgets, success rules), drawn from seeds of their own (80_000 + seed for the
    sketches, 90_000 + seed for the episodes) that no training, alignment, test or rollout-
    selection draw uses. kwargs: protocol's."""
    return protocol(model, domain, n_tasks, seed, split="validation", **kwargs)


def state_views(domain, n):
    """views(k, s) -> (n, D) for SketchRunner from domain.state_views, or None when n == 1.
    ValueError naming views when n > 1 and the domain has none."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"views: expected an integer >= 1, got {n!r}")
    if n == 1:
        return None
    if domain.state_views is None:
        raise ValueError(f"views: domain {domain.name} has no state views (views must be 1)")
    return lambda k, s: domain.state_views(k, s, n)


def test_condition(domain, name):
    """domain.tests[name]; ValueError naming test when the domain has no such condition."""
    tests = dict(getattr(domain, "tests", {}) or {})
    if name not in tests:
        have = f"its conditions are {', '.join(sorted(tests))}" if tests else "it has only the standard test"
        raise ValueError(f"test: domain {domain.name} has no test condition {name!r} ({have})")
    return tests[name]


def protocol_sketches(domain, n_tasks, seed=0, sketch_len=None, split="test", test=None):
    """The sketches protocol(model, domain, n_tasks, seed, sketch_len, split=split, test=test)
    executes, in order (rows padded with -1 where lengths are mixed): a cell's recorded
    task_progress lines up with them."""
    rng = np.random.default_rng(split_seeds(split, seed)[0])
    if test is not None:
        return test_condition(domain, test).sketches(n_tasks, rng)
    return (domain.test_sketches(n_tasks, rng) if sketch_len is None
            else domain.sample_sketches(n_tasks, sketch_len, rng))


VALIDATION_SKETCH_SEED = 50_000
"""The validation sketches of training seed s (select "rollouts") come from default_rng(50_000 + s)."""
VALIDATION_EPISODE_SEED = 60_000
"""Their episodes' seeds from task_accuracy(..., seed=60_000 + s)."""


def validation_rollouts(domain, n_tasks, seed, sketch_len=None):
    """validate(model) -> the share of n_tasks validation sketches the model completes, for
    choosing a training epoch by rollouts (TrainConfig.select "rollouts", spec/training.md
    eq. (13)). The sketches have the training length (domain.sample_sketches; a domain of mixed
    lengths: domain.test_sketches) and run in domain.validation_env (the Dial: random layouts,
    the training data's distribution; else task_env), from seeds of their own (50_000 + seed,
    60_000 + seed): never the test sketches, the test layout or their episodes."""
    rng = np.random.default_rng(VALIDATION_SKETCH_SEED + seed)
    sketches = (domain.test_sketches(n_tasks, rng) if sketch_len is None
                else domain.sample_sketches(n_tasks, sketch_len, rng))
    make_env = domain.validation_env or domain.task_env

    def validate(model):
        return task_accuracy(model, make_env, sketches, seed=VALIDATION_EPISODE_SEED + seed)["task_accuracy"]
    return validate


def ctc_log_probs(model, demos):
    """A CTC-BC model's classifier output log p(k | s_t, a_t) on demos, (B, T, K)."""
    feats = objectives.ctc_features(model.params, demos, demos.discrete, model.policy.action_dim,
                                    image_cfg=model.policy)
    return objectives.ctc_log_p(model.params, model.ctc_kind, feats, demos.traj_len)[0]


def alignments(model, demos, decoders=DECODERS):
    """{name: (N, T) sketch positions} for demos: one per decoder, plus the algorithm's own
    alignments (Algorithm.extra_alignments: CompILE's boundaries). A model aligns as its
    algorithm declares (Algorithm.align): TACO's and GT-BC's with the TACO lattice of their
    sub-policies, CTC-BC's with its CTC classifier (as in the paper)."""
    check_compatible(model, demos)
    own = algorithms.get(model.algo).align
    if own is not None:
        return own(model, demos, decoders)
    return lattice_alignments(model, demos, decoders)


ALIGNMENT_METRICS = ("position", "subtask")
"""Alignment accuracy compares sketch positions (ours, spec/evaluation.md eq. (2)) or the
sub-task ids at those positions (OMPN's and, for sketches without repeats, the same)."""


def _subtask_ids(sketch, positions):
    """(B, T) sub-task id at each decoded position; -2 where the position is -1 (impossible) or
    outside the sketch (padding)."""
    inside = (positions >= 0) & (positions < sketch.shape[1])               # padding may hold anything
    ids = np.take_along_axis(sketch, np.where(inside, positions, 0), axis=1)
    return np.where(inside, ids, -2)


def alignment_accuracy(model, demos, decoders=DECODERS, batch_size=128, by="position"):
    """{decoder: share of valid steps whose decoded sketch position equals demos.labels}
    (by="position", spec/evaluation.md eq. (2)), or whose sub-task id equals the true one
    (by="subtask", eq. (3): OMPN's metric; it forgives confusing two positions of a sketch
    that repeats a sub-task)."""
    if by not in ALIGNMENT_METRICS:
        raise ValueError(f"by must be one of {ALIGNMENT_METRICS}, got {by!r}")
    return alignment_accuracies(model, demos, decoders, batch_size)[by]


def alignment_accuracies(model, demos, decoders=DECODERS, batch_size=128):
    """{metric: {decoder: accuracy}} for both ALIGNMENT_METRICS from one decoding pass."""
    check_compatible(model, demos)
    hits = {m: {} for m in ALIGNMENT_METRICS}
    total = 0
    for batch in data.batches(demos, data.pass_batch_size(demos, batch_size)):
        valid = np.arange(batch.labels.shape[1])[None, :] < batch.traj_len[:, None]
        true_ids = _subtask_ids(batch.sketch, batch.labels)
        for d, path in alignments(model, batch, decoders).items():
            hits["position"][d] = hits["position"].get(d, 0) + int(((path == batch.labels) & valid).sum())
            hits["subtask"][d] = hits["subtask"].get(d, 0) + int(
                ((_subtask_ids(batch.sketch, path) == true_ids) & valid).sum())
        total += int(valid.sum())
    return {m: {d: n / total for d, n in hits[m].items()} for m in ALIGNMENT_METRICS}


def action_accuracy(model, demos, batch_size=128):
    """Share of the valid steps of demos whose demonstrated action is the most probable one of
    the sub-policy of the step's true sub-task, argmax_a pi_k(a | s_t) with k = sketch[labels[t]];
    spec/evaluation.md eq. (12). Discrete actions only (ties go to the lowest id). It scores
    imitation step by step, free of alignment and of execution: on held-out demonstrations, a
    GT-BC model's figure says how far its nets reproduce the expert (spec/craft.md §10)."""
    if not model.policy.discrete:
        raise ValueError("action accuracy: the model's actions are continuous (it counts equal "
                         "discrete actions)")
    check_compatible(model, demos)
    hits = total = 0
    for batch in data.batches(demos, data.pass_batch_size(demos, batch_size)):
        valid = np.arange(batch.labels.shape[1])[None, :] < batch.traj_len[:, None]   # (B, T)
        subtask = np.take_along_axis(batch.sketch, np.where(valid, batch.labels, 0), axis=1)  # (B, T)
        for k in np.unique(subtask[valid]):
            b, t = np.nonzero(valid & (subtask == k))                                  # (n,) each
            head = policy.action_head(model.params, model.policy, int(k), batch.states[b, t])  # (n, A)
            hits += int((np.argmax(head, axis=1) == batch.actions[b, t]).sum())
        total += int(valid.sum())
    return hits / total


def mean_loglik_per_step(model, demos, batch_size=128):
    """TACO's log p(tau, a | s) per valid step on demos (any model's sub-policies)."""
    check_compatible(model, demos)
    total, steps = 0.0, 0
    for batch in data.batches(demos, data.pass_batch_size(demos, batch_size)):
        total += align.taco_loglik(*scores(model, batch), batch.traj_len, batch.sketch_len).sum()
        steps += int(batch.traj_len.sum())
    return total / steps

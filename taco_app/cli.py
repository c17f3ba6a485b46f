"""The `taco` command line: collect demonstrations, train, evaluate, align, and the demo.

    taco demo                                  # the whole journey on a small embedded default
    taco collect navworld --n 200 --sketch-len 3 --out data/nav.npz
    taco collect navworld --n 100 --sketch-len 3 --seed 1 --out data/nav-test.npz
    taco train --algo taco --data data/nav.npz --out runs/nav-taco
    taco evaluate --model runs/nav-taco/model --n-tasks 100 --data data/nav-test.npz --json eval.json
    taco align --model runs/nav-taco/model --data data/nav-test.npz --plot alignment.png
    taco rollout --model dial --sketch "0 5 1 6" --out dial.png
    taco experiment navworld --sizes 200 --seeds 0 1 --algos taco gtbc --n-tasks 100 --out grid
    taco report grid
    taco conformance taco_ref.align
    taco export data/nav.npz --format lerobot --out nav-lerobot
    taco annotate nav-lerobot --model runs/nav-taco/model --out nav-labelled

(README.md's command block; `taco COMMAND --help` for each command's options.)
"""
import argparse
import json
import os
import re
import signal
import sys
import time

# One BLAS thread per process unless the caller set the variables, before NumPy loads its BLAS:
# the nets' matrix products are too small for threads to pay, and on a shared machine a
# threaded product waits for a busy core (measured: a Nav-World run 6x slower in wall time, a
# Dial-sized step 4x, with 2 threads on 2 busy cores; README "Training speed"). Experiments
# run cells in parallel instead (--workers).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import inspect  # noqa: E402

import taco_sim  # noqa: E402
from taco_sim.domain import (MAX_COLLECT, MAX_DART_SIGMA, MAX_SKETCH_LEN, MAX_WORKERS,  # noqa: E402
                             MissingPackage, RenderingUnavailable)
from taco_ref import algorithms, data, evaluate, model as model_mod, runner, train  # noqa: E402
from taco_ref.config import PROTOCOLS  # noqa: E402
from taco_ref.plumbing import files as files_mod  # noqa: E402
from taco_app import config as config_mod, paper, report, stats  # noqa: E402
from taco_app.grid import costs, engine, manifest as grids, plan, store as cells_mod  # noqa: E402


def _progress(label):
    """A light progress line on stderr: label done/total, elapsed."""
    t0 = time.time()

    def report(done, total, *_):
        end = "\n" if done == total else ""
        print(f"\r{label}: {done}/{total}  {time.time() - t0:5.1f}s", end=end, file=sys.stderr, flush=True)
    return report


def cmd_collect(args):
    dom = taco_sim.get(args.domain)
    if args.workers > 1 and not dom.parallel_collect:
        raise ValueError(f"--workers: {args.domain} collects in one process (its expert runs "
                         f"fast enough there), so --workers {args.workers} would do nothing; leave it out")
    if args.dart_sigma is not None and "dart_sigma" not in inspect.signature(dom.collect).parameters:
        raise ValueError(f"--dart-sigma: {args.domain}'s expert noise is not a Gaussian on "
                         f"continuous actions (its DART noise is its own setting); leave it out")
    if args.expert is not None:
        plan.chosen_expert(dom, args.expert)
    sketch_len = dom.train_sketch_len if args.sketch_len is None else args.sketch_len
    kwargs = {"dart_sigma": args.dart_sigma} if args.dart_sigma is not None else {}
    if args.motor_noise is not None:
        if "motor_noise" not in inspect.signature(dom.collect).parameters:
            raise ValueError(f"--motor-noise: {args.domain}'s arm has no motors to disturb in collection "
                             f"(the joint-state Dial domains have); leave it out")
        kwargs["motor_noise"] = args.motor_noise
    if args.disturbance is not None:
        if "disturbance" not in inspect.signature(dom.collect).parameters:
            raise ValueError(f"--disturbance: {args.domain}'s arm cannot be disturbed in collection "
                             f"(the joint-state Dial domains' can); leave it out")
        from taco_sim.dial.disturb import TESTS
        if args.disturbance not in TESTS:
            raise ValueError(f"--disturbance: expected one of {', '.join(TESTS)}, got {args.disturbance!r}")
        kwargs["disturbance"] = TESTS[args.disturbance].disturbance
    if args.expert is not None:
        kwargs["expert"] = args.expert
    # a domain that streams writes a frame directory as it collects, unless an .npz is asked for
    stream = dom.streams and not args.out.endswith(".npz")
    if not stream:                                          # a frame directory resumes instead
        check_new("--out", args.out, args.overwrite)
    if stream:
        kwargs["out"] = args.out
    t0 = time.time()
    demos = dom.collect(args.n, sketch_len, args.seed, workers=args.workers,
                        progress=_progress(f"collect {args.domain}"), **kwargs)
    seconds = time.time() - t0
    if not stream:
        data.save(demos, args.out)
    shape = "x".join(str(v) for v in demos.states.shape[2:])
    print(f"wrote {demos.n} demonstrations to {args.out}{' (a frame directory)' if stream else ''} "
          f"(T <= {demos.states.shape[1]}, mean T {demos.traj_len.mean():.0f}, L = {sketch_len}, "
          f"{'D = ' if demos.image_shape is None else 'images '}{shape}); "
          f"{demos.n / seconds:.1f} demonstrations/s, {demos.meta.get('discarded', 0)} discarded")
    return 0


def cmd_train(args):
    demos = data.load(args.data)
    domain = demos.meta.get("domain")
    cfg = config_mod.load(domain if domain in taco_sim.names() else None, args.config, args.set,
                          protocol=args.protocol, algo=args.algo, seed=args.seed)
    validate = None
    if cfg.select == "rollouts":
        if domain not in taco_sim.names():
            raise ValueError(f"--set select=rollouts: the data's domain {domain!r} is not one taco_sim "
                             "can roll out in")
        validate = evaluate.validation_rollouts(taco_sim.get(domain), cfg.select_tasks, cfg.seed,
                                                demos.meta.get("sketch_len"))
    augment = None
    if cfg.augment:
        augment = taco_sim.get(domain).augment if domain in taco_sim.names() else None
        if augment is None:
            raise ValueError(f"--set augment=true: the data's domain {domain!r} has no augmentation")
    model = train.train(demos, cfg, out_dir=args.out, resume=args.resume, stop_after=args.stop_after,
                        overwrite=args.overwrite, log=sys.stderr, validate=validate, augment=augment)
    if model is None:
        print(f"stopped after {args.stop_after} epochs; continue with --resume --out {args.out}")
        return 0
    best = min(h["held_out_loss"] for h in model.info["history"] if h["stage"] == "policy")
    print(f"trained {cfg.algo} on {model.info['train_size']} demonstrations; best held-out loss "
          f"{best:.4f} per step; model in {os.path.join(args.out, 'model')}")
    return 0


def check_new(option, path, overwrite, what="file"):
    """Refuse to write over an existing path unless --overwrite: ValueError naming the option
    (every writer of the command line: nothing is replaced by accident)."""
    if path and os.path.lexists(path) and not overwrite:
        raise ValueError(f"{option}: {path} exists; choose a new {what}, or give --overwrite to replace it")


OVERWRITE_HELP = "replace an existing output file instead of refusing"


def model_path(text):
    """--model: a model directory, or the name of a shipped model (taco_sim.shipped_models) when
    no directory of that name is here; ValueError naming both otherwise."""
    if os.path.isdir(text):
        inner = os.path.join(text, "model")
        if not os.path.exists(os.path.join(text, "model.json")) and os.path.isfile(os.path.join(inner, "model.json")):
            raise ValueError(f"--model: {_one_line(text)[:80]!r} is a run folder; its model is {_one_line(inner)[:86]!r}")
        return text
    shipped = taco_sim.shipped_models()
    if text in shipped:
        return shipped[text]
    raise ValueError(f"--model: no model directory {_one_line(text)[:80]!r} here, and no shipped model of "
                     f"that name (shipped: {', '.join(sorted(shipped))})")


def model_domain(model, given):
    """The domain a command executes model in: --domain when given, else the domain of the data it
    was trained on (recorded in its info), else the one domain whose vocabulary is the model's;
    ValueError asking for --domain when that leaves a choice."""
    if given is not None:
        return given
    recorded = (model.info.get("data") or {}).get("domain")
    if recorded in taco_sim.names():
        return recorded
    fits = [name for name in taco_sim.available_names() if list(taco_sim.get(name).vocab) == list(model.vocab)]
    if len(fits) == 1:
        return fits[0]
    raise ValueError(f"--domain: the model does not record the domain it was trained in, and its vocabulary "
                     f"fits {' and '.join(fits) if fits else 'no domain'}; give --domain")


def expert_model(args):
    """The evaluate.Expert that `taco evaluate --expert [NAME]` runs in a model's place; ValueError
    naming the argument when the combination makes no sense (the expert has no nets to score
    demonstrations with, and decides its STOP itself)."""
    if args.model is not None:
        raise ValueError("--expert: evaluates the domain's expert in place of a model; leave out --model")
    for option, value in (("--data", args.data), ("--stop-threshold", args.stop_threshold),
                          ("--views", args.views), ("--stop-hold", args.stop_hold)):
        if value is not None:
            raise ValueError(f"{option}: a model's setting; the expert decides by its own rules "
                             "(leave it out with --expert)")
    dom = taco_sim.get(args.domain)
    if not dom.experts:
        raise ValueError(f"--expert: domain {args.domain} has no expert that acts through the "
                         "evaluation protocol (its expert reads the simulator)")
    if args.expert and args.expert not in dom.experts:
        raise ValueError(f"--expert: {args.domain}'s experts are {', '.join(dom.experts)}, "
                         f"got {_one_line(args.expert)[:40]!r}")
    return evaluate.domain_expert(dom, args.expert or None)


def cmd_evaluate(args):
    if args.expert is None and args.model is None:
        raise ValueError("--model: give a model directory, or --expert to evaluate the domain's expert")
    check_new("--json", args.json, args.overwrite)
    if args.expert is not None:
        if args.domain is None:
            raise ValueError("--expert: give --domain, the domain whose expert is executed "
                             f"(those with one: {', '.join(n for n in taco_sim.names() if taco_sim.get(n).experts)})")
        model, config = expert_model(args), {}
    else:
        model = model_mod.load(model_path(args.model))
        config = model.config
        args.domain = model_domain(model, args.domain)
    dom = taco_sim.get(args.domain)
    demos = data.load(args.data) if args.data else None       # bad data fails before the rollouts
    if demos is not None:
        evaluate.check_compatible(model, demos)
    result = evaluate.protocol(model, dom, args.n_tasks, args.seed, sketch_len=args.sketch_len,
                               lengths=args.lengths, progress=_progress, split=args.split, test=args.test,
                               stop_threshold=0.5 if args.stop_threshold is None else args.stop_threshold,
                               views=config.get("views", 1) if args.views is None else args.views,
                               stop_hold=config.get("stop_hold", 1) if args.stop_hold is None else args.stop_hold)
    result["split"] = args.split
    if args.test is not None:
        result["test"] = args.test
    done = result["outcomes"].count("1")
    result["task_accuracy_ci95"] = list(evaluate.wilson_interval(done, result["n_tasks"]))
    if demos is not None:
        both = evaluate.alignment_accuracies(model, demos)
        result.update({f"align_{k}": v for k, v in both["position"].items()})
        result.update({f"align_subtask_{k}": v for k, v in both["subtask"].items()})
    figures = json.dumps(result, indent=1) + "\n"
    # the summary is for a person, the JSON (every figure, a number per line) for a file or a
    # program: to --json FILE, else to stdout when that is not a terminal
    piped = not sys.stdout.isatty()
    summary = sys.stdout if args.json or not piped else sys.stderr
    print("\n".join(evaluation_summary(result, dom) + evaluate.failure_table(result)
                    + evaluate.rule_lines(result) + evaluate.subtask_lines(result, dom.vocab)),
          file=summary, flush=True)
    if args.json:
        files_mod.write_bytes(args.json, figures.encode())
        print(f"wrote every figure to {args.json}", file=summary)
    elif piped:
        sys.stdout.write(figures)
    else:
        print("(every figure as JSON: --json FILE, or pipe the output)", file=summary)
    return 0


def evaluation_summary(result, dom):
    """The head of `taco evaluate`'s summary: what was executed and the headline figures."""
    lo, hi = result["task_accuracy_ci95"]
    where = f" under the test condition {result['test']}" if result.get("test") else ""
    lines = [f"{dom.name}: executed {result['n_tasks']} {result.get('split', 'test')} sketches{where}; task accuracy "
             f"{100 * result['task_accuracy']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] (95 % Wilson), "
             f"sub-task accuracy {100 * result['subtask_accuracy']:.1f} %"]
    by_length = result.get("task_accuracy_by_length") or {}
    if by_length:
        lines.append("task accuracy by sketch length: " + ", ".join(
            f"L={L} {100 * v:.1f} %" for L, v in sorted(by_length.items(), key=lambda kv: int(kv[0]))))
    if "align_forward_argmax" in result:
        lines.append(f"alignment accuracy on the --data demonstrations: "
                     f"{100 * result['align_forward_argmax']:.1f} % of steps (forward argmax), "
                     f"{100 * result['align_posterior_argmax']:.1f} % (posterior argmax), "
                     f"{100 * result['align_viterbi']:.1f} % (Viterbi)")
    return lines


def cmd_align(args):
    check_new("--plot", args.plot, args.overwrite)
    model = model_mod.load(model_path(args.model))
    demos = data.load(args.data)
    both = evaluate.alignment_accuracies(model, demos)
    acc, by_id = both["position"], both["subtask"]
    for name, value in acc.items():
        print(f"alignment accuracy ({name}): {100 * value:.2f} % of steps at the right sketch "
              f"position, {100 * by_id[name]:.2f} % with the right sub-task")
    if model.policy.discrete:
        print(f"action accuracy: {100 * evaluate.action_accuracy(model, demos):.2f} % of steps where "
              "the true sub-task's most probable action is the demonstrated one")
    if args.plot:
        try:
            from taco_app import plots
            plots.alignment(model, demos, args.index, args.plot)
            print(f"wrote {args.plot}")
        except ImportError:
            print("taco align: --plot needs matplotlib: pip install 'taco_ref[plot]'", file=sys.stderr)
            return 1
    return 0


def demo_out(requested):
    """The folder the demo writes: --out as given (refused when it holds anything), or the first
    of taco-demo, taco-demo-2, ... that does not exist: a second demo never replaces the first."""
    if requested is not None:
        if os.path.exists(requested) and (not os.path.isdir(requested) or os.listdir(requested)):
            raise ValueError(f"--out: {requested} exists; choose a new folder (a demo never replaces one)")
        return requested
    n, out = 1, "taco-demo"
    while os.path.lexists(out):
        n += 1
        out = f"taco-demo-{n}"
    return out


def cmd_demo(args):
    dom = taco_sim.get(args.domain)
    config = config_mod.settings(args.domain, None, args.set, protocol=args.protocol)
    out = demo_out(args.out)
    longest_first = sorted(set(args.algos), key=lambda a: DEMO_ORDER.index(a) if a in DEMO_ORDER else len(DEMO_ORDER))
    cells = [dict(domain=args.domain, algo=a, size=args.n, seed=args.seed,
                  train_sketch_len=dom.train_sketch_len, n_tasks=args.n_tasks, n_align=100,
                  config=config, expert=dom.default_expert)
             for a in longest_first]
    print(f"{args.domain}: {args.n} demonstrations with sketches of length {dom.train_sketch_len}; "
          f"evaluation on {args.n_tasks} test sketches of length {dom.test_sketch_len}; alignment on "
          f"100 held-out demonstrations; {len(cells)} models to train: {costs.estimate(cells, args.workers)}.",
          file=sys.stderr)
    progress = engine.Progress()
    with engine.Local(args.workers) as ex:
        grid = engine.run_grid(cells, ex, progress=progress, expected=costs.wall_seconds(cells, args.workers))
    progress.end()
    if grid.failures:
        raise grid_error(grid)
    results = grid.results
    lines = [report.table(results), "", *DEMO_LEGEND, ""]
    by_algo = {r["algo"]: r for r in results}
    for algo, r in sorted(by_algo.items(), key=lambda kv: algorithms.names().index(kv[0])):
        lines.append(f"{algorithms.label(algo):>13}: aligned {100 * r['align_forward_argmax']:5.1f} % of held-out "
                     f"steps, completed {100 * r['task_accuracy']:5.1f} % of unseen longer tasks")
    print("\n".join(lines))
    os.makedirs(out, exist_ok=True)
    files_mod.write_bytes(os.path.join(out, "results.md"), (report.report(results) + "\n").encode())
    written = [os.path.join(out, "results.md")]
    try:
        from taco_app import plots
        plots.plot(results, os.path.join(out, "accuracy.png"))
        written.append(os.path.join(out, "accuracy.png"))
    except ImportError:
        written.append("(no picture: pip install 'taco_ref[plot]')")
    print(f"wrote {', '.join(written)}", file=sys.stderr)
    return 0


DEMO_LEGEND = (
    "Figures in %; each row one method trained once (one seed: no spread). A sketch is the "
    "list of sub-tasks a task is made of. task acc.: unseen test sketches completed; sub-task acc.: "
    "sketch steps completed; align: held-out demonstration steps placed at the right sketch step, by "
    "three decoders (fwd argmax is the paper's).",
    "TACO learns from sketches alone, never told where a sub-task ends; GT-BC is behaviour cloning "
    "told exactly where (the reference TACO should match); CTC-BC takes its boundaries from a CTC "
    "alignment net, then clones.",
    "CTC-BC completing few or no tasks is the paper's finding too: small alignment mistakes put "
    "one sub-task's actions into another's data, and BC cannot fit that; TACO weighs every "
    "alignment instead.",
)
"""The three lines under the demo's table (docs/cli.md has the long form)."""


def grid_error(grid):
    """A failed cell of taco demo as one line (bad input: the demo's cells fail only on it)."""
    f = grid.failures[0]
    return ValueError(f"{f['cell']['algo']} cell failed: {f['error']}")


def experiment_runs(args):
    """The runs `taco experiment` computes and where: (runs, out), each run a grid definition
    (taco_app.grid.manifest) from the arguments, or from GRID/grid.yaml with --rerun GRID."""
    if args.rerun is not None:
        given = [f"--{name.replace('_', '-')}" for name in EXPERIMENT_DEFAULTS if getattr(args, name) is not None]
        if args.domain is not None or given:
            raise ValueError(f"--rerun: the grid's definition comes from {grids.path(args.rerun)}; leave out "
                             f"{' and '.join((['the domain'] if args.domain else []) + given)}")
        if not os.path.exists(grids.path(args.rerun)):
            raise ValueError(f"--rerun: {grids.path(args.rerun)} does not exist (the folder of a grid that "
                             f"`taco experiment --out` wrote)")
        return grids.load(args.rerun), args.rerun if args.out is None else args.out
    if args.domain is None:
        raise ValueError("give the grid's domain (e.g. taco experiment navworld --out grid), or "
                         "--rerun GRID to run a recorded grid again")
    if args.out is None:
        raise ValueError("--out: give the results directory of the grid (e.g. --out grid)")
    for name, default in EXPERIMENT_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, list(paper.in_paper()) if name == "algos" else default)
    return [grids.run_of(args)], args.out


def cmd_experiment(args):
    runs, out = experiment_runs(args)
    args.out = out
    cells = plan.cells_of_runs(runs)
    if args.workers is not None and (args.scheduler or os.environ.get(engine.SCHEDULER_ENV)):
        raise ValueError(f"--workers: the cells run on the Dask scheduler's workers, so --workers "
                         f"{args.workers} (local processes) would do nothing; leave it out")
    if args.migrate:
        store = cells_mod.Store(args.out)
        left = sum(store.finished(c) is None for c in cells)
        print(f"converted {store.migrated} cells of {os.path.join(args.out, 'results.json')} into cell files "
              f"under {os.path.join(args.out, 'cells')}; {left} of the grid's {len(cells)} cells are not "
              f"finished there (a run computes them)")
        return EXIT_OK
    store = cells_mod.Store(args.out)
    todo = cells if args.force else [c for c in cells if store.finished(c) is None]
    plan.check_not_committed(args.out, todo, args.extend_committed)
    grids.record(args.out, runs)
    workers = 2 if args.workers is None else args.workers
    print(f"taco experiment: {costs.announce(cells, todo, workers)}", file=sys.stderr, flush=True)
    with engine.executor(args.scheduler, workers) as ex:
        for line in ex.check_workers():
            print(f"taco experiment: warning: {line}", file=sys.stderr)
        progress = engine.Progress()
        try:
            grid = engine.run_grid(cells, ex, out_dir=args.out, retries=args.retries, force=args.force,
                                   progress=progress)
        finally:
            progress.end()
    text, written, note = report.write_report([args.out])
    print(text)
    for line in engine.summary(grid):
        print(line, file=sys.stderr)
    print(f"wrote {', '.join(written)}" + (f" ({note})" if note else ""), file=sys.stderr)
    if grid.failures:
        print(f"taco experiment: {len(grid.failures)} of {len(cells)} cells failed (errors in "
              f"{os.path.join(args.out, 'failures.json')}); the others are in the report", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_report(args):
    if args.figures:
        from taco_app import figures
        if args.dirs or args.claims:
            raise ValueError("--figures reads every grid it needs itself (run it from the repository "
                             "root); give no OUT directories or --claims with it")
        if not os.path.isdir("results"):
            raise ValueError("--figures: no results/ here; run it from the repository root")
        print(f"wrote {', '.join(figures.write(args.figures, '.'))}")
        return EXIT_OK
    if args.claims:
        from taco_app import claims
        if args.dirs:
            raise ValueError("--claims reads every grid it needs itself (run it from the repository "
                             "root); give no OUT directories with it")
        if not os.path.isdir("results"):
            raise ValueError("--claims: no results/ here; run it from the repository root")
        files_mod.write_bytes(args.claims, claims.page(".").encode())
        print(f"wrote {args.claims}")
        return EXIT_OK
    if not args.dirs:
        raise ValueError("give one or more OUT directories (or --claims FILE)")
    text, written, note = report.write_report(args.dirs, args.out)
    print(text)
    rows = [r for d in args.dirs for r in cells_mod.load_results(d)]
    hours = sum(r.get("seconds") or 0.0 for r in rows) / 3600
    print(f"{len(rows)} cells, {hours:.1f} h of computation in their cells; wrote {', '.join(written)}",
          file=sys.stderr)
    if note:
        print(f"taco report: {note}", file=sys.stderr)
    return EXIT_OK


def cmd_rollout(args):
    check_new("--out", args.out, args.overwrite)
    check_new("--gif", args.gif, args.overwrite)
    model = model_mod.load(model_path(args.model))
    args.domain = model_domain(model, args.domain)
    dom = taco_sim.get(args.domain)
    evaluate.check_vocab(model, dom.vocab, f"domain {args.domain}")
    sketch = runner.parse_sketch(args.sketch, model.vocab)
    if not dom.renders:
        raise ValueError(f"--domain: {args.domain} has no renderer")
    env = dom.task_env()
    from taco_app import plots
    out = plots.rollout(model, env, sketch, args.seed, args.out, every=args.every, gif=args.gif)
    print(f"{'completed' if out['success'] else 'did not finish'} {args.sketch!r} in {out['steps']} "
          f"steps (STOP at {out['stop_times']}); wrote {args.out}" + (f" and {args.gif}" if args.gif else ""))
    return 0 if out["success"] else 1


def cmd_annotate(args):
    from taco_app import interop
    if args.sketches_template:
        if args.out or args.in_place or args.sketches or args.model:
            raise ValueError("--sketches-template: only lists DATASET's task strings; run it alone, then "
                             "annotate with --sketches")
        report = interop.sketches_template(args.dataset, args.sketches_template, state_keys=args.state_key,
                                           action_key=args.action_key)
        print(f"wrote {report['tasks']} task strings of {report['episodes']} episodes to {report['out']} "
              f"({report['known']} with the dataset's own sketch, {report['tasks'] - report['known']} with an "
              "empty one to fill in); then: taco annotate DATASET --sketches " + report["out"] + " --out ...")
        return EXIT_OK
    report = interop.annotate_dataset(
        args.dataset, out=args.out, sketches=args.sketches, model=args.model, decoder=args.decoder,
        in_place=args.in_place, state_keys=args.state_key, action_key=args.action_key, chunk=args.chunk,
        review=args.review, config=args.config, overrides=args.set, seed=args.seed, save_model=args.save_model,
        report_html=args.report, review_below=args.review_below)
    print(f"annotated {report['episodes']} episodes ({report['frames']} frames, {report['format']}) with "
          f"{report['model']} ({'trained on them' if report['trained'] else 'given'}), decoder {report['decoder']}, "
          f"in {report['seconds']:.1f} s; wrote {report['out']}")
    print(f"confidence (expected share of frames labelled as the posterior has them): mean "
          f"{report['mean_confidence']:.4f}, lowest {report['min_confidence']:.4f}")
    if "agreement_with_existing_labels" in report:
        print(f"agreement with the labels already in the dataset: "
              f"{100 * report['agreement_with_existing_labels']:.2f} % of frames")
    if report["not_alignment_paths"]:
        print(f"{report['not_alignment_paths']} episodes' labels skip or revisit a sketch step "
              f"(decoder {report['decoder']}; viterbi's never do)")
    if report["mimicgen_unparsable"]:
        print(f"{len(report['mimicgen_unparsable'])} episodes' MimicGen signals cannot express their "
              f"labels (a sub-task twice in a row, or a first sub-task of one frame): "
              f"{report['mimicgen_unparsable'][:10]}")
    for hit in report.get("previous_action_keys", [])[:3]:
        print(f"warning: state {hit['key']} tracks the previous action (r = {hit['r_previous']:.3f} with "
              f"action[{hit['action_dim']}] one frame earlier, {hit['r_current']:.3f} with the current one): "
              "a sub-task's end then shows in the state a frame late and boundaries may follow it; "
              "annotate without that key (--state-key), see docs/annotate.md")
    if report.get("lagging_episodes"):
        print(f"{report['lagging_episodes']} episodes' boundaries mostly come one frame after the actions "
              "change (in the review list)")
    if "page" in report:
        page = report["page"]
        print(f"review page: {page['out']} ({page['detailed']} of {page['episodes']} episodes drawn; open it "
              "in a browser)")
    if report["review"]:
        print("review first (least confident): " + ", ".join(
            f"{r['episode']} ({r['confidence']:.3f}{', ' + r['note'] if 'note' in r else ''})"
            for r in report["review"]))
    return EXIT_OK


def cmd_export(args):
    from taco_app import interop
    report = interop.export_demos(args.data, args.format, args.out, fps=args.fps, sketches_out=args.sketches_out)
    print(f"wrote {report['episodes']} episodes ({report['frames']} frames) with their true sub-task labels "
          f"to {report['out']} ({report['format']}); sketches of their tasks in {report['sketches']}")
    if report["mimicgen_unparsable"]:
        print(f"{len(report['mimicgen_unparsable'])} demonstrations' MimicGen signals cannot express their "
              f"labels: {report['mimicgen_unparsable'][:10]}")
    return EXIT_OK


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help with every option's default shown, unless its help line already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default not in (None, False, [], argparse.SUPPRESS)
        if action.option_strings and shown and "default" not in text:
            value = " ".join(map(str, action.default)) if isinstance(action.default, list) else action.default
            text += f" (default: {value})".replace("%", "%%")
        return text


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (exit 2, like every other bad input), a "did you
    mean" for a mistyped command or option, and every default in the help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        hint = self._did_you_mean(message)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {_one_line(message)}{hint} (see {self.prog} --help)\n")

    def _did_you_mean(self, message):
        """' (did you mean ...?)' for an invalid command or an unknown option, else ''."""
        import difflib
        bad = re.match(r"argument command: invalid choice: '([^']*)'", message)
        if bad:
            close = difflib.get_close_matches(bad.group(1), list(self._commands()), n=1, cutoff=0.6)
            return f" (did you mean {close[0]!r}?)" if close else ""
        if message.startswith("unrecognized arguments: "):
            known = {o for p in self._commands().values() for a in p._actions for o in a.option_strings}
            guesses = [f"{difflib.get_close_matches(w.split('=')[0], sorted(known), n=1, cutoff=0.6)[0]} for {w}"
                       for w in message.split(": ", 1)[1].split() if w.startswith("--")
                       and difflib.get_close_matches(w.split("=")[0], sorted(known), n=1, cutoff=0.6)]
            return f" (did you mean {', '.join(guesses)}?)" if guesses else ""
        return ""

    def _commands(self):
        """{name: parser} of this parser's subcommands: only the one the command line named, when it
        named one (its options are the ones a mistyped option was meant for)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                named = [w for w in (self.argv or []) if w in action.choices]
                return {named[0]: action.choices[named[0]]} if named else dict(action.choices)
        return {}

    argv = None
    """The command line being parsed (main sets it), for _commands."""


def _integer(low, what, high=None):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {_one_line(text)[:40]!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value
    parse.__name__ = what
    return parse


def probability(text):
    """A number strictly between 0 and 1 (a STOP threshold: at 0 or 1 a sub-policy would always
    or never stop)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_one_line(text)[:40]!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {value}")
    return value


positive = _integer(1, "an integer >= 1")
non_negative = _integer(0, "an integer >= 0")
MAX_TASKS = evaluate.MAX_TASKS
MAX_RETRIES = 100
"""Command-line counts are bounded before anything is allocated or started (a mistyped count
ends in one usage line, not an out-of-memory kill or a fork storm): demonstrations per data set
(--n, --sizes, --n-align) taco_sim.domain.MAX_COLLECT, test tasks (--n-tasks)
evaluate.MAX_TASKS, sketch lengths taco_sim.domain.MAX_SKETCH_LEN, worker processes
taco_sim.domain.MAX_WORKERS, resubmissions (--retries) MAX_RETRIES."""
demos_count = _integer(1, f"an integer in [1, {MAX_COLLECT}]", MAX_COLLECT)
tasks_count = _integer(1, f"an integer in [1, {MAX_TASKS}]", MAX_TASKS)
sketch_length = _integer(1, f"an integer in [1, {MAX_SKETCH_LEN}]", MAX_SKETCH_LEN)
workers_count = _integer(1, f"an integer in [1, {MAX_WORKERS}]", MAX_WORKERS)
retries_count = _integer(0, f"an integer in [0, {MAX_RETRIES}]", MAX_RETRIES)


def motor_level(text):
    """--motor-noise: a share of the peak torques in [0, MAX_MOTOR_NOISE]."""
    from taco_sim.dial.expert import MAX_MOTOR_NOISE
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0.0 <= value <= MAX_MOTOR_NOISE:
        raise argparse.ArgumentTypeError(f"expected a number in [0, {MAX_MOTOR_NOISE:g}], got {text!r}")
    return value


def dart_level(text):
    """--dart-sigma: a number in [0, MAX_DART_SIGMA] (taco_sim.domain.check_dart_sigma)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_one_line(text)[:40]!r}") from None
    if not 0.0 <= value <= MAX_DART_SIGMA:
        raise argparse.ArgumentTypeError(f"expected a number in [0, {MAX_DART_SIGMA:g}] (a share of the "
                                         f"action's range), got {text}")
    return value


def build_parser():
    """The `taco` parser: one sub-parser per command, each built by its _add_<command>."""
    parser = _Parser(prog="taco", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_collect, _add_train, _add_evaluate, _add_align, _add_demo, _add_experiment, _add_report,
                _add_rollout, _add_annotate, _add_export, _add_conformance):
        add(sub)
    return parser


def _add_collect(sub):
    """`taco collect`'s arguments."""
    p = sub.add_parser("collect", help="collect expert demonstrations with DART noise")
    p.add_argument("domain", choices=taco_sim.names(), help="the domain whose expert demonstrates")
    p.add_argument("--n", type=demos_count, required=True, help=f"number of demonstrations (at most {MAX_COLLECT})")
    p.add_argument("--sketch-len", type=sketch_length, default=None, help="L (domain default: the paper's)")
    p.add_argument("--workers", type=workers_count, default=1,
                   help="parallel processes (the Dial's domains; the others collect in one)")
    p.add_argument("--seed", type=non_negative, default=0, help="seed of the worlds and the noise: the same seed, the same file")
    p.add_argument("--dart-sigma", type=dart_level, default=None,
                   help=f"DART noise level in [0, {MAX_DART_SIGMA:g}], a share of the action range "
                        "(continuous domains; default: the domain's)")
    p.add_argument("--motor-noise", type=motor_level, default=None, metavar="SHARE",
                   help="the joint-state Dial's: each demonstration's arm also meets Gaussian noise on "
                        "its motors' torques at a level drawn from U(0, SHARE) of the peak torques "
                        "(the harder test's noise; default none)")
    p.add_argument("--disturbance", default=None, metavar="NAME",
                   help="the joint-state Dial's: each demonstration's arm meets the disturbances of the "
                        "named test condition (harder, push, ...) at levels drawn up to the condition's")
    p.add_argument("--expert", default=None, metavar="NAME",
                   help="which of the domain's experts demonstrates (Craft: features, the default, "
                        "or planner)")
    p.add_argument("--out", required=True, help="output .npz; for image domains a directory (frame chunks "
                   "written as they are collected, read lazily by training) unless it ends in .npz")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.set_defaults(func=cmd_collect)


def _add_train(sub):
    """`taco train`'s arguments."""
    p = sub.add_parser("train", help="train sub-policies")
    p.add_argument("--algo", choices=algorithms.names(), default=None,
                   help="the method to train (default: the config's, TACO)")
    p.add_argument("--data", required=True, help="demonstrations: an .npz or frame directory from taco collect")
    p.add_argument("--config", default=None, help="YAML file, or the name of a shipped config (default: the data's domain's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value (repeatable), e.g. --set lr=1e-3")
    p.add_argument("--protocol", choices=sorted(PROTOCOLS), default=None,
                   help="an equal-budget protocol (spec/evaluation.md §7): paper, no pre-stage for any "
                        "algorithm; recipe, the same pre-stage for every one (default: the config's)")
    p.add_argument("--seed", type=non_negative, default=None,
                   help="seed of the initial weights and minibatches (default: the config's, 0)")
    p.add_argument("--out", required=True, help="run directory (checkpoint + model/)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true",
                   help="start again in an --out that holds a run (never done without this)")
    p.add_argument("--stop-after", type=non_negative, default=None, metavar="N",
                   help="return after N epochs, leaving a checkpoint to --resume from")
    p.set_defaults(func=cmd_train)


def _add_evaluate(sub):
    """`taco evaluate`'s arguments."""
    p = sub.add_parser("evaluate", help="execute sketches; task, sub-task and alignment accuracy")
    p.add_argument("--model", default=None,
                   help="a model directory (a run's OUT/model), or a shipped model's name (e.g. dial); "
                        "or --expert")
    p.add_argument("--expert", nargs="?", const="", default=None, metavar="NAME",
                   help="execute the domain's expert instead of a model, by the same protocol "
                        "(Craft: features, the default, or planner)")
    p.add_argument("--domain", default=None, choices=taco_sim.names(),
                   help="where the sketches are executed (default: the domain the model was trained in)")
    p.add_argument("--n-tasks", type=tasks_count, default=100, help="test sketches to execute")
    p.add_argument("--sketch-len", type=sketch_length, default=None,
                   help="random sketches of this length (default: the domain's zero-shot test sketches)")
    p.add_argument("--lengths", type=sketch_length, nargs="+", default=None, metavar="L",
                   help="also task accuracy for each test sketch length (paper figure 8)")
    p.add_argument("--data", default=None, help="held-out demonstrations for alignment accuracy")
    p.add_argument("--seed", type=non_negative, default=0,
                   help="seed of the test sketches and episodes: the same seed, the same tasks")
    p.add_argument("--split", choices=list(evaluate.SPLITS), default="test",
                   help="test tasks (default) or validation tasks, drawn from seeds of their own: "
                        "choose settings on validation, report test (spec/evaluation.md §6)")
    p.add_argument("--test", default=None, metavar="NAME",
                   help="a named test condition of the domain instead of the standard test (the Dial: "
                        "harder, and its single disturbances; spec/evaluation.md §9)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write every figure as JSON to FILE (without it: to stdout when stdout is "
                        "not a terminal; the summary then goes to stderr)")
    p.add_argument("--stop-threshold", type=probability, default=None, metavar="P",
                   help="a sub-policy stops when its P(STOP | state) exceeds P (default 0.5)")
    p.add_argument("--views", type=positive, default=None, metavar="N",
                   help="decide over N views of each state (the domain's; default: the model's "
                        "config, else 1: the state alone)")
    p.add_argument("--stop-hold", type=positive, default=None, metavar="H",
                   help="a sub-policy stops when P(STOP) exceeds the threshold in H consecutive "
                        "decisions (default: the model's config, else 1)")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.set_defaults(func=cmd_evaluate)


def _add_align(sub):
    """`taco align`'s arguments."""
    p = sub.add_parser("align", help="alignment accuracy on demonstrations, and a picture")
    p.add_argument("--model", required=True,
                   help="a model directory (a run's OUT/model), or a shipped model's name (e.g. dial)")
    p.add_argument("--data", required=True, help="demonstrations to align (held out from training)")
    p.add_argument("--plot", default=None, help="write a PNG of demonstration --index")
    p.add_argument("--index", type=non_negative, default=0, help="which demonstration --plot draws")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.set_defaults(func=cmd_align)


def _add_demo(sub):
    """`taco demo`'s arguments."""
    p = sub.add_parser("demo", help="collect, train TACO and the baselines, print the results table")
    p.add_argument("--domain", default="navworld", choices=taco_sim.names(), help="the domain to run")
    # 400 demonstrations, 1000 test tasks, the recipe protocol: a demo cell is the computation of
    # a results/navworld-recipe cell of that size and seed (`taco experiment navworld --protocol
    # recipe --n-tasks 1000`), where TACO and GT-BC both complete about 80 % of the unseen
    # sketches and CTC-BC none (README's Nav-World table); 1000 tasks make one figure's standard
    # error about 1 point. 1000 demonstrations cost twice the CPU for a few points more.
    p.add_argument("--n", type=demos_count, default=400, help="training demonstrations")
    p.add_argument("--protocol", choices=("recipe", "paper"), default="recipe",
                   help="recipe (default): every method gets the same 5-epoch pre-stage on its own "
                        "segmentation; paper: no pre-stage for any (spec/evaluation.md §7)")
    p.add_argument("--n-tasks", type=tasks_count, default=1000, help="unseen test sketches each model executes")
    p.add_argument("--seed", type=non_negative, default=0, help="seed of the data, the weights and the test tasks")
    p.add_argument("--workers", type=workers_count, default=2, help="local processes training models at once")
    p.add_argument("--algos", nargs="+", default=list(DEMO_ALGOS), choices=algorithms.names(),
                   help=f"the methods to compare (default {' '.join(DEMO_ALGOS)}; add ctcbc-gru for the paper's "
                        f"bi-GRU baseline, two thirds of the demo's time with it)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where the demo writes results.md and accuracy.png (default: taco-demo, or "
                        "taco-demo-2, ... when that exists: nothing is replaced)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a training config value (repeatable)")
    p.set_defaults(func=cmd_demo)


DEMO_ALGOS = ("taco", "gtbc", "ctcbc-mlp")
DEMO_ORDER = ("ctcbc-gru", "taco", "ctcbc-mlp", "gtbc", "compile")
"""The order `taco demo` starts its cells in: the longest first, so the workers stay busy."""
"""The demo's methods: TACO, the supervised GT-BC and the MLP CTC-BC (the bi-GRU's CTC-BC, also in
the paper, costs twice the rest together: --algos adds it)."""


EXPERIMENT_DEFAULTS = {"sizes": [50, 200, 400, 1000], "seeds": [0, 1, 2, 3, 4], "algos": None,
                       "n_tasks": 100, "n_align": 100, "expert": None, "test_lengths": None,
                       "config": None, "set": [], "protocol": None, "split": None, "tests": None}
"""`taco experiment`'s grid definition when an option is left out (algos None: the algorithms
with paper figures, paper.in_paper()); --rerun takes all of it from the grid's manifest."""


def _shown(name):
    """EXPERIMENT_DEFAULTS[name] as --help shows it."""
    value = EXPERIMENT_DEFAULTS[name]
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def _add_experiment(sub):
    """`taco experiment`'s arguments."""
    p = sub.add_parser("experiment", help="the paper's comparison across dataset sizes and seeds")
    p.add_argument("domain", nargs="?", choices=taco_sim.names(), help="the domain of the grid (not with --rerun)")
    p.add_argument("--sizes", type=demos_count, nargs="+", default=None,
                   help=f"training set sizes (demonstrations), one column each (default: {_shown('sizes')})")
    p.add_argument("--seeds", type=non_negative, nargs="+", default=None,
                   help=f"seeds: each its own data, weights and test tasks (default: {_shown('seeds')})")
    p.add_argument("--algos", nargs="+", default=None, choices=algorithms.names(),
                   help=f"default: the algorithms with figures in the paper ({' '.join(paper.in_paper())})")
    p.add_argument("--n-tasks", type=tasks_count, default=None, help=f"test sketches each cell executes (default: {_shown('n_tasks')})")
    p.add_argument("--n-align", type=demos_count, default=None,
                   help=f"held-out demonstrations for alignment (default: {_shown('n_align')})")
    p.add_argument("--expert", default=None, metavar="NAME",
                   help="which of the domain's experts demonstrates (Craft: features, the default, "
                        "or planner, whose cells are results/archive/craft*)")
    p.add_argument("--test-lengths", type=sketch_length, nargs="+", default=None, metavar="L",
                   help="also task accuracy for each test sketch length (paper figure 8)")
    p.add_argument("--config", default=None,
                   help="YAML file, or the name of a shipped config (default: the domain's)")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="override a training config value (repeatable); part of each cell's key")
    p.add_argument("--protocol", choices=sorted(PROTOCOLS), default=None,
                   help="an equal-budget protocol (spec/evaluation.md §7): paper, no pre-stage for any "
                        "algorithm; recipe, the same pre-stage for every one (default: the config's)")
    p.add_argument("--tests", nargs="+", default=None, metavar="NAME",
                   help="also evaluate every cell on these named test conditions of the domain (the "
                        "Dial's harder test: taco_sim.dial.disturb.TESTS; spec/evaluation.md §9)")
    p.add_argument("--split", choices=list(evaluate.SPLITS), default=None,
                   help="the tasks each cell is evaluated on: test (default; the figures results "
                        "report) or validation (tasks of their own seeds, where settings are chosen: "
                        "spec/evaluation.md §6)")
    p.add_argument("--rerun", default=None, metavar="GRID",
                   help="run the grid GRID/grid.yaml defines (what earlier runs with --out GRID "
                        "recorded) instead of one given here: only its unfinished cells are computed; "
                        "into GRID, or into --out")
    p.add_argument("--workers", type=workers_count, default=None,
                   help="local worker processes (default 2; not with --scheduler, whose workers run the cells)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help=f"run the cells on this Dask scheduler's workers (default: ${engine.SCHEDULER_ENV}, "
                        f"else this machine); needs the 'dist' extra")
    p.add_argument("--retries", type=retries_count, default=2,
                   help="times a task whose worker died is submitted again")
    p.add_argument("--force", action="store_true", help="recompute the cells already finished in --out")
    p.add_argument("--extend-committed", action="store_true",
                   help="allow computing cells in an --out that holds files committed to git (a "
                        "grid of results/); refused without it")
    p.add_argument("--migrate", action="store_true",
                   help="only convert the grid's cells found in OUT/results.json (earlier versions' "
                        "record, same config) into cell files; compute nothing")
    p.add_argument("--out", default=None,
                   help="results directory: OUT/cells/<domain>/<algo>/n<size>/seed<seed>.json per cell, "
                        "the grid's definition in OUT/grid.yaml; finished cells of the same config are "
                        "not run again (required unless --rerun)")
    p.set_defaults(func=cmd_experiment)


def _add_report(sub):
    """`taco report`'s arguments."""
    p = sub.add_parser("report", help="results.md and figures from the cell files of one or more grids")
    p.add_argument("dirs", nargs="*", metavar="OUT", help="a directory given to taco experiment --out")
    p.add_argument("--out", default=None, help="where to write (default: OUT, when there is one)")
    p.add_argument("--claims", default=None, metavar="FILE",
                   help="instead: the paper's claims tested on the committed grids (docs/claims.md), "
                        "from the repository root")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="instead: the paper's figures 5, 6, 8 and 9 from the committed grids, with 95 %% "
                        "bands, into DIR (docs/figures), from the repository root")
    p.set_defaults(func=cmd_report)


def _add_rollout(sub):
    """`taco rollout`'s arguments."""
    p = sub.add_parser("rollout", help="execute one sketch and draw it (contact sheet PNG, GIF)")
    p.add_argument("--model", required=True,
                   help="a model directory (a run's OUT/model), or a shipped model's name (e.g. dial)")
    p.add_argument("--domain", default=None, choices=taco_sim.names(),
                   help="where the sketch is executed (default: the domain the model was trained in)")
    p.add_argument("--sketch", required=True, help='sub-task names, e.g. "0 5 1 6"')
    p.add_argument("--seed", type=non_negative, default=0, help="seed of the episode")
    p.add_argument("--every", type=positive, default=10, help="one picture every N control steps")
    p.add_argument("--out", required=True, help="contact sheet PNG")
    p.add_argument("--gif", default=None, help="also an animated GIF of every step")
    p.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    p.set_defaults(func=cmd_rollout)


# --- the ecosystem's datasets (taco_app/interop/, the interop extra) ---

def _add_annotate(sub):
    """`taco annotate`'s arguments."""
    from taco_ref.annotate import DECODERS, DEFAULT_DECODER
    p = sub.add_parser("annotate", help="per-frame sub-task labels for a LeRobot v3 or robomimic dataset")
    p.add_argument("dataset", metavar="DATASET", help="a LeRobot v3 folder or a robomimic .hdf5 file")
    p.add_argument("--sketches", default=None, metavar="SKETCHES.yaml",
                   help="YAML mapping each task string to its list of sub-task names (default: the "
                        "dataset's own sub-task annotation)")
    p.add_argument("--out", default=None, help="the new dataset to write (the input is never changed)")
    p.add_argument("--in-place", action="store_true", help="rewrite DATASET instead of writing --out")
    p.add_argument("--model", default=None, help="a trained model directory (default: train TACO on DATASET)")
    p.add_argument("--decoder", choices=DECODERS, default=DEFAULT_DECODER,
                   help="forward_argmax (the paper's), posterior_argmax or viterbi (default: its labels "
                        "always give every sub-task one segment)")
    p.add_argument("--config", default=None, help="training config without --model: YAML file or shipped name")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a training config value (repeatable)")
    p.add_argument("--seed", type=non_negative, default=None,
                   help="seed of the training without --model (default: the config's)")
    p.add_argument("--save-model", default=None, metavar="DIR",
                   help="training run directory without --model (default: OUT.taco-model)")
    p.add_argument("--state-key", action="append", default=None, metavar="KEY",
                   help="feature (LeRobot) or obs key (robomimic) forming the state, repeatable, "
                        "concatenated in order (default: observation.state; robomimic: every "
                        "low-dimensional obs key)")
    p.add_argument("--action-key", default=None, metavar="KEY",
                   help="the action feature (default: action; robomimic: actions)")
    p.add_argument("--chunk", type=_integer(1, "an integer in [1, 4096]", 4096), default=64,
                   help="episodes decoded together (memory holds one chunk)")
    p.add_argument("--review", type=non_negative, default=20, help="least confident episodes to list")
    p.add_argument("--report", default=None, metavar="OUT.html",
                   help="also write a self-contained review page: per episode the posterior over sketch "
                        "positions against time, the boundaries, the confidence, frames at the boundaries")
    p.add_argument("--review-below", type=probability, default=None, metavar="P",
                   help="the review page lists first the episodes whose confidence is below P (at most "
                        "--review of them, least confident first; default 0.95)")
    p.add_argument("--sketches-template", default=None, metavar="OUT.yaml",
                   help="write every task string of DATASET to OUT.yaml with a sketch to fill in (its own, "
                        "if the dataset is annotated) and stop; the file for --sketches")
    p.set_defaults(func=cmd_annotate)


def _add_export(sub):
    """`taco export`'s arguments."""
    p = sub.add_parser("export", help="write demonstrations as a LeRobot v3 or robomimic dataset, true labels included")
    p.add_argument("data", metavar="DATA", help="a taco_ref demonstration file (.npz)")
    p.add_argument("--format", required=True, choices=("lerobot", "robomimic"), help="the dataset format to write")
    p.add_argument("--out", required=True, help="LeRobot: a new folder; robomimic: a new .hdf5 file")
    p.add_argument("--fps", type=positive, default=None,
                   help="frames per second for LeRobot (default: 1 / the domain's control period)")
    p.add_argument("--sketches-out", default=None, metavar="PATH",
                   help="the sketches file for taco annotate (default: OUT.sketches.yaml)")
    p.set_defaults(func=cmd_export)
# --- end datasets ---


def _add_conformance(sub):
    """`taco conformance`'s arguments (taco_ref/conformance/__init__.py owns them and its output)."""
    from taco_ref import conformance
    p = sub.add_parser("conformance", help="run an alignment implementation through spec/vectors")
    conformance.build_parser(p)
    p.set_defaults(func=conformance.run_args)


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_IO, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
"""Exit codes: 0 done; 1 the command ran but its result is a failure (rollout: the sketch was not
completed; conformance: a case failed; experiment: a cell failed); 2 bad input (arguments, data,
model, config or checkpoint files; argparse's usage errors too); 3 the system refused a read or
write (disk full, read-only, permissions); 4 training diverged (no model saved); 130 interrupted
(Ctrl-C; a training run resumes from its last checkpoint with --resume, an experiment grid from
its cell files). Every non-zero exit prints one line "taco COMMAND: ..." on stderr; a traceback
means a bug in taco_ref."""


def _one_line(text):
    return " ".join(str(text).split())


class _LineTracker:
    """sys.stderr while a command runs, remembering whether what was last written ended its
    line: progress lines are rewritten in place ("\r..." without a newline), and an error
    printed after one must start on a fresh line."""

    def __init__(self, stream):
        self.stream, self.line_open = stream, False

    def write(self, text):
        if text:
            self.line_open = not text.endswith("\n")
        return self.stream.write(text)

    def __getattr__(self, name):                # flush, isatty, fileno, encoding, ...
        return getattr(self.stream, name)


def main(argv=None):
    try:
        parser = build_parser()
        parser.argv = sys.argv[1:] if argv is None else list(argv)
        args = parser.parse_args(argv)
    except SystemExit as exit:          # --help (0) or a usage error (2, one line): a code, as below
        return exit.code
    stderr = sys.stderr = _LineTracker(sys.stderr)

    def fail(message, code):
        """The one place an error is printed: one line, on a line of its own."""
        if stderr.line_open:
            print(file=stderr.stream)
        print(f"taco {args.command}: {message}", file=stderr.stream, flush=True)
        return code
    try:
        return args.func(args)
    except train.DivergedError as err:
        return fail(_one_line(err), EXIT_DIVERGED)
    except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
        return fail(_one_line(err), EXIT_BAD_INPUT)                         # bad input
    except (RenderingUnavailable, MissingPackage, stats.MissingSciPy) as err:   # no offscreen GL, MuJoCo, SciPy
        return fail(_one_line(err), EXIT_IO)
    except OSError as err:                      # full or read-only disk, permissions
        where = f" {err.filename}" if err.filename else ""
        return fail(f"cannot read or write{where}: {err.strerror or err}", EXIT_IO)
    except KeyboardInterrupt:
        if argv is None:
            # the program's own run (the console script): what could be stopped has been (a
            # grid's workers ended, files whole) and the process only exits now; a second Ctrl-C
            # must not interrupt that with a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        hint = {"train": "; continue with --resume" if getattr(args, "out", None) else "",
                "experiment": "; the same command again runs only the unfinished cells"}.get(args.command, "")
        return fail(f"interrupted{hint}", EXIT_INTERRUPTED)
    finally:
        sys.stderr = stderr.stream


if __name__ == "__main__":
    sys.exit(main())

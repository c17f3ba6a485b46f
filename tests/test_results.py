"""The committed results: every grid's definition finds its cells, and the READMEs' tables and
command blocks are the generated ones.

Each results/<grid> holds its definition in grid.yaml (taco_app.grid.manifest), the command block
under its README's "## Command" generated from it, and what the grid cost under "## Cost".
Rerun on a copy of the grid (`taco experiment --rerun COPY`), the definition must find every
cell of the grid (their keys, taco_app.grid.keys, version 1 for the older files) and compute
none: a key that changes under committed cells would make them run again. The tables and
command blocks between markers in README.md and the grids' READMEs must equal what
`python -m taco_app.report FILE` writes. Figures a page computes from other committed outputs
(results/dial-image/more-pins, the image grids' ablation/ folders) are recomputed from them.
"""
import glob
import json
import os
import re
import shutil

import pytest

from taco_app import cli, report

from taco_app.grid import store as cells_mod, engine, cell as experiment, manifest as grids
from taco_app.analysis import craft_realisability, dial_stop_timing
from taco_ref import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRIDS = sorted(os.path.relpath(os.path.dirname(p), os.path.join(ROOT, "results"))
               for pattern in (("*", "cells"), ("archive", "*", "cells"))
               for p in glob.glob(os.path.join(ROOT, "results", *pattern)))
"""Every grid with cells, current (results/GRID) or superseded (results/archive/GRID)."""
SELECTION_GRIDS = sorted(os.path.relpath(os.path.dirname(p), os.path.join(ROOT, "results"))
                         for p in glob.glob(os.path.join(ROOT, "results", "selection", "*", "*", "cells")))
"""The candidate grids of the selection studies (results/selection/STUDY/VALUE): their study's
README gives their commands."""
RERUN_GRIDS = [pytest.param(g, marks=pytest.mark.slow) if g.startswith("archive") else g
               for g in GRIDS + SELECTION_GRIDS]
"""Rerunning a superseded grid's definition is slow-tier: its cells no longer change."""


def readme(grid):
    """A grid's README; a selection study's candidate grid is described by its study's."""
    folder = os.path.dirname(grid) if grid.startswith("selection/") else grid
    return open(os.path.join(ROOT, "results", folder, "README.md"), encoding="utf-8").read()


def test_every_grid_has_its_definition_and_a_readme_that_gives_it():
    assert GRIDS and "navworld" in GRIDS
    for grid in GRIDS:
        assert grids.load(os.path.join(ROOT, "results", grid)), grid
        text = readme(grid)
        command = text.split("\n## Command\n", 1)[1].split("\n## ", 1)[0]
        assert f"<!-- commands: results/{grid} -->" in command, \
            f"results/{grid}/README.md: no generated command block under ## Command"
        assert "\n## Cost\n" in text, f"results/{grid}/README.md: no ## Cost section"


@pytest.mark.parametrize("grid", GRIDS)
def test_grid_readme_command_block_is_the_generated_one(grid):
    """results/<grid>/README.md's command block is its grid.yaml's (regenerate with
    `python -m taco_app.report results/<grid>/README.md`), every line a command that parses."""
    text = readme(grid)
    assert grids.fill_commands(text, os.path.join(ROOT, "results", grid)) == text
    block = grids.BLOCK.search(text).group(4)
    lines = [line for line in block.splitlines() if line.startswith("taco experiment ")]
    assert lines[0] == f"taco experiment --rerun results/{grid}" and len(lines) >= 2
    parser = cli.build_parser()
    for line in lines:
        args = parser.parse_args(line.split()[1:])
        assert cli.experiment_runs(args)[1] == f"results/{grid}"


IN_PROGRESS = "**Status: in progress**"
"""A grid README that says so is still being computed: its command's cells not yet committed
would be computed (and fail here, where nothing may be computed); the committed ones are found."""


@pytest.mark.parametrize("grid", RERUN_GRIDS)
def test_the_committed_definitions_recompute_nothing(grid, tmp_path, monkeypatch):
    """Every cell file of results/<grid> is found by its definition, rerun; none is computed
    (in a grid in progress, only the cells not yet committed would be)."""
    out = tmp_path / grid
    shutil.copytree(os.path.join(ROOT, "results", grid, "cells"), out / "cells")
    if os.path.exists(os.path.join(ROOT, "results", grid, "results.json")):
        shutil.copy(os.path.join(ROOT, "results", grid, "results.json"), out / "results.json")

    def computed(*args):
        raise AssertionError(f"results/{grid}: a committed cell would be computed again: {args[0]}")
    monkeypatch.setattr(experiment, "collect", computed)
    monkeypatch.setattr(experiment, "run_cell", computed)
    monkeypatch.setattr(report, "write_report", lambda dirs, dest=None: ("", [], None))
    ran, real = [], engine.run_grid

    def run_grid(cells, ex, **kw):
        ran.append(real(cells, ex, **kw))
        return ran[-1]
    monkeypatch.setattr(engine, "run_grid", run_grid)
    committed = {(r["cell"]["algo"], r["cell"]["size"], r["cell"]["seed"])
                 for r in cells_mod.load_cells(os.path.join(ROOT, "results", grid))}
    in_progress = IN_PROGRESS in readme(grid)
    manifest = open(os.path.join(ROOT, "results", grid, grids.MANIFEST), encoding="utf-8").read()
    shutil.copy(os.path.join(ROOT, "results", grid, grids.MANIFEST), out / grids.MANIFEST)
    status = cli.main(["experiment", "--rerun", str(out), "--workers", "1"])
    assert ran[-1].computed == 0
    failed = {(f["cell"]["algo"], f["cell"]["size"], f["cell"]["seed"]) for f in ran[-1].failures}
    if in_progress:
        assert not failed & committed, sorted(failed & committed)
    else:
        assert status == 0 and not failed, ran[-1].failures
    found = {(r["algo"], r["size"], r["seed"]) for r in ran[-1].results if r is not None}
    assert committed <= found, f"cells results/{grid}/grid.yaml does not define: {sorted(committed - found)}"
    assert (out / grids.MANIFEST).read_text(encoding="utf-8") == manifest, "a rerun changed the definition"


def test_readme_tables_are_the_generated_ones():
    """README.md's results tables and command blocks equal taco_app.report.fill_tables' output
    (regenerate with `python -m taco_app.report README.md`)."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(report.GENERATED.findall(text)) >= 3
    assert {m.group(2) for m in grids.BLOCK.finditer(text)} >= {m.group(2) for m in report.GENERATED.finditer(text)}
    assert report.fill_tables(text, ROOT) == text


def test_more_pins_figures_are_the_committed_outcomes():
    """results/dial-image's "400 more test PINs" table: every figure recomputed from the
    committed `taco evaluate` outputs (more-pins/) and the cells' own 100 PINs."""
    from taco_ref import evaluate
    grid = os.path.join(ROOT, "results", "dial-image")
    text = open(os.path.join(grid, "README.md"), encoding="utf-8").read()
    more, cell = {}, {}
    for algo in ("taco", "gtbc"):
        with open(os.path.join(grid, "more-pins", f"{algo}.json"), encoding="utf-8") as f:
            more[algo] = json.load(f)
        with open(os.path.join(grid, "cells", "dial-image", algo, "n1200", "seed0.json"), encoding="utf-8") as f:
            cell[algo] = json.load(f)["figures"]["outcomes"]
        assert more[algo]["n_tasks"] == len(more[algo]["outcomes"]) == 400
    interval = lambda d, lo, hi: f"{pct(d)} [{pct(lo)}, +{pct(hi)}]".replace("-", "−")
    for algo, name in (("taco", "TACO"), ("gtbc", "GT-BC")):
        outcomes = more[algo]["outcomes"]
        lo, hi = evaluate.wilson_interval(outcomes.count("1"), 400)
        whole = cell[algo] + outcomes
        lo5, hi5 = evaluate.wilson_interval(whole.count("1"), 500)
        row = (f"| {name} | {pct(outcomes.count('1') / 400)} [{pct(lo)}, {pct(hi)}] | "
               f"{pct(more[algo]['subtask_accuracy'])} | {pct(whole.count('1') / 500)} [{pct(lo5)}, {pct(hi5)}] |")
        assert row in text, row
    d400 = interval(*evaluate.paired_difference_interval(more["taco"]["outcomes"], more["gtbc"]["outcomes"]))
    d500 = interval(*evaluate.paired_difference_interval(cell["taco"] + more["taco"]["outcomes"],
                                                         cell["gtbc"] + more["gtbc"]["outcomes"]))
    assert f"400: {d400} |" in text and f"500: **{d500}** |" in text, (d400, d500)


def pct(v):
    return f"{100 * v:.1f}"


def signed(v):
    return f"{'+' if v >= 0 else '−'}{pct(abs(v))}"


def signed_interval(d, lo, hi):
    """A paired difference and its 95 % interval as the results pages print them."""
    return f"{signed(d)} [{signed(lo)}, {signed(hi)}]"


ABLATIONS = (("warm", "warm-up (as the cell), this draw"), ("viterbi", "hard labels (`taco_targets=viterbi`)"),
             ("nowarm", "no warm-up (`warmup_epochs=0`)"))


def stop_summaries(path):
    """{model path: its "all" row's eager | P(STOP) last step | P(STOP) stop step | label} of a
    `taco_app/analysis/stop_by_subtask.py` table."""
    stops, model = {}, None
    for line in open(path, encoding="utf-8"):
        if line.startswith("| taco: ") or line.startswith("| gtbc: "):
            model = line.split(": ", 1)[1].split(" |", 1)[0]
        elif line.startswith("| all |"):
            stops[model] = " | ".join(c.strip() for c in line.strip().strip("|").split("|")[4:8])
    return stops


def ablation_rows(grid_dir):
    """The rows of a grid's ablation table, computed from the committed `taco evaluate` outputs
    (ablation/taco-<kind>-seed<s>.json), the seed's TACO and GT-BC cells and the
    `taco_app/analysis/stop_by_subtask.py` tables: ablation/stop-by-subtask-seed<s>.md, and for the cells'
    models the grid's own stop-by-subtask-seed<s>.md where it has one (a grid whose ablation
    ran on another machine's draw of the data than its cells). Each run's paired
    difference is against the seed's "warm" run where there is one (TACO as the cell trains it,
    on the ablation's draw of the data), else against the TACO cell."""
    from taco_ref import evaluate
    rows = []
    for table in sorted(glob.glob(os.path.join(grid_dir, "ablation", "stop-by-subtask-seed*.md"))):
        seed = int(re.search(r"seed(\d+)\.md$", table).group(1))
        stops = stop_summaries(table)
        cell_stops = os.path.join(grid_dir, f"stop-by-subtask-seed{seed}.md")
        if os.path.exists(cell_stops):
            stops.update(stop_summaries(cell_stops))
        kinds = [(kind, name) for kind, name in ABLATIONS
                 if os.path.exists(os.path.join(grid_dir, "ablation", f"taco-{kind}-seed{seed}.json"))]
        runs = [("TACO (the cell)", "taco", None), *((name, "taco", kind) for kind, name in kinds),
                ("GT-BC (the cell)", "gtbc", None)]
        outputs = []
        for name, algo, kind in runs:
            if kind is None:
                with open(os.path.join(grid_dir, "cells", "dial-image-small", algo, "n200", f"seed{seed}.json"),
                          encoding="utf-8") as f:
                    figures = json.load(f)["figures"]
                model = next(m for m in stops if f"/{algo}/n200/seed{seed}-" in m)
            else:
                with open(os.path.join(grid_dir, "ablation", f"taco-{kind}-seed{seed}.json"), encoding="utf-8") as f:
                    figures = json.load(f)
                model = next(m for m in stops if f"/ablation/taco-{kind}-seed{seed}/" in m)
            assert figures["n_tasks"] == len(figures["outcomes"]) == 100
            outputs.append((name, kind, figures, stops[model]))
        base = next((f for _, kind, f, _ in outputs if kind == "warm"), outputs[0][2])["outcomes"]
        for name, kind, figures, stop in outputs:
            outcomes = figures["outcomes"]
            lo, hi = evaluate.wilson_interval(outcomes.count("1"), 100)
            d, dlo, dhi = evaluate.paired_difference_interval(outcomes, base)
            diff = "" if outcomes is base else signed_interval(d, dlo, dhi)
            rows.append(f"| {seed} | {name} | {pct(outcomes.count('1') / 100)} [{pct(lo)}, {pct(hi)}] | {diff} | "
                        f"{pct(figures['subtask_accuracy'])} | {pct(figures['align_viterbi'])} | {stop} |")
    return rows


THRESHOLD_RUNS = (("taco-warm", "TACO, warm-up (as the cell)"), ("taco-nowarm", "TACO, no warm-up"),
                  ("gtbc", "GT-BC (as the cell)"))
THRESHOLDS = ("0.5", "0.9", "0.99")


def threshold_rows(grid_dir):
    """The rows of the STOP-threshold table: each model of the ablation evaluated on its seed's
    100 PINs at STOP thresholds 0.5 (the default: ablation/<run>-seed<s>.json) and higher
    (ablation/stop-threshold/<run>-seed<s>-p<P>.json), with the paired 0.9 − 0.5 difference;
    then, per seed and threshold, TACO (warm-up) − GT-BC paired on the PINs."""
    from taco_ref import evaluate
    rows, leads = [], []
    seeds = sorted({int(m.group(1)) for p in glob.glob(os.path.join(grid_dir, "ablation", "stop-threshold", "*.json"))
                    for m in [re.search(r"-seed(\d+)-p", p)]})
    for seed in seeds:
        outcomes = {}
        for run, name in THRESHOLD_RUNS:
            for p in THRESHOLDS:
                path = (os.path.join(grid_dir, "ablation", f"{run}-seed{seed}.json") if p == "0.5" and run != "gtbc"
                        else os.path.join(grid_dir, "ablation", "stop-threshold", f"{run}-seed{seed}-p{p}.json"))
                if os.path.exists(path):
                    with open(path, encoding="utf-8") as f:
                        figures = json.load(f)
                    assert figures["n_tasks"] == len(figures["outcomes"]) == 100
                    outcomes[run, p] = figures["outcomes"]
            cols = [pct(outcomes[run, p].count("1") / 100) if (run, p) in outcomes else "" for p in THRESHOLDS]
            diff = signed_interval(*evaluate.paired_difference_interval(outcomes[run, "0.9"], outcomes[run, "0.5"]))
            rows.append(f"| {seed} | {name} | {' | '.join(cols)} | {diff} |")
        for p in ("0.5", "0.9"):
            d = signed_interval(*evaluate.paired_difference_interval(outcomes["taco-warm", p], outcomes["gtbc", p]))
            leads.append(f"| {seed} | {p} | {d} |")
    return rows, leads


def test_stop_threshold_figures_are_the_committed_outputs():
    """results/dial-image-small-trained-core, "The STOP threshold": both tables recomputed from
    the committed evaluation outputs, seeds 0 and 2, every model at 0.5 and 0.9."""
    grid = os.path.join(ROOT, "results", "dial-image-small-trained-core")
    text = open(os.path.join(grid, "README.md"), encoding="utf-8").read()
    rows, leads = threshold_rows(grid)
    assert len(rows) == 6 and len(leads) == 4
    for row in rows + leads:
        assert row in text, row


@pytest.mark.parametrize("grid, min_rows", [("dial-image-small", 8), ("dial-image-small-trained-core", 12)])
def test_ablation_figures_are_the_committed_outputs(grid, min_rows):
    """A grid's ablation table (results/dial-image-small: hard labels and no warm-up, core
    frozen; results/dial-image-small-trained-core: no warm-up, core trained): every figure
    recomputed from the committed evaluation outputs, cells and STOP tables."""
    grid = os.path.join(ROOT, "results", grid)
    text = open(os.path.join(grid, "README.md"), encoding="utf-8").read()
    rows = ablation_rows(grid)
    assert len(rows) >= min_rows and any("no warm-up" in row for row in rows)
    if grid.endswith("trained-core"):                  # every seed paired on its own draw
        for seed in (0, 1, 2):
            assert any(r.startswith(f"| {seed} | warm-up (as the cell), this draw |") for r in rows), seed
    for row in rows:
        assert row in text, row


def _numbers(line):
    """The numbers of a markdown table row, minus signs of either kind, in order."""
    return re.findall(r"-?\d+(?:\.\d+)?", line.replace("\u2212", "-"))


def test_dial_stop_timing_figures_are_the_committed_outputs():
    """results/dial, "Why the STOP fires a step early": taco_app/analysis/dial_stop_timing.py's tables,
    regenerated from the committed figures (stop-timing/*.json), are the committed
    stop-timing/*.md, and every row of the README's tables in that section carries the figures
    of one generated row (its numbers appear, in order, among that row's)."""
    folder = os.path.join(ROOT, "results", "dial", "stop-timing")
    generated = []
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".json")):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = dial_stop_timing.tables(json.load(f))
        with open(os.path.join(folder, name[:-5] + ".md"), encoding="utf-8") as f:
            assert f.read().strip() == text.strip(), name
        generated += [_numbers(line) for line in text.splitlines() if line.startswith("| ")]
    readme = open(os.path.join(ROOT, "results", "dial", "README.md"), encoding="utf-8").read()
    section = readme.split("## Why the STOP fires a step early", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and _numbers(line)]
    assert len(rows) >= 15
    def within(want, have):                   # want is a subsequence of have
        it = iter(have)
        return all(x in it for x in want)
    for row in rows:
        assert any(within(_numbers(row), g) for g in generated), row


@pytest.mark.parametrize("name", ["dial", "dial-velocity"])
def test_shipped_model_readme_gives_the_committed_evaluation(name):
    """A shipped Dial model's README: PINs completed with their Wilson interval and the Viterbi
    alignment are those of the committed `taco evaluate` output
    (results/dial/shipped), as is the bridge's offline count; every rule's figure is there."""
    shipped = os.path.join(ROOT, "results", "dial", "shipped")
    with open(os.path.join(shipped, f"{name}-evaluate.json"), encoding="utf-8") as f:
        out = json.load(f)
    with open(os.path.join(shipped, f"{name}-bridge-offline.json"), encoding="utf-8") as f:
        bridge = json.load(f)
    text = open(os.path.join(ROOT, "sim", "taco_sim", "dial", "models", name, "README.md"), encoding="utf-8").read()
    done, n = out["outcomes"].count("1"), out["n_tasks"]
    lo, hi = evaluate.wilson_interval(done, n)
    assert f"{done} of {n}, {100 * done / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]" in text
    for rule in ("paper", "strict"):
        k = out["rules"][rule]["outcomes"].count("1")
        assert f"| {k} of {n} | {100 * out['rules'][rule]['subtask_accuracy']:.1f} % |" in text, rule
    assert f"{100 * out['align_viterbi']:.2f} % (Viterbi)" in text
    assert f"dials {bridge['dialled']} of {bridge['n_tasks']}" in text


@pytest.mark.parametrize("name", ["dial", "dial-velocity"])
def test_shipped_model_readme_gives_its_committed_harder_test_figures(name):
    """A shipped Dial model's README gives, for every committed `taco evaluate --test NAME`
    output of it (results/dial/shipped/<model>-test-NAME.json), the PINs completed with their
    Wilson interval and the sub-task accuracy, beside the condition's own description."""
    import glob
    from taco_sim.dial import disturb
    shipped = os.path.join(ROOT, "results", "dial", "shipped")
    text = open(os.path.join(ROOT, "sim", "taco_sim", "dial", "models", name, "README.md"), encoding="utf-8").read()
    outputs = sorted(glob.glob(os.path.join(shipped, f"{name}-test-*.json")))
    assert outputs, f"no harder-test evaluation of {name} in {shipped}"
    for path in outputs:
        test = os.path.basename(path)[len(f"{name}-test-"):-len(".json")]
        with open(path, encoding="utf-8") as f:
            out = json.load(f)
        assert out["test"] == test and out["n_tasks"] == 500, path
        done, n = out["outcomes"].count("1"), out["n_tasks"]
        lo, hi = evaluate.wilson_interval(done, n)
        row = (f"| `{test}` | {disturb.TESTS[test].about} | {done} of {n}, {100 * done / n:.1f} % "
               f"[{100 * lo:.1f}, {100 * hi:.1f}] | {100 * out['subtask_accuracy']:.1f} % |")
        assert row in text, row


def test_image_stop_hold_figures_are_the_committed_outputs():
    """results/dial-image-small-trained-core, "A STOP held for two steps": every row of its
    table, and the paired difference, recomputed from the committed evaluation outputs."""
    grid = os.path.join(ROOT, "results", "dial-image-small-trained-core")
    text = open(os.path.join(grid, "README.md"), encoding="utf-8").read()
    out = {}
    for hold, label in ((1, "STOP once (the cell)"), (2, "STOP held 2 steps"), (3, "STOP held 3 steps")):
        with open(os.path.join(grid, "stop-hold", f"gtbc-seed0-hold{hold}.json"), encoding="utf-8") as f:
            out[hold] = r = json.load(f)
        early = r["failure_details"].get("stopped early: over its key, before pressing it", 0)
        row = (f"| {label} | {r['outcomes'].count('1')} | {r['rules']['strict']['outcomes'].count('1')} | "
               f"{r['rules']['paper']['outcomes'].count('1')} | {100 * r['subtask_accuracy']:.1f} % | {early} |")
        assert row in text, row
    with open(os.path.join(grid, "cells", "dial-image-small", "gtbc", "n200", "seed0.json"), encoding="utf-8") as f:
        assert out[1]["outcomes"] == json.load(f)["figures"]["outcomes"]
    d, lo, hi = evaluate.paired_difference_interval(out[2]["outcomes"], out[1]["outcomes"])
    assert f"+{100 * d:.0f} points (paired on the PINs, [+{100 * lo:.1f}, +{100 * hi:.1f}])" in text


def test_craft_realisability_figures_are_the_committed_outputs():
    """results/craft/realisability: taco_app/analysis/craft_realisability.py's tables, regenerated from the
    committed JSON, are the committed markdown; spec/craft.md §10's table carries its rows; the
    feature expert's clones imitate better than the planner's at every L2."""
    folder = os.path.join(ROOT, "results", "craft", "realisability")
    with open(os.path.join(folder, "realisability.json"), encoding="utf-8") as f:
        figures = json.load(f)
    text = craft_realisability.tables(figures)
    with open(os.path.join(folder, "realisability.md"), encoding="utf-8") as f:
        assert f.read().strip() == text.strip()
    held = {(r["expert"], r["l2"]): r["held_out"] for r in figures["runs"]}
    for l2 in craft_realisability.L2S:
        assert held[("features", l2)] > held[("planner", l2)]
    spec = open(os.path.join(ROOT, "spec", "craft.md"), encoding="utf-8").read().split("**Realisability**")[1]
    for r in figures["runs"]:
        row = f"| {r['expert']} | {r['l2']:.0e}".replace("e-0", "e-")
        line = next(line for line in spec.splitlines() if line.startswith(row))
        assert f"{100 * r['held_out']:.1f} % | {100 * r['training_data']:.1f} %" in line, line


def test_results_readme_is_the_generated_index_of_every_folder():
    """results/README.md is `python -m taco_app.grid.manifest results`'s page: every folder of results/
    and results/archive listed once in results/index.yaml, each archived one naming its
    replacement, every link resolving."""
    results = os.path.join(ROOT, "results")
    page = grids.index_page(results)
    assert open(os.path.join(results, "README.md"), encoding="utf-8").read() == page
    for link in re.findall(r"\]\(([^)]+)\)", page):
        assert os.path.exists(os.path.join(results, link)), link


def test_the_cells_of_one_seed_train_on_one_data_set():
    """Paired means paired (spec/evaluation.md §6, "Paired cells"): in every committed grid, the
    cells of one (domain, size, seed) record the same training and held-out fingerprints whatever
    their algorithm, but for the groups results/index.yaml lists as `unpaired` with why no
    comparison reads them; and a listed group must really be unpaired (a stale entry fails)."""
    index = grids.index_entries(os.path.join(ROOT, "results"))
    allowed = {e["grid"]: e.get("unpaired") for entries in index.values() for e in entries}
    for grid in GRIDS:
        groups = {}
        for r in cells_mod.load_cells(os.path.join(ROOT, "results", grid)):
            c, d = r["cell"], r["data"]
            if not d["train"].get("fingerprint"):
                continue                                 # migrated from results.json: none recorded
            groups.setdefault((c["domain"], c["size"], c["seed"]), {})[c["algo"]] = \
                (d["train"]["fingerprint"], d["test"]["fingerprint"])
        exempt = allowed.get(grid) or {}
        for (domain, size, seed), by_algo in sorted(groups.items()):
            listed = seed in exempt.get("seeds", []) and bool(set(exempt.get("algos", [])) & set(by_algo))
            kept = {a: fp for a, fp in by_algo.items() if not (listed and a in exempt["algos"])}
            assert len(set(kept.values())) <= 1, (f"results/{grid}: {domain} n{size} seed {seed} trains its "
                                                  f"cells on different data: {kept}")
            if listed:
                assert len(set(by_algo.values())) > 1, f"results/{grid}: seed {seed} is listed unpaired but is paired"


def test_dial_robust_diagnosis_rows_are_the_committed_runs():
    """results/dial-robust/README.md's diagnosis table: every committed run of
    taco_app.analysis.dial_disturbed (diagnosis/*.json) has its row there, as the analysis
    prints it from the file."""
    import glob
    from taco_app.analysis import dial_disturbed
    folder = os.path.join(ROOT, "results", "dial-robust")
    text = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    runs = sorted(glob.glob(os.path.join(folder, "diagnosis", "*.json")))
    assert len(runs) >= 10
    for path in runs:
        with open(path, encoding="utf-8") as f:
            row = dial_disturbed.table([json.load(f)]).splitlines()[-1]
        assert row in text, (path, row)


def test_dial_robust_validation_table_is_the_committed_outputs():
    """results/dial-robust/README.md's validation table: dial_disturbed.validation_table of the
    committed validation outputs, the candidates in the README's order."""
    from taco_app.analysis import dial_disturbed
    folder = os.path.join(ROOT, "results", "dial-robust")
    text = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    table = text.split("<!-- validation table -->\n", 1)[1].split("\n<!-- end validation table -->", 1)[0]
    prefixes = {("dial", "standard (DART noise only)"): "shipped-dial",
                ("dial", "motor noise up to 10 %"): "dial-m0.1",
                ("dial", "the harder test's disturbances, motor noise up to 10 %"): "dial-h",
                ("dial-velocity", "standard (DART noise only)"): "shipped-dial-velocity",
                ("dial-velocity", "motor noise up to 10 %"): "vel-m0.1",
                ("dial-velocity", "the harder test's disturbances, motor noise up to 10 %"): "vel-h",
                ("dial, GT-BC", "standard (DART noise only)"): "gtbc-dial-std",
                ("dial, GT-BC", "the harder test's disturbances, motor noise up to 10 %"): "gtbc-dial-h"}
    rows = [line.split(" | ")[:2] for line in table.splitlines()[2:]]
    candidates = [(prefixes[(m.lstrip("| "), about)], m.lstrip("| "), about) for m, about in rows]
    assert table == dial_disturbed.validation_table(os.path.join(folder, "validation"), candidates)


def test_dial_robust_retrained_tables_are_the_committed_outputs():
    """results/dial-robust/README.md's tables of the retrained models against the ones they
    replaced are dial_disturbed.retrained_table of the committed outputs (results/dial/shipped
    and results/archive/dial-shipped-undisturbed, 500 test PINs each), and every condition
    stays at or above the 90 % the retraining had to reach."""
    from taco_app.analysis import dial_disturbed
    text = open(os.path.join(ROOT, "results", "dial-robust", "README.md"), encoding="utf-8").read()
    tables = text.split("<!-- retrained tables -->\n", 1)[1].split("\n<!-- end retrained tables -->", 1)[0]
    shipped = os.path.join(ROOT, dial_disturbed.SHIPPED_FIGURES)
    want = "\n\n".join(dial_disturbed.retrained_table(name, shipped, os.path.join(ROOT, dial_disturbed.BEFORE_FIGURES))
                       for name in ("dial", "dial-velocity"))
    assert tables == want
    for name in ("dial", "dial-velocity"):
        for condition in dial_disturbed.TEST_CONDITIONS:
            file = f"{name}-evaluate.json" if condition == "standard" else f"{name}-test-{condition}.json"
            with open(os.path.join(shipped, file), encoding="utf-8") as f:
                out = json.load(f)
            least = 500 if condition == "standard" else 450        # every standard PIN, 90 % of the others
            assert out["n_tasks"] == 500 and out["outcomes"].count("1") >= least, (name, condition)

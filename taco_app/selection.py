"""The selection log: every setting chosen on validation tasks, from the cells (spec/selection.md).

A *study* chooses one setting of a domain's config. It is a folder results/selection/STUDY/
holding study.yaml and one grid per candidate value, results/selection/STUDY/VALUE/, computed by
`taco experiment DOMAIN ... --split validation --set KEY=VALUE --out results/selection/STUDY/VALUE`:
every candidate with the same algorithms, sizes, seeds, tasks and protocol, so each method gets
the same search, and every figure is a validation figure (taco_ref.evaluate.validation), never a
test one.

study.yaml:
  setting    what is chosen, as the config calls it ("sigma")
  about      one line: why it is a choice
  config     the config file the choice is written to ("sim/taco_sim/configs/navworld.yaml")
  before     the value the config held when the study began (how it was chosen then: `why`)
  why        how the value in use before the study had been chosen
  limit      (optional) a candidate that ends the range by its meaning, where the edge rule
             below does not apply (patience = epochs: no early stopping)

The rule (`choose`): each candidate's score is the mean, over the methods, of each method's mean
validation task accuracy over the seeds; the choice is the candidate of the highest score (a tie
keeps `before`). A numeric choice is never left at the edge of its search: when the chosen value
is the smallest or the largest of three or more candidates, the study is extended beyond it (the
next value one step further) and chosen again; `check_config` refuses a choice at the edge.
Beside it: each method's own best, and the chosen candidate's paired difference
to the runner-up over (method, seed) pairs with its t interval, so a reader sees how far the
validation tasks separate them. `check_config` holds the config to the choice.

results/selection/pending.yaml lists the settings chosen on test tasks before this page existed
that no study has chosen again yet: each with where it was chosen and what a study would cost.
"""
import os

import numpy as np
import yaml

from taco_ref import algorithms
from taco_app import stats
from taco_app.grid import store as cells_mod, manifest as grids

SELECTION = os.path.join("results", "selection")
STUDY = "study.yaml"
PENDING = "pending.yaml"
STUDY_FIELDS = ("setting", "about", "config", "before", "why")
OPTIONAL_FIELDS = ("limit",)


class StudyError(ValueError):
    """A study folder that is not one: names the file and the field."""


def load_study(folder):
    """study.yaml of folder, checked (StudyError naming the file and field)."""
    where = os.path.join(folder, STUDY)
    try:
        with open(where, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise StudyError(f"{where}: cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise StudyError(f"{where}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise StudyError(f"{where}: expected a mapping of {', '.join(STUDY_FIELDS)}")
    for name in STUDY_FIELDS:
        if not isinstance(doc.get(name), str) or not doc[name].strip():
            raise StudyError(f"{where}.{name}: expected a non-empty string, got {doc.get(name)!r}")
    if "limit" in doc and not isinstance(doc["limit"], str):
        raise StudyError(f"{where}.limit: expected a candidate's name (a string), got {doc['limit']!r}")
    unknown = sorted(set(doc) - set(STUDY_FIELDS) - set(OPTIONAL_FIELDS))
    if unknown:
        raise StudyError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    return doc


def candidates(folder):
    """The candidate grids of a study, {value: its folder}, in numeric order where the values
    are numbers; each a grid of validation cells (StudyError naming the folder otherwise)."""
    found = {}
    for name in sorted(os.listdir(folder)):
        grid = os.path.join(folder, name)
        if not os.path.isdir(grid):
            continue
        runs = grids.load(grid)
        if any(run.get("split") != "validation" for run in runs):
            raise StudyError(f"{grid}: a candidate grid runs on the validation split only "
                             f"(taco experiment --split validation); its grid.yaml says otherwise")
        found[name] = grid
    if len(found) < 2:
        raise StudyError(f"{folder}: a study compares two or more candidate grids, found {len(found)}")

    def order(value):
        try:
            return (0, float(value), value)
        except ValueError:
            return (1, 0.0, value)
    return dict(sorted(found.items(), key=lambda kv: order(kv[0])))


def figures(grid):
    """{algo: {seed: validation task accuracy in %}} of a candidate grid's cells."""
    out = {}
    for r in cells_mod.load_results(grid):
        if r.get("split") != "validation":
            raise StudyError(f"{grid}: cell {r['algo']} n{r['size']} seed {r['seed']} is not a validation "
                             "cell; a selection reads validation tasks only")
        out.setdefault(r["algo"], {})[r["seed"]] = 100.0 * float(r["task_accuracy"])
    return out


def choose(table, before):
    """(choice, scores) for table {candidate: {algo: {seed: accuracy}}}: the candidate of the
    highest mean over the methods of their mean over seeds (module docstring); a tie keeps
    before. Only the (algo, seed) pairs every candidate has count, so every candidate is scored
    on the same runs."""
    common = None
    for per_algo in table.values():
        pairs = {(a, s) for a, seeds in per_algo.items() for s in seeds}
        common = pairs if common is None else common & pairs
    if not common:
        raise StudyError("no (method, seed) pair is computed for every candidate yet")
    algos = sorted({a for a, _ in common})
    scores = {}
    for c, per_algo in table.items():
        scores[c] = float(np.mean([np.mean([per_algo[a][s] for a2, s in common if a2 == a]) for a in algos]))
    best = max(scores.values())
    tied = [c for c, v in scores.items() if v == best]
    return (before if before in tied else tied[0]), scores, sorted(common)


def study_section(folder, name):
    """The markdown of one study: its table, choice and rule."""
    study = load_study(folder)
    grids_of = candidates(folder)
    table = {c: figures(g) for c, g in grids_of.items()}
    choice, scores, common = choose(table, study["before"])
    algos = [a for a in algorithms.names() if any(a == x for x, _ in common)]
    seeds = sorted({s for _, s in common})
    runs = grids.load(next(iter(grids_of.values())))[0]
    planned = len(runs["algos"]) * len(runs["seeds"]) * len(runs["sizes"])
    missing = sum(planned - sum(len(v) for v in per_algo.values()) for per_algo in table.values())
    lines = [f"### {study['setting']} ({name})", "",
             f"{study['about']} Candidates: {', '.join(grids_of)}; before this study: {study['before']} "
             f"({study['why']}).", "",
             f"Search: {', '.join(algorithms.label(a) for a in runs['algos'])} on {runs['domain']}, "
             f"{', '.join(map(str, runs['sizes']))} demonstrations, seeds {', '.join(map(str, runs['seeds']))}, "
             f"{runs['n_tasks']} validation tasks per cell, protocol {runs['protocol'] or 'of the config'}"
             f"{'; ' + ' '.join(runs['set']) if len(runs['set']) > 1 else ''}"
             + (f" (**in progress**: {missing} of {planned * len(table)} runs not computed yet; the table "
                "reads the runs every candidate has)" if missing else "") + ". Grids: "
             + ", ".join(f"[{c}](../{SELECTION}/{name}/{c}/grid.yaml)" for c in grids_of) + ".", "",
             "| " + study["setting"] + " | " + " | ".join(algorithms.label(a) for a in algos)
             + " | score (mean of the methods) |",
             "|---|" + "---:|" * (len(algos) + 1)]
    for c, per_algo in table.items():
        shown = []
        for a in algos:
            values = [per_algo[a][s] for s in seeds]
            mean, lo, hi = stats.t_interval(values)
            shown.append(f"{mean:.1f} [{lo:.1f}, {hi:.1f}]" if lo is not None else f"{mean:.1f}")
        mark = "**" if c == choice else ""
        lines.append(f"| {mark}{c}{mark} | " + " | ".join(shown) + f" | {mark}{scores[c]:.1f}{mark} |")
    own = {a: max(table, key=lambda c: (np.mean([table[c][a][s] for s in seeds]), c == study["before"]))
           for a in algos}
    ranked = sorted(scores, key=lambda c: -scores[c])
    lines.append("")
    said = (f"**{'Ahead so far' if missing else 'Choice'}: {study['setting']} = {choice}**"
            + (" (unchanged)." if choice == study["before"] else f" (was {study['before']}).")
            + " Each method's own best: " + ", ".join(f"{algorithms.label(a)} {own[a]}" for a in algos) + ".")
    if len(ranked) > 1:
        second = ranked[1] if ranked[0] == choice else ranked[0]
        diffs = [table[choice][a][s] - table[second][a][s] for a, s in common]
        mean, lo, hi = stats.t_interval(diffs)
        said += (f" {choice} − {second}, paired over the {len(diffs)} (method, seed) runs: {mean:+.1f} points"
                 + (f" [{lo:+.1f}, {hi:+.1f}]." if lo is not None else "."))
    if at_edge(grids_of, choice, study.get("limit")):
        said += (f" **{choice} is the edge of the search: the study is extended beyond it before the "
                 "choice is applied.**")
    lines.append(said)
    return lines, study, (None if missing else choice), grids_of


def at_edge(grids_of, choice, limit=None):
    """Whether a numeric choice is the smallest or the largest of three or more candidates (the
    search must go on past it); False for settings that are not numbers, and for the study's
    limit (a value that ends the range by its meaning)."""
    if choice == limit:
        return False
    try:
        values = [float(c) for c in grids_of]
    except ValueError:
        return False
    return len(values) > 2 and float(choice) in (min(values), max(values))


def page(root="."):
    """spec/selection.md as text, from results/selection under root."""
    folder = os.path.join(root, SELECTION)
    lines = ["# The selection log: every setting chosen on validation tasks",
             "",
             "Generated by `python -m taco_app.selection` from the cells of results/selection/ "
             "(taco_app/selection.py); a test regenerates it and holds each config to its choice. "
             "Every candidate is a grid of validation cells ([evaluation.md](evaluation.md) §6: the "
             "test protocol on tasks of seeds of their own), with the same methods, sizes, seeds and "
             "tasks for every candidate, so each method gets the same search. The rule: a "
             "candidate's score is the mean over the methods of their mean validation task accuracy "
             "over the seeds; the highest score is chosen, a tie keeps the value in use, and a "
             "numeric choice at the edge of three or more candidates extends the search beyond it "
             "first. Figures: "
             "mean validation task accuracy over the seeds, in percent, with its 95 % t interval.",
             "", "## Studies", ""]
    studies = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d))) \
        if os.path.isdir(folder) else []
    for name in studies:
        where = os.path.join(folder, name)
        if not computed(where):
            study = load_study(where)
            lines += [f"### {study['setting']} ({name})", "", f"{study['about']} Before this study: "
                      f"{study['before']} ({study['why']}). **Planned**: no run is computed for every "
                      "candidate yet.", ""]
            continue
        lines += study_section(where, name)[0] + [""]
    pending = load_pending(folder)
    if pending:
        lines += ["## Chosen on test tasks, not yet chosen again", "",
                  "Settings chosen before this log existed, on test tasks or on one method alone, that no "
                  "study above has chosen again yet (results/selection/pending.yaml). Their grids' figures "
                  "stand, with this caveat.", "",
                  "| setting | domain | how it was chosen | what a study would cost |", "|---|---|---|---|"]
        lines += [f"| {p['setting']} | {p['domain']} | {p['chosen']} | {p['cost']} |" for p in pending]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def computed(folder):
    """Whether a study has two or more candidate grids and a (method, seed) run that every one
    of them has computed (else it is only planned)."""
    if sum(os.path.isdir(os.path.join(folder, d)) for d in os.listdir(folder)) < 2:
        return False
    table = {c: figures(g) for c, g in candidates(folder).items()}
    runs = [{(a, s) for a, seeds in per_algo.items() for s in seeds} for per_algo in table.values()]
    return bool(set.intersection(*runs))


def load_pending(folder):
    """results/selection/pending.yaml's entries (setting, domain, chosen, cost), or []."""
    where = os.path.join(folder, PENDING)
    if not os.path.exists(where):
        return []
    with open(where, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or []
    if not isinstance(doc, list) or not all(isinstance(p, dict) and all(isinstance(p.get(k), str) for k in
                                                                          ("setting", "domain", "chosen", "cost"))
                                            for p in doc):
        raise StudyError(f"{where}: expected a list of mappings with setting, domain, chosen and cost (strings)")
    return doc


def check_config(folder, root="."):
    """The config a study chose for, with the choice applied, is the config as it is: else
    StudyError saying which value the config holds and which the study chose. None for a study
    planned or still in progress (its choice is not made yet)."""
    from taco_app import config as config_mod
    from taco_app.grid.keys import full_config
    if not computed(folder):
        return None                                   # planned: no run computed for every candidate
    _, study, choice, grids_of = study_section(folder, os.path.basename(folder))
    if choice is None:
        return None
    if at_edge(grids_of, choice, study.get("limit")):
        raise StudyError(f"{folder}: {study['setting']} = {choice} is the edge of the search "
                         f"({', '.join(grids_of)}): extend the study beyond it before applying the choice")
    run = grids.load(grids_of[choice])[0]
    chosen = config_mod.settings(run["domain"], None, run["set"])
    shipped = config_mod.settings(run["domain"], None, [])
    cell = dict(algo=run["algos"][0], seed=0)
    a, b = full_config(dict(cell, config=chosen)), full_config(dict(cell, config=shipped))
    if a != b:
        moved = {k: (b[k], a[k]) for k in a if a[k] != b[k]}
        raise StudyError(f"{folder}: the study chose {study['setting']} = {choice}, but "
                         f"{study['config']} holds " + ", ".join(f"{k} = {v[0]!r} (chosen {v[1]!r})"
                                                                 for k, v in moved.items()))
    return choice


def main(argv=None):
    """python -m taco_app.selection [FILE]: write spec/selection.md (or FILE) from results/selection."""
    import sys
    from taco_ref.plumbing import files
    args = sys.argv[1:] if argv is None else argv
    dest = args[0] if args else os.path.join("spec", "selection.md")
    files.write_bytes(dest, page(".").encode())
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()

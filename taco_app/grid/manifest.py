"""Grid manifests: a grid's definition kept beside its cells, in OUT/grid.yaml.

A grid is what one or more `taco experiment` runs asked for. Each run is a cross product
(algorithms x sizes x seeds) under one set of *settings*: domain, test tasks, held-out
demonstrations, expert, test lengths, config, --set overrides, protocol and split. `taco experiment`
records its run in OUT/grid.yaml before it computes anything (an interrupted grid still knows
its definition); `taco experiment --rerun OUT` runs the recorded definition again, computing
only the cells not finished there. Runs with the same settings that differ in one axis are
merged (a grid grown seed by seed is one run), so the manifest reads as the grid's definition,
not as a log of the commands that built it.

The command blocks of the READMEs are generated from it: a block between
`<!-- commands: results/GRID -->` and `<!-- end of commands -->` is rewritten by
`python -m taco_app.report FILE` (taco_app.report.fill_tables), and tests/test_results.py
checks every committed block. Format and fields: spec/evaluation.md §6.
"""
import os
import re
import shlex
from typing import List

import yaml

from taco_app.grid import Run

MANIFEST = "grid.yaml"

AXES = ("algos", "sizes", "seeds")
"""A run's axes: its cells are every (algorithm, size, seed) of their product."""

SETTINGS = ("domain", "n_tasks", "n_align", "expert", "test_lengths", "config", "set", "protocol", "split",
            "tests")
"""What a run's cells share besides the axes: the arguments of `taco experiment` they were
given (None: left out, the command's default). split and tests are written only when given (a
manifest from before they existed reads as it did)."""
OPTIONAL = ("split", "tests")
"""Settings left out of grid.yaml at None."""

FIELDS = ("domain",) + AXES + SETTINGS[1:]

HEADER = ("# The grid's definition, written by `taco experiment` (taco_app.grid.manifest). Each run is a\n"
          "# product algos x sizes x seeds under its settings; `taco experiment --rerun DIR`\n"
          "# runs them again, computing only the cells not finished in DIR.\n")


class ManifestError(ValueError):
    """A grid.yaml that is not a grid's definition: names the file, the run and the field."""


MAX_MANIFEST_BYTES = 2 ** 20
"""Largest grid.yaml read (1 MiB; the committed ones are under 2 kB)."""
MAX_AXIS = 1000
"""Most sizes or seeds one run lists."""
MAX_CELLS = 10_000
"""Most cells one run defines (algorithms x sizes x seeds): a grid of the paper's scale has a few
hundred; a manifest asking for more is a mistake, refused before any cell is built."""


def run_of(args):
    """The run `taco experiment`'s parsed arguments define (a dict of FIELDS; the axes without
    repeats, in the order given)."""
    run = {name: getattr(args, name) for name in FIELDS}
    for axis in AXES:
        run[axis] = _unique(run[axis])
    run["set"] = list(run["set"] or [])
    run["test_lengths"] = None if run["test_lengths"] is None else list(run["test_lengths"])
    run["tests"] = None if run.get("tests") is None else list(run["tests"])
    return run


def _unique(values):
    return list(dict.fromkeys(values))


def canonical(run):
    """run with its axes in one order: algorithms as the registry lists them, sizes and seeds
    ascending (the same grid, the same manifest, whatever order the commands gave)."""
    from taco_ref import algorithms
    order = {name: i for i, name in enumerate(algorithms.names())}
    run = dict(run, **{name: run.get(name) for name in OPTIONAL})
    return dict(run, algos=sorted(_unique(run["algos"]), key=lambda a: order.get(a, len(order))),
                sizes=sorted(_unique(run["sizes"])), seeds=sorted(_unique(run["seeds"])))


def merge(runs):
    """runs with every two of the same settings that differ in at most one axis joined into one
    (that axis the union), and a run whose cells another run of the same settings holds (every
    axis a subset: a part of the grid run again) dropped, until no two can be; each canonical,
    their order kept otherwise."""
    runs = [canonical(r) for r in runs]
    joined = True
    while joined:
        joined = False
        for i in range(len(runs)):
            for j in range(i + 1, len(runs)):
                a, b = runs[i], runs[j]
                if any(a[k] != b[k] for k in SETTINGS):
                    continue
                differ = [k for k in AXES if set(a[k]) != set(b[k])]
                a_holds_b = all(set(b[k]) <= set(a[k]) for k in AXES)
                if a_holds_b or all(set(a[k]) <= set(b[k]) for k in AXES):
                    runs[i] = a if a_holds_b else b
                    del runs[j]
                    joined = True
                    break
                if len(differ) <= 1:
                    runs[i] = canonical({**a, **{k: a[k] + b[k] for k in differ}})
                    del runs[j]
                    joined = True
                    break
            if joined:
                break
    return runs


def path(grid_dir):
    return os.path.join(grid_dir, MANIFEST)


def load(grid_dir) -> List[Run]:
    """The runs of grid_dir/grid.yaml, checked (ManifestError naming the file, run and field)."""
    from taco_app.config import safe_yaml
    where = path(grid_dir)
    if os.path.islink(where) and not os.path.exists(where):
        raise ManifestError(f"{where}: a symbolic link to nothing (or a loop of links)")
    if not os.path.exists(where):
        raise ManifestError(f"{where} does not exist (a grid's folder holds the grid.yaml that "
                            f"`taco experiment --out` writes there)")
    doc = safe_yaml(where, MAX_MANIFEST_BYTES, ManifestError, "a grid manifest")
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list) or not doc["runs"]:
        raise ManifestError(f"{where}: expected a mapping with a non-empty list 'runs'")
    return [_checked(run, f"{where}: runs[{i}]") for i, run in enumerate(doc["runs"])]


def _checked(run, where):
    import taco_sim
    from taco_sim.domain import MAX_COLLECT
    from taco_ref import algorithms
    from taco_ref.config import PROTOCOLS
    from taco_ref.evaluate import MAX_TASKS, SPLITS
    if not isinstance(run, dict):
        raise ManifestError(f"{where}: expected a mapping of {', '.join(FIELDS)}")
    unknown = sorted(map(str, set(run) - set(FIELDS)))
    if unknown:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(unknown)}; a run has {', '.join(FIELDS)}")
    missing = [name for name in FIELDS if name not in run and name not in OPTIONAL]
    if missing:        # a truncated file: a run without `set` would run other cells than it names
        raise ManifestError(f"{where}: missing field(s) {', '.join(missing)} (a truncated grid.yaml?); "
                            f"every run names {', '.join(n for n in FIELDS if n not in OPTIONAL)}")
    run = {name: run.get(name) for name in FIELDS}

    def need(ok, name, expected):
        if not ok:
            raise ManifestError(f"{where}.{name}: expected {expected}, got {run[name]!r}")

    def ints(name, least, most=2 ** 31 - 1):
        v = run[name]
        return (isinstance(v, list) and v and len(v) <= MAX_AXIS
                and all(type(x) is int and least <= x <= most for x in v))
    need(run["domain"] in taco_sim.names(), "domain", f"one of {', '.join(taco_sim.names())}")
    need(isinstance(run["algos"], list) and run["algos"] and all(a in algorithms.names() for a in run["algos"]),
         "algos", f"a non-empty list of {', '.join(algorithms.names())}")
    need(ints("sizes", 1, MAX_COLLECT), "sizes", f"a non-empty list of at most {MAX_AXIS} integers in [1, {MAX_COLLECT}]")
    need(ints("seeds", 0), "seeds", f"a non-empty list of at most {MAX_AXIS} integers in [0, 2**31 - 1]")
    need(type(run["n_tasks"]) is int and 1 <= run["n_tasks"] <= MAX_TASKS, "n_tasks",
         f"an integer in [1, {MAX_TASKS}]")
    need(type(run["n_align"]) is int and 1 <= run["n_align"] <= MAX_COLLECT, "n_align",
         f"an integer in [1, {MAX_COLLECT}]")
    need(run["test_lengths"] is None or ints("test_lengths", 1), "test_lengths",
         "null or a non-empty list of positive integers")
    for name in ("expert", "config"):
        need(run[name] is None or isinstance(run[name], str), name, "null or a string")
    run["set"] = [] if run["set"] is None else run["set"]
    need(isinstance(run["set"], list) and all(isinstance(s, str) and "=" in s for s in run["set"]),
         "set", "a list of KEY=VALUE strings")
    need(run["protocol"] is None or run["protocol"] in PROTOCOLS, "protocol",
         f"null or one of {', '.join(sorted(PROTOCOLS))}")
    need(run["split"] is None or run["split"] in SPLITS, "split", f"null or one of {', '.join(SPLITS)}")
    need(run["tests"] is None or (isinstance(run["tests"], list) and run["tests"]
                                  and all(t in taco_sim.get(run["domain"]).tests for t in run["tests"])),
         "tests", f"null or a non-empty list of {run['domain']}'s test conditions "
                  f"({', '.join(sorted(taco_sim.get(run['domain']).tests)) or 'it has none'})")
    cells = len(run["algos"]) * len(run["sizes"]) * len(run["seeds"])
    if cells > MAX_CELLS:
        raise ManifestError(f"{where}: {cells} cells (algos x sizes x seeds); at most {MAX_CELLS} a run")
    return run


def record(grid_dir, runs: List[Run]) -> List[Run]:
    """Add runs to grid_dir/grid.yaml (created when missing), merged with the runs there; the
    file is rewritten atomically, and not at all when it would not change. Returns the runs."""
    from taco_ref.plumbing import files
    earlier = load(grid_dir) if os.path.exists(path(grid_dir)) else []
    merged = merge(earlier + [dict(r) for r in runs])
    if merged != earlier:
        os.makedirs(grid_dir, exist_ok=True)
        files.write_bytes(path(grid_dir), dump(merged).encode())
    return merged


def dump(runs):
    """grid.yaml's text: HEADER and the runs, fields in FIELDS order, lists in flow style."""
    lines = [HEADER.rstrip("\n"), "runs:"]
    for run in runs:
        for i, name in enumerate(f for f in FIELDS if f not in OPTIONAL or run.get(f) is not None):
            value = yaml.safe_dump(run[name], default_flow_style=True, width=10_000).strip()
            value = value.removesuffix("\n...")      # the end-of-document mark after a scalar
            lines.append(f"{'  - ' if i == 0 else '    '}{name}: {value}")
    return "\n".join(lines) + "\n"


def argv(run, out):
    """`taco experiment`'s arguments (without the command's name) that give run into out."""
    args = [run["domain"], "--sizes", *map(str, run["sizes"]), "--seeds", *map(str, run["seeds"]),
            "--algos", *run["algos"], "--n-tasks", str(run["n_tasks"])]
    if run["n_align"] != 100:
        args += ["--n-align", str(run["n_align"])]
    if run["expert"] is not None:
        args += ["--expert", run["expert"]]
    if run["test_lengths"] is not None:
        args += ["--test-lengths", *map(str, run["test_lengths"])]
    if run["config"] is not None:
        args += ["--config", run["config"]]
    for setting in run["set"]:
        args += ["--set", setting]
    if run["protocol"] is not None:
        args += ["--protocol", run["protocol"]]
    if run.get("split") is not None:
        args += ["--split", run["split"]]
    if run.get("tests") is not None:
        args += ["--tests", *run["tests"]]
    return args + ["--out", out]


def commands(grid_dir, name):
    """The lines of a grid's command block: `taco experiment --rerun NAME`, then each run as
    its own command (name: the grid's folder as the reader types it, e.g. results/dial)."""
    return ([f"taco experiment --rerun {name}", "# which runs, run by run:"]
            + ["taco experiment " + shlex.join(argv(run, name)) for run in load(grid_dir)])


BLOCK = re.compile(r"(<!-- commands: (\S+)( rerun)? -->\n)(.*?)(<!-- end of commands -->)", re.S)
"""A generated command block in a markdown file: `<!-- commands: results/GRID -->` (or
`<!-- commands: results/GRID rerun -->`: the --rerun line alone), a fenced block,
`<!-- end of commands -->`."""


def locate(root, name):
    """The folder of grid name (results/GRID, as typed from the repository root) seen from
    root or the nearest folder above it that holds name/grid.yaml (a grid's own README fills
    its block from its folder); ManifestError when none does."""
    here = os.path.abspath(root)
    while True:
        if os.path.exists(path(os.path.join(here, name))):
            return os.path.join(here, name)
        parent = os.path.dirname(here)
        if parent == here:
            raise ManifestError(f"<!-- commands: {name} -->: no {name}/{MANIFEST} in {root} or above")
        here = parent


def fill_commands(text, root="."):
    """text with every marked command block rewritten from GRID/grid.yaml (found by locate)."""
    def fill(match):
        name = match.group(2)
        lines = commands(locate(root, name), name)
        if match.group(3):
            lines = lines[:1]
        return match.group(1) + "```\n" + "\n".join(lines) + "\n```\n" + match.group(5)
    return BLOCK.sub(fill, text)


INDEX = "index.yaml"
SECTIONS = (("current", "Headline: equal budgets under today's recipe",
             "README.md's tables and docs/claims.md's first rows come from these: every method compared gets "
             "the same epochs, gradient steps and pre-stage (spec/evaluation.md §7)."),
            ("baselines", "Before equal budgets: every method of the paper",
             "TACO alone had the 5-epoch pre-stage here, CTC-BC none (as under the paper protocol): docs/claims.md "
             "reads their CTC-BC cells and marks their TACO-against-GT-BC rows as ablations."),
            ("studies", "Ablations, studies and the selection log",
             "Cited by the spec, docs/ and the grids' own READMEs; results/selection holds every setting "
             "chosen on validation tasks (spec/selection.md)."),
            ("archive", "Superseded (results/archive)",
             "Kept for the comparisons their READMEs and docs/findings.md draw; each names what replaced it."))


def index_entries(results_dir):
    """results_dir/index.yaml's entries by section, checked: every folder of results_dir (and
    of its archive/) listed exactly once, no entry without its folder, an archived one naming
    the grid that replaced it (ManifestError naming the entry otherwise)."""
    where = os.path.join(results_dir, INDEX)
    with open(where, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or set(doc) != {name for name, _, _ in SECTIONS}:
        raise ManifestError(f"{where}: expected the sections {', '.join(n for n, _, _ in SECTIONS)}")
    folders = {d for d in os.listdir(results_dir) if os.path.isdir(os.path.join(results_dir, d)) and d != "archive"}
    archive = os.path.join(results_dir, "archive")
    folders |= {f"archive/{d}" for d in os.listdir(archive) if os.path.isdir(os.path.join(archive, d))}
    listed = [e.get("grid") for entries in doc.values() for e in entries]
    missing, unknown = sorted(folders - set(listed)), sorted(set(listed) - folders)
    twice = sorted({g for g in listed if listed.count(g) > 1})
    if missing or unknown or twice:
        raise ManifestError(f"{where}: " + "; ".join(
            part for part in (missing and f"folders not listed: {', '.join(missing)}",
                              unknown and f"entries without a folder: {', '.join(map(str, unknown))}",
                              twice and f"listed twice: {', '.join(twice)}") if part))
    for section, entries in doc.items():
        for e in entries:
            archived = e["grid"].startswith("archive/")
            if archived != (section == "archive"):
                raise ManifestError(f"{where}: {e['grid']}: a folder under archive/ is listed in 'archive', "
                                    f"and only those")
            if archived and e.get("replaced_by") not in listed:
                raise ManifestError(f"{where}: {e['grid']}.replaced_by: expected a listed folder, "
                                    f"got {e.get('replaced_by')!r}")
            if not (e.get("about") or e.get("why")):
                raise ManifestError(f"{where}: {e['grid']}: a line saying what it is ('about', or 'why' when archived)")
    return doc


def _definition(grid_dir):
    """A grid's cells and definition in a few words, from its cells and grid.yaml ('' if none)."""
    if not os.path.exists(path(grid_dir)):
        return "", ""
    from taco_app.grid import store as cells
    from taco_ref import algorithms
    runs = load(grid_dir)
    n = len(cells.load_cells(grid_dir))

    def span(values):
        run = len(values) >= 3 and values == list(range(values[0], values[-1] + 1))
        return f"{values[0]}-{values[-1]}" if run else ", ".join(map(str, values))
    parts = [f"{', '.join(algorithms.label(a) for a in r['algos'])} × {span(r['sizes'])} × "
             f"seed{'s' if len(r['seeds']) > 1 else ''} {span(r['seeds'])}" for r in runs]
    return str(n), "; ".join(parts)


def index_page(results_dir):
    """results/README.md: the index of the grids, from index.yaml and each grid's own files."""
    doc = index_entries(results_dir)
    lines = ["# results/: the committed grids", "",
             "<!-- generated by `python -m taco_app.grid.manifest results` from results/index.yaml and each grid's "
             "grid.yaml and cells; edit those -->", "",
             "Each folder is one grid: its cells (`cells/`, one JSON per algorithm x size x seed, with the config, "
             "data, figures and cost), its definition (`grid.yaml`: `taco experiment --rerun results/GRID` computes "
             "what is missing, `--out DIR` all of it afresh), its tables (`results.md`, `taco report results/GRID`) "
             "and a README with its command, cost and findings."]
    for section, title, note in SECTIONS:
        lines += ["", f"## {title}", "", note, ""]
        if section == "archive":
            lines += ["| folder | replaced by | why | cells |", "|---|---|---|---:|"]
        else:
            lines += ["| folder | paper | what it is | cells | algorithms × sizes × seeds |", "|---|---|---|---:|---|"]
        for e in doc[section]:
            grid = e["grid"]
            n, definition = _definition(os.path.join(results_dir, grid))
            link = f"[{grid}]({grid}/README.md)"
            unpaired = f" **Unpaired**: {e['unpaired']['why']}." if e.get("unpaired") else ""
            if section == "archive":
                repl = e["replaced_by"]
                lines.append(f"| {link} | [{repl}]({repl}/README.md) | {e['why']}{unpaired} | {n} |")
            else:
                lines.append(f"| {link} | {e.get('paper', '')} | {e['about']}{unpaired} | {n} | {definition} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    """python -m taco_app.grid.manifest RESULTS: write RESULTS/README.md, the index of the grids."""
    import sys
    from taco_ref.plumbing import files
    for results_dir in (argv if argv is not None else sys.argv[1:]) or ["results"]:
        files.write_bytes(os.path.join(results_dir, "README.md"), index_page(results_dir).encode())
        print(f"wrote {os.path.join(results_dir, 'README.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

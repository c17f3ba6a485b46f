"""Every registered algorithm (taco_ref.algorithms) meets the registry's contract.

Parameterised over taco_ref.algorithms.names(), so an algorithm added to the package is checked
without editing this file: it declares a label and stages whose parameters exist; a short
Nav-World run trains every stage, is deterministic, saves and loads (its own nets' shapes
checked on load) and aligns; its config section's fields are documented and only its own; the
applications list it by its label.
"""
import ast
import inspect
from dataclasses import fields

import numpy as np
import pytest

from taco_ref import algorithms, config as config_mod, evaluate, model as model_mod, train
from taco_app import paper, report
from taco_sim import navworld

ALGOS = algorithms.names()


@pytest.fixture(scope="module")
def demos():
    return navworld.collect(24, 2, seed=5), navworld.collect(8, 2, seed=6)


def small(algo, **kw):
    return train.TrainConfig.from_dict(dict(dict(algo=algo, act_hidden=[6], stop_hidden=[6], ctc_hidden=[6],
                                                 compile_hidden=[6], epochs=2, patience=5, warmup_epochs=1,
                                                 batch_size=8), **kw))


def test_registry_holds_the_papers_algorithms_and_compile():
    assert set(ALGOS) >= {"taco", "gtbc", "ctcbc-mlp", "ctcbc-gru", "compile"}
    assert ALGOS[:4] == ("taco", "gtbc", "ctcbc-mlp", "ctcbc-gru")     # the paper's order in tables
    with pytest.raises(ValueError, match="algo must be one of"):
        algorithms.get("nope")


@pytest.mark.parametrize("algo", ALGOS)
def test_declaration(algo):
    """Name, label, stages with distinct names whose parameter prefixes the job holds."""
    a = algorithms.get(algo)
    assert a.name == algo and isinstance(a.label, str) and a.label.strip()
    stages = a.stages(small(algo))
    assert stages and len({s.name for s in stages}) == len(stages)
    assert sum(s.policy for s in stages) == 1, "exactly one stage trains the sub-policies for good"
    for domain, figures in paper.ALIGNMENT.get(algo, {}).items():
        assert len(figures) == 2 and all(0 <= f <= 100 for f in figures), domain


@pytest.mark.parametrize("algo", [a for a in ALGOS if algorithms.get(a).section is not None])
def test_config_section_is_documented_and_its_own(algo):
    """Every field of an algorithm's section has a docstring under it, no other section or the
    shared config has a field of that name, and the section validates its own fields."""
    section = algorithms.get(algo).section
    tree = ast.parse(inspect.getsource(section))
    body = tree.body[0].body
    documented = {node.target.id for node, after in zip(body, body[1:] + [None])
                  if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}
    mine = {f.name for f in fields(section)}
    assert mine <= documented, f"undocumented: {mine - documented}"
    others = {f.name for s in algorithms.sections() if s is not section for f in fields(s)}
    assert not mine & others and not mine & {f.name for f in fields(config_mod.SharedConfig)}
    assert set(config_mod.fields_read_by(algo)) >= mine
    assert callable(getattr(section, "check", None))


@pytest.mark.parametrize("algo", ALGOS)
def test_trains_every_stage_saves_loads_and_aligns(algo, demos, tmp_path):
    """A two-epoch run per stage: every stage in the history, the same parameters from the same
    seed, a model directory that loads, and an alignment accuracy per decoder (plus the
    algorithm's own) in [0, 1]."""
    train_set, held = demos
    cfg = small(algo)
    a = train.train(train_set, cfg, out_dir=str(tmp_path / "run"), progress=False)
    b = train.train(train_set, cfg, progress=False)
    assert [h["stage"] for h in a.info["history"]] == [s.name for s in algorithms.get(algo).stages(cfg)
                                                       for _ in range(2 if s.name != "warmup" else 1)]
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k], err_msg=k)
    loaded = model_mod.load(str(tmp_path / "run" / "model"))
    assert loaded.algo == algo and loaded.ctc_kind == algorithms.get(algo).ctc_kind
    acc = evaluate.alignment_accuracy(loaded, held)
    assert set(acc) == set(evaluate.DECODERS) | set(algorithms.get(algo).extra_alignments)
    assert all(0.0 <= v <= 1.0 for v in acc.values())


@pytest.mark.parametrize("algo", ALGOS)
def test_applications_read_the_registry(algo):
    """The experiment tables and the command line list every algorithm by its registered label."""
    assert algo in report.ALGOS and report.LABELS[algo] == algorithms.get(algo).label
    row = dict(domain="navworld", algo=algo, size=10, seed=0, task_accuracy=0.5, subtask_accuracy=0.5,
               **{f"align_{d}": 0.5 for d in evaluate.DECODERS})
    assert f"| {algorithms.get(algo).label} | 10 |" in report.table([row])

"""taco_app/analysis/dial_variance.py: the factors chosen are the factors measured (and trained), an existing
model is taken as the base run only with the base run's settings and data, and every model
decides over the config's views, as `taco evaluate` does."""
import json
import os

import pytest

from taco_ref import evaluate
from taco_app.analysis import dial_variance

TINY = ["act_hidden=[8]", "stop_hidden=[8]", "epochs=1", "patience=1", "views=2"]


def run(module, out, *extra, sets=TINY):
    return module.main(["--size", "10", "--levels", "2", "--n-tasks", "2", "--set", *sets,
                        "--out", str(out), *extra])


@pytest.mark.slow
def test_chosen_factors_a_checked_base_model_and_views(tmp_path, monkeypatch):
    module = dial_variance
    views_seen = []
    task_accuracy = evaluate.task_accuracy

    def spy(*args, views=None, **kwargs):
        views_seen.append(views)
        return task_accuracy(*args, views=views, **kwargs)

    monkeypatch.setattr(module.evaluate, "task_accuracy", spy)
    assert run(module, tmp_path / "a", "--factors", "test PIN set") == 0
    report = json.loads((tmp_path / "a" / "variance.json").read_text())
    assert list(report["factors"]) == ["test PIN set"]
    assert len(report["factors"]["test PIN set"]["task_accuracy"]) == 2
    assert sorted(os.listdir(tmp_path / "a" / "models")) == ["seed0"]      # nothing else trained
    assert len(views_seen) == 2 and all(callable(v) for v in views_seen)  # views = 2, not the state alone

    base = str(tmp_path / "a" / "models" / "seed0")
    assert run(module, tmp_path / "b", "--base", base, "--factors", "rollout's own noise") == 0
    assert not os.path.exists(tmp_path / "b" / "models")                   # the base was not retrained
    again = json.loads((tmp_path / "b" / "variance.json").read_text())
    assert again["factors"]["rollout's own noise"]["task_accuracy"][0] == report["factors"]["test PIN set"]["task_accuracy"][0]

    with pytest.raises(ValueError, match=r"^--base .*epochs=1 \(base: 2\)"):
        run(module, tmp_path / "c", "--base", base, "--factors", "test PIN set",
            sets=[s if s != "epochs=1" else "epochs=2" for s in TINY])
    with pytest.raises(SystemExit):
        run(module, tmp_path / "d", "--factors", "no such factor")

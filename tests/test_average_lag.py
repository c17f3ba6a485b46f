"""taco_app/analysis/average_lag.py: on a run `train` made with averaged parameters, the
average's held-out loss is the run's last recorded one, the last iterate is the last optimiser
step's parameters (a model `taco evaluate` can load), and a run without an average is refused
by name."""
import json

import numpy as np
import pytest

from taco_app.analysis import average_lag
from taco_ref import data, model as model_mod, optim, train
from taco_ref.config import TrainConfig
from taco_sim import navworld


@pytest.fixture(scope="module")
def nav():
    return navworld.collect(24, 2, seed=7)


def small(**kw):
    return TrainConfig.from_dict(dict(dict(act_hidden=[16], stop_hidden=[16], epochs=3, patience=10,
                                           batch_size=8, warmup_epochs=0, dtype="float64"), **kw))


def test_the_average_and_the_last_iterate_of_a_finished_run(nav, tmp_path, monkeypatch, capsys):
    steps = []
    step = optim.Adam.step

    def recording_step(self, params, grads):
        step(self, params, grads)
        steps.append({k: params[k].copy() for k in self.m})

    monkeypatch.setattr(optim.Adam, "step", recording_step)
    run_dir = tmp_path / "run"
    kept = train.train(nav, small(ema=0.8), out_dir=str(run_dir), progress=False)
    monkeypatch.undo()
    figures = average_lag.measure(str(run_dir), nav)
    assert figures["held_out_average"] == pytest.approx(figures["recorded"], rel=1e-9)
    assert figures["beta"] == 0.8 and figures["epochs"] == 3 and figures["steps"] == len(steps)
    assert figures["held_out_last_iterate"] != pytest.approx(figures["held_out_average"])
    out = tmp_path / "last"
    assert average_lag.main(["--run", str(run_dir), "--data", _saved(nav, tmp_path), "--model-out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["held_out_average"] == pytest.approx(figures["recorded"], rel=1e-9)
    last = model_mod.load(str(out))
    for k, v in steps[-1].items():
        np.testing.assert_array_equal(last.params[k], v, err_msg=k)
        assert not np.allclose(kept.params[k], v), k       # the kept average is not the last step


def test_a_run_without_an_average_or_on_other_data_is_refused(nav, tmp_path):
    run_dir = tmp_path / "plain"
    train.train(nav, small(epochs=2), out_dir=str(run_dir), progress=False)
    with pytest.raises(ValueError, match="kept no average"):
        average_lag.measure(str(run_dir), nav)
    averaged = tmp_path / "averaged"
    train.train(nav, small(epochs=2, ema_epochs=1.0), out_dir=str(averaged), progress=False)
    with pytest.raises(ValueError, match="--data: not the data the run"):
        average_lag.measure(str(averaged), navworld.collect(24, 2, seed=8))


def _saved(demos, tmp_path):
    path = str(tmp_path / "demos.npz")
    data.save(demos, path)
    return path

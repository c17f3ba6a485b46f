"""Tests for taco_ref/train.py and taco_ref/optim.py (spec/training.md).

(a) end to end on Nav-World (paper Sec. 5.1): TACO learns sub-policies that align held-out
    demonstrations, GT-BC too, CTC-BC (MLP) runs both stages; thresholds and the measurements
    behind them are in each test's docstring;
(b) determinism (same seed => identical parameters and history) and exact resume: a run
    interrupted with stop_after and continued with resume=True ends with the parameters and
    history of an uninterrupted run (TACO; CTC-BC across its stage transition); resume refuses
    another config or other data;
(c) configuration: TrainConfig validation (the YAML reader: tests/test_config.py);
    the STOP-dropout schedule as the trainer applies it; Adam's update and its state round trip;
(d) dtype float32: nets, gradients and Adam state in float32 during training, the model saved
    and loaded as float64, exact resume, a checkpoint of the wrong dtype refused; Adam's
    buffered update equal to the formula; the allocator setting that lets a step reuse the
    previous step's freed arrays.

Runs are kept small (hidden sizes 8-32, a few epochs) so that the file runs in seconds.
"""
import contextlib
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from taco_ref import data, evaluate, model as model_mod, nn, objectives, optim, policy, train
from taco_ref.plumbing import checkpoints, files
from taco_app import config as config_mod
from taco_ref.train import TrainConfig
from taco_ref.algorithms import taco as taco_algo
import taco_sim
from taco_sim import navworld

# float64 nets: several tests compare against float64 arithmetic at rtol 1e-12
SMALL = dict(act_hidden=[8], stop_hidden=[8], ctc_hidden=[8], epochs=3, patience=100,
             batch_size=10, stop_dropout=0.3, warmup_epochs=1, dtype="float64")


@pytest.fixture(scope="module")
def nav150():
    """150 training demonstrations (sketches of length 3) and 40 held-out ones."""
    return navworld.collect(150, 3, seed=3), navworld.collect(40, 3, seed=1003)


@pytest.fixture(scope="module")
def nav_small():
    return navworld.collect(30, 2, seed=5)


def config(**kw):
    return TrainConfig.from_dict(dict(SMALL, **kw))


def assert_same_params(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def assert_resumes_to(plain, demos, cfg, out_dir):
    """A run of cfg stopped after one epoch in out_dir, then resumed, ends with plain's parameters."""
    assert train.train(demos, cfg, out_dir=out_dir, progress=False, stop_after=1) is None
    resumed = train.train(demos, cfg, out_dir=out_dir, resume=True, progress=False)
    assert_same_params(resumed.params, plain.params)


# ----------------------------------------------------------------------------------------------
# (a) End to end on Nav-World
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow        # a training run
def test_taco_learns_to_align_navworld(nav150):
    """Plain TACO (warmup_epochs 0), 150 demonstrations, 20 epochs, action and STOP nets [32],
    STOP dropout 0.3. (The warm-up of the default recipe has its own tests below.)

    Thresholds: held-out NLL below 2.05 nats per step and forward-argmax alignment accuracy
    above 0.85 on 40 held-out demonstrations. Measured with this configuration on data/training
    seeds 0-4 (and with terminal_stop, tanh, or [64] x 30 epochs): NLL 1.92-2.00 and alignment
    0.858-0.994 (TACO sometimes keeps a sub-policy active a few steps too long: 0.86-0.92 on
    about one seed in three; this seed, 3, gives ~0.985). For comparison the untrained policy
    scores NLL 3.3-4.7 and alignment 0.35-0.45, an even split of each demonstration into L
    segments 0.81-0.83, and the Gaussian's own floor (sigma = 1, A = 2) is 1.84 nats per step.
    """
    demos, test = nav150
    cfg = TrainConfig.from_dict(dict(algo="taco", act_hidden=[32], stop_hidden=[32], epochs=20,
                                     patience=100, stop_dropout=0.3, seed=3, warmup_epochs=0))
    model = train.train(demos, cfg, progress=False)
    nll = -evaluate.mean_loglik_per_step(model, test)
    acc = evaluate.alignment_accuracy(model, test)
    assert nll < 2.05, nll
    assert acc["forward_argmax"] > 0.85, acc
    history = model.info["history"]
    assert [h["epoch"] for h in history] == list(range(1, 21))
    assert history[-1]["held_out_loss"] < history[0]["held_out_loss"]
    assert model.info["train_size"] + model.info["held_out_size"] == demos.n == 150
    assert model.vocab == navworld.VOCAB and model.algo == "taco" and model.ctc_kind is None


@pytest.mark.slow        # a training run
def test_gtbc_aligns_navworld(nav150):
    """GT-BC, 10 epochs, nets [32]: forward-argmax alignment above 0.95 on 40 held-out
    demonstrations. Measured on seeds 0-4: 0.973-0.979 (posterior argmax and Viterbi 0.992-1.0)."""
    demos, test = nav150
    cfg = TrainConfig.from_dict(dict(algo="gtbc", act_hidden=[32], stop_hidden=[32], epochs=10,
                                     patience=100, stop_dropout=0.3, seed=3))
    model = train.train(demos, cfg, progress=False)
    acc = evaluate.alignment_accuracy(model, test)
    assert acc["forward_argmax"] > 0.95, acc
    assert -evaluate.mean_loglik_per_step(model, test) < 2.1


def test_ctcbc_mlp_runs_both_stages(nav150):
    """CTC-BC (MLP) on 80 demonstrations, 5 epochs per stage: the classifier stage runs first and
    its best held-out CTC loss is below its first (here 0.65 -> 0.51 nats per step; with 150
    demonstrations, seeds 0-4: 0.36-0.73 after one epoch, 0.05-0.39 after ten), then the policy
    stage trains on its alignment; alignments come from the classifier."""
    demos, test = nav150
    cfg = TrainConfig.from_dict(dict(algo="ctcbc-mlp", act_hidden=[16], stop_hidden=[16],
                                     ctc_hidden=[32], epochs=5, patience=100, seed=3))
    model = train.train(demos.subset(np.arange(80)), cfg, progress=False)
    stages = [h["stage"] for h in model.info["history"]]
    assert stages == ["ctc"] * 5 + ["policy"] * 5
    ctc_losses = [h["held_out_loss"] for h in model.info["history"][:5]]
    assert min(ctc_losses) < ctc_losses[0]
    assert all(np.isfinite(h["held_out_loss"]) for h in model.info["history"])
    assert model.ctc_kind == "mlp" and any(k.startswith("ctc.") for k in model.params)
    paths = evaluate.alignments(model, test, ("viterbi",))["viterbi"]
    for n in range(test.n):
        z = paths[n, :test.traj_len[n]]
        assert z[0] == 0 and z[-1] == test.sketch_len[n] - 1 and set(np.diff(z)) <= {0, 1}
    acc = evaluate.alignment_accuracy(model, test, ("forward_argmax",))["forward_argmax"]
    assert 0.0 <= acc <= 1.0


@pytest.mark.parametrize("algo, extra", [("ctcbc-gru", {}), ("ctcbc-mlp", {"ctc_weighting": "alpha"}),
                                         ("taco", {"terminal_stop": True}),
                                         ("gtbc", {"terminal_stop": True, "activation": "tanh"})])
def test_other_variants_run(nav_small, algo, extra):
    model = train.train(nav_small, config(algo=algo, epochs=2, **extra), progress=False)
    assert model.algo == algo
    assert all(np.isfinite(h["held_out_loss"]) for h in model.info["history"])
    assert all(np.isfinite(v).all() for v in model.params.values())


@pytest.mark.parametrize("algo", ["taco", "gtbc", "ctcbc-mlp"])
def test_the_recipe_protocol_gives_every_algorithm_the_same_prestage(nav_small, algo, monkeypatch):
    """Equal budgets (spec/evaluation.md §7): under prestage "all" every algorithm runs
    warmup_epochs of a pre-stage (constant rate, its last parameters handed on, never the kept
    epoch) before as many policy epochs as the others, and as many gradient steps of the
    sub-policies as TACO; under "taco" only TACO does; warmup_epochs 0 (the paper protocol)
    none."""
    steps = []
    real = optim.Adam.step

    def counted(adam, params, grads):
        steps.append(any(k.startswith(("act.", "stop.")) for k in grads))
        return real(adam, params, grads)
    monkeypatch.setattr(optim.Adam, "step", counted)

    def stages(algo, **kw):
        steps.clear()
        model = train.train(nav_small, config(**{"algo": algo, "epochs": 2, "warmup_epochs": 2, **kw}),
                            progress=False)
        return [h["stage"] for h in model.info["history"]], sum(steps)
    head = ["ctc"] * 2 if algo.startswith("ctcbc") else []
    recipe, n_steps = stages(algo, prestage="all")
    assert recipe == head + ["warmup"] * 2 + ["policy"] * 2
    assert n_steps == stages("taco", prestage="all")[1] > 0
    assert stages(algo, prestage="taco")[0] == head + (["warmup"] * 2 if algo == "taco" else []) + ["policy"] * 2
    assert stages(algo, prestage="all", warmup_epochs=0)[0] == head + ["policy"] * 2


# ----------------------------------------------------------------------------------------------
# (b) Determinism and resume
# ----------------------------------------------------------------------------------------------

def test_same_seed_gives_identical_parameters(nav_small):
    a = train.train(nav_small, config(seed=7), progress=False)
    b = train.train(nav_small, config(seed=7), progress=False)
    assert_same_params(a.params, b.params)
    assert a.info["history"] == b.info["history"]
    c = train.train(nav_small, config(seed=8), progress=False)
    assert not np.array_equal(a.params["act.W0"], c.params["act.W0"])


def test_execution_settings_leave_training_alone(nav_small):
    """views and stop_hold are read at execution only: training with other values gives the same
    parameters and history bit for bit (so a model's execution settings can be changed without
    training it again: the Dial's shipped models gained stop_hold: 2 so)."""
    a = train.train(nav_small, config(seed=7), progress=False)
    b = train.train(nav_small, config(seed=7, stop_hold=3, views=2), progress=False)
    assert_same_params(a.params, b.params)
    assert a.info["history"] == b.info["history"]


def test_normalisation_comes_from_the_training_split(nav_small):
    """Checks spec/training.md eq. (1)."""
    cfg = config(seed=2)
    model = train.train(nav_small, cfg, progress=False)
    train_set, _ = data.split(nav_small, cfg.holdout_fraction, np.random.default_rng(cfg.seed))
    mean, std = train.state_statistics(train_set)
    np.testing.assert_array_equal(model.params["norm.mean"], mean)
    np.testing.assert_array_equal(model.params["norm.std"], std)


@pytest.mark.parametrize("algo, stops", [
    ("taco", [2]),              # one interruption just after the warm-up → TACO transition
    ("ctcbc-mlp", [2, 2]),      # in the CTC stage, then just after the transition to the policy
])
def test_resume_ends_exactly_like_an_uninterrupted_run(tmp_path, nav_small, algo, stops):
    cfg = config(algo=algo, seed=4)
    full = train.train(nav_small, cfg, out_dir=tmp_path / "full", progress=False)
    out = tmp_path / "interrupted"
    assert train.train(nav_small, cfg, out_dir=out, stop_after=stops[0], progress=False) is None
    for k in stops[1:]:
        assert train.train(nav_small, cfg, out_dir=out, resume=True, stop_after=k, progress=False) is None
    meta = json.loads((out / checkpoints.CHECKPOINT_META).read_text())
    if algo == "ctcbc-mlp":
        assert meta["stage"] == 1 and meta["epoch"] == 1      # resumed across the stage boundary
    resumed = train.train(nav_small, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(resumed.params, full.params)
    assert resumed.info["history"] == full.info["history"]
    on_disk = model_mod.load(out / "model")
    assert_same_params(on_disk.params, full.params)
    assert "model" in os.listdir(out) and checkpoints.CHECKPOINT_META in os.listdir(out)
    assert not [f for f in os.listdir(out) if f.startswith(".tmp-")]      # no temporary files left
    # resuming a finished run changes nothing
    again = train.train(nav_small, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(again.params, full.params)
    assert again.info["history"] == full.info["history"]


@pytest.mark.parametrize("where", ["held_out", "params"])
def test_divergence_is_seen_in_either_loss_and_in_the_parameters(nav_small, monkeypatch, where):
    """A NaN held-out loss next to a finite training loss (max() passed over it), or a
    non-finite parameter, stops the run with DivergedError and no NumPy warning escapes."""
    import warnings
    if where == "held_out":
        monkeypatch.setattr(train, "mean_loss", lambda *args, **kwargs: float("nan"))
    else:
        real = optim.Adam.step

        def poisoned(self, params, grads):
            real(self, params, grads)
            next(iter(params.values())).flat[0] = np.inf
        monkeypatch.setattr(optim.Adam, "step", poisoned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(train.DivergedError, match="nan" if where == "held_out" else "non-finite|inf|nan"):
            train.train(nav_small, config(epochs=3), progress=False)


def test_resume_refuses_a_different_config(tmp_path, nav_small):
    train.train(nav_small, config(seed=1), out_dir=tmp_path, stop_after=1, progress=False)
    with pytest.raises(ValueError, match=r"different config \(differs in \['lr'\]\)"):
        train.train(nav_small, config(seed=1, lr=1e-2), out_dir=tmp_path, resume=True, progress=False)


@pytest.mark.slow
def test_resume_compares_the_config_where_the_run_reads_it(tmp_path, nav_small):
    """spec/training.md §8: a checkpoint written before a field existed resumes while the field
    holds its value from before (its metadata "before"), and not at another; a field of another
    algorithm's section may differ, and so may one that cannot change the run
    (config.inert_fields); a recorded field this config does not know stops it."""
    cfg = config(seed=1, algo="ctcbc-mlp")
    train.train(nav_small, cfg, out_dir=tmp_path / "full", progress=False)
    out = tmp_path / "run"
    train.train(nav_small, cfg, out_dir=out, stop_after=1, progress=False)
    meta_path = out / checkpoints.CHECKPOINT_META
    meta = json.loads(meta_path.read_text())
    del meta["config"]["prestage"]                         # written before the field existed
    meta["config"]["warmup_epochs"] += 1                   # no pre-stage runs: ctcbc-mlp never reads it
    meta["config"]["temperature"] = 2.0                    # TACO's section: ctcbc-mlp never reads it
    meta["config"]["ctc_core_dtype"] = "float32"           # no conv core: it cannot change the run
    meta_path.write_text(json.dumps(meta))
    assert checkpoints.config_changes(meta["config"], cfg) == []
    assert checkpoints.config_changes(meta["config"], config(seed=1, algo="ctcbc-mlp", prestage="all")) \
        == ["prestage", "warmup_epochs"]
    assert checkpoints.config_changes(dict(meta["config"], retired=1), cfg) == ["retired"]
    assert checkpoints.config_changes(dict(meta["config"], lr=1.0), cfg) == ["lr"]
    with pytest.raises(ValueError, match=r"differs in \['prestage', 'warmup_epochs'\]"):
        train.train(nav_small, config(seed=1, algo="ctcbc-mlp", prestage="all"), out_dir=out,
                    resume=True, progress=False)
    resumed = train.train(nav_small, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(resumed.params, train.train(nav_small, cfg, progress=False).params)


def test_resume_refuses_different_data(tmp_path, nav_small):
    train.train(nav_small, config(seed=1), out_dir=tmp_path, stop_after=1, progress=False)
    other = nav_small.subset(np.arange(nav_small.n - 1))
    with pytest.raises(ValueError, match="different data"):
        train.train(other, config(seed=1), out_dir=tmp_path, resume=True, progress=False)


def test_resume_without_a_checkpoint(tmp_path, nav_small):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train.train(nav_small, config(), out_dir=tmp_path, resume=True, progress=False)


# ----------------------------------------------------------------------------------------------
# (c) Configuration
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [
    ("algo", "ppo"), ("batch_size", 0), ("epochs", 2.5), ("patience", -1), ("holdout_fraction", 1.0),
    ("stop_dropout", 1.0), ("stop_dropout", -0.1), ("dropout_decay", 1.5), ("ctc_weighting", "soft"),
    ("ctc_decoder", "beam"), ("warmup_epochs", -1), ("temperature", 0.5), ("temperature", float("inf")),
    ("temperature_epochs", 200), ("temperature_epochs", -1), ("restarts", 0), ("restarts", 1.5),
    ("dtype", "float16"), ("dtype", 32), ("act_l2", -1e-3), ("stop_l2", float("inf")), ("act_l2", "x"), ("lr_decay", "linear"),
    ("epoch_size", -1), ("epoch_size", 2.5), ("epoch_size", True), ("views", 0), ("views", 257), ("views", 1.5),
    ("taco_targets", "hard"), ("ctc_core_dtype", "float16"), ("ctc_core_dtype", 64),
])
def test_train_config_rejects_bad_values_naming_the_field(key, value):
    with pytest.raises(ValueError, match=f"^{key} must"):
        TrainConfig.from_dict({key: value})


def test_train_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown config keys \['hidden', 'lerning_rate'\]"):
        TrainConfig.from_dict({"lerning_rate": 1.0, "hidden": [3]})


def test_train_config_ctc_kind():
    assert TrainConfig(algo="ctcbc-gru").ctc_kind == "gru"
    assert TrainConfig(algo="ctcbc-mlp").ctc_kind == "mlp"
    assert TrainConfig(algo="taco").ctc_kind is None


@pytest.mark.parametrize("key, value", [("lr", "abc"), ("epochs", True), ("epochs", 2.5),
                                        ("terminal_stop", "maybe"), ("sigma", None)])
def test_config_fields_have_their_types(key, value):
    with pytest.raises(ValueError, match=key):
        train.TrainConfig(**{key: value})


@pytest.mark.parametrize("key, value", [("sigma", 1e300), ("sigma", 1e-30), ("sigma", 2e4),
                                        ("sigma_init", 1e-5), ("sigma_init", 1e300)])
def test_sigma_is_held_to_the_policy_range(key, value):
    """policy.SIGMA_RANGE, which every model file is held to as well; its ends are accepted."""
    with pytest.raises(ValueError, match=f"^{key} must be a positive number in"):
        train.TrainConfig(**{key: value})
    for end in policy.SIGMA_RANGE:
        assert train.TrainConfig(**{key: end})


def test_the_gru_classifier_takes_one_hidden_size():
    """ctc_hidden=[5, 5] trained a GRU of 5 and dropped the second size without a word."""
    with pytest.raises(ValueError, match=r"^ctc_hidden must be one hidden size \[H\] for ctcbc-gru"):
        train.TrainConfig(algo="ctcbc-gru", ctc_hidden=[5, 5])
    assert train.TrainConfig(algo="ctcbc-mlp", ctc_hidden=[5, 5]).ctc_hidden == [5, 5]


# ----------------------------------------------------------------------------------------------
# (c) Dropout schedule and Adam
# ----------------------------------------------------------------------------------------------

def test_dropout_rate_schedule():
    """Checks spec/training.md eq. (3)."""
    rates = [optim.dropout_rate(0.3, 0.95, e) for e in range(50)]
    assert rates[0] == 0.3
    np.testing.assert_allclose(rates, 0.3 * 0.95 ** np.arange(50), rtol=1e-15)
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert optim.dropout_rate(0.3, 1.0, 10) == 0.3 and optim.dropout_rate(0.0, 0.5, 3) == 0.0
    with pytest.raises(ValueError, match="stop_dropout"):
        optim.dropout_rate(1.0, 0.9, 0)
    with pytest.raises(ValueError, match="dropout_decay"):
        optim.dropout_rate(0.2, -0.1, 0)


def spy_on_taco(monkeypatch):
    """Replace objectives.taco by a wrapper that records (training batch?, STOP dropout rate,
    temperature) of every call; returns the list it fills. Whether a call is a training batch
    is read from the trainer's own train flag (train._Job.loss)."""
    seen, in_training = [], []
    real, real_loss = objectives.taco, train._Job.loss

    def loss(self, stage, batch, rng, epoch, train):
        in_training.append(train)
        return real_loss(self, stage, batch, rng, epoch, train)

    def spy(params, cfg, batch, terminal_stop=False, stop_dropout=None, temperature=1.0):
        rate = 0.0 if stop_dropout is None else stop_dropout.rate
        seen.append((in_training[-1], rate, temperature))
        return real(params, cfg, batch, terminal_stop, stop_dropout, temperature)

    monkeypatch.setattr(train._Job, "loss", loss)
    monkeypatch.setattr(objectives, "taco", spy)
    return seen


def test_trainer_applies_the_dropout_schedule(nav_small, monkeypatch):
    """Training batches of epoch e get stop_dropout * decay**e; held-out losses get none.
    Checks spec/training.md eq. (3)."""
    seen = spy_on_taco(monkeypatch)
    cfg = config(epochs=3, stop_dropout=0.4, dropout_decay=0.5, batch_size=9)
    train.train(nav_small, cfg, progress=False)
    training = [rate for is_train, rate, _ in seen if is_train]
    batches = -(-(nav_small.n - 3) // 9)                     # 27 training demonstrations
    assert training == [0.4] * batches + [0.2] * batches + [0.1] * batches
    assert {rate for is_train, rate, _ in seen if not is_train} == {0.0}


def test_adam_first_step_moves_each_entry_by_lr():
    """Checks spec/training.md eq. (2)."""
    params = {"w": np.array([1.0, -2.0, 3.0])}
    adam = optim.Adam(["w"], [(3,)], lr=0.1)
    adam.step(params, {"w": np.array([0.5, -4.0, 0.0])})
    np.testing.assert_allclose(params["w"], [0.9, -1.9, 3.0], rtol=1e-6)
    with pytest.raises(ValueError, match="lr must be positive"):
        optim.Adam(["w"], [(3,)], lr=0.0)


def test_adam_follows_its_update_rule_over_several_steps():
    """Five steps against the update rule written plainly, with the defaults beta_1 = 0.9,
    beta_2 = 0.999, eps = 1e-8 and the bias corrections of step i.
    Checks spec/training.md eq. (2)."""
    rng = np.random.default_rng(3)
    theta = rng.normal(size=(2, 3))
    params = {"w": theta.copy()}
    adam = optim.Adam(["w"], [(2, 3)], lr=0.01)
    m, v = np.zeros((2, 3)), np.zeros((2, 3))
    for i in range(1, 6):
        g = rng.normal(scale=10.0 ** (i - 3), size=(2, 3))    # scales 1e-2 .. 1e2
        adam.step(params, {"w": g})
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g ** 2
        theta = theta - 0.01 * (m / (1 - 0.9 ** i)) / (np.sqrt(v / (1 - 0.999 ** i)) + 1e-8)
        np.testing.assert_allclose(params["w"], theta, rtol=1e-13, atol=1e-15, err_msg=f"step {i}")


def test_state_statistics_follow_their_definition(nav_small):
    """Mean and population standard deviation over the valid steps of every demonstration
    (padding holds NaN), the deviation floored at 1e-6 (here: a constant state dimension).
    Checks spec/training.md eq. (1)."""
    states = nav_small.states.copy()
    valid = np.arange(states.shape[1])[None, :] < nav_small.traj_len[:, None]     # (N, T)
    states[~valid] = np.nan
    states[..., 0] = np.where(valid, 7.0, np.nan)
    demos = dataclasses.replace(nav_small, states=states)
    rows = [states[n, t] for n in range(demos.n) for t in range(demos.traj_len[n])]
    mean = np.sum(rows, axis=0) / len(rows)
    std = np.sqrt(np.sum([(r - mean) ** 2 for r in rows], axis=0) / len(rows))
    got_mean, got_std = train.state_statistics(demos)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-12)
    np.testing.assert_allclose(got_std[1:], std[1:], rtol=1e-12)
    assert got_std[0] == 1e-6 and std[0] == 0.0


def test_mean_loss_pools_the_summed_losses_over_the_valid_steps(nav_small):
    """The held-out loss is every batch's summed loss over the data set's valid steps (not a
    mean of batch means: the lengths differ), without dropout.
    Checks spec/training.md eq. (4)."""
    cfg = config(warmup_epochs=0, stop_dropout=0.5)
    job = train._Job(cfg, nav_small, np.random.default_rng(0))
    rows = [job.loss("policy", row, None, 0, train=False)[0] for row in data.batches(nav_small, 1)]
    expected = sum(rows) / nav_small.traj_len.sum()
    np.testing.assert_allclose(train.mean_loss(job, "policy", nav_small, batch_size=7), expected, rtol=1e-12)
    means = [sum(rows[i:i + 7]) / nav_small.traj_len[i:i + 7].sum() for i in range(0, nav_small.n, 7)]
    assert abs(np.mean(means) - expected) > 1e-6            # the two readings differ on these data


def test_trainer_divides_each_batch_by_its_valid_steps(nav_small, monkeypatch):
    """Every training batch's gradient reaches Adam divided by the batch's valid steps, and an
    epoch's train_loss is its summed losses over its summed valid steps.
    Checks spec/objectives.md eq. (6)."""
    calls, passed = [], []
    real_loss, real_step = train._Job.loss, optim.Adam.step

    def loss(self, stage, batch, rng, epoch, train):
        out = real_loss(self, stage, batch, rng, epoch, train)
        if train:
            calls.append((out[0], {k: g.copy() for k, g in out[1].items()}, int(batch.traj_len.sum())))
        return out

    def step(self, params, grads):
        passed.append({k: g.copy() for k, g in grads.items()})
        return real_step(self, params, grads)

    monkeypatch.setattr(train._Job, "loss", loss)
    monkeypatch.setattr(optim.Adam, "step", step)
    model = train.train(nav_small, config(epochs=2, warmup_epochs=0, batch_size=9), progress=False)
    assert len(calls) == len(passed) == 6                  # 27 training demonstrations, 3 batches per epoch
    for (_, grads, n), got in zip(calls, passed):
        assert set(got) == set(grads)
        for name in grads:
            np.testing.assert_array_equal(got[name], grads[name] / n, err_msg=name)
    for e, record in enumerate(model.info["history"]):
        epoch = calls[3 * e:3 * e + 3]
        np.testing.assert_allclose(record["train_loss"], sum(c[0] for c in epoch) / sum(c[2] for c in epoch),
                                   rtol=1e-12)


@pytest.mark.parametrize("algo, stage, epoch, expected", [
    ("taco", "policy", 0, 1.0), ("taco", "policy", 25, 0.5 * (1 + np.cos(np.pi / 4))),
    ("gtbc", "policy", 50, 0.5), ("ctcbc-mlp", "policy", 99, 0.5 * (1 + np.cos(np.pi * 0.99))),
    ("taco", "warmup", 3, 1.0), ("ctcbc-mlp", "ctc", 50, 1.0)])
def test_cosine_lr_factor(algo, stage, epoch, expected):
    """Checks spec/training.md eq. (10)."""
    cfg = TrainConfig(algo=algo, lr_decay="cosine", epochs=100)
    spec = {s.name: s for s in cfg.algorithm.stages(cfg)}[stage]
    np.testing.assert_allclose(train.lr_factor(cfg, spec, epoch), expected, rtol=1e-12)
    assert train.lr_factor(TrainConfig(algo=algo, epochs=100), spec, epoch) == 1.0


@pytest.mark.parametrize("epoch_size, n_train, passes", [
    (0, 45, 1), (360, 45, 8), (360, 180, 2), (361, 180, 3), (360, 360, 1), (360, 900, 1), (1, 1, 1)])
def test_passes_per_epoch(epoch_size, n_train, passes):
    """Checks spec/training.md eq. (11): the fewest whole passes that see epoch_size demonstrations."""
    assert train.passes_per_epoch(epoch_size, n_train) == passes


def test_an_epoch_of_several_passes_sees_every_demonstration_once_per_pass(nav_small, monkeypatch):
    """With epoch_size = 2.5 training sets an epoch is 3 passes: 3x the Adam steps of one pass,
    and every training demonstration 3 times. Checks spec/training.md eq. (11)."""
    seen = []
    real_loss = train._Job.loss

    def loss(self, stage, batch, rng, epoch, train):
        if train:   # a training batch: record which demonstrations (by their first state)
            seen.append((epoch, [tuple(s) for s in batch.states[:, 0]]))
        return real_loss(self, stage, batch, rng, epoch, train)

    monkeypatch.setattr(train._Job, "loss", loss)
    n_train = nav_small.n - data.holdout_count(nav_small.n, TrainConfig().holdout_fraction)
    per_pass = -(-n_train // 9)
    for epoch_size, passes in ((int(2.5 * n_train), 3), (n_train, 1)):
        seen.clear()
        train.train(nav_small, config(epochs=2, patience=2, warmup_epochs=0, batch_size=9,
                                      epoch_size=epoch_size), progress=False)
        assert len(seen) == 2 * passes * per_pass
        for e in range(2):
            demos = [d for ep, batch in seen if ep == e for d in batch]
            assert len(demos) == passes * n_train and len(set(demos)) == n_train


def test_trainer_steps_at_the_scheduled_learning_rate(nav_small, monkeypatch):
    """Every Adam step of an epoch runs at lr * lr_factor(epoch): the warm-up at lr, TACO's
    epochs on the cosine. Checks spec/training.md eq. (10)."""
    rates = []
    real_step = optim.Adam.step

    def step(self, params, grads):
        rates.append(self.lr)
        return real_step(self, params, grads)

    monkeypatch.setattr(optim.Adam, "step", step)
    cfg = config(epochs=4, patience=4, warmup_epochs=2, lr_decay="cosine", lr=1e-2, batch_size=9)
    train.train(nav_small, cfg, progress=False)
    per_epoch = [rates[i] for i in range(0, len(rates), 3)]          # 3 batches per epoch
    assert len(rates) == 3 * (2 + 4) and all(len(set(rates[i:i + 3])) == 1 for i in range(0, len(rates), 3))
    np.testing.assert_allclose(per_epoch, [1e-2, 1e-2] + [1e-2 * 0.5 * (1 + np.cos(np.pi * e / 4))
                                                          for e in range(4)], rtol=1e-12)


def test_l2_penalty_and_its_gradient_follow_their_definition():
    """optim.add_l2 adds d/dW of c/2 ||W||^2 to the weight matrices' gradients only and returns
    the penalty. Checks spec/training.md eq. (9)."""
    rng = np.random.default_rng(0)
    params = {"act.W0": rng.normal(size=(2, 3, 4)), "act.b0": rng.normal(size=(2, 4)),
              "stop.W0": rng.normal(size=(2, 3, 5)), "stop.b0": rng.normal(size=(2, 5)),
              "act.logstd": rng.normal(size=(2, 2))}
    grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
    before = {k: g.copy() for k, g in grads.items()}
    coefs = {"act": 1e-3, "stop": 0.25}

    def penalty(p):
        return sum(c / 2 * sum(np.sum(p[n] ** 2) for n in p if n.startswith(net + ".W"))
                   for net, c in coefs.items())

    got = optim.add_l2(grads, params, coefs)
    np.testing.assert_allclose(got, penalty(params), rtol=1e-12)
    eps = 1e-6
    for name in params:
        idx = tuple(rng.integers(0, s) for s in params[name].shape)
        plus = {k: v.copy() for k, v in params.items()}
        minus = {k: v.copy() for k, v in params.items()}
        plus[name][idx] += eps
        minus[name][idx] -= eps
        fd = (penalty(plus) - penalty(minus)) / (2 * eps)
        np.testing.assert_allclose(grads[name][idx] - before[name][idx], fd, rtol=1e-6, atol=1e-10,
                                   err_msg=name)
    assert optim.add_l2(grads, params, {"act": 0.0, "stop": 0.0}) == 0.0


def test_trainer_adds_the_l2_gradient_to_the_per_step_gradient(nav_small, monkeypatch):
    """With act_l2 and stop_l2 the gradient Adam receives is the per-step gradient plus c W on
    the weight matrices of each net; the reported losses stay the plain likelihood.
    Checks spec/training.md eq. (9)."""
    seen = []
    real_step = optim.Adam.step

    def step(self, params, grads):
        seen.append(({k: v.copy() for k, v in params.items()}, {k: g.copy() for k, g in grads.items()}))
        return real_step(self, params, grads)

    monkeypatch.setattr(optim.Adam, "step", step)
    plain = train.train(nav_small, config(epochs=1, warmup_epochs=0), progress=False)
    without = seen[:]
    seen.clear()
    l2 = train.train(nav_small, config(epochs=1, warmup_epochs=0, act_l2=0.5, stop_l2=2.0), progress=False)
    (p0, g0), (p1, g1) = without[0], seen[0]            # the first step: the same parameters
    for name in g0:
        np.testing.assert_array_equal(p0[name], p1[name])
        coef = 0.5 if name.startswith("act.W") else 2.0 if name.startswith("stop.W") else 0.0
        np.testing.assert_allclose(g1[name], g0[name] + coef * p0[name], rtol=1e-12, atol=1e-15,
                                   err_msg=name)
    assert plain.info["history"][0]["train_loss"] != l2.info["history"][0]["train_loss"]   # later steps differ
    assert abs(l2.info["history"][0]["train_loss"]) < 50     # a likelihood per step, not a penalty on it


@pytest.mark.parametrize("drop, kept_epoch, epochs_run", [(5e-10, 2, 4), (2e-9, 3, 5)])
def test_early_stopping_keeps_the_best_held_out_epoch(nav_small, monkeypatch, drop, kept_epoch, epochs_run):
    """Held-out losses 5, 4, 4 - drop, 4.5, 4.5, ... with patience 2: epoch 3 improves only when
    it is lower than the best by more than 1e-9; the stage ends after two epochs without
    improvement and hands on the parameters of the best epoch.
    Checks spec/training.md eq. (5)."""
    held = iter([5.0, 4.0, 4.0 - drop] + [4.5] * 10)
    seen = []

    def mean_loss(job, stage, demos, batch_size=64, workspace=None):
        seen.append({k: v.copy() for k, v in job.params.items()})
        return next(held)

    monkeypatch.setattr(train, "mean_loss", mean_loss)
    model = train.train(nav_small, config(epochs=10, patience=2, warmup_epochs=0), progress=False)
    assert len(model.info["history"]) == epochs_run          # (one more call: the training likelihood)
    for name in policy.trainable(model.params):
        np.testing.assert_array_equal(model.params[name], seen[kept_epoch - 1][name], err_msg=name)
        assert not np.array_equal(model.params[name], seen[epochs_run - 1][name]), name


def test_adam_state_round_trip():
    rng = np.random.default_rng(0)
    shapes = {"a": (3, 2), "b": (4,)}
    grads = [{n: rng.normal(size=s) for n, s in shapes.items()} for _ in range(6)]
    p1 = {n: rng.normal(size=s) for n, s in shapes.items()}
    a1 = optim.Adam(list(shapes), list(shapes.values()), lr=0.01)
    for g in grads[:3]:
        a1.step(p1, g)
    arrays, meta = a1.state()
    assert set(arrays) == {"adam.m.a", "adam.m.b", "adam.v.a", "adam.v.b"} and meta["step_count"] == 3
    # through JSON and npz-like copies, as the checkpoint stores them
    meta = json.loads(json.dumps(meta))
    a2 = optim.Adam(list(shapes), list(shapes.values()), lr=0.01)
    a2.load_state({k: v.copy() for k, v in arrays.items()}, meta)
    p2 = {n: v.copy() for n, v in p1.items()}
    for g in grads[3:]:
        a1.step(p1, g)
        a2.step(p2, g)
    assert a2.step_count == a1.step_count == 6
    assert_same_params(p1, p2)


def test_stop_prior_sets_the_stop_bias_to_the_switch_rate():
    """Checks spec/training.md eq. (6)."""
    demos = navworld.collect(20, 3, seed=5)
    rate = (demos.sketch_len - 1).sum() / (demos.traj_len - 1).sum()
    logit = train.stop_prior_logit(demos)
    assert np.isclose(1.0 / (1.0 + np.exp(-logit)), rate)
    cfg = train.TrainConfig(stop_prior=True, stop_hidden=[8], act_hidden=[8])
    job = train._Job(cfg, demos, np.random.default_rng(0))
    assert np.all(job.params["stop.b1"] == logit)
    off = train._Job(train.TrainConfig(stop_hidden=[8], act_hidden=[8]), demos, np.random.default_rng(0))
    assert np.all(off.params["stop.b1"] == 0.0)


# ----------------------------------------------------------------------------------------------
# (d) Label-free initialisation of TACO: warm-up, tempered alignment, restarts (spec/training.md §6-7)
# ----------------------------------------------------------------------------------------------

def test_warmup_runs_bc_on_the_even_split_then_taco(nav_small, monkeypatch):
    """warmup_epochs = 2: a "warmup" stage of exactly 2 epochs whose loss is BC on
    objectives.even_split_labels, handing its last parameters to the TACO stage."""
    seen = []
    real_bc = objectives.bc

    def spy(params, cfg, batch, labels, *args, **kw):
        seen.append(np.array_equal(labels, objectives.even_split_labels(
            batch.traj_len, batch.sketch_len, batch.states.shape[1])))
        return real_bc(params, cfg, batch, labels, *args, **kw)

    monkeypatch.setattr(objectives, "bc", spy)
    model = train.train(nav_small, config(warmup_epochs=2, epochs=2, seed=2), progress=False)
    stages = [h["stage"] for h in model.info["history"]]
    assert stages == ["warmup", "warmup", "policy", "policy"]
    assert seen and all(seen)


def test_warmup_hands_on_its_last_parameters_not_its_best(tmp_path, nav_small, monkeypatch):
    """The warm-up is a fixed schedule: after it the parameters are those of its last epoch,
    even when its held-out loss rose every epoch (here made to, by a stand-in mean_loss)."""
    worse = iter(range(100))
    monkeypatch.setattr(train, "mean_loss", lambda *a, **k: float(next(worse)))
    cfg = config(warmup_epochs=3, epochs=2, seed=3)
    train.train(nav_small, cfg, out_dir=tmp_path, stop_after=3, progress=False)
    meta = json.loads((tmp_path / checkpoints.CHECKPOINT_META).read_text())
    assert meta["stage"] == 0 and meta["epoch"] == 3
    with np.load(tmp_path / meta["arrays_file"]) as z:
        params = {k[len("param."):]: z[k] for k in z.files if k.startswith("param.")}
        kept = {k[len("best."):]: z[k] for k in z.files if k.startswith("best.")}
    assert_same_params(params, kept)


@pytest.mark.parametrize("epoch, expected", [(0, 3.0), (1, 2.5), (2, 2.0), (3, 1.5), (4, 1.0), (9, 1.0)])
def test_temperature_schedule(epoch, expected):
    """spec/training.md eq. (7): linear from the initial temperature to 1 over
    temperature_epochs, then 1."""
    cfg = TrainConfig(temperature=3.0, temperature_epochs=4)
    assert taco_algo.temperature(cfg, epoch) == pytest.approx(expected)
    assert taco_algo.temperature(TrainConfig(temperature=3.0), epoch) == 1.0    # no schedule: plain TACO


def test_trainer_anneals_the_temperature_and_holds_off_early_stopping(nav_small, monkeypatch):
    """Training batches of epoch e get temperature(cfg, e), held-out losses temperature 1; with
    patience 1 the stage still runs every tempered epoch plus at least one at temperature 1.
    Checks spec/training.md eq. (7)."""
    seen = spy_on_taco(monkeypatch)
    cfg = config(epochs=8, patience=1, temperature=3.0, temperature_epochs=4, batch_size=27, lr=0.5)
    model = train.train(nav_small, cfg, progress=False)
    training = [temp for is_train, _, temp in seen if is_train]
    assert training[:4] == pytest.approx([3.0, 2.5, 2.0, 1.5]) and set(training[4:]) == {1.0}
    assert {temp for is_train, _, temp in seen if not is_train} == {1.0}
    assert len(model.info["history"]) >= 5


def test_viterbi_targets_train_on_the_best_path_and_select_on_the_marginal(nav_small, monkeypatch):
    """taco_targets "viterbi": every training batch of the TACO stage goes to
    objectives.taco_viterbi (with the STOP dropout of its epoch), every held-out batch to
    objectives.taco, so early stopping reads the same marginal likelihood as plain TACO."""
    seen = spy_on_taco(monkeypatch)
    hard, real = [], objectives.taco_viterbi

    def spy(params, cfg, batch, terminal_stop=False, stop_dropout=None):
        hard.append(0.0 if stop_dropout is None else stop_dropout.rate)
        return real(params, cfg, batch, terminal_stop, stop_dropout)

    monkeypatch.setattr(objectives, "taco_viterbi", spy)
    cfg = config(epochs=2, batch_size=27, taco_targets="viterbi", stop_dropout=0.5)
    model = train.train(nav_small, cfg, progress=False)
    assert hard and set(hard) <= {0.5, 0.5 * cfg.dropout_decay}
    assert seen and not any(is_train for is_train, _, _ in seen)
    assert [h["stage"] for h in model.info["history"]].count("policy") == 2
    with pytest.raises(ValueError, match="^taco_targets 'viterbi' .* temperature_epochs"):
        TrainConfig(taco_targets="viterbi", temperature=2.0, temperature_epochs=1)


@pytest.fixture(scope="module")
def three_restarts(nav_small):
    cfg = config(restarts=3, epochs=2, seed=6)
    return cfg, train.train(nav_small, cfg, progress=False)


def test_restart_zero_is_the_plain_run(nav_small, three_restarts):
    cfg, _ = three_restarts
    plain = train.train(nav_small, config(epochs=2, seed=6), progress=False)
    each = [train._train_run(nav_small, cfg, r, None, False, None, False, None)[0] for r in range(3)]
    assert_same_params(each[0].params, plain.params)
    assert not np.array_equal(each[1].params["act.W0"], each[0].params["act.W0"])


def test_restarts_keep_the_best_training_likelihood(nav_small, three_restarts):
    """spec/training.md §7: the kept run is the argmax of the training log-likelihood per step,
    and that figure is the model's TACO log-likelihood on the training split.
    Checks spec/training.md eq. (8)."""
    cfg, model = three_restarts
    runs = model.info["restarts"]
    assert [r["restart"] for r in runs] == [0, 1, 2]
    logliks = [r["train_loglik"] for r in runs]
    assert len(set(logliks)) == 3
    assert model.info["restart"] == int(np.argmax(logliks))
    rng = np.random.default_rng(cfg.seed)
    train_set, _ = data.split(nav_small, cfg.holdout_fraction, rng)
    assert evaluate.mean_loglik_per_step(model, train_set) == pytest.approx(max(logliks), rel=1e-12)


def test_restarts_select_by_likelihood_not_by_order():
    """select_restart on stand-in models: the highest train_loglik wins, ties go to the first.
    Checks spec/training.md eq. (8)."""
    class M:
        def __init__(self, ll):
            self.info = {"train_loglik": ll, "run_seed": 0, "seconds": 1.0, "cpu_seconds": 0.5,
                         "processes": 2, "earlier": {"seconds": 0.25, "cpu_seconds": 0.125, "processes": 1},
                         "history": [{"stage": "policy", "held_out_loss": -ll}]}
    picked = train.select_restart([M(-2.0), M(-1.5), M(-1.9)])
    assert picked.info["restart"] == 1 and picked.info["seconds"] == 3.0 and picked.info["cpu_seconds"] == 1.5
    # the runs follow each other in the same processes: their times add up, their processes do not
    assert picked.info["processes"] == 2
    assert picked.info["earlier"] == {"seconds": 0.75, "cpu_seconds": 0.375, "processes": 1}
    assert train.select_restart([M(-1.0), M(-1.0)]).info["restart"] == 0


@pytest.mark.slow
def test_restarts_resume_exactly(tmp_path, nav_small, three_restarts):
    cfg, full = three_restarts
    out = tmp_path / "run"
    assert train.train(nav_small, cfg, out_dir=out, stop_after=4, progress=False) is None
    assert (out / "restart-1" / checkpoints.CHECKPOINT_META).exists()      # 1 warm-up + 2 TACO epochs each
    assert not (out / "restart-2").exists()
    resumed = train.train(nav_small, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(resumed.params, full.params)
    assert resumed.info["restarts"] == full.info["restarts"]
    assert_same_params(model_mod.load(out / "model").params, full.params)


@pytest.fixture(scope="module")
def collapsing_case():
    """Issue 9's case, small: 100 Nav-World demonstrations (collect seed 0), 40 held-out ones
    (seed 999), taco_sim/configs/navworld.yaml with 20 epochs of one pass each (epoch_size 0, as
    the case was found; the config's 360 would make 4) and no early stopping, training seed 1."""
    base = config_mod.load("navworld")
    values = dict(base.__dict__, algo="taco", seed=1, epochs=20, patience=20, epoch_size=0)
    return navworld.collect(100, 3, seed=0), navworld.collect(40, 3, seed=999), values


@pytest.mark.slow        # a training run
def test_default_recipe_aligns_where_plain_taco_collapses(collapsing_case):
    """spec/training.md §6. Plain TACO (warmup_epochs 0) from this seed merges two sub-policies:
    69.4 % forward-argmax alignment when measured; the default recipe (warm-up of 5 epochs on the
    even split) aligns 99.8 %. Thresholds: plain below 90 % (the case still collapses), default at
    least 95 % (issue 9's bar)."""
    demos, held_out, values = collapsing_case
    plain = train.train(demos, TrainConfig.from_dict(dict(values, warmup_epochs=0)), progress=False)
    default = train.train(demos, TrainConfig.from_dict(values), progress=False)
    assert values["warmup_epochs"] > 0
    assert evaluate.alignment_accuracy(plain, held_out)["forward_argmax"] < 0.90
    assert evaluate.alignment_accuracy(default, held_out)["forward_argmax"] >= 0.95


@pytest.mark.slow        # a training run
def test_restarts_keep_the_run_that_did_not_collapse(collapsing_case):
    """spec/training.md §7 on the collapsing case: plain TACO with 2 restarts. Run 0 is the
    collapsed run above (training log-likelihood -0.89 per step when measured, alignment 69 %);
    run 1 did not collapse (-0.63, 99.9 %). The likelihood must pick run 1."""
    demos, held_out, values = collapsing_case
    model = train.train(demos, TrainConfig.from_dict(dict(values, warmup_epochs=0, restarts=2)),
                        progress=False)
    runs = model.info["restarts"]
    assert model.info["restart"] == 1 and runs[1]["train_loglik"] > runs[0]["train_loglik"]
    assert evaluate.alignment_accuracy(model, held_out)["forward_argmax"] >= 0.95


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_ctcbc_relabels_once_exactly_as_aligning_each_batch(nav_small, kind):
    """CTC-BC's policy stage trains on labels computed once per demonstration (_Job.stage_sets);
    they equal the classifier's alignment of any minibatch the stage draws."""
    cfg = config(algo=f"ctcbc-{kind}", seed=7)
    job = train._Job(cfg, nav_small, np.random.default_rng(7))
    relabelled, _ = job.stage_sets("policy", nav_small, nav_small)
    for batch_idx in (np.arange(0, 30, 3), np.array([4, 17, 29])):
        batch = nav_small.subset(batch_idx)
        path, _ = objectives.ctc_alignment(job.params, kind, batch, False, 2, cfg.ctc_decoder)
        valid = np.arange(path.shape[1])[None, :] < batch.traj_len[:, None]
        np.testing.assert_array_equal(np.where(valid, path, -1), relabelled.subset(batch_idx).labels)
    assert job.stage_sets("ctc", nav_small, nav_small)[0] is nav_small


# ----------------------------------------------------------------------------------------------
# (d) float32 nets
# ----------------------------------------------------------------------------------------------

def test_the_default_precision_is_float32_in_every_shipped_domain_config():
    """spec/training.md §4: float32 nets unless dtype says otherwise, and no domain config
    overrides it (the committed float64 results name it with --set dtype=float64)."""
    assert TrainConfig().dtype == "float32"
    for domain in taco_sim.names():
        assert TrainConfig.from_dict(config_mod.settings(domain, None, [])).dtype == "float32", domain
    assert TrainConfig.from_dict(config_mod.settings("dial", None, ["dtype=float64"])).dtype == "float64"


def test_float32_training_runs_the_nets_in_float32_and_saves_float64(tmp_path, nav_small, monkeypatch):
    seen = []
    real = optim.Adam.step

    def spy(self, params, grads):
        seen.extend((params[n].dtype, grads[n].dtype, self.m[n].dtype, self.v[n].dtype) for n in self.m)
        return real(self, params, grads)
    monkeypatch.setattr(optim.Adam, "step", spy)
    model = train.train(nav_small, config(dtype="float32", seed=3), out_dir=tmp_path, progress=False)
    assert seen and {d for dtypes in seen for d in dtypes} == {np.dtype(np.float32)}
    assert {v.dtype for v in model.params.values()} == {np.dtype(np.float64)}
    for name in policy.trainable(model.params):     # float32 values, widened exactly
        np.testing.assert_array_equal(model.params[name].astype(np.float32), model.params[name])
    assert_same_params(model_mod.load(tmp_path / "model").params, model.params)
    assert model.config["dtype"] == "float32"
    # the same run in float64 starts from the same draws and ends close, not equal
    m64 = train.train(nav_small, config(seed=3), progress=False)
    assert not np.array_equal(m64.params["act.W0"], model.params["act.W0"])
    np.testing.assert_allclose(m64.info["history"][0]["train_loss"],
                               model.info["history"][0]["train_loss"], rtol=1e-4)


@pytest.mark.slow
def test_float32_resume_ends_exactly_like_an_uninterrupted_run(tmp_path, nav_small):
    cfg = config(dtype="float32", seed=4)
    full = train.train(nav_small, cfg, out_dir=tmp_path / "full", progress=False)
    out = tmp_path / "interrupted"
    assert train.train(nav_small, cfg, out_dir=out, stop_after=2, progress=False) is None
    resumed = train.train(nav_small, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(resumed.params, full.params)
    assert resumed.info["history"] == full.info["history"]


def test_resume_refuses_a_checkpoint_of_another_dtype(tmp_path, nav_small):
    """A float32 run's checkpoint whose arrays were swapped for float64 ones (and the hash
    updated) is refused by name, not silently trained on in float64."""
    train.train(nav_small, config(dtype="float32", seed=1), out_dir=tmp_path, stop_after=1, progress=False)
    meta = json.loads((tmp_path / checkpoints.CHECKPOINT_META).read_text())
    arrays = files.read_npz(tmp_path / meta["arrays_file"], meta["arrays_sha256"])
    arrays = {k: v.astype(np.float64) if k.startswith("param.act.") else v for k, v in arrays.items()}
    blob, meta["arrays_sha256"] = files.npz_blob(arrays)
    (tmp_path / meta["arrays_file"]).write_bytes(blob)
    (tmp_path / checkpoints.CHECKPOINT_META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"cannot resume: .*param\.act\.W0 is float64 .* needs float32"):
        train.train(nav_small, config(dtype="float32", seed=1), out_dir=tmp_path, resume=True,
                    progress=False)


@pytest.mark.parametrize("block", [5, 1 << 15])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adam_buffered_update_equals_the_formula(dtype, block, monkeypatch):
    """spec/training.md eq. (2) written plainly: the same values bit for bit (same operations in
    the same order), over three steps, in the parameters' dtype, whether the update runs in one
    block or in blocks of 5 entries (the last one partial)."""
    monkeypatch.setattr(optim.Adam, "BLOCK", block)
    rng = np.random.default_rng(0)
    p = {"w": rng.normal(size=(4, 3)).astype(dtype)}
    ref, m, v = p["w"].copy(), np.zeros((4, 3), dtype), np.zeros((4, 3), dtype)
    adam = optim.adam_for(p, ["w"], 1e-2)
    for n in range(1, 4):
        g = rng.normal(size=(4, 3)).astype(dtype)
        adam.step(p, {"w": g})
        m = 0.9 * m + (1.0 - 0.9) * g
        v = 0.999 * v + (1.0 - 0.999) * g * g
        ref = ref - 1e-2 * (m / (1.0 - 0.9 ** n)) / (np.sqrt(v / (1.0 - 0.999 ** n)) + 1e-8)
        assert p["w"].dtype == adam.m["w"].dtype == dtype
        np.testing.assert_array_equal(p["w"], ref)


_ALLOCATE_LIKE_A_STEP = """
import resource, sys
import numpy as np
from taco_ref import nn
if sys.argv[1] == "keep":
    assert nn.workspace.keep_freed_memory()
def step():  # arrays of 8-24 MiB alive together, then freed, as in a Dial-sized step
    live = [np.ones(n) for n in (3 << 20, 1 << 20, 2 << 20, 3 << 19, 1 << 21, 1 << 20, 3 << 20)]
    del live
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.slow        # two fresh processes
def test_keep_freed_memory_lets_the_next_step_reuse_freed_arrays():
    """spec/training.md §4: with keep_freed_memory, five more steps' worth of 8-24 MiB arrays
    touch no fresh pages; without it glibc maps and zero-fills them anew (measured: ~18000
    page faults). Each case in a fresh process, since the setting is process-wide."""
    if not nn.workspace.keep_freed_memory():
        pytest.skip("no glibc mallopt on this platform")
    faults = {mode: int(subprocess.run([sys.executable, "-c", _ALLOCATE_LIKE_A_STEP, mode], check=True,
                                       capture_output=True, text=True).stdout)
              for mode in ("keep", "default")}
    assert faults["keep"] < 100 < 5000 < faults["default"], faults


def _extreme_alignment_batch(rng, B=4, T=60, D=6, A=3, K=4, L=3):
    """Untrained nets on actions three times the Gaussian's scale: posteriors of unlikely
    positions are ~1e-40 and below, so float32 rounding makes subnormal gradients."""
    traj_len = rng.integers(T // 2, T + 1, size=B)
    pad = np.arange(T)[None, :] >= traj_len[:, None]
    states, actions = rng.standard_normal((B, T, D)), 3.0 * rng.standard_normal((B, T, A))
    states[pad], actions[pad] = 0.0, 0.0
    sketch = np.stack([rng.choice(K, size=L, replace=False) for _ in range(B)])
    labels = np.where(pad, -1, np.minimum(np.arange(T)[None, :] * L // traj_len[:, None], L - 1))
    return data.Demos(states=states, actions=actions, traj_len=traj_len, sketch=sketch,
                      sketch_len=np.full(B, L), labels=labels, final_state=rng.standard_normal((B, D)),
                      vocab=tuple(map(str, range(K)))).validate()


@pytest.mark.parametrize("algo", ["taco", "gtbc"])
def test_no_subnormal_reaches_a_matrix_product_of_a_float32_training_step(algo, monkeypatch):
    """spec/training.md eq. (12): in float32 training steps (loss, backward, Adam) on a batch
    whose posteriors underflow, with STOP nets whose sigma(g) is subnormal, the census of every matrix product of the nets counts no
    subnormal operand entry. Without the flush the same steps send hundreds (so this test can
    fail), and the float64 nets, which are never flushed, compute the same losses either way."""
    from taco_ref import nn

    def steps(dtype):
        rng = np.random.default_rng(3)
        demos = _extreme_alignment_batch(rng)
        cfg = TrainConfig(algo=algo, act_hidden=[64, 64], stop_hidden=[64, 64], dtype=dtype,
                          stop_dropout=0.2, warmup_epochs=0)
        job = train._Job(cfg, demos, rng)
        job.params["stop.b2"][:] = -95.0          # confident STOP nets, as trained ones are: sigma(g) < 2^-126
        adam, losses = job.optimiser("policy"), []
        with nn.subnormal_census() as census:
            for _ in range(3):
                loss, grads = job.loss("policy", demos, rng, 0, train=True)
                adam.step(job.params, {k: g / int(demos.traj_len.sum()) for k, g in grads.items()})
                losses.append(loss)
        return census, losses

    census, _ = steps("float32")
    assert census.products > 0 and census.entries > 0
    assert census.subnormal == 0, f"{census.subnormal} subnormal operand entries"
    with_flush64 = steps("float64")[1]
    for module in (nn, nn.layers, nn.mlp_fast):              # every place the flush is looked up
        monkeypatch.setattr(module, "flush_subnormals", lambda x, scratch=None: x)
    unflushed, _ = steps("float32")
    assert unflushed.subnormal > 100
    assert steps("float64")[1] == with_flush64


def test_float32_adam_state_holds_no_subnormal():
    """spec/training.md eq. (12): a float32 parameter whose gradient falls to 0 has m and v
    decaying by beta each step; they are flushed instead of turning subnormal, the gradient is
    flushed before it is read, and the parameter stops moving once m is gone."""
    from taco_ref import nn
    p = {"w": np.ones(4, np.float32)}
    adam = optim.adam_for(p, ["w"], 1e-3)
    adam.step(p, {"w": np.array([1e-30, 1e-39, 1e-20, 1.0], np.float32)})
    for _ in range(1500):
        adam.step(p, {"w": np.zeros(4, np.float32)})
        assert nn.count_subnormal(adam.m["w"]) == nn.count_subnormal(adam.v["w"]) == 0
    assert (adam.m["w"] == 0).all() and (adam.v["w"][:3] == 0).all() and adam.v["w"][3] > 0
    still = p["w"].copy()
    adam.step(p, {"w": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(p["w"], still)


@pytest.mark.slow
def test_select_by_rollouts_keeps_the_epoch_that_completes_most_validation_sketches(nav_small, tmp_path):
    """spec/training.md eq. (13): scores 0.2, 0.5, 0.5, 0.3, 0.1 from epoch 2 on (select_from 2)
    with patience 2: epoch 1 is no candidate, epoch 4 ties the best and wins (the later epoch),
    epochs 5 and 6 do not improve and end the stage; the model holds epoch 4's parameters, each
    scored epoch records its score, and a run stopped after 3 epochs resumes to the same end."""
    def scripted():
        scores, seen = iter([0.2, 0.5, 0.5, 0.3, 0.1, 0.9]), []

        def validate(model):
            seen.append({k: v.copy() for k, v in model.params.items()})
            return next(scores)
        return validate, seen

    cfg = config(epochs=10, patience=2, warmup_epochs=0, select="rollouts", select_from=2)
    validate, seen = scripted()
    model = train.train(nav_small, cfg, progress=False, validate=validate)
    history = model.info["history"]
    assert [h.get("rollout_score") for h in history] == [None, 0.2, 0.5, 0.5, 0.3, 0.1]
    for name in policy.trainable(model.params):
        np.testing.assert_array_equal(model.params[name], seen[2][name], err_msg=name)
    validate, _ = scripted()
    assert train.train(nav_small, cfg, out_dir=tmp_path, progress=False, validate=validate,
                       stop_after=3) is None
    resumed = train.train(nav_small, cfg, out_dir=tmp_path, resume=True, progress=False,
                          validate=lambda m, s=iter([0.5, 0.3, 0.1]): next(s))
    assert_same_params(resumed.params, model.params)
    with pytest.raises(ValueError, match="select: 'rollouts' needs a domain"):
        train.train(nav_small, cfg, progress=False)


def test_validation_rollouts_run_training_length_sketches_in_the_validation_env():
    """spec/training.md eq. (13): the validator executes select_tasks sketches of the training
    length from their own seed in the domain's validation environment (the Dial: random
    layouts, never the test layout) and returns the share completed."""
    made = []

    class Env:
        subtask_budget = None

        def __init__(self):
            made.append(self)

        def reset(self, sketch, seed=None):
            self.sketch, self.progress, self.failed = list(sketch), len(sketch), False
            return np.zeros(1)

        def budget(self, L):
            return 5

        done = property(lambda self: True)

    import types
    domain = types.SimpleNamespace(
        validation_env=Env, task_env=None, test_sketches=None,
        sample_sketches=lambda n, L, rng: np.tile(np.arange(L), (n, 1)))
    model = types.SimpleNamespace(params=None, policy=types.SimpleNamespace(discrete=False, n_subtasks=3),
                                  vocab=("a", "b", "c"))
    validate = evaluate.validation_rollouts(domain, 7, seed=0, sketch_len=2)
    assert validate(model) == 1.0 and len(made) == 7 and all(e.sketch == [0, 1] for e in made)
    dial_env = taco_sim.get("dial").validation_env()
    layouts = {tuple(dial_env.reset([1, 2], seed=s) is not None and dial_env.env.layout) for s in range(5)}
    assert len(layouts) > 1 and tuple(taco_sim.dial.STANDARD_LAYOUT) not in layouts


def test_averaged_parameters_follow_their_rule_and_are_what_is_scored_and_kept(nav_small, monkeypatch, tmp_path):
    """spec/training.md eq. (14): with ema = 0.6 the trainer keeps avg = theta at the policy
    stage's first step, then avg <- 0.6 avg + 0.4 theta after every step; the held-out loss is
    computed on the average (in the nets' dtype), the kept parameters are the average of the
    kept epoch, and a run stopped after one epoch resumes to the same end."""
    steps, scored = [], []
    step = optim.Adam.step

    def recording_step(self, params, grads):
        step(self, params, grads)
        steps.append({k: params[k].copy() for k in self.m})

    held = iter([5.0, 4.0, 3.0] + [9.0] * 10)

    def mean_loss(job, stage, demos, batch_size=64, workspace=None):
        scored.append({k: v.copy() for k, v in job.params.items()})
        return next(held)

    monkeypatch.setattr(optim.Adam, "step", recording_step)
    monkeypatch.setattr(train, "mean_loss", mean_loss)
    cfg = config(epochs=4, patience=10, warmup_epochs=0, ema=0.6)
    model = train.train(nav_small, cfg, progress=False)
    n_per_epoch = len(steps) // 4
    avg = {k: v.astype(np.float64) for k, v in steps[0].items()}
    averages = []
    for i, p in enumerate(steps[1:], start=2):
        for k in avg:
            avg[k] = 0.6 * avg[k] + 0.4 * p[k]
        if i % n_per_epoch == 0:
            averages.append({k: v.copy() for k, v in avg.items()})
    for epoch in range(4):
        for k in averages[epoch]:
            np.testing.assert_allclose(scored[epoch][k], averages[epoch][k], rtol=1e-12, atol=1e-14, err_msg=k)
    for k in averages[2]:                                 # epoch 3 had the best held-out loss
        np.testing.assert_allclose(model.params[k], averages[2][k], rtol=1e-12, atol=1e-14, err_msg=k)
        assert not np.allclose(model.params[k], steps[-1][k]), k
    monkeypatch.undo()
    plain = train.train(nav_small, config(epochs=3, warmup_epochs=0, ema=0.9), progress=False)
    assert_resumes_to(plain, nav_small, config(epochs=3, warmup_epochs=0, ema=0.9), tmp_path)
    with pytest.raises(ValueError, match="ema must lie in"):
        config(ema=1.0)


def test_the_average_horizon_in_epochs_sets_beta_from_the_steps_of_an_epoch(nav_small, monkeypatch, tmp_path):
    """spec/training.md eq. (15): with ema_epochs = E the trainer averages with
    beta = 1 - 1/(E * S), S the optimiser steps of an epoch, whatever ema says; the average it
    scores is the moving average with that beta, and a stopped run resumes to the same end."""
    steps, scored = [], []
    step = optim.Adam.step

    def recording_step(self, params, grads):
        step(self, params, grads)
        steps.append({k: params[k].copy() for k in self.m})

    def mean_loss(job, stage, demos, batch_size=64, workspace=None):
        scored.append({k: v.copy() for k, v in job.params.items()})
        return 1.0

    monkeypatch.setattr(optim.Adam, "step", recording_step)
    monkeypatch.setattr(train, "mean_loss", mean_loss)
    cfg = config(epochs=2, patience=10, warmup_epochs=0, ema=0.0, ema_epochs=0.5, batch_size=8)
    train.train(nav_small, cfg, progress=False)
    per_epoch = len(steps) // 2
    run = train._Run(nav_small, cfg, 0, None)
    assert per_epoch == -(-run.train_set.n // 8)          # the steps the formula counts
    beta = 1.0 - 1.0 / (0.5 * per_epoch)
    assert train.average_decay(cfg, run.train_set.n) == pytest.approx(beta)
    avg = {k: v.astype(np.float64) for k, v in steps[0].items()}
    for p in steps[1:per_epoch]:
        for k in avg:
            avg[k] = beta * avg[k] + (1 - beta) * p[k]
    for k in avg:
        np.testing.assert_allclose(scored[0][k], avg[k], rtol=1e-12, atol=1e-14, err_msg=k)
        assert not np.allclose(scored[0][k], steps[per_epoch - 1][k]), k
    monkeypatch.undo()
    # ema is read only without a horizon; a resumed run ends as an uninterrupted one
    plain = train.train(nav_small, config(epochs=3, warmup_epochs=0, ema=0.0, ema_epochs=2.0), progress=False)
    other = train.train(nav_small, config(epochs=3, warmup_epochs=0, ema=0.9, ema_epochs=2.0), progress=False)
    assert_same_params(other.params, plain.params)
    assert_resumes_to(plain, nav_small, config(epochs=3, warmup_epochs=0, ema_epochs=2.0), tmp_path)
    with pytest.raises(ValueError, match="ema_epochs must be a finite number"):
        config(ema_epochs=-1.0)


@pytest.mark.parametrize("n_train, batch_size, epoch_size, epochs, expected", [
    (180, 6, 0, 5.5, 1 - 1 / 165),       # the image Dial at 200 demonstrations: 30 steps an epoch
    (1080, 6, 0, 5.5, 1 - 1 / 990),      # the joint-state Dial at 1200: about beta = 0.999
    (10, 6, 25, 1.0, 1 - 1 / 6),         # epoch_size: 3 passes of 2 minibatches
    (4, 8, 0, 0.5, 0.0),                 # a horizon under one step: the last step's parameters
])
def test_average_decay_counts_the_steps_of_an_epoch(n_train, batch_size, epoch_size, epochs, expected):
    """spec/training.md eq. (15): beta from the horizon and the passes and minibatches of an
    epoch; ema alone without a horizon."""
    cfg = config(ema=0.3, ema_epochs=epochs, batch_size=batch_size, epoch_size=epoch_size)
    assert train.average_decay(cfg, n_train) == pytest.approx(expected)
    assert train.average_decay(config(ema=0.3, batch_size=batch_size), n_train) == 0.3


# ----------------------------------------------------------------------------------------------
# Image states: the convolutional core, data read lazily (spec/policy.md §10, spec/data.md §10)
# ----------------------------------------------------------------------------------------------

IMAGE = dict(SMALL, conv_channels=[3, 2], conv_kernels=[3, 3], conv_strides=[2, 1], batch_size=3,
             ctc_hidden=[6])


def image_demos(N=12, size=11, seed=0):
    """N demonstrations of 2-digit sketches whose images are noise plus a bright square in a
    corner that depends on the active sub-task (so the segmentation is visible), 6-9 frames each."""
    rng = np.random.default_rng(seed)
    traj_len = rng.integers(6, 10, size=N)
    T = int(traj_len.max())
    states = np.zeros((N, T, size, size, 3), np.uint8)
    actions, labels = np.zeros((N, T, 2)), np.full((N, T), -1)
    sketch = np.stack([rng.choice(3, size=2, replace=False) for _ in range(N)])
    for n in range(N):
        cut = rng.choice([1, 2, traj_len[n] - 2, traj_len[n] - 1])        # far from the even split
        for t in range(traj_len[n]):
            k = sketch[n, int(t >= cut)]
            states[n, t] = rng.integers(0, 60, size=(size, size, 3))
            states[n, t, :4, 4 * k:4 * k + 3] = 250
            actions[n, t] = [k - 1.0, 0.5 * k] + 0.1 * rng.normal(size=2)
            labels[n, t] = int(t >= cut)
    final = rng.integers(0, 256, size=(N, size, size, 3), dtype=np.uint8)
    return data.Demos(states, actions, traj_len.astype(np.int64), sketch.astype(np.int64),
                      np.full(N, 2, np.int64), labels, final, ("a", "b", "c"), {"domain": "test"}).validate()


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("images") / "frames"
    data.save_frames(image_demos(), d, frames_per_chunk=20)
    return d


def test_training_on_a_frame_directory_reads_at_most_a_minibatch_of_images(image_dir, monkeypatch):
    """spec/data.md §10: a set larger than memory trains with the images of one minibatch (or of
    one whole-set pass batch, data.pass_batch_size) in memory at a time, never the whole set."""
    demos = data.load(image_dir)
    read = []
    real_gather = data.FrameStates._gather

    def gather(self, b, t):
        read.append(len(b))
        return real_gather(self, b, t)

    def whole(self, *args, **kwargs):
        raise AssertionError("training read the whole set into memory")
    monkeypatch.setattr(data.FrameStates, "_gather", gather)
    monkeypatch.setattr(data.FrameStates, "__array__", whole)
    monkeypatch.setattr(data, "MAX_BATCH_FRAMES", 20)
    model = train.train(demos, TrainConfig.from_dict(dict(IMAGE, epochs=2)), progress=False)
    longest = int(demos.traj_len.max())
    assert read and max(read) <= max(IMAGE["batch_size"], data.pass_batch_size(demos, 64)) * longest
    assert data.pass_batch_size(demos, 64) == 20 // longest
    assert model.params["core.W1"].shape == (3, 3, 3, 2)


@pytest.mark.parametrize("train_core", [True, False])
@pytest.mark.parametrize("algo", ["taco", "gtbc", "ctcbc-mlp"])
def test_the_stages_that_train_the_nets_train_the_shared_core(monkeypatch, algo, train_core):
    """spec/training.md §2: every stage that trains the sub-policies takes its Adam step on the
    shared core too (the first step of a stage moves each entry with a nonzero gradient by lr
    against its sign); with train_core false the core keeps its initial values. CTC-BC's
    classifier stage trains the classifier's own core either way and never the policies'."""
    cfg = TrainConfig.from_dict(dict(IMAGE, algo=algo, epochs=2, warmup_epochs=1, lr=1e-2,
                                     dtype="float64", train_core=train_core))
    first_steps = []                                   # (names, lr, before, gradients, after)
    real_step = optim.Adam.step

    def step(self, params, grads):
        first = self.step_count == 0
        before = {k: v.copy() for k, v in params.items()} if first else None
        real_step(self, params, grads)
        if first:
            first_steps.append((list(self.m), self.lr, before, {k: np.copy(g) for k, g in grads.items()},
                                {k: v.copy() for k, v in params.items()}))
    monkeypatch.setattr(optim.Adam, "step", step)
    train.train(image_demos(), cfg, progress=False)
    assert len(first_steps) == {"taco": 2, "gtbc": 1, "ctcbc-mlp": 2}[algo]
    core = [f"core.{w}{i}" for i in range(2) for w in "Wb"]
    for names, lr, before, grads, after in first_steps:
        classifier = any(n.startswith("ctc.") for n in names)
        trains_core = train_core and not classifier
        assert all((name in names) == trains_core for name in core), names
        for name in core:
            if trains_core:                    # Adam's first step: lr g / (|g| + eps)
                g = grads[name]
                assert np.abs(g).max() > 0, name
                np.testing.assert_allclose(after[name], before[name] - lr * g / (np.abs(g) + 1e-8),
                                           rtol=1e-12, atol=1e-15, err_msg=name)
            else:
                assert np.array_equal(after[name], before[name]), name
        if classifier:
            assert {"ctc.core.W0", "ctc.core.b0", "ctc.core.W1", "ctc.core.b1"} <= set(names)


@pytest.mark.parametrize("algo, core_dtype", [("taco", "float64"), ("ctcbc-gru", "float64"),
                                              ("ctcbc-mlp", "float32")])
@pytest.mark.slow
def test_image_training_resumes_exactly_and_saves_its_core(tmp_path, image_dir, algo, core_dtype):
    """The core's parameters (and CTC-BC's classifier core, in either ctc_core_dtype) are
    checkpointed with the nets: an interrupted run on a frame directory ends exactly like an
    uninterrupted one, and the saved model loads with its core (float64, as every saved array)."""
    demos = data.load(image_dir)
    cfg = TrainConfig.from_dict(dict(IMAGE, algo=algo, seed=3, dtype="float32", ctc_core_dtype=core_dtype))
    out = tmp_path / "interrupted"
    assert train.train(demos, cfg, out_dir=out, stop_after=2, progress=False) is None
    if algo.startswith("ctcbc"):                  # the classifier's core trains in its own dtype
        arrays = np.load(out / json.loads((out / checkpoints.CHECKPOINT_META).read_text())["arrays_file"])
        assert arrays["param.ctc.core.W0"].dtype == arrays["adam.m.ctc.core.W0"].dtype == core_dtype
    full = train.train(demos, cfg, out_dir=tmp_path / "full", progress=False)
    resumed = train.train(demos, cfg, out_dir=out, resume=True, progress=False)
    assert_same_params(resumed.params, full.params)
    loaded = model_mod.load(out / "model")
    assert_same_params(loaded.params, full.params)
    assert loaded.policy.conv_channels == [3, 2] and loaded.policy.image_shape == [11, 11, 3]
    if algo == "ctcbc-gru":
        assert loaded.params["ctc.core.W0"].shape == (3, 3, 3, 3)
    assert 0.0 <= evaluate.alignment_accuracy(loaded, demos)["forward_argmax"] <= 1.0


@pytest.mark.parametrize("algo", ["taco", "ctcbc-gru"])
def test_image_training_reuses_its_steps_memory_and_ends_exactly_as_with_fresh_arrays(image_dir, algo, monkeypatch):
    """Every training step runs in the run's workspace (nn.workspace: the core's arrays are the
    previous step's memory); the trained parameters are bit for bit those of a run whose steps
    allocate fresh arrays. CTC-BC's steps run two cores (its classifier's, the policy's)."""
    demos = data.load(image_dir)
    cfg = TrainConfig.from_dict(dict(IMAGE, algo=algo, seed=5, epochs=2, dtype="float32"))
    scopes = []
    real_scope = nn.workspace.active_scope

    def spy():
        scope = real_scope()
        scopes.append(scope is not None)
        return scope
    monkeypatch.setattr(nn.workspace, "active_scope", spy)
    reused = train.train(demos, cfg, progress=False)
    assert any(scopes)

    @contextlib.contextmanager
    def fresh(self):
        yield self
    monkeypatch.setattr(nn.Workspace, "step", fresh)
    scopes.clear()
    assert_same_params(train.train(demos, cfg, progress=False).params, reused.params)
    assert not any(scopes)


@pytest.mark.slow
def test_taco_aligns_images_through_the_core():
    """End to end on images: TACO with the core learns where each demonstration switches from
    the bright square of one sub-task to the other's, from weak supervision, far above the even
    split it starts from (the switches lie near either end)."""
    demos = image_demos(N=40, seed=1)
    held = image_demos(N=12, seed=2)
    cfg = TrainConfig.from_dict(dict(IMAGE, epochs=25, warmup_epochs=2, lr=1e-2, stop_dropout=0.0,
                                     act_hidden=[16], stop_hidden=[16], batch_size=8))
    model = train.train(demos, cfg, progress=False)
    acc = evaluate.alignment_accuracy(model, held)["forward_argmax"]
    even = objectives.even_split_labels(held.traj_len, held.sketch_len, held.labels.shape[1])
    baseline = ((even == held.labels) & (held.labels >= 0)).sum() / held.traj_len.sum()
    assert acc >= 0.97 and baseline < 0.8, (acc, baseline)      # measured: 1.0 against 0.6-0.7


@pytest.mark.parametrize("states, conv, message", [
    ("vectors", dict(conv_channels=[4], conv_kernels=[3], conv_strides=[1]),
     "^conv_channels: a convolutional core reads image states; these states are vectors"),
    ("images", dict(), r"^conv_channels: the states are images \[11, 11, 3\]"),
])
def test_the_core_and_the_states_must_agree(nav_small, states, conv, message):
    demos = nav_small if states == "vectors" else image_demos(N=4)
    with pytest.raises(ValueError, match=message):
        train.train(demos, TrainConfig.from_dict(dict(SMALL, **conv)), progress=False)


def test_compile_refuses_image_states():
    """CompILE's boundary net reads state vectors: on images it stops with one line naming the
    algorithm, not with a shape error deep in a product."""
    with pytest.raises(ValueError, match=r"^algo compile: its boundary net reads state vectors, these states "
                                         r"are images \[11, 11, 3\]"):
        train.train(image_demos(N=4), TrainConfig.from_dict(dict(IMAGE, algo="compile")), progress=False)


def test_train_config_wants_one_entry_per_conv_layer():
    with pytest.raises(ValueError, match="^conv_channels, conv_kernels, conv_strides must have one entry"):
        TrainConfig.from_dict(dict(conv_channels=[4, 2], conv_kernels=[3], conv_strides=[1]))
    with pytest.raises(ValueError, match="^conv_strides must be a list of at most"):
        TrainConfig.from_dict(dict(conv_channels=[4], conv_kernels=[3], conv_strides=[0]))


def test_augment_changes_every_training_minibatch_and_nothing_else(nav_small, tmp_path):
    """TrainConfig.augment (spec/training.md §4): the domain's augment(batch, rng) runs once on
    every training minibatch, on a copy (the training set's own states are untouched) and never
    on held-out data; it draws from the run's generator, so a run stopped after an epoch resumes
    to the uninterrupted end; without an augmentation the config is refused by name."""
    calls = []

    def augment(batch, rng):
        calls.append(batch.n)
        batch.states += rng.normal(0.0, 0.01, batch.states.shape)

    before = nav_small.states.copy()
    cfg = config(epochs=2, warmup_epochs=0, augment=True)
    model = train.train(nav_small, cfg, progress=False, augment=augment)
    n_train = nav_small.n - round(cfg.holdout_fraction * nav_small.n)
    per_epoch = -(-n_train // cfg.batch_size)
    assert len(calls) == 2 * per_epoch and sum(calls) == 2 * n_train
    np.testing.assert_array_equal(nav_small.states, before)
    plain = train.train(nav_small, config(epochs=2, warmup_epochs=0), progress=False, augment=augment)
    assert len(calls) == 2 * per_epoch                    # augment: false ignores the function
    assert not all(np.array_equal(model.params[k], plain.params[k]) for k in policy.trainable(model.params))
    assert train.train(nav_small, cfg, out_dir=tmp_path, progress=False, augment=augment, stop_after=1) is None
    resumed = train.train(nav_small, cfg, out_dir=tmp_path, resume=True, progress=False, augment=augment)
    assert_same_params(resumed.params, model.params)
    with pytest.raises(ValueError, match="augment: true needs"):
        train.train(nav_small, cfg, progress=False)

"""taco_app.config: the one reader of training settings (defaults < domain YAML or --config <
--algo/--seed < --set), and the domains' configs shipped as package data."""
import os
import subprocess
import sys

import pytest

import taco_sim
from taco_app import config
from taco_ref.train import TrainConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("text, expected", [
    ("act_hidden=[16, 8]", ("act_hidden", [16, 8])),
    ("terminal_stop=true", ("terminal_stop", True)),
    ("normalise_states=false", ("normalise_states", False)),
    ("lr=0.001", ("lr", 0.001)),
    ("epochs=7", ("epochs", 7)),
    (" algo = gtbc", ("algo", "gtbc")),
])
def test_parse_override(text, expected):
    assert config.parse_override(text) == expected


@pytest.mark.parametrize("text", ["epochs", "=3", ""])
def test_parse_override_needs_key_equals_value(text):
    with pytest.raises(ValueError, match="--set expects key=value"):
        config.parse_override(text)


def test_parse_override_reads_exponent_notation_as_a_number():
    # PyYAML reads "1e-3" (no dot) as a string; TrainConfig coerces numeric fields
    assert config.load(None, None, ["lr=1e-3"]).lr == 0.001


def test_load_config_sources_and_precedence(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  algo: gtbc\n  epochs: 5\n  act_hidden: [7]\n  seed: 1\n")
    cfg = config.load(None, path, ["epochs=9", "stop_hidden=[4, 4]"], algo=None, seed=3)
    assert (cfg.algo, cfg.epochs, cfg.act_hidden, cfg.stop_hidden, cfg.seed) == ("gtbc", 9, [7], [4, 4], 3)
    cfg = config.load(None, path, ["algo=taco"], algo="ctcbc-mlp")     # --set wins over --algo
    assert cfg.algo == "taco"
    flat = tmp_path / "flat.yaml"
    flat.write_text("lr: 0.01\nterminal_stop: yes\n")                  # keys at the top level
    cfg = config.load(None, flat)
    assert cfg.lr == 0.01 and cfg.terminal_stop is True
    assert config.load() == TrainConfig()


def test_a_protocol_sits_between_the_yaml_and_the_overrides(tmp_path):
    """--protocol (taco_ref.config.PROTOCOLS, spec/evaluation.md §7) overrides the YAML and is
    overridden by --set; an unknown name is refused naming the known ones; prestage and
    warmup_epochs are validated."""
    path = tmp_path / "c.yaml"
    path.write_text("warmup_epochs: 4\n")
    assert config.load(None, path, protocol="paper").warmup_epochs == 0
    recipe = config.load(None, path, protocol="recipe")
    assert (recipe.prestage, recipe.warmup_epochs) == ("all", 4)
    assert config.load(None, path, ["warmup_epochs=2"], protocol="paper").warmup_epochs == 2
    assert config.load(None, path).prestage == "taco"
    with pytest.raises(ValueError, match="--protocol: expected one of paper, recipe"):
        config.load(None, None, protocol="mine")
    with pytest.raises(ValueError, match="^prestage must be one of taco, all"):
        config.load(None, None, ["prestage=some"])
    with pytest.raises(ValueError, match="^warmup_epochs must be a non-negative integer"):
        config.load(None, None, ["warmup_epochs=-1"])


def test_load_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        config.load(None, bad)
    with pytest.raises(ValueError, match=r"unknown config keys \['colour'\]"):
        config.load(None, None, ["colour=red"])
    with pytest.raises(ValueError, match="^stop_dropout must"):
        config.load(None, None, ["stop_dropout=1.5"])


def test_each_domain_config_loads_and_the_name_of_a_shipped_config_works():
    cfg = config.load("navworld")
    assert cfg.act_hidden == [100] and cfg.lr == 5e-3 and cfg.batch_size == 10 and cfg.epochs == 300
    for name in taco_sim.names():
        config.load(name)
    assert config.load(None, "dial-small").act_hidden == [200, 100]
    # the Dial's recipe moves and averages over the keys a sub-task does not press (spec/dial.md
    # §9, training.md §11), and so does the velocity variant (sigma scaled to its actions); the
    # small nets keep both off until measured
    dial, velocity = config.load("dial"), config.load(None, "dial-velocity")
    assert (dial.augment, dial.views) == (velocity.augment, velocity.views) == (True, 8)
    assert velocity.act_hidden == dial.act_hidden == [300, 200, 100] and velocity.sigma == 0.1
    for name in ("dial-small", "dial-image-small", "navworld"):
        cfg = config.load(None, name)
        assert (cfg.augment, cfg.views) == (False, 1), name
    with pytest.raises(FileNotFoundError, match="no shipped config of that name"):
        config.load(None, "no-such-config")


@pytest.mark.slow
def test_configs_are_found_after_a_non_editable_install(tmp_path):
    """Issue 10: after `pip install .` (not -e) the CLI used TrainConfig's defaults because
    configs/ was not package data. Install into a target folder and load from there."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), ROOT], check=True, capture_output=True)
    code = ("import taco_sim, taco_app.config as c; cfg = c.load('navworld'); "
            "print(taco_sim.__file__); print(cfg.epochs, cfg.sigma, cfg.stop_dropout); "
            "print(taco_sim.get('dial').models['default'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(target)), check=True).stdout.split("\n")
    assert out[0].startswith(str(target))
    shipped = config.load(None, "navworld")  # the source tree's navworld.yaml, whatever it says today
    assert out[1] == f"{shipped.epochs} {shipped.sigma} {shipped.stop_dropout}"
    assert os.path.isfile(os.path.join(out[2], "model.json")) and out[2].startswith(str(target))

"""Cell keys (taco_app.grid.keys, taco_app.grid.legacy; spec/evaluation.md §6, "The key"): a key
names the run that made a cell, so a committed cell is found again, never recomputed, and a
changed config is never taken for it.

(a) frozen keys: the version-1 keys that `taco experiment` wrote for the Dial's current recipe
    (cosine rate, averaged parameters) and today's version-2 keys of the same cells, written
    out here; (b) the rule that keeps keys valid when the config gains a field, on a config
    with one field more; (c) a cell file's key of either version is matched by its version.
"""
import dataclasses

import pytest

from taco_app.grid import store as cells, keys as cellkeys, legacy
from taco_ref import config as config_mod, train

DIAL_RECIPE = dict(act_hidden=[300, 200, 100], stop_hidden=[300, 200, 100], lr=2e-3, batch_size=6,
                   sigma=1.0, epochs=60, lr_decay="cosine", patience=60, ema=0.999,
                   holdout_fraction=0.1, stop_dropout=0.5, dropout_decay=0.98, ctc_hidden=[128],
                   ctc_lr=2e-3)
"""sim/taco_sim/configs/dial.yaml's training section when the Dial's grid of 1200
demonstrations, 5 seeds, 500 test PINs began (the cells keep it in their files)."""


def dial_cell(algo, **config):
    return dict(domain="dial", algo=algo, size=1200, seed=0, train_sketch_len=4, n_tasks=500,
                n_align=100, test_lengths=[3, 4, 5, 6, 7], config=dict(DIAL_RECIPE, **config))


# the keys the writer of version-1 cell files gave these cells (its files carry no key_version)
V1_KEYS = {"taco": "91fc2230b3d2e14e0579805694a489a743072938c2b55d112618c78c8abac5d9",
           "ctcbc-gru": "d3852070f5f8e464ddac72c86b80eb10a3b1b8e9c5f90ed43f45beb935eabe4b"}
V2_KEYS = {"taco": "f00222568d76663c1317d326e572a1afc88bcff2315bf6ce494346eceeefc6e2",
           "ctcbc-gru": "9803c17f0a3d3d51440953520f9296db0aaced53cd06fb64db9b7d4ca865e242",
           "compile": "f8974672189aaf7b4bd42f4be8b56ba8f706c222ad34b09f82f7e756e52d9283"}


@pytest.mark.parametrize("algo", sorted(V1_KEYS))
def test_version_1_keys_of_the_dial_recipe_are_the_ones_its_cell_files_carry(algo):
    """The frozen version-1 key reproduces what the version-1 writer computed for a cell with
    the averaged parameters and the cosine rate (fields its list left out only at 0 and "none"),
    and tells a cell of another recipe apart."""
    assert legacy.cell_key_v1(dial_cell(algo)) == V1_KEYS[algo]
    for changed in (dict(ema=0.0), dict(lr_decay="none"), dict(patience=8), dict(stop_dropout=0.3)):
        assert legacy.cell_key_v1(dial_cell(algo, **changed)) != V1_KEYS[algo], changed


@pytest.mark.parametrize("algo", sorted(V2_KEYS))
def test_version_2_keys_are_frozen(algo):
    """canonical() is a file format: a change to it that moves a key recomputes committed cells.
    A field the algorithm does not read leaves its key alone; one it reads moves it."""
    assert cellkeys.cell_key(dial_cell(algo)) == V2_KEYS[algo]
    assert cellkeys.cell_key(dial_cell(algo, ema=0.99)) != V2_KEYS[algo]
    unread = "compile_beta" if algo != "compile" else "ctc_lr"
    assert unread not in config_mod.fields_read_by(algo)
    assert cellkeys.cell_key(dial_cell(algo, **{unread: 0.123})) == V2_KEYS[algo]


def test_compile_cells_have_no_version_1_key():
    """CompILE came after version 1: no version-1 file can hold one of its cells."""
    assert legacy.cell_key_v1(dial_cell("compile")) is None


def test_every_config_field_is_keyed_or_declares_its_value_from_before():
    """Each TrainConfig field is one of the fields at version 2, or declares metadata["before"];
    a field added without it is reported (and so is one of version 2 that is gone)."""
    assert cellkeys.undeclared_fields() == []
    bare = dataclasses.make_dataclass("Bare", [("new_knob", float, dataclasses.field(default=0.0))],
                                      bases=(train.TrainConfig,))
    assert cellkeys.undeclared_fields(bare) == ["new_knob"]
    declared = dataclasses.make_dataclass(
        "Declared", [("new_knob", float, dataclasses.field(default=0.0, metadata={"before": 0.0}))],
        bases=(train.TrainConfig,))
    assert cellkeys.undeclared_fields(declared) == []


def test_a_field_added_at_its_value_from_before_keeps_both_keys(monkeypatch):
    """A field added to the config with metadata["before"], and read by the algorithm: at that
    value both key versions are what they were without the field; away from it the version-2
    key moves and no version-1 key exists (no version-1 file can hold such a run)."""
    cell = dial_cell("taco")
    v1, v2 = legacy.cell_key_v1(cell), cellkeys.cell_key(cell)
    grown = dataclasses.make_dataclass(
        "Grown", [("new_knob", float, dataclasses.field(default=0.0, metadata={"before": 0.0}))],
        bases=(train.TrainConfig,))
    read_by = config_mod.fields_read_by
    monkeypatch.setattr(train, "TrainConfig", grown)
    monkeypatch.setattr(config_mod, "fields_read_by", lambda algo: read_by(algo) + ("new_knob",))
    assert cellkeys.undeclared_fields() == []
    assert (legacy.cell_key_v1(cell), cellkeys.cell_key(cell)) == (v1, v2)
    moved = dict(cell, config=dict(cell["config"], new_knob=0.5))
    assert cellkeys.cell_key(moved) != v2 and legacy.cell_key_v1(moved) is None


def test_a_cell_file_is_matched_by_the_key_of_its_own_version():
    """cells.matches: no key_version is version 1, KEY_VERSION is today's; another version, or
    a key of the right version for another config, is never a match."""
    cell = dial_cell("taco")
    assert cells.matches({"key": V1_KEYS["taco"]}, cell)
    assert cells.matches({"key": V2_KEYS["taco"], "key_version": 2}, cell)
    assert not cells.matches({"key": V2_KEYS["taco"]}, cell)                   # v2 key read as v1
    assert not cells.matches({"key": V1_KEYS["taco"], "key_version": 2}, cell)
    assert not cells.matches({"key": V2_KEYS["taco"], "key_version": 3}, cell)
    assert not cells.matches({"key": V1_KEYS["taco"]}, dial_cell("taco", ema=0.99))


@pytest.mark.parametrize("train_core", [True, False])
def test_train_core_enters_a_key_only_where_a_core_is_trained(train_core):
    """train_core is keyed only for image cells that train their core: image cells computed
    before the field existed (the core left at its initial values) keep their keys at false,
    and no cell of state vectors moves whatever its value (they have no core)."""
    vectors = dial_cell("taco", train_core=train_core)
    assert "train_core" not in cellkeys.canonical(vectors)["config"]
    assert cellkeys.cell_key(vectors) == V2_KEYS["taco"]
    conv = dict(conv_channels=[10, 5, 3], conv_kernels=[5, 5, 3], conv_strides=[2, 2, 1])
    image = dict(dial_cell("taco", **conv), domain="dial-image-small", size=200, n_tasks=100, test_lengths=[5])
    keyed = cellkeys.canonical(dict(image, config=dict(image["config"], train_core=train_core)))["config"]
    assert ("train_core" in keyed) == train_core
    frozen = cellkeys.cell_key(dict(image, config=dict(image["config"], train_core=False)))
    assert (cellkeys.cell_key(dict(image, config=dict(image["config"], train_core=train_core))) == frozen) \
        == (not train_core)


@pytest.mark.parametrize("core_dtype", ["float64", "float32"])
def test_ctc_core_dtype_enters_only_the_keys_of_image_ctc_cells_that_change_it(core_dtype):
    """ctc_core_dtype is keyed only where it changes a run: CTC-BC on images at float32. At
    float64 (every CTC-BC image run before the field existed) image cells keep their keys, and
    neither state-vector cells nor other algorithms' cells move whatever its value."""
    assert cellkeys.cell_key(dial_cell("ctcbc-gru", ctc_core_dtype=core_dtype)) == V2_KEYS["ctcbc-gru"]
    conv = dict(conv_channels=[10, 5, 3], conv_kernels=[5, 5, 3], conv_strides=[2, 2, 1])
    for algo in ("taco", "ctcbc-mlp"):
        image = dict(dial_cell(algo, **conv), domain="dial-image", size=1200, n_tasks=100, test_lengths=[5])
        keyed = cellkeys.canonical(dict(image, config=dict(image["config"], ctc_core_dtype=core_dtype)))["config"]
        assert ("ctc_core_dtype" in keyed) == (algo == "ctcbc-mlp" and core_dtype == "float32"), algo
        assert keyed.get("ctc_core_dtype", "float64") == (core_dtype if algo == "ctcbc-mlp" else "float64")
        unchanged = cellkeys.cell_key(dict(image, config=dict(image["config"], ctc_core_dtype=core_dtype))) \
            == cellkeys.cell_key(image)
        assert unchanged == (algo == "taco" or core_dtype == "float64"), algo


def test_prestage_enters_a_key_only_where_it_changes_a_run():
    """prestage "taco" (every cell before the field) keeps every key; "all" moves GT-BC's and
    CTC-BC's keys but not TACO's (it warms up either way) nor CompILE's (it never does); and
    warmup_epochs is keyed for GT-BC only when its pre-stage runs."""
    for algo in ("taco", "ctcbc-gru", "compile"):
        assert cellkeys.cell_key(dial_cell(algo, prestage="taco")) == V2_KEYS[algo], algo
    assert cellkeys.cell_key(dial_cell("taco", prestage="all")) == V2_KEYS["taco"]
    assert cellkeys.cell_key(dial_cell("compile", prestage="all", warmup_epochs=3)) == V2_KEYS["compile"]
    assert cellkeys.cell_key(dial_cell("ctcbc-gru", prestage="all")) != V2_KEYS["ctcbc-gru"]
    gtbc = cellkeys.cell_key(dial_cell("gtbc"))
    assert cellkeys.cell_key(dial_cell("gtbc", warmup_epochs=0)) == gtbc       # no pre-stage runs
    recipe = cellkeys.cell_key(dial_cell("gtbc", prestage="all"))
    assert recipe != gtbc != cellkeys.cell_key(dial_cell("gtbc", prestage="all", warmup_epochs=3)) != recipe


def test_an_expert_enters_a_key_only_where_the_domain_offers_a_choice_and_it_is_new():
    """A Craft cell of the planner (Domain.expert_before) keeps the key of the cells computed
    before experts could be chosen, under both versions; the feature expert's cell has
    another; a domain without a choice ignores the field."""
    craft = dict(domain="craft", algo="gtbc", size=100, seed=0, train_sketch_len=None, n_tasks=2000,
                 n_align=100, test_lengths=None, config={})
    old = cellkeys.cell_key(craft)
    assert cellkeys.cell_key(dict(craft, expert="planner")) == old
    assert legacy.cell_key_v1(dict(craft, expert="planner")) == legacy.cell_key_v1(craft)
    assert cellkeys.cell_key(dict(craft, expert="features")) != old
    assert legacy.cell_key_v1(dict(craft, expert="features")) is None
    assert cellkeys.cell_fields(dict(craft, expert="features"))["expert"] == "features"
    assert "expert" not in cellkeys.cell_fields(dial_cell("taco"))
    assert cellkeys.cell_key(dict(dial_cell("taco"), expert=None)) == V2_KEYS["taco"]


def test_the_validation_split_enters_a_key_and_the_test_split_keeps_every_key():
    """A cell evaluated on the validation tasks (taco_ref.evaluate.SPLITS) is another cell than
    the test cell of the same run; "test", given or not, is every cell from before splits
    existed (its key unchanged). A validation cell aligns demonstrations of its own seed."""
    from taco_app.grid import cell as experiment
    assert cellkeys.cell_key(dict(dial_cell("taco"), split="test")) == V2_KEYS["taco"]
    assert cellkeys.cell_key(dict(dial_cell("taco"), split=None)) == V2_KEYS["taco"]
    validation = dict(dial_cell("taco"), split="validation")
    assert cellkeys.cell_key(validation) != V2_KEYS["taco"]
    assert cellkeys.cell_fields(validation)["split"] == "validation"
    assert "split" not in cellkeys.cell_fields(dict(dial_cell("taco"), split="test"))
    (_, test_align), (train_v, align_v) = experiment.data_specs(dial_cell("taco")), experiment.data_specs(validation)
    assert train_v == experiment.data_specs(dial_cell("taco"))[0]          # the same training data
    assert (test_align[3], align_v[3]) == (experiment.TEST_DATA_SEED, experiment.VALIDATION_DATA_SEED)


def test_named_test_conditions_enter_a_key_only_when_a_cell_has_them():
    """A cell also evaluated on the Dial's harder test is another cell; none (or an empty list)
    is every cell from before test conditions existed."""
    assert cellkeys.cell_key(dict(dial_cell("taco"), tests=[])) == V2_KEYS["taco"]
    harder = dict(dial_cell("taco"), tests=["harder"])
    assert cellkeys.cell_key(harder) != V2_KEYS["taco"]
    assert cellkeys.cell_fields(harder)["tests"] == ["harder"]
    assert "tests" not in cellkeys.cell_fields(dial_cell("taco"))

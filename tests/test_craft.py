"""The Craft domain (sim/taco_sim/craft, spec/craft.md): rules on hand-built worlds, the feature
layout against hand-computed indices, scenarios, the expert, the task environment, determinism,
the CLI and the JSON conformance cases of spec/vectors/craft/world.json. The domain contract itself is
checked by tests/test_domains.py."""
import json
import os

import numpy as np
import pytest

import taco_sim
from taco_ref import data, evaluate
from taco_app import cli
from taco_sim import craft
from taco_sim.craft import expert as ex, world as cw

I = cw.INDEX
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "spec", "vectors", "craft", "world.json")


def make_world(pos, heading=cw.DOWN, things=(), inventory=None):
    """A hand-built world: the border, things {(x, y): kind name}, the agent at pos."""
    grid = cw.empty_grid()
    for cell, name in dict(things).items():
        grid[cell] = I[name]
    inv = np.zeros(cw.N_KINDS, dtype=np.int64)
    for name, n in (inventory or {}).items():
        inv[I[name]] = n
    return cw.World(grid, tuple(pos), heading, inv)


def held(world):
    return {cw.KINDS[k]: int(n) for k, n in enumerate(world.inventory) if n}


# ---------------------------------------------------------------------------------------- rules

def test_the_kind_order_is_the_documented_one():
    assert cw.KINDS[0] == "" and cw.N_KINDS == 21 and cw.STATE_DIM == 1076
    assert cw.KINDS[1:7] == ("boundary", "workshop0", "workshop1", "workshop2", "water", "stone")
    assert cw.KINDS[7:12] == ("iron", "grass", "wood", "gold", "gem")
    assert cw.KINDS[12:] == ("plank", "stick", "axe", "rope", "bed", "shears", "cloth", "bridge", "ladder")


RECIPE_TABLE = [("plank", "workshop0", {"wood": 1}), ("axe", "workshop0", {"stick": 1, "iron": 1}),
                ("rope", "workshop0", {"grass": 1}), ("stick", "workshop1", {"wood": 1}),
                ("bed", "workshop1", {"plank": 1, "grass": 1}),
                ("shears", "workshop1", {"stick": 1, "iron": 1}), ("cloth", "workshop2", {"grass": 1}),
                ("bridge", "workshop2", {"wood": 1, "iron": 1}),
                ("ladder", "workshop2", {"plank": 1, "stick": 1})]


def test_the_recipe_file_says_what_the_issue_says():
    got = [(cw.KINDS[o], cw.KINDS[a], {cw.KINDS[k]: n for k, n in needs}) for o, a, needs in cw.RECIPES]
    assert got == RECIPE_TABLE


@pytest.mark.parametrize("output, workshop, needs", RECIPE_TABLE, ids=[r[0] for r in RECIPE_TABLE])
def test_each_recipe_makes_its_item_from_its_inputs_at_its_workshop(output, workshop, needs):
    w = make_world((4, 4), cw.UP, {(4, 5): workshop}, needs)
    event = cw.step(w, cw.USE)
    assert held(w) == {output: 1} and event["crafted"] == [I[output]] and event["used"] == I[workshop]
    # without the inputs nothing happens; at another workshop nothing of this recipe
    w = make_world((4, 4), cw.UP, {(4, 5): workshop})
    assert cw.step(w, cw.USE)["crafted"] == [] and held(w) == {}
    other = [f"workshop{i}" for i in range(3) if f"workshop{i}" != workshop][0]
    w = make_world((4, 4), cw.UP, {(4, 5): other}, needs)
    cw.step(w, cw.USE)
    assert output not in held(w)


def test_one_use_chains_recipes_in_order():
    """wood + iron at workshop1: stick (wood), then shears (stick + iron) in the same USE."""
    w = make_world((4, 4), cw.LEFT, {(3, 4): "workshop1"}, {"wood": 1, "iron": 1})
    event = cw.step(w, cw.USE)
    assert event["crafted"] == [I["stick"], I["shears"]] and held(w) == {"shears": 1}
    # two woods: one stick is made per USE, the other wood stays
    w = make_world((4, 4), cw.LEFT, {(3, 4): "workshop1"}, {"wood": 2})
    cw.step(w, cw.USE)
    assert held(w) == {"stick": 1, "wood": 1}


def test_use_picks_up_primitives_and_empties_the_cell():
    for name in ("iron", "grass", "wood", "gold", "gem"):
        w = make_world((4, 4), cw.RIGHT, {(5, 4): name})
        assert cw.step(w, cw.USE)["picked"] == I[name]
        assert held(w) == {name: 1} and w.grid[5, 4] == 0 and w.pos == (4, 4)


def test_a_bridge_clears_water_and_is_consumed():
    w = make_world((4, 4), cw.DOWN, {(4, 3): "water"})
    cw.step(w, cw.USE)
    assert w.grid[4, 3] == I["water"]                         # no bridge: nothing
    w = make_world((4, 4), cw.DOWN, {(4, 3): "water", (4, 2): "water"}, {"bridge": 1})
    assert cw.step(w, cw.USE)["cleared"] == I["water"]
    assert w.grid[4, 3] == 0 and held(w) == {}
    cw.step(w, cw.DOWN)                                       # walk onto the cleared cell
    cw.step(w, cw.USE)
    assert w.pos == (4, 3) and w.grid[4, 2] == I["water"]     # the bridge is gone


def test_an_axe_clears_stone_and_is_kept():
    w = make_world((4, 4), cw.UP, {(4, 5): "stone", (4, 6): "stone"}, {"axe": 1})
    cw.step(w, cw.USE)
    cw.step(w, cw.UP)
    cw.step(w, cw.USE)
    assert w.grid[4, 5] == 0 and w.grid[4, 6] == 0 and held(w) == {"axe": 1} and w.pos == (4, 5)
    w = make_world((4, 4), cw.UP, {(4, 5): "stone"})
    cw.step(w, cw.USE)
    assert w.grid[4, 5] == I["stone"]


def test_moves_set_the_heading_and_move_only_into_empty_cells():
    w = make_world((1, 1), cw.DOWN, {(2, 1): "workshop0"})
    for action, pos in ((cw.LEFT, (1, 1)), (cw.DOWN, (1, 1)), (cw.RIGHT, (1, 1)), (cw.UP, (1, 2)),
                        (cw.UP, (1, 3)), (cw.RIGHT, (2, 3))):
        event = cw.step(w, action)
        assert w.heading == action and w.pos == pos and event["moved"] == (pos != (1, 1))
    w = make_world((1, 1), cw.LEFT)
    before = w.grid.copy()
    cw.step(w, cw.USE)                                        # USE on the boundary: nothing
    assert np.array_equal(w.grid, before) and held(w) == {}
    with pytest.raises(ValueError, match="action"):
        cw.step(w, 5)


# ------------------------------------------------------------------------------------ features

def test_the_feature_layout_matches_hand_computed_indices():
    """spec/craft.md eq. (1): agent at (1, 1) facing UP, a wood at (2, 1), workshop0 at (1, 3),
    a gem at (7, 8), 2 iron held."""
    w = make_world((1, 1), cw.UP, {(2, 1): "wood", (1, 3): "workshop0", (7, 8): "gem"}, {"iron": 2})
    f = cw.features(w)
    assert f.shape == (1076,)

    def win(i, j, kind):      # window cell (x + i - 2, y + j - 2)
        return (i * 5 + j) * 21 + I[kind]

    def big(i, j, kind):      # pooled block (i, j)
        return 525 + (i * 5 + j) * 21 + I[kind]

    expected = {win(3, 2, "wood"): 1, win(2, 4, "workshop0"): 1}
    # boundary inside the window: x in -1..3, y in -1..3, on the grid, x == 0 or y == 0: 7 cells
    for x in range(0, 4):
        for y in range(0, 4):
            if x == 0 or y == 0:
                expected[win(x + 1, y + 1, "boundary")] = 1
    # pooled blocks cover x (and y) in 1 + 5 i - 12 .. + 4: i = 2: -1..3, 3: 4..8, 4: 9..13
    for i in range(5):
        for j in range(5):
            xs = set(range(5 * i - 11, 5 * i - 6)) & set(range(10))
            ys = set(range(5 * j - 11, 5 * j - 6)) & set(range(10))
            if any(x in (0, 9) or y in (0, 9) for x in xs for y in ys):
                expected[big(i, j, "boundary")] = 1
    expected.update({big(2, 2, "wood"): 1, big(2, 2, "workshop0"): 1, big(3, 3, "gem"): 1})
    expected[1050 + I["iron"]] = 2
    expected[1071 + cw.UP] = 1
    got = {int(k): float(f[k]) for k in np.nonzero(f)[0]}
    assert got == expected
    assert f[1075] == 0.0 and len([k for k in expected if k < 525]) == 9


def test_features_are_zero_outside_the_grid_and_in_channel_zero():
    w = make_world((8, 8), cw.DOWN)
    f = cw.features(w)
    window = f[:525].reshape(5, 5, 21)
    assert (window[:, :, 0] == 0).all() and (f[525:1050].reshape(5, 5, 21)[:, :, 0] == 0).all()
    assert (window[4, :, :] == 0).all() and (window[:, 4, :] == 0).all()    # x = 10, y = 10: off the grid
    assert window[3, 2, I["boundary"]] == 1                                   # (9, 8)


# ----------------------------------------------------------------------------------- scenarios

@pytest.mark.parametrize("task", range(10))
def test_scenarios_place_what_psketch_places(task):
    rng = np.random.default_rng(task)
    w = cw.sample_scenario(ex.TASK_GOALS[task], rng)
    counts = np.bincount(w.grid.ravel(), minlength=cw.N_KINDS)
    assert counts[I["iron"]] == counts[I["grass"]] == counts[I["wood"]] == 4
    assert all(counts[k] == 1 for k in cw.WORKSHOPS) and counts[I["boundary"]] == 36
    assert w.grid[w.pos] == 0 and w.heading == cw.DOWN and not w.inventory.any()
    goal = cw.KINDS[ex.TASK_GOALS[task]]
    if goal in ("gold", "gem"):
        (gx, gy), = np.argwhere(w.grid == I[goal])
        assert gy == 1 and 1 <= gx <= 8
        wall = I["water"] if goal == "gold" else I["stone"]
        ring = [w.grid[gx + i, gy + j] for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0)]
        assert all(k in (wall, I["boundary"]) for k in ring) and wall in ring
    else:
        assert counts[I["gold"]] == counts[I["gem"]] == counts[I["water"]] == counts[I["stone"]] == 0


def test_the_task_environment_is_deterministic_by_seed():
    a, b = ex.CraftTask(), ex.CraftTask()
    s = ex.TASK_SKETCHES[9]
    assert np.array_equal(a.reset(s, seed=3), b.reset(s, seed=3))
    for action in (0, 3, 3, 4, 1, 2, 4):
        assert np.array_equal(a.step(action), b.step(action))
    assert not np.array_equal(a.reset(s, seed=3), b.reset(s, seed=4))


# ------------------------------------------------------------------------- expert and episodes

@pytest.mark.slow
def test_the_planner_succeeds_at_least_99_percent_under_the_budgets():
    """3000 DART rollouts (seed 1, the default dart_eps), every task drawn uniformly: each
    sub-task done within SUBTASK_STEPS actions, the goal in the inventory at the last STOP."""
    rng = np.random.default_rng(1)
    ok = [ex.rollout(int(rng.integers(10)), rng, expert="planner") is not None for _ in range(3000)]
    assert np.mean(ok) >= 0.99


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["craft", "craft-holdout"])
def test_the_feature_expert_earns_at_least_0_9_mean_reward(domain):
    """spec/craft.md §10: the feature expert through the evaluation protocol a model gets, 2000
    tasks in new worlds (seed 0), reaches the paper's demonstrator (0.9) on both splits; the
    planner, reading the whole map, more."""
    from taco_ref import evaluate
    dom = taco_sim.get(domain)
    features = evaluate.protocol(evaluate.domain_expert(dom), dom, 2000, seed=0)
    assert features["task_accuracy"] >= 0.9
    if domain == "craft":
        planner = evaluate.protocol(evaluate.domain_expert(dom, "planner"), dom, 500, seed=0)
        assert planner["task_accuracy"] >= 0.97


@pytest.mark.parametrize("expert", ["features", "planner"])
def test_an_expert_demonstration_replays_to_the_goal(expert):
    """Replaying the executed actions is not possible (noise is not recorded), so replay a
    noise-free demonstration: its recorded actions, its labels and STOPs drive the env to done.
    (The feature expert fails some worlds, spec/craft.md §10: the first world it completes.)"""
    for task in range(10):
        for attempt in range(20):
            out = ex.rollout(task, np.random.default_rng([task, attempt]), dart_eps=0.0, expert=expert)
            if out is not None:
                break
        states, actions, labels, final = out
        env = ex.CraftTask()
        obs = env.reset(ex.TASK_SKETCHES[task], seed=int(np.random.default_rng([task, attempt]).integers(2**63)))
        for t, a in enumerate(actions):
            assert np.array_equal(obs, states[t]) and env.active == labels[t]
            if expert == "features":
                assert a == ex.feature_action(obs, env.sketch[env.active])   # a function of s alone
            obs = env.step(a)
            if t + 1 == len(actions) or labels[t + 1] != labels[t]:
                env.stop()
        assert env.done and np.array_equal(obs, final)
        if expert == "planner":
            assert env.progress == len(env.sketch)


def test_the_last_stop_without_the_goal_fails_and_early_stops_count_nothing():
    env = ex.CraftTask()
    env.reset(ex.TASK_SKETCHES[0], seed=0)            # plank: get_wood, make0
    env.step(cw.DOWN)
    env.stop()                                         # get_wood stopped without a wood
    assert env.progress == 0 and env.active == 1 and not env.failed
    env.step(cw.UP)
    env.stop()
    assert env.failed and not env.done and env.reward == 0.0 and env.progress == 0
    assert env.subtask_budget == 15 and env.budget(2) == env.budget(5) == 100


def test_unknown_sketches_are_refused():
    with pytest.raises(ValueError, match="not the sketch of a Craft task"):
        ex.CraftTask().reset([0, 0], seed=0)


@pytest.mark.slow
def test_collection_is_deterministic_mixed_and_labelled_by_sketch_step():
    a = craft.collect_all(40, None, 5)
    b = craft.collect_all(40, None, 5)
    assert a.fingerprint() == b.fingerprint() and a.discrete and a.meta["n_actions"] == 5
    assert set(a.sketch_len.tolist()) >= {2, 4}                   # a mix of lengths
    assert ((a.sketch == -1) == (np.arange(a.sketch.shape[1]) >= a.sketch_len[:, None])).all()
    for n in range(a.n):
        T = a.traj_len[n]
        # the inventory grows by exactly one pick-up at the last step of every get_X segment
        inv = np.vstack([a.states[n, :T, 1050:1071], a.final_state[n, None, 1050:1071]])
        for l in range(a.sketch_len[n]):
            name = ex.VOCAB[a.sketch[n, l]]
            last = np.nonzero(a.labels[n, :T] == l)[0][-1]
            if name.startswith("get_"):
                # the feature expert STOPs get_X once an X is held (spec/craft.md §10): one it
                # picked up in this segment, or, rarely, one picked up earlier to clear its way
                first, kind = np.nonzero(a.labels[n, :T] == l)[0][0], I[name[4:]]
                assert inv[last + 1, kind] >= 1
                if inv[first, kind] == 0:
                    assert inv[last + 1, kind] == 1 and inv[last, kind] == 0
    only4 = craft.collect_all(10, 4, 5)
    assert (only4.sketch_len == 4).all()
    with pytest.raises(ValueError, match="no task of length"):
        craft.collect_all(3, 7, 0)


@pytest.mark.slow
def test_the_holdout_split_never_trains_on_bed_or_axe():
    dom = taco_sim.get("craft-holdout")
    demos = dom.collect(60, None, 2)
    held_out = {ex.TASK_SKETCHES[i] for i in ex.HOLDOUT}
    seen = {tuple(r[r >= 0].tolist()) for r in demos.sketch}
    assert held_out == {ex.TASK_SKETCHES[ex.TASK_NAMES.index(n)] for n in ("make[bed]", "make[axe]")}
    assert not seen & held_out and len(seen) == 8
    test = dom.test_sketches(50, np.random.default_rng(0))
    assert {tuple(r) for r in test.tolist()} == held_out
    drawn = taco_sim.get("craft").test_sketches(400, np.random.default_rng(0))
    assert drawn.shape == (400, 5)
    assert {tuple(evaluate.unpad(r)) for r in drawn} == set(ex.TASK_SKETCHES)     # all ten tasks


def test_render_draws_the_grid_and_the_agent():
    env = ex.CraftTask()
    env.reset(ex.TASK_SKETCHES[8], seed=1)
    img = env.render()
    assert img.dtype == np.uint8 and img.shape == (160, 224, 3)
    x, y = env.world.pos
    assert (img[(9 - y) * 16 + 4, x * 16 + 4] == 0).all()       # the agent's black square


# ---------------------------------------------------------------------------------- CLI, cases

def test_cli_collects_craft(tmp_path, capsys):
    out = tmp_path / "craft.npz"
    assert cli.main(["collect", "craft", "--n", "6", "--seed", "2", "--out", str(out)]) == 0
    demos = data.load(str(out))
    assert demos.n == 6 and demos.meta["domain"] == "craft" and demos.discrete
    assert "wrote 6 demonstrations" in capsys.readouterr().out


def _world_from_case(case):
    grid = np.zeros((cw.W, cw.H), dtype=np.int64)
    for x, y, name in case["things"]:
        grid[x, y] = I[name]
    grid[0, :] = grid[-1, :] = grid[:, 0] = grid[:, -1] = I["boundary"]
    inv = np.zeros(cw.N_KINDS, dtype=np.int64)
    for name, n in case["inventory"].items():
        inv[I[name]] = n
    return cw.World(grid, tuple(case["pos"]), cw.ACTION_NAMES.index(case["heading"]), inv)


def test_the_conformance_cases_of_the_spec_hold():
    """spec/vectors/craft/world.json: a fixed world, actions, and after each the position, heading,
    inventory and the non-zero features (index: value)."""
    with open(CASES, encoding="utf-8") as f:
        cases = json.load(f)
    assert cases["kinds"] == list(cw.KINDS[1:]) and len(cases["cases"]) >= 3
    for case in cases["cases"]:
        w = _world_from_case(case)
        assert {int(k): v for k, v in case["features"].items()} == \
            {int(k): float(cw.features(w)[k]) for k in np.nonzero(cw.features(w))[0]}
        for step in case["steps"]:
            cw.step(w, cw.ACTION_NAMES.index(step["action"]))
            f = cw.features(w)
            assert list(w.pos) == step["pos"] and cw.ACTION_NAMES[w.heading] == step["heading"]
            assert held(w) == step["inventory"], (case["name"], step)
            assert {int(k): v for k, v in step["features"].items()} == \
                {int(k): float(f[k]) for k in np.nonzero(f)[0]}, (case["name"], step["action"])

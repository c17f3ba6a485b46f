"""Writes spec/vectors/craft/world.json: Craft conformance cases (spec/craft.md §8).

Each case is a hand-built world (the border is always boundary; things are listed as
[x, y, kind]), the agent's position and heading, the inventory, then actions; after the start
and after every action the file records the position, heading, inventory and the non-zero
features as {index: value} (eq. (1) of spec/craft.md). The worlds and actions were chosen by
hand to exercise every rule; the expected values are this implementation's output, and
tests/test_craft.py checks the rules they rest on against hand-computed values.

    python spec/vectors/craft/generate.py
"""
import json
import os

import numpy as np

from taco_sim.craft import world as cw

CASES = [
    {"name": "pick up, turn against an obstacle, chain stick into shears at workshop1",
     "things": [[4, 3, "wood"], [5, 4, "iron"], [3, 4, "workshop1"]],
     "pos": [4, 4], "heading": "DOWN", "inventory": {},
     "actions": ["USE", "RIGHT", "USE", "LEFT", "USE", "USE"]},
    {"name": "a bridge clears one water cell of the ring around gold",
     "things": [[4, 1, "gold"], [3, 1, "water"], [5, 1, "water"], [3, 2, "water"],
                [4, 2, "water"], [5, 2, "water"]],
     "pos": [4, 3], "heading": "UP", "inventory": {"bridge": 1},
     "actions": ["DOWN", "USE", "DOWN", "USE", "LEFT", "USE", "UP"]},
    {"name": "an axe clears stone and is kept; moves into the border are blocked",
     "things": [[1, 3, "stone"], [2, 2, "gem"], [1, 4, "stone"]],
     "pos": [1, 2], "heading": "DOWN", "inventory": {"axe": 1},
     "actions": ["LEFT", "DOWN", "UP", "USE", "UP", "USE", "RIGHT", "DOWN", "RIGHT", "USE"]},
    {"name": "every recipe of workshop0 and workshop2 with their inputs held",
     "things": [[6, 6, "workshop0"], [6, 8, "workshop2"]],
     "pos": [6, 7], "heading": "DOWN",
     "inventory": {"wood": 2, "grass": 2, "stick": 2, "iron": 2, "plank": 1},
     "actions": ["USE", "UP", "USE", "USE"]},
]


def world_of(case):
    grid = cw.empty_grid()
    for x, y, name in case["things"]:
        grid[x, y] = cw.INDEX[name]
    inv = np.zeros(cw.N_KINDS, dtype=np.int64)
    for name, n in case["inventory"].items():
        inv[cw.INDEX[name]] = n
    return cw.World(grid, tuple(case["pos"]), cw.ACTION_NAMES.index(case["heading"]), inv)


def sparse(f):
    return {str(int(k)): float(f[k]) for k in np.nonzero(f)[0]}


def record(world, action=None):
    out = {} if action is None else {"action": action}
    out.update(pos=list(world.pos), heading=cw.ACTION_NAMES[world.heading],
               inventory={cw.KINDS[k]: int(n) for k, n in enumerate(world.inventory) if n},
               features=sparse(cw.features(world)))
    return out


def main():
    cases = []
    for case in CASES:
        w = world_of(case)
        out = dict(case, features=sparse(cw.features(w)), steps=[])
        del out["actions"]
        for action in case["actions"]:
            cw.step(w, cw.ACTION_NAMES.index(action))
            out["steps"].append(record(w, action))
        cases.append(out)
    doc = {"about": "Craft conformance cases, spec/craft.md section 8; features as {index: value}, "
                    "zeros omitted; kinds[i] has id i + 1",
           "kinds": list(cw.KINDS[1:]), "actions": list(cw.ACTION_NAMES), "cases": cases}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "world.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

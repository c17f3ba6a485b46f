"""Craft's world: the grid, the rules of a step, the 1076 features and the scenarios; spec/craft.md.

Our own implementation of the rules of psketch's Craft (Andreas et al., 2017; github
jacobandreas/psketch, worlds/craft.py and resources/craft/recipes.yaml), stated in
``recipes.yaml`` beside this module. Coordinates are (x, y) with x the first grid index; DOWN
is y - 1, UP y + 1, LEFT x - 1, RIGHT x + 1 (psketch's). The border cells (x or y equal to 0 or
9) hold ``boundary``; an empty cell holds kind 0.

Rules of one step (:func:`step`, spec/craft.md §3):
  - a move (DOWN, UP, LEFT, RIGHT) sets the heading; the agent moves one cell that way only
    into an empty cell;
  - USE acts on the faced cell: a primitive (or any non-environment kind) is picked up (inventory
    + 1, cell emptied); on a workshop every recipe of that workshop whose inputs are held is
    applied, in recipe order (so one USE can chain, e.g. wood + iron at workshop1 makes a stick
    and then shears); water with a bridge held is cleared and the bridge consumed; stone with an
    axe held is cleared and the axe kept; anything else (boundary, an empty cell) does nothing.

Symbol | Shape         | Meaning
W, H   |               | grid width and height = 10, 10
N_KINDS|               | 21 kind ids (0 unused)
D      |               | feature dimension = 2 * 5 * 5 * 21 + 21 + 4 + 1 = 1076
A      |               | number of actions = 5
"""
import os
from dataclasses import dataclass

import numpy as np
import yaml

_HERE = os.path.dirname(os.path.abspath(__file__))
RECIPES_PATH = os.path.join(_HERE, "recipes.yaml")

with open(RECIPES_PATH, encoding="utf-8") as _f:
    _RULES = yaml.safe_load(_f)

KINDS = ("",) + tuple(_RULES["kinds"])
"""Kind names by id; id 0 (the empty string) is unused: an empty cell holds 0."""
N_KINDS = len(KINDS)
INDEX = {name: i for i, name in enumerate(KINDS) if name}
"""Kind id by name."""
ENVIRONMENT = frozenset(INDEX[k] for k in _RULES["environment"])
PRIMITIVES = tuple(INDEX[k] for k in _RULES["primitives"])
GRABBABLE = frozenset(i for i in range(1, N_KINDS) if i not in ENVIRONMENT)
"""Kinds a USE picks up: every kind outside the environment."""
WORKSHOPS = tuple(INDEX[f"workshop{i}"] for i in range(3))
BOUNDARY, WATER, STONE = INDEX["boundary"], INDEX["water"], INDEX["stone"]
BRIDGE, AXE = INDEX["bridge"], INDEX["axe"]
RECIPES = tuple((INDEX[r["make"]], INDEX[r["at"]],
                 tuple((INDEX[k], int(n)) for k, n in r["needs"].items()))
                for r in _RULES["recipes"])
"""(output kind, workshop kind, ((input kind, count), ...)) in the order a USE applies them."""

W = H = 10
WINDOW = 5
"""Side of the egocentric window, and of the blocks the big window is max-pooled in."""
BIG = WINDOW * WINDOW
"""Side of the big egocentric window (25), max-pooled in WINDOW x WINDOW blocks to 5 x 5."""
STATE_DIM = 2 * WINDOW * WINDOW * N_KINDS + N_KINDS + 4 + 1
"""D = 1076: window one-hot (525), pooled big window (525), inventory (21), heading (4), constant (1)."""
N_RESOURCE = 4
"""Each of iron, grass and wood is placed this many times (psketch)."""
TREASURE_Y = 1
"""gold and gem lie at y = 1, the row next to the y = 0 border (psketch's gy = 1)."""

DOWN, UP, LEFT, RIGHT, USE = range(5)
N_ACTIONS = 5
ACTION_NAMES = ("DOWN", "UP", "LEFT", "RIGHT", "USE")
MOVES = ((0, -1), (0, 1), (-1, 0), (1, 0))
"""(dx, dy) of DOWN, UP, LEFT, RIGHT."""


@dataclass
class World:
    """One Craft state.

    Field     | Shape   | Meaning
    grid      | (W, H)  | int64 kind id per cell, 0 empty
    pos       | (2,)    | agent cell (x, y), a tuple of ints; always an empty cell
    heading   |         | DOWN, UP, LEFT or RIGHT (the last move action)
    inventory | (N_KINDS,) | int64 count per kind
    """

    grid: np.ndarray
    pos: tuple
    heading: int
    inventory: np.ndarray

    def copy(self):
        return World(self.grid.copy(), tuple(self.pos), int(self.heading), self.inventory.copy())

    def faced(self):
        """The (x, y) cell the agent faces (always inside the grid: the agent is inside the border)."""
        dx, dy = MOVES[self.heading]
        return self.pos[0] + dx, self.pos[1] + dy


def empty_grid():
    """(W, H) grid with the boundary border and an empty inside."""
    grid = np.zeros((W, H), dtype=np.int64)
    grid[0, :] = grid[-1, :] = grid[:, 0] = grid[:, -1] = BOUNDARY
    return grid


def step(world, action):
    """Apply action (0..4) to world in place (rules in the module docstring); returns the event,
    a dict: picked (kind id or None), crafted (list of kind ids), used (kind id of the faced cell
    on USE, or None), cleared (kind id of water/stone removed, or None), moved (bool)."""
    action = int(action)
    if not 0 <= action < N_ACTIONS:
        raise ValueError(f"action: expected an id in [0, {N_ACTIONS}), got {action}")
    event = {"picked": None, "crafted": [], "used": None, "cleared": None, "moved": False}
    if action != USE:
        world.heading = action
        dx, dy = MOVES[action]
        nx, ny = world.pos[0] + dx, world.pos[1] + dy
        if world.grid[nx, ny] == 0:
            world.pos = (nx, ny)
            event["moved"] = True
        return event
    x, y = world.faced()
    thing = int(world.grid[x, y])
    if thing == 0:
        return event
    event["used"] = thing
    inv = world.inventory
    if thing in GRABBABLE:
        inv[thing] += 1
        world.grid[x, y] = 0
        event["picked"] = thing
    elif thing in WORKSHOPS:
        for output, at, needs in RECIPES:
            if at == thing and all(inv[k] >= n for k, n in needs):
                for k, n in needs:
                    inv[k] -= n
                inv[output] += 1
                event["crafted"].append(output)
    elif thing == WATER and inv[BRIDGE] > 0:
        world.grid[x, y] = 0
        inv[BRIDGE] -= 1
        event["cleared"] = WATER
    elif thing == STONE and inv[AXE] > 0:
        world.grid[x, y] = 0
        event["cleared"] = STONE
    return event


def one_hot_grid(grid):
    """(W, H, N_KINDS) float64 one-hot of the kinds; channel 0 (empty) is all zero."""
    out = np.zeros(grid.shape + (N_KINDS,))                              # (W, H, N_KINDS)
    xs, ys = np.nonzero(grid)
    out[xs, ys, grid[xs, ys]] = 1.0
    return out


def features(world):
    """The (D,) = (1076,) float64 features of spec/craft.md eq. (1), in this order:

    Slice       | Shape       | Meaning
    [0, 525)    | (5, 5, 21)  | window: one-hot kinds of cells (x + i - 2, y + j - 2), i, j in 0..4,
                |             | flattened (i, j, kind); zero outside the grid
    [525, 1050) | (5, 5, 21)  | big window: cells (x + u - 12, y + v - 12), u, v in 0..24, one-hot,
                |             | max-pooled over u // 5 = i, v // 5 = j; flattened (i, j, kind)
    [1050, 1071)| (21,)       | inventory counts by kind id
    [1071, 1075)| (4,)        | heading one-hot (DOWN, UP, LEFT, RIGHT)
    1075        | (1,)        | the constant 0 (psketch's last feature)
    """
    half = BIG // 2                                                      # 12
    pad = np.zeros((W + 2 * half, H + 2 * half, N_KINDS))                # (34, 34, N_KINDS)
    pad[half:half + W, half:half + H] = one_hot_grid(world.grid)
    x, y = world.pos
    big = pad[x:x + BIG, y:y + BIG]                                      # (25, 25, N_KINDS)
    w = WINDOW // 2
    small = big[half - w:half + w + 1, half - w:half + w + 1]            # (5, 5, N_KINDS)
    pooled = big.reshape(WINDOW, WINDOW, WINDOW, WINDOW, N_KINDS).max(axis=(1, 3))  # (5, 5, N_KINDS)
    heading = np.zeros(4)
    heading[world.heading] = 1.0
    return np.concatenate([small.ravel(), pooled.ravel(), world.inventory.astype(np.float64),
                           heading, [0.0]])                              # (D,)


def _free_cells(grid, taken):
    """Cells (k, 2) that hold nothing and are not in taken, in row-major (x, y) order."""
    free = grid == 0
    for cell in taken:
        free[cell] = False
    return np.argwhere(free)


def sample_scenario(goal, rng):
    """A fresh World for a task whose goal kind is goal (spec/craft.md §2), drawn with rng.

    In order: for goal gold (gem), the treasure at (1 + rng.integers(W - 2), TREASURE_Y) and water
    (stone) on every empty cell of the 3 x 3 square around it; then N_RESOURCE each of iron,
    grass and wood, then workshop0, workshop1, workshop2, then the agent, each on a cell drawn
    uniformly from the empty cells (rng.integers over the row-major list of empty cells); the
    agent faces DOWN with an empty inventory. psketch builds every scenario this way (its
    ingredient list is not used).
    """
    grid = empty_grid()
    if goal in (INDEX["gold"], INDEX["gem"]):
        gx = 1 + int(rng.integers(W - 2))
        wall = WATER if goal == INDEX["gold"] else STONE
        grid[gx, TREASURE_Y] = goal
        for i in (-1, 0, 1):
            for j in (-1, 0, 1):
                if grid[gx + i, TREASURE_Y + j] == 0:
                    grid[gx + i, TREASURE_Y + j] = wall
    for kind in (INDEX["iron"], INDEX["grass"], INDEX["wood"]):
        for _ in range(N_RESOURCE):
            free = _free_cells(grid, ())
            grid[tuple(free[rng.integers(len(free))])] = kind
    for kind in WORKSHOPS:
        free = _free_cells(grid, ())
        grid[tuple(free[rng.integers(len(free))])] = kind
    free = _free_cells(grid, ())
    pos = tuple(int(v) for v in free[rng.integers(len(free))])
    return World(grid, pos, DOWN, np.zeros(N_KINDS, dtype=np.int64))


COLOURS = {
    "boundary": (90, 90, 90), "workshop0": (200, 120, 40), "workshop1": (160, 80, 160),
    "workshop2": (60, 140, 200), "water": (40, 90, 230), "stone": (140, 140, 150),
    "iron": (190, 190, 210), "grass": (90, 200, 70), "wood": (130, 85, 40), "gold": (240, 200, 30),
    "gem": (230, 60, 150)}
"""Tile colours of the kinds that lie on the grid (render)."""


def render(world, cell=16):
    """(H * cell, (W + 4) * cell, 3) uint8 picture: the grid with y up (row 0 of the picture is
    y = H - 1), the agent as a black square with a white mark on its heading side, and the
    inventory to the right as one coloured bar per held kind (height = count)."""
    img = np.full((H * cell, (W + 4) * cell, 3), 255, dtype=np.uint8)
    for x in range(W):
        for y in range(H):
            name = KINDS[world.grid[x, y]]
            if name:
                r = (H - 1 - y) * cell
                img[r + 1:r + cell - 1, x * cell + 1:(x + 1) * cell - 1] = COLOURS.get(name, (0, 0, 0))
    x, y = world.pos
    r, c = (H - 1 - y) * cell, x * cell
    img[r + 2:r + cell - 2, c + 2:c + cell - 2] = 0
    dx, dy = MOVES[world.heading]
    mr, mc = r + cell // 2 - dy * (cell // 3), c + cell // 2 + dx * (cell // 3)
    img[mr - 2:mr + 2, mc - 2:mc + 2] = 255
    held = [k for k in range(1, N_KINDS) if world.inventory[k] > 0]
    palette = [(200, 30, 30), (30, 160, 30), (30, 30, 200), (200, 140, 0), (120, 0, 160), (0, 150, 150)]
    for i, k in enumerate(held[:2 * H]):
        colour = COLOURS.get(KINDS[k], palette[k % len(palette)])
        r = (i % H) * cell
        c = (W + 1 + 2 * (i // H)) * cell // 1
        n = min(int(world.inventory[k]), 4)
        img[r + 2:r + cell - 2, c:c + n * cell // 4] = colour
    return img

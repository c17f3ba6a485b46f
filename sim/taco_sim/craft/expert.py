"""Craft's tasks, task environment, planner expert and DART collection; spec/craft.md §4-6.

Tasks and sketches are stated in ``tasks.yaml`` beside this module (psketch's hints). A task
environment (:class:`CraftTask`) runs one task the way psketch scores it: reward 1 when the last
sketch step STOPs with the goal kind in the inventory, else 0; at most ``EPISODE_STEPS`` actions
per episode and ``SUBTASK_STEPS`` per sub-task (a forced STOP, via ``subtask_budget``).

The expert (:func:`expert_action`) plans afresh in every state: the cheapest path (Dijkstra; an
empty cell costs 1, a cell it can clear costs 2: one USE then the move) to a cell next to the
nearest object its sub-task needs (get_X: a cell of kind X; makeN: workshop N), then faces that
object and USEs it. Clearable cells are the primitives iron, grass, wood (picked up on the way),
water while a bridge is held (at most as many water cells as bridges) and stone while an axe is
held. A sub-task is complete when its effect happens (:func:`subtask_done`): get_X when a USE
picks up an X, makeN when a USE on workshop N crafts something. The expert's STOP is the state
right after that USE, and the label of step t is the sketch position at s_t (as in Nav-World).

DART noise (Laskey et al., 2017) for discrete actions: with probability ``DART_EPS`` the
executed action is drawn uniformly from the 5 actions; the recorded action is always the
expert's action in the visited state.

Symbol | Shape | Meaning
T      |       | steps of a demonstration (at most EPISODE_STEPS)
L      |       | sketch length, 2..5 (a mix)
K      |       | sub-tasks = 8
D      |       | features = 1076
A      |       | actions = 5 (discrete)
"""
import heapq
import os

import numpy as np
import yaml

from taco_ref.data import assemble, collected_on
from taco_sim.domain import check_collect_args
from taco_sim.craft import world as cw

_HERE = os.path.dirname(os.path.abspath(__file__))
TASKS_PATH = os.path.join(_HERE, "tasks.yaml")
with open(TASKS_PATH, encoding="utf-8") as _f:
    _SPEC = yaml.safe_load(_f)

VOCAB = tuple(_SPEC["subtasks"])
"""Sub-task names; ids index this tuple."""
K = len(VOCAB)
TASK_NAMES = tuple(t["name"] for t in _SPEC["tasks"])
TASK_GOALS = tuple(cw.INDEX[t["goal"]] for t in _SPEC["tasks"])
"""Goal kind id of each task."""
TASK_SKETCHES = tuple(tuple(VOCAB.index(s) for s in t["sketch"]) for t in _SPEC["tasks"])
"""Sketch (sub-task ids) of each task; distinct, so a sketch names its task."""
HOLDOUT = tuple(TASK_NAMES.index(n) for n in _SPEC["holdout"])
"""Task ids of the zero-shot split's test tasks (bed, axe)."""
ALL_TASKS = tuple(range(len(TASK_NAMES)))
TRAIN_TASKS_HOLDOUT = tuple(i for i in ALL_TASKS if i not in HOLDOUT)
PRIMITIVES3 = (cw.INDEX["iron"], cw.INDEX["grass"], cw.INDEX["wood"])
"""The primitives placed everywhere, the only cells the expert may pick up on its way."""
_TASK_OF_SKETCH = {s: i for i, s in enumerate(TASK_SKETCHES)}

EPISODE_STEPS = 100
"""Actions per episode (psketch's trainer.max_timesteps; psketch also spent a step on each STOP)."""
SUBTASK_STEPS = 15
"""Actions per sub-task before a forced STOP (psketch's model.max_subtask_timesteps)."""
DART_EPS = 0.1
"""Probability that the executed action is a uniformly drawn move instead of the expert's
(while the sub-task's budget has room, see rollout)."""
NOISE_MARGIN = 4
"""Noise is applied only while the plan's steps + NOISE_MARGIN fit the sub-task's budget. A
random move costs the expert about 2 more actions (the move and its undo), but replanning after
it can cost more; measured on 3000 rollouts (seed 1, dart_eps 0.1), expert success was 98.4 %
with a margin of 2, 98.9 % with 3 and 99.1 % with 4 (noise-free: 99.2 %)."""
N_ACTIONS = cw.N_ACTIONS
STATE_DIM = cw.STATE_DIM


def task_of(sketch):
    """Task id of a sketch (a sequence of sub-task ids); ValueError for a sketch of no task."""
    key = tuple(int(k) for k in sketch)
    if key not in _TASK_OF_SKETCH:
        names = [VOCAB[k] if 0 <= k < K else k for k in key]
        raise ValueError(f"sketch {names} is not the sketch of a Craft task "
                         f"(known: {', '.join(TASK_NAMES)})")
    return _TASK_OF_SKETCH[key]


def subtask_target(subtask):
    """('get', kind id) or ('make', workshop kind id) of a sub-task id."""
    name = VOCAB[subtask]
    if name.startswith("get_"):
        return "get", cw.INDEX[name[4:]]
    return "make", cw.INDEX["workshop" + name[4:]]


def subtask_done(subtask, event):
    """Whether the step whose event is given completes the sub-task (module docstring)."""
    verb, kind = subtask_target(subtask)
    if verb == "get":
        return event["picked"] == kind
    return event["used"] == kind and bool(event["crafted"])


def _step_cost(world, cell, waters, pick):
    """Cost of entering cell and the water count after it, or None when it is impassable.
    pick: the kinds that may be picked up on the way."""
    kind = int(world.grid[cell])
    if kind == 0:
        return 1, waters
    if kind in pick:
        return 2, waters
    if kind == cw.STONE and world.inventory[cw.AXE] > 0:
        return 2, waters
    if kind == cw.WATER and waters < world.inventory[cw.BRIDGE]:
        return 2, waters + 1
    return None


def plan(world, target_kind, pickable=PRIMITIVES3):
    """The expert's path: a list of cells from world.pos to a cell next to a cell of target_kind,
    and the target cells next to its end; (None, None) when no target can be reached.

    Cheapest first (Dijkstra; ties broken by the order DOWN, UP, LEFT, RIGHT): entering an empty
    cell costs 1, clearing and entering a cell costs 2. Primitives of the kinds pickable on the
    way are picked up only when no path avoids them (an extra iron can turn a stick into shears
    at workshop1: :func:`safe_pickups` says which kinds are harmless), and any primitive only
    when nothing else is left.
    """
    for pick in ((), tuple(pickable), PRIMITIVES3):
        path, near = _dijkstra(world, target_kind, pick)
        if path is not None:
            return path, near
    return None, None


def _dijkstra(world, target_kind, pick):
    targets = {tuple(int(v) for v in c) for c in np.argwhere(world.grid == target_kind)}
    if not targets:
        return None, None
    start = (tuple(world.pos), 0)
    best = {start: 0}
    parent = {start: None}
    heap = [(0, 0, start)]
    count = 1
    while heap:
        cost, _, node = heapq.heappop(heap)
        if cost > best[node]:
            continue
        (x, y), waters = node
        near = [(x + dx, y + dy) for dx, dy in cw.MOVES if (x + dx, y + dy) in targets]
        if near:
            path = []
            while node is not None:
                path.append(node[0])
                node = parent[node]
            return path[::-1], near
        for dx, dy in cw.MOVES:
            cell = (x + dx, y + dy)
            step_cost = _step_cost(world, cell, waters, pick)
            if step_cost is None:
                continue
            nxt = (cell, step_cost[1])
            total = cost + step_cost[0]
            if total < best.get(nxt, np.inf):
                best[nxt] = total
                parent[nxt] = node
                heapq.heappush(heap, (total, count, nxt))
                count += 1
    return None, None


def _direction(src, dst):
    return cw.MOVES.index((dst[0] - src[0], dst[1] - src[1]))


def safe_pickups(world, sketch, position, goal):
    """The primitive kinds (iron, grass, wood) whose extra pick-up now, while sketch step position
    is active, still lets every later step do its part and the sketch make the goal. The rest of
    the sketch is simulated on the inventory alone: get_X adds an X (get_gold needs and uses a
    bridge, get_gem needs an axe), makeN applies workshop N's recipes in order and must make
    something."""
    safe = []
    for kind in PRIMITIVES3:
        inv = world.inventory.copy()
        inv[kind] += 1
        ok = True
        for subtask in sketch[position:]:
            verb, target = subtask_target(int(subtask))
            if verb == "get":
                tool = {cw.INDEX["gold"]: cw.BRIDGE, cw.INDEX["gem"]: cw.AXE}.get(target)
                if tool is not None and inv[tool] < 1:
                    ok = False
                    break
                inv[cw.BRIDGE] -= tool == cw.BRIDGE
                inv[target] += 1
                continue
            made = False
            for output, at, needs in cw.RECIPES:
                if at == target and all(inv[k] >= n for k, n in needs):
                    for k, n in needs:
                        inv[k] -= n
                    inv[output] += 1
                    made = True
            ok = ok and made
        if ok and inv[goal] > 0:
            safe.append(kind)
    return tuple(safe)


def expert_action(world, subtask, pickable=PRIMITIVES3):
    """The expert's action (0..4) for sub-task in world, or None when it sees no way to do it."""
    return expert_plan(world, subtask, pickable)[0]


def expert_plan(world, subtask, pickable=PRIMITIVES3):
    """(action, steps): the expert's action and the number of actions its plan takes from here
    to the completing USE (an upper bound: path cost + one turn + the USE); (None, None) when
    it sees no way to do the sub-task."""
    verb, kind = subtask_target(subtask)
    path, near = plan(world, kind, pickable)
    if path is None:
        return None, None
    cost = sum(1 if world.grid[c] == 0 else 2 for c in path[1:])
    if len(path) == 1:                                  # next to a target: face it, then USE
        if world.faced() in near:
            return cw.USE, 1
        return _direction(world.pos, near[0]), 2
    nxt = path[1]
    heading = _direction(world.pos, nxt)
    if world.grid[nxt] != 0 and world.heading == heading:
        return cw.USE, cost + 2                         # clear the faced obstacle
    return heading, cost + 2                            # move (or turn towards an obstacle)


# ------------------------------------------------------------------------------------------
# The feature expert: every decision a function of the features s and the sub-task alone
# ------------------------------------------------------------------------------------------

VIEW = cw.WINDOW // 2
"""The window reaches VIEW = 2 cells each way: window offsets (u, v) in [-2, 2]^2."""
PASSABLE = (cw.INDEX["wood"], cw.INDEX["grass"])
"""Primitives the feature expert picks up when they stand in its way: an extra wood or grass
leaves every task able to make its goal (spec/craft.md §10). Never iron: an extra iron turns
a stick into shears at workshop1 (make[stick], make[axe], get[gem] fail)."""
VERTICAL_BIAS = 1.5
"""The attraction of DOWN and UP is multiplied by this: towards a target diagonally away the
expert moves vertically first, and by a margin a net can see, not by an exact tie."""


def read_features(state):
    """What the feature expert reads of a state (D,), spec/craft.md eq. (1).

    Name      | Shape            | Meaning
    kinds     | (5, 5) int       | kind id of window cell (u + 2, v + 2), i.e. of the cell at
              |                  | offset (u, v) from the agent; 0 empty or off the grid
    pooled    | (5, 5, N_KINDS)  | bool: pooled block (i, j) holds a cell of the kind
    inventory | (N_KINDS,)       | counts by kind id
    heading   |                  | DOWN, UP, LEFT or RIGHT
    """
    state = np.asarray(state, dtype=np.float64)
    n = cw.WINDOW * cw.WINDOW * cw.N_KINDS                                # 525
    window = state[:n].reshape(cw.WINDOW, cw.WINDOW, cw.N_KINDS)         # (5, 5, N_KINDS)
    kinds = np.where(window.any(axis=2), window.argmax(axis=2), 0)        # (5, 5)
    pooled = state[n:2 * n].reshape(cw.WINDOW, cw.WINDOW, cw.N_KINDS) > 0  # (5, 5, N_KINDS)
    inventory = state[2 * n:2 * n + cw.N_KINDS]                           # (N_KINDS,)
    heading = int(np.argmax(state[2 * n + cw.N_KINDS:2 * n + cw.N_KINDS + 4]))
    return kinds, pooled, inventory, heading


def target_regions(kinds, pooled, kind):
    """Where cells of kind may lie, as rectangles (u_lo, u_hi, v_lo, v_hi) of offsets from the
    agent: each window cell holding it (a single cell), then each other pooled block showing it
    (its 5 x 5 cells: block (i, j) covers u in [5 i - 12, 5 i - 8], v in [5 j - 12, 5 j - 8])."""
    regions = [(u - VIEW, u - VIEW, v - VIEW, v - VIEW)
               for u in range(cw.WINDOW) for v in range(cw.WINDOW) if kinds[u, v] == kind]
    lo = cw.WINDOW * np.arange(cw.WINDOW) - cw.BIG // 2                   # (5,) block starts
    regions += [(lo[i], lo[i] + cw.WINDOW - 1, lo[j], lo[j] + cw.WINDOW - 1)
                for i in range(cw.WINDOW) for j in range(cw.WINDOW)
                if (i, j) != (VIEW, VIEW) and pooled[i, j, kind]]
    return [tuple(int(b) for b in r) for r in regions]


def _distance(u, v, region):
    """L1 distance from offset (u, v) to the nearest offset of region."""
    u_lo, u_hi, v_lo, v_hi = region
    return max(u_lo - u, 0, u - u_hi) + max(v_lo - v, 0, v - v_hi)


def attraction(regions):
    """(4,) the pull of each move (DOWN, UP, LEFT, RIGHT) towards the regions,
    sum_r exp(-d_r) (d_r - d_r after the move), d_r the L1 distance from the agent to region r;
    DOWN and UP times VERTICAL_BIAS. Linear in the target cells the features show (the nearest
    dominate), positive for the moves that bring the agent nearer."""
    pull = np.zeros(4)                                                    # (4,)
    for r in regions:
        d = _distance(0, 0, r)
        pull += np.exp(-d) * np.array([d - _distance(dx, dy, r) for dx, dy in cw.MOVES])
    pull[[cw.DOWN, cw.UP]] *= VERTICAL_BIAS
    return pull


def _clearable(kind, inventory):
    """Whether the feature expert may clear a cell of kind out of its way (USE, then move)."""
    return (kind in PASSABLE or (kind == cw.STONE and inventory[cw.AXE] > 0)
            or (kind == cw.WATER and inventory[cw.BRIDGE] > 0))


def feature_plan(state, subtask):
    """(action, steps): the feature expert's action in state (D,) for sub-task, and a bound on
    the actions it still needs (for the DART noise gate); (None, None) when it sees no target
    or no way to move. A function of (state, subtask) alone; spec/craft.md §10, in this order:

    1. next to a target (its kind in a neighbouring window cell): USE if facing one, else turn
       to the first in the order DOWN, UP, LEFT, RIGHT;
    2. the wanted moves: positive attraction, strongest first (ties: the lower id), without
       the move that undoes the last one (the heading's opposite) unless it is the only one;
       the first into an empty cell;
    3. else the first wanted move into a cell it may clear: USE if facing it, else turn to it;
    4. else step aside: a move across the strongest wanted direction (not the undoing one),
       first one whose cell and the cell beyond it in the wanted direction are empty, then
       one whose cell is empty, stronger attraction first (ties: the lower id);
    5. else back (the heading's opposite) into an empty cell; else (None, None).
    """
    kinds, pooled, inventory, heading = read_features(state)
    target = subtask_target(subtask)[1]
    regions = target_regions(kinds, pooled, target)
    if not regions:
        return None, None
    cell = [int(kinds[VIEW + dx, VIEW + dy]) for dx, dy in cw.MOVES]     # (4,) neighbours
    near = [a for a in range(4) if cell[a] == target]
    if near:                                                             # 1.
        return (cw.USE, 1) if heading in near else (near[0], 2)
    steps = min(_distance(0, 0, r) for r in regions) + 2
    pull = attraction(regions)
    back = cw.MOVES.index(tuple(-c for c in cw.MOVES[heading]))
    order = [int(a) for a in np.argsort(-pull, kind="stable")]
    positive = [a for a in order if pull[a] > 0]
    wanted = positive if positive == [back] else [a for a in positive if a != back]
    for a in wanted:                                                     # 2.
        if cell[a] == 0:
            return a, steps
    for a in wanted:                                                     # 3.
        if _clearable(cell[a], inventory):
            return (cw.USE if a == heading else a), steps + 1
    w = cw.MOVES[positive[0] if positive else heading]
    across = [a for a in order if a != back and cw.MOVES[a] not in (w, (-w[0], -w[1]))]
    for a in across:                                                     # 4.
        dx, dy = cw.MOVES[a]
        if cell[a] == 0 and kinds[VIEW + dx + w[0], VIEW + dy + w[1]] == 0:
            return a, steps + 2
    for a in across:
        if cell[a] == 0:
            return a, steps + 2
    if cell[back] == 0:                                                  # 5.
        return back, steps + 2
    return None, None


def feature_action(state, subtask):
    """The feature expert's action (0..4) in state (D,) for sub-task, or None (feature_plan)."""
    return feature_plan(state, subtask)[0]


def feature_stops(state, subtask):
    """Whether the feature expert STOPs sub-task in state (D,): get_X once an X is held, makeN
    once no recipe of workshop N has its inputs in the inventory (spec/craft.md §10)."""
    inventory = read_features(state)[2]
    verb, kind = subtask_target(subtask)
    if verb == "get":
        return bool(inventory[kind] > 0)
    return not any(at == kind and all(inventory[k] >= n for k, n in needs)
                   for _, at, needs in cw.RECIPES)


NO_PLAN = cw.DOWN
"""The action the experts take in the evaluation protocol where they see no way (a turn; the
sub-task then runs into its budget). Collection discards such episodes instead."""


class FeatureExpert:
    """The feature expert on the evaluation protocol (taco_ref.evaluate.Expert): it decides
    from the observation alone, so the task environment is not read."""

    def __init__(self, env):
        del env

    def stops(self, subtask, state):
        return feature_stops(state, subtask)

    def action(self, subtask, state, rng):
        action = feature_action(state, subtask)
        return NO_PLAN if action is None else action


class PlannerExpert:
    """The planner on the evaluation protocol: it reads the simulator (the world, the sketch)
    as in rollout, and STOPs right after the action whose effect completes the sub-task."""

    def __init__(self, env):
        self.env = env

    def stops(self, subtask, state):
        return self.env._effect

    def action(self, subtask, state, rng):
        env = self.env
        safe = safe_pickups(env.world, env.sketch, env.active, env.goal)
        action = expert_action(env.world, subtask, safe + (subtask_target(subtask)[1],))
        return NO_PLAN if action is None else action


EXPERTS = {"features": FeatureExpert, "planner": PlannerExpert}
"""The experts by name (taco_sim Domain.experts): the feature expert, the default, and the
planner of the whole map."""


class CraftTask:
    """One Craft episode on the domain contract (taco_sim/domain.py).

    Attribute | Shape | Meaning
    world     |       | the cw.World
    sketch    | (L,)  | sub-task ids of the task
    task      |       | task id (TASK_NAMES)
    goal      |       | goal kind id
    active    |       | sketch position of the active sub-policy (STOPs so far)
    progress  |       | sub-tasks counted: leading sketch steps whose effect happened before their
              |       | STOP (subtask_done); L once done
    done      |       | the last STOP came with the goal in the inventory: reward 1
    failed    |       | the last STOP came without it: reward 0, the episode is over
    t         |       | actions taken since reset
    """

    vocab = VOCAB
    state_dim = STATE_DIM
    action_dim = N_ACTIONS
    subtask_budget = SUBTASK_STEPS
    """A sub-policy that has acted SUBTASK_STEPS times is stopped by force (psketch's 15)."""

    def __init__(self):
        self.world = None
        self.sketch = None
        self.task = None
        self.goal = None
        self.active = 0
        self.progress = 0
        self.done = False
        self.failed = False
        self.t = 0
        self._effect = False
        self._counting = True

    def reset(self, sketch, seed=None):
        """Start the task whose sketch is given, in a world drawn from default_rng(seed);
        returns the first observation (D,)."""
        self.task = task_of(sketch)
        self.sketch = np.array(TASK_SKETCHES[self.task], dtype=np.int64)
        self.goal = TASK_GOALS[self.task]
        self.world = cw.sample_scenario(self.goal, np.random.default_rng(seed))
        self.active = self.progress = self.t = 0
        self.done = self.failed = False
        self._effect = False
        self._counting = True
        return self.obs

    @property
    def obs(self):
        return cw.features(self.world)                                  # (D,)

    @property
    def reward(self):
        return 1.0 if self.done else 0.0

    def budget(self, sketch_len):
        """EPISODE_STEPS for any sketch length (psketch's episode length)."""
        return EPISODE_STEPS

    def step(self, action):
        """Apply action (an id 0..4); returns the observation (D,). After done or failed the
        world still changes; done, failed and progress stay."""
        event = cw.step(self.world, int(action))
        self.t += 1
        if not (self.done or self.failed) and subtask_done(int(self.sketch[self.active]), event):
            self._effect = True
        return self.obs

    def stop(self):
        """The active sub-policy emitted STOP (or was stopped by force): it counts if its effect
        happened and every earlier one counted; the last STOP ends the episode, done if the goal
        is in the inventory (reward 1), failed otherwise. No effect once done or failed."""
        if self.done or self.failed:
            return
        self._counting = self._counting and self._effect
        self.progress += int(self._counting)
        self._effect = False
        self.active += 1
        if self.active == len(self.sketch):
            if self.world.inventory[self.goal] > 0:
                self.done, self.progress = True, len(self.sketch)
            else:
                self.failed = True

    def render(self, camera=None):
        """(H, W, 3) uint8 picture of the world and inventory (world.render); camera unused."""
        return cw.render(self.world)


def task_env():
    """A fresh CraftTask."""
    return CraftTask()


def task_sketches(tasks):
    """(n, L) int64 sketches of the given task ids, which must share one length."""
    lengths = {len(TASK_SKETCHES[i]) for i in tasks}
    if len(lengths) != 1:
        raise ValueError(f"task_sketches: tasks of one length expected, got lengths {sorted(lengths)}")
    return np.array([TASK_SKETCHES[i] for i in tasks], dtype=np.int64).reshape(len(tasks), -1)


def tasks_of_length(pool, sketch_len):
    """The task ids of pool whose sketch has length sketch_len (all of pool for None)."""
    return tuple(i for i in pool if sketch_len is None or len(TASK_SKETCHES[i]) == sketch_len)


def rollout(task, rng, dart_eps=DART_EPS, expert="features"):
    """One DART demonstration of task by expert (EXPERTS); returns (states (T, D), actions (T,),
    labels (T,), final_state (D,)) or None when the expert failed (no plan, a sub-task over
    SUBTASK_STEPS, or the last STOP without the goal).

    The feature expert STOPs where feature_stops says so, in the state it sees (after at least
    one action of the sub-task, as in execution); the planner right after the action whose
    effect completes the sub-task (subtask_done). Noise (spec/craft.md §6): with probability
    dart_eps the executed action is a uniformly drawn move (DOWN, UP, LEFT, RIGHT), but only
    while the sub-task's budget leaves room for the expert's plan plus NOISE_MARGIN recovery
    steps. Two draws per step from rng, always, in this order: the uniform for the coin, the
    integer for the move.
    """
    env = CraftTask()
    obs = env.reset(TASK_SKETCHES[task], seed=int(rng.integers(2**63)))
    states, actions, labels = [], [], []
    segment = 0
    while True:
        subtask = int(env.sketch[env.active])
        # the expert's STOP, decided in the state it sees: the feature expert's from the
        # inventory; the planner's once the last action had the sub-task's effect
        stops = feature_stops(obs, subtask) if expert == "features" else env._effect
        if segment > 0 and stops:
            env.stop()
            segment = 0
            if env.done:
                return np.array(states), np.array(actions, dtype=np.int64), np.array(labels), obs
            if env.failed:
                return None
            continue
        if expert == "features":
            action, steps = feature_plan(obs, subtask)
        else:
            safe = safe_pickups(env.world, env.sketch, env.active, env.goal)
            action, steps = expert_plan(env.world, subtask, safe + (subtask_target(subtask)[1],))
        if action is None or segment == SUBTASK_STEPS:
            return None
        coin, move = rng.random(), int(rng.integers(4))
        room = segment + steps + NOISE_MARGIN <= SUBTASK_STEPS
        executed = move if coin < dart_eps and room else action
        states.append(obs)
        actions.append(action)
        labels.append(env.active)
        obs = env.step(executed)
        segment += 1


def collect(n, sketch_len=None, seed=0, dart_eps=DART_EPS, sketches=None, progress=None,
            workers=1, tasks=ALL_TASKS, domain="craft", expert="features"):
    """n demonstrations of expert (EXPERTS: "features", the default, or "planner") with DART
    noise, as a validated taco_ref.data.Demos; meta["expert"] names the expert.

    Tasks are drawn uniformly from tasks (restricted to sketches of length sketch_len unless it
    is None: then the mix of lengths), or given as sketches (n rows of sub-task ids, padded with
    -1 when lengths differ). A failed expert episode is redrawn with a new world and the same
    task; meta["discarded"] counts them. progress(done, total) after every CHUNK demonstrations.
    Deterministic for a seed; workers is accepted for the contract and not used (about 200
    demonstrations per second in one process).
    """
    check_collect_args(n, sketch_len, workers)
    if expert not in EXPERTS:
        raise ValueError(f"expert: expected one of {', '.join(EXPERTS)}, got {expert!r}")
    if not 0.0 <= dart_eps <= 1.0:
        raise ValueError(f"dart_eps: expected a probability, got {dart_eps}")
    rng = np.random.default_rng(seed)
    if sketches is None:
        pool = tasks_of_length(tasks, sketch_len)
        if not pool:
            raise ValueError(f"sketch_len: no task of length {sketch_len} (lengths "
                             f"{sorted({len(TASK_SKETCHES[i]) for i in tasks})})")
        chosen = [pool[i] for i in rng.integers(len(pool), size=n)]
    else:
        chosen = [task_of([k for k in row if k >= 0]) for row in sketches]
        if len(chosen) != n:
            raise ValueError(f"sketches: expected {n} rows (n), got {len(chosen)}")
    demos, discarded = [], 0
    for i, task in enumerate(chosen):
        while True:
            out = rollout(task, rng, dart_eps, expert)
            if out is not None:
                break
            discarded += 1
            if discarded > 10 * n + 100:
                raise RuntimeError(f"collect: the expert failed {discarded} times; dart_eps = {dart_eps} too large?")
        demos.append(out)
        if progress is not None and ((i + 1) % CHUNK == 0 or i + 1 == n):
            progress(i + 1, n)
    meta = {"domain": domain, "action_type": "discrete", "n_actions": N_ACTIONS,
            "sketch_len": None if sketch_len is None else int(sketch_len),
            "dart_eps": float(dart_eps), "expert": expert, "tasks": [TASK_NAMES[t] for t in tasks],
            "seed": int(seed) if isinstance(seed, (int, np.integer)) else None,
            "discarded": discarded, "collected_on": collected_on()}
    return assemble([d[0] for d in demos], [d[1] for d in demos], [d[2] for d in demos],
                    [d[3] for d in demos], [TASK_SKETCHES[t] for t in chosen], VOCAB, meta)


CHUNK = 50
"""collect reports progress after every CHUNK demonstrations."""


def sample_sketches_from(pool, n, sketch_len, rng, exclude=()):
    """n sketches (n, L) int64 drawn uniformly from the tasks of pool with length sketch_len,
    never one of exclude."""
    if sketch_len is None:
        raise ValueError("sample_sketches: sketch_len is needed (Craft's tasks have lengths 2 to 5)")
    excluded = {tuple(int(k) for k in s if k >= 0) for s in exclude}
    chosen = [i for i in tasks_of_length(pool, sketch_len) if TASK_SKETCHES[i] not in excluded]
    if not chosen:
        raise ValueError(f"sample_sketches: no task of length {sketch_len} is left to draw")
    return task_sketches(chosen)[rng.integers(len(chosen), size=n)]      # (n, L)

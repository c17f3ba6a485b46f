"""Read a labelled LeRobot dataset back through lerobot's own API; run by
tests/test_interop_clients.py with the Python of a separate venv that has the real `lerobot`
(taco_ref itself never imports it).

    python lerobot_readback.py DATASET_ROOT OUT.json

For every frame, LeRobotDataset's item gives its language_persistent rows and timestamp, and
lerobot's active_at(t, style="subtask") resolves the active sub-task row; the frame's sketch
position is that row's rank among the episode's subtask rows in time order. Writes
{"frames": [[episode, frame, sub-task name, position, subtask_index, subtask.position], ...],
 "features": {...}, "subtasks": [names by subtask_index], "posterior_shape": [...] or null,
 "confidence": {episode: value} or null,
 "sarm": [[episode, frame, position, name], ...] or null}: the sub-task lerobot's SARM reward
model finds for each frame (its find_stage_and_tau on meta/episodes' sparse_subtask_* columns),
with "sarm_legacy_equal": whether the unprefixed subtask_* columns hold the same.
"""
import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


def main(root, out):
    from lerobot.datasets.language_render import active_at
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("taco_ref/readback", root=root)
    frames, shape = [], None
    rank_cache = {}
    for i in range(len(ds)):
        item = ds[i]
        episode = int(item["episode_index"])
        t = float(item["timestamp"])
        rows = item["language_persistent"]
        row = active_at(t, persistent=rows, style="subtask")
        if episode not in rank_cache:
            stamps = sorted(float(r["timestamp"]) for r in rows if r["style"] == "subtask")
            rank_cache[episode] = {s: k for k, s in enumerate(stamps)}
        position = None if row is None else rank_cache[episode][float(row["timestamp"])]
        frames.append([episode, int(item["frame_index"]), None if row is None else row["content"], position,
                       int(item["subtask_index"]), int(item["subtask.position"])])
        if "subtask.posterior" in item and shape is None:
            shape = list(item["subtask.posterior"].shape)
    # lerobot 0.6 no longer reads meta/subtasks.parquet (0.4.4-0.5 did, with pandas, as here)
    import pandas as pd
    subtasks = pd.read_parquet(os.path.join(root, "meta", "subtasks.parquet"))
    episodes = ds.meta.episodes
    confidence = None
    if "subtask/confidence" in episodes.column_names:
        confidence = {str(e): c for e, c in zip(episodes["episode_index"], episodes["subtask/confidence"])}
    sarm, legacy_equal = None, None
    if "sparse_subtask_names" in episodes.column_names:
        from lerobot.rewards.sarm.sarm_utils import find_stage_and_tau
        sarm, legacy_equal = [], True
        columns = ("subtask_names", "subtask_start_frames", "subtask_end_frames",
                   "subtask_start_times", "subtask_end_times")
        for row in range(len(episodes)):
            episode, length = int(episodes["episode_index"][row]), int(episodes["length"][row])
            names, starts, ends = (list(episodes["sparse_" + c][row]) for c in columns[:3])
            legacy_equal &= all(list(episodes["sparse_" + c][row]) == list(episodes[c][row]) for c in columns)
            tokens = [str(i) for i in range(len(names))]        # positions, so a repeated name stays apart
            for frame in range(length):
                stage, _ = find_stage_and_tau(frame, length, tokens, starts, ends, tokens, {})
                sarm.append([episode, frame, stage, names[stage]])
    result = {"frames": frames, "sarm": sarm, "sarm_legacy_equal": legacy_equal, "features": {k: v["dtype"] for k, v in ds.meta.features.items()},
              "subtasks": list(subtasks.index), "posterior_shape": shape,
              "confidence": confidence, "episodes": ds.meta.total_episodes, "fps": ds.meta.fps,
              "tasks": list(ds.meta.tasks.index)}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

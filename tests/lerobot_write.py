"""Write taco_ref demonstrations as a LeRobot dataset with lerobot's own recording API
(LeRobotDataset.create, add_frame, save_episode, finalize); run by
tests/test_interop_clients.py with the Python of the venv that has the real lerobot, so that
`taco annotate` is also checked on a dataset lerobot itself wrote (its schema metadata, row
groups, statistics and episode table), not only on taco export's.

    python lerobot_write.py DEMOS.npz FPS N ROOT

Episode n's task is "task n" (the caller's sketches file maps it). The .npz is read with NumPy
alone (allow_pickle=False), as taco_ref writes it (spec/data.md §6).
"""
import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


def main(path, fps, n, root):
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    z = np.load(path, allow_pickle=False)
    states, actions, traj_len = z["states"], z["actions"], z["traj_len"]
    features = {"observation.state": {"dtype": "float32", "shape": (states.shape[2],), "names": None},
                "action": {"dtype": "float32", "shape": (actions.shape[2],), "names": None}}
    ds = LeRobotDataset.create("taco_ref/recorded", fps=fps, root=root, features=features, use_videos=False)
    for i in range(n):
        for t in range(int(traj_len[i])):
            ds.add_frame({"observation.state": states[i, t].astype(np.float32),
                          "action": actions[i, t].astype(np.float32), "task": f"task {i}"})
        ds.save_episode()
    ds.finalize()
    print(json.dumps({"episodes": n}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

"""Analyses of trained models and committed grids, each a module with a command line
(`python -m taco_app.analysis.NAME --help`), tested like the rest of the package:

Module                | What it measures
compare_grids         | the paired difference of two grids' cells, seed by seed, and its mean
stop_by_subtask       | where each sub-task's STOP fires against its segment's end, and its probabilities
dial_variance         | how much of the Dial's spread between seeds each source of randomness makes
dial_other_keys       | a Dial model on keypads whose keys a sub-task does not press are moved
dial_harder_levels    | the expert under each candidate disturbance of the Dial's harder test
average_lag           | how far a run's averaged parameters lag behind its last epoch's
dial_stop_timing      | the state and P(STOP) around each Dial press, and candidate STOP rules
dial_approach_heights | the fingertip's height over a key in the steps before its press (the
                      | ROS bridge's hand-over rule; reads taco_bridge.keypad)
annotate_lag          | why a state key holding the previous action makes `taco annotate` late
craft_realisability   | how well GT-BC imitates each Craft expert, and by which rule it errs

Benchmarks (timings) stay in bench/ (bench/README.md).
"""

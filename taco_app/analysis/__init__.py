"""Analyses of trained models and committed grids, each a module with a command line
(`python -m taco_app.analysis.NAME --help`), tested like the rest of the package:

Module           | What it measures
compare_grids    | the paired difference of two grids' cells, seed by seed, and its mean
stop_by_subtask  | where each sub-task's STOP fires against its segment's end, and its probabilities
dial_variance    | how much of the Dial's spread between seeds each source of randomness makes
dial_other_keys  | a Dial model on keypads whose keys a sub-task does not press are moved

Benchmarks (timings) stay in bench/.
"""

"""The experiment grid: `taco experiment`, `taco demo` and the reports' cells, in one package.

A grid is read, planned, computed and stored by these modules, in this order (the command line
only parses its arguments and calls them):

  manifest   OUT/grid.yaml: the grid's definition, a list of Run records (plan.runs_of reads
             them from the arguments or the file)
  plan       Run -> its Cell records (every algorithm x size x seed), the committed-folder guard
  keys       Cell -> its key (the hash of a versioned canonical config; spec/evaluation.md §6)
  costs      Cell -> the CPU seconds it will take, measured on committed grids
  engine     where cells run (local processes or a Dask scheduler), retries, progress
  cell       Cell -> Record: one cell's computation (collect, train, evaluate, align)
  store      Records in OUT/cells/: the one reader and writer of a grid's results
  legacy     what earlier versions wrote (version-1 keys, results.json)

The records that pass between them are plain dicts (they are hashed, pickled to workers and
written as JSON), typed here for the reader and the type checker.
"""
from typing import List, Optional, TypedDict


class Run(TypedDict, total=False):
    """One run of a grid's definition (manifest.FIELDS): the product algos x sizes x seeds under
    one set of settings."""
    domain: str
    algos: List[str]
    sizes: List[int]
    seeds: List[int]
    n_tasks: int
    n_align: int
    expert: Optional[str]
    test_lengths: Optional[List[int]]
    config: Optional[str]          # a config file, or None for the domain's shipped one
    set: List[str]                 # KEY=VALUE overrides
    protocol: Optional[str]        # "paper", "recipe" or None (taco_ref.config.PROTOCOLS)
    split: Optional[str]           # "validation", or None for the test tasks
    tests: Optional[List[str]]     # named test conditions (the Dial's harder test)


class Cell(TypedDict, total=False):
    """One cell: what plan.cells_of makes of a Run, what keys.cell_key hashes and cell.run
    computes."""
    domain: str
    algo: str
    size: int                      # training demonstrations
    seed: int
    train_sketch_len: int
    n_tasks: int                   # test sketches executed
    n_align: int                   # held-out demonstrations aligned
    test_lengths: Optional[List[int]]
    config: dict                   # the TrainConfig settings given (algo and seed are the cell's)
    expert: Optional[str]
    split: str                     # "test" or "validation"
    tests: List[str]


class Record(TypedDict, total=False):
    """A finished cell as store.write_cell keeps it in OUT/cells/.../seed<s>.json."""
    key: str                       # keys.cell_key of the cell
    key_version: int
    cell: dict                     # the Cell's fields (keys.cell_fields)
    config: dict                   # the full TrainConfig it ran (keys.full_config)
    data: dict                     # fingerprints of its training and held-out data
    figures: dict                  # task_accuracy, align_<decoder>, ... (cell.run)
    seconds: float
    cpu_seconds: float
    train_seconds: float
    processes: int
    threads: dict
    machine: dict
    versions: dict

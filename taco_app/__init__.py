"""The application layer, on top of the NumPy core (taco_ref) and the domains (taco_sim):

- the `taco` command line: cli; config, the one reader of training settings;
- the experiment grid, the package grid: manifest (OUT/grid.yaml), plan (a run's cells), keys
  (a cell's key), costs, engine (where cells run), cell (a cell's computation), store (the one
  reader and writer of a grid's results), legacy (what earlier versions wrote), with the typed
  records that pass between them (grid.Run, grid.Cell, grid.Record);
- what is read from the cells: report (results.md), stats (intervals), claims (docs/claims.md),
  figures (the paper's figures), selection (spec/selection.md), plots (pictures; needs
  matplotlib), analysis (analyses behind committed tables, each with a command line);
- interop: `taco annotate` and `taco export` on LeRobot and robomimic datasets.

It is a package of its own, not part of taco_ref: the core never imports a domain, and the
application imports both, so every import runs downward (application -> domains -> core's data
container; application -> core).
"""

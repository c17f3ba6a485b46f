"""The application layer, on top of the NumPy core (taco_ref) and the domains (taco_sim): the
`taco` command line (cli), the one reader of training settings (config), the experiment grid
(experiment: a cell's computation; engine: where cells run; cellkeys: what a cell is and its
key; cells: the one writer of a results directory; legacy: what earlier versions wrote;
report: results.md) and pictures (plots, needs matplotlib).

It is a package of its own, not part of taco_ref: the core never imports a domain, and the
application imports both, so every import runs downward (application -> domains -> core's data
container; application -> core).
"""

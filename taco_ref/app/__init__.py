"""taco_ref's application layer, on top of the NumPy core (taco_ref.*) and the domains (taco_sim):
the `taco` command line (cli), the experiment grid and its reports (experiment), pictures
(plots, needs matplotlib) and the one reader of training settings (config)."""

"""What keeps the core's files safe and traceable, none of it the method (skippable on a first
reading): files (atomic writes, .npz reads checked before anything is allocated), provenance
(the machine a collection or a figure was computed on) and checkpoints (a training run's
checkpoint, its checks and its run folder). spec/README.md's reading path says where the method is.
"""

"""A model's TACO lattice on demonstrations and the alignments decoded from it: a leaf below
taco_ref.evaluate and the algorithms (CompILE aligns its sub-policies with it; evaluate looks the
algorithms up), so neither imports the other."""
from taco_ref import align, policy
from taco_ref.objectives import valid_mask

DECODERS = align.DECODER_NAMES


def scores(model, demos):
    """The model's lattice inputs on demos: log_act, log_stop, log_go (B, T, L). Scoring only:
    no backward cache is kept, so the memory held is one sub-task's activations at a time."""
    out, _ = policy.evaluate(model.params, model.policy, demos, valid_mask(demos), keep_cache=False)
    return out["log_act"], out["log_stop"], out["log_go"]


def lattice_alignments(model, demos, decoders=DECODERS):
    """{decoder: (N, T) sketch positions} from the TACO lattice of the model's sub-policies."""
    lattice = scores(model, demos)
    return {d: align.DECODERS[d](*lattice, demos.traj_len, demos.sketch_len) for d in decoders}

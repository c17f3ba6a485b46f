"""Paired means paired (spec/evaluation.md §6, "Paired cells"; spec/data.md §6): a grid never
computes a cell on demonstrations its finished partners did not train on, and the Dial's
collection is pinned to one set of BLAS kernels, so that a seed gives one data set on any CPU."""
import json
import os

import pytest

from taco_app import cli

from taco_app.grid import store as cells, cell as experiment


def tiny(out, algos):
    return cli.main(["experiment", "navworld", "--sizes", "30", "--seeds", "0", "--algos", *algos, "--n-tasks", "5",
                     "--n-align", "5", "--set", "epochs=1", "--set", "epoch_size=0", "--out", str(out), "--workers", "1"])


def test_a_cell_refuses_data_its_finished_partner_did_not_train_on(tmp_path, capsys):
    """GT-BC of seed 0 finished on data D; its record is made to say another fingerprint (as a
    partner computed under other BLAS kernels would): TACO of seed 0 then fails in one line naming
    the partner and both fingerprints, and nothing is written for it; with the record restored it
    computes."""
    assert tiny(tmp_path, ["gtbc"]) == 0
    path = tmp_path / "cells" / "navworld" / "gtbc" / "n30" / "seed0.json"
    record = json.loads(path.read_text())
    real = record["data"]["train"]["fingerprint"]
    record["data"]["train"]["fingerprint"] = "f" * 64
    path.write_text(json.dumps(record))
    assert tiny(tmp_path, ["taco", "gtbc"]) == cli.EXIT_FAILED
    failure = json.loads((tmp_path / "failures.json").read_text())[0]
    assert failure["cell"]["algo"] == "taco" and "its partner gtbc seed 0 trained on ffffffffffff" in failure["error"]
    assert f"its train data are {real[:12]}" in failure["error"]
    assert not (tmp_path / "cells" / "navworld" / "taco").exists()
    record["data"]["train"]["fingerprint"] = real
    path.write_text(json.dumps(record))
    assert tiny(tmp_path, ["taco", "gtbc"]) == 0
    assert (tmp_path / "cells" / "navworld" / "taco" / "n30" / "seed0.json").exists()
    capsys.readouterr()


def test_a_partner_is_the_same_domain_size_seed_and_data_spec_of_another_algorithm():
    cell = dict(domain="navworld", algo="taco", size=30, seed=0, train_sketch_len=3, n_tasks=5, n_align=5,
                config={})
    specs = experiment.data_specs(cell)

    def record(algo, seed=0, size=30, n_align=5, fp="a" * 64):
        return {"cell": dict(cell, algo=algo, seed=seed, size=size),
                "data": {"train": {"n": size, "sketch_len": 3, "seed": 10_000 + seed, "fingerprint": fp},
                         "test": {"n": n_align, "sketch_len": 3, "seed": specs[1][3], "fingerprint": "b" * 64}}}
    found = cells.partner_data([record("taco", fp="c" * 64), record("gtbc", seed=1), record("gtbc", size=50),
                                record("ctcbc-mlp", n_align=9)], cell)
    assert found == {"train": {"fingerprint": "a" * 64, "partner": "ctcbc-mlp seed 0"}}
    assert cells.partner_data([record("gtbc", fp=None)], cell) == {"test": {"fingerprint": "b" * 64,
                                                                            "partner": "gtbc seed 0"}}


@pytest.mark.slow
def test_a_dial_collection_in_a_child_pinned_to_haswell_is_the_collection_here(monkeypatch):
    """The pinned path (a child Python with OPENBLAS_CORETYPE=Haswell) returns the set a process
    already on those kernels collects; where this CPU's default kernels are others (AVX-512), the
    child is the only way to the shared draws."""
    import taco_sim
    from taco_sim.dial import blas as pinned
    dom = taco_sim.get("dial")
    here = dom.collect(2, 3, 10_000) if pinned.runs_kernel("Haswell") else None
    monkeypatch.setattr(pinned, "runs_kernel", lambda kernel: False)
    child = dom.collect(2, 3, 10_000)
    assert child.meta["collected_on"]["blas"] and all(v == "Haswell" for v in child.meta["collected_on"]["blas"].values())
    if here is not None:
        assert child.fingerprint() == here.fingerprint()

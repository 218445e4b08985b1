"""The stand-in trainer's formulas for a removal campaign (tests/fake_trainer.py): what the keys
that a campaign turns off add to the final loss and to a step's time. tests/test_removals.py
computes its expected table from the same formulas."""


def mechanism(v):
    """What the keys a removal campaign turns off add to the final loss."""
    return (0.03 * (1 - v["attention.doc_mask"]) + 0.00001 * (v["schedule.window_start"] - 64) +
            0.1 * (v["optimizer.muon.momentum_start"] - 0.85) + 0.6 / v["schedule.lr_cooldown"])


def jitter(seed, v):
    """A loss term of the seed and the keys, so that the pairs' differences spread."""
    code = 3 * v["attention.doc_mask"] + v["schedule.window_start"] // 64 + v["schedule.lr_cooldown"] + \
        round(100 * v["optimizer.muon.momentum_start"])
    return 0.001 * ((seed * 7 + code) % 5)


def step_extra(seed, v):
    """What the keys add to a step's time in ms: the documents' mask off costs 4 ms, with a spread."""
    return 4 * (1 - v["attention.doc_mask"]) + (seed + 2 * v["attention.doc_mask"]) % 3

"""What the paper reports, for the reports to put beside ours: each method's alignment accuracy
in its tables. Presentation only: the algorithms (taco_ref.algorithms) do not carry it."""
from taco_ref import algorithms

ALIGNMENT = {
    "taco": {"navworld": (95.3, 95.3), "craft": (95.6, 95.6), "dial": (99.8, 98.9),
             # the image Dial (Sec. 5.3.2): both tables agree; both scales are compared with it
             "dial-image": (99.0, 99.0), "dial-image-small": (99.0, 99.0)},
    "gtbc": {"navworld": (94.6, 94.6), "craft": (99.4, 99.4), "dial": (97.3, 98.7),
             "dial-image": (98.2, 98.2), "dial-image-small": (98.2, 98.2)},
    "ctcbc-mlp": {"navworld": (89.0, 89.0), "craft": (41.4, 41.4), "dial": (90.1, 31.4),
                  "dial-image": (84.6, 84.6), "dial-image-small": (84.6, 84.6)},
    "ctcbc-gru": {"navworld": (80.0, 80.0), "craft": (57.1, 57.1), "dial": (93.4, 28.6),
                  "dial-image": (48.8, 48.8), "dial-image-small": (48.8, 48.8)},
}
"""Alignment accuracy (%) in the paper, {algo: {domain: (Sec. 5 table, appendix B table)}}."""


def in_paper():
    """The algorithms with figures in the paper, in table order (taco_ref.algorithms.names()):
    the methods `taco experiment` compares by default."""
    return tuple(name for name in algorithms.names() if name in ALIGNMENT)

"""bench/pck_clustering.py: one repetition on a small set measures all three methods; the
summary's counts follow the means, and a crashed peer repetition is left out of every mean."""

import pytest

from bench import pck_clustering as pc


def test_one_repetition_measures_every_method():
    pytest.importorskip("active_semi_clustering")
    name, rep, out = pc.one_rep("iris", 0)
    assert (name, rep) == ("iris", 0)
    for m in pc.METHODS:
        acc, seconds = out[m]
        assert 0.5 < acc <= 1.0 and seconds >= 0


def test_summary_counts_and_crashes():
    res = {
        ("a", 0): {"normalize": False, "kmeans": (0.8, 1), "pck": (0.9, 1), "PCKMeans": (0.85, 1)},
        ("a", 1): {"normalize": False, "kmeans": (0.8, 1), "pck": (0.9, 1), "PCKMeans": ("X", 1)},
        ("b", 0): {"normalize": False, "kmeans": (0.9, 1), "pck": (0.7, 1), "PCKMeans": (0.95, 1)},
        ("b", 1): {"normalize": False, "kmeans": (0.7, 1), "pck": (0.8, 1), "PCKMeans": (0.95, 1)},
    }
    rows, raw, above, within = pc.summarise(res, ["a", "b"], 2)
    a, b = rows
    assert a["reps"] == 1 and a["peer_crashes"] == 1 and a["pck"] == "90.00 ± 0.00"
    assert b["reps"] == 2 and b["kmeans"] == "80.00 ± 10.00" and b["pck_vs_peer"] == "-20.00"
    # a: above the peer; b: below it, pck mean 75 >= kmeans mean 80 - std 10
    assert above == 1 and within == 2


def test_kernel_option_clusters_that_kernel():
    pytest.importorskip("active_semi_clustering")
    _, _, lin = pc.one_rep("iris", 0, ("pairs",))
    _, _, sq = pc.one_rep("iris", 0, ("pairs",), kernel="BCD-square")
    assert lin["PCKMeans"][0] == sq["PCKMeans"][0]  # the same pairs and features
    assert 0.5 < sq["pck"][0] <= 1.0 and sq["kmeans"][0] != lin["kmeans"][0]

"""`adjit memory` (nn/memory_study.py) on a small MLP: every schedule measured and estimated."""
import argparse

from adjit.nn import memory_study


def _study(capsys, *argv):
    """`adjit memory ARGV`: its printed output and table rows (split into words)."""
    p = argparse.ArgumentParser()
    memory_study.add_arguments(p)
    assert memory_study.main(p.parse_args(list(argv) + ["--repeat", "1"])) == 0
    out = capsys.readouterr().out
    return out, [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]


def test_study_prints_each_schedule_and_the_growth(capsys):
    out, rows = _study(capsys, "--depth", "4,9", "--width", "32", "--batch", "64")
    assert [(r[0], r[1]) for r in rows] == [(d, s) for d in ("4", "9")
                                            for s in ("store-all", "sqrt", "budget")]
    assert "sqrt: memory besides gradients grows like L^" in out


def test_repeated_depths_are_measured_once_and_fit_nothing(capsys):
    out, rows = _study(capsys, "--depth", "4,4", "--width", "16", "--batch", "8")
    assert [r[0] for r in rows] == ["4"] * 3 and "grows like" not in out


def test_study_rows_are_measured_and_agree_with_the_estimates():
    # activations of 1 MiB, so that the budget (whole MiB) falls between the two schedules
    store, sqrt, budget = memory_study.measure_depth(9, 128, 2048, repeat=1)
    for row in (store, sqrt, budget):
        assert abs(row["work"] - row["est_work"]) <= 0.1 * row["est_work"]
        assert abs(row["peak"] - row["est_peak"]) <= 0.1 * row["est_peak"]
    assert sqrt["work"] < 0.7 * store["work"]
    assert sqrt["recompute"] > budget["recompute"] > 0
    assert budget["peak"] <= budget["budget"]
    assert abs(memory_study.growth_exponent([4, 16], [2.0, 4.0]) - 0.5) < 1e-12


def test_training_step_study_updates_in_place(capsys):
    """--step: a whole SGD step with the parameters donated; checkpointing then lowers the
    whole-step peak itself, and the estimates agree with the measurements."""
    store, sqrt, budget = memory_study.measure_depth(16, 64, 512, repeat=1, step=True)
    for row in (store, sqrt, budget):
        assert abs(row["peak"] - row["est_peak"]) <= 0.1 * row["est_peak"]
        assert row["work"] == row["peak"]
    assert sqrt["peak"] < 0.6 * store["peak"]
    assert budget["peak"] <= budget["budget"]
    p = argparse.ArgumentParser()
    memory_study.add_arguments(p)
    args = p.parse_args(["--depth", "4,9", "--width", "32", "--batch", "64", "--repeat", "1",
                         "--step"])
    assert memory_study.main(args) == 0
    out = capsys.readouterr().out
    assert "SGD training step" in out and "the whole-step peak grows like L^" in out

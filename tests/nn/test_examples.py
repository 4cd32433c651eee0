"""The examples run and show what they claim (the XOR network of seed 004 above 98%)."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name):
    return runpy.run_path(str(EXAMPLES / name), run_name="example")


def test_xor_with_adam_reaches_98_percent():
    accuracy = load("xor_adam.py")["main"](backend="numpy", log=None)
    assert accuracy >= 0.98


def test_read_backward_matches_the_hand_written_backward_pass(capsys):
    assert load("read_backward.py")["main"]() < 1e-12
    out = capsys.readouterr().out
    assert "# backward" in out and "vjp of" in out


def test_mnist_mlp_example_learns(capsys):
    accuracy = load("mnist_mlp.py")["main"](epochs=1, backend="numpy")
    assert accuracy > 0.85
    assert "epoch 1" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["mnist_mlp.py", "xor_adam.py", "read_backward.py"])
def test_examples_are_short(name):
    lines = [l for l in (EXAMPLES / name).read_text().splitlines() if l.strip()]
    assert len(lines) < 80

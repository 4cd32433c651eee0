"""The `adjit` command: help texts, `adjit mnist` end to end, `adjit inspect`, errors."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from adjit import cli
from adjit.nn import data

FAST = ["--backend", "numpy", "--no-progress"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_entry_point_help_runs_as_a_command():
    r = subprocess.run([sys.executable, "-m", "adjit.cli", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    for word in ("mnist", "inspect", "memory", "examples:"):
        assert word in r.stdout


@pytest.mark.parametrize("command", ["mnist", "inspect", "memory"])
def test_subcommand_help(capsys, command):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and f"usage: adjit {command}" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_no_command_prints_help(capsys):
    code, out, _ = run(capsys)
    assert code == 2 and "commands:" in out


def test_mnist_on_the_bundled_sample(capsys, tmp_path):
    save = tmp_path / "params.npz"
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "2", "--hidden", "64",
                         "--save", str(save))
    assert code == 0, err
    assert "3,600 training, 400 validation, 1,000 test" in out
    assert "compiled train_step" in out and "adjit inspect --mnist" in out
    assert out.count("validation loss") == 2
    accuracy = float(out.split("test accuracy ")[1].split("%")[0])
    assert accuracy > 75
    assert set(np.load(save).files) >= {"param/W1", "param/b2", "meta/mean", "meta/sizes"}


def test_mnist_default_configuration_reaches_90_percent(capsys):
    code, out, err = run(capsys, "mnist", *FAST)
    assert code == 0, err
    assert float(out.split("test accuracy ")[1].split("%")[0]) >= 90


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adamw"])
def test_mnist_other_optimizers_and_activations(capsys, optimizer):
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "1", "--hidden", "32",
                         "--optimizer", optimizer, "--activation", "tanh", "--val-size", "0",
                         "--schedule", "constant")
    assert code == 0, err
    assert "validation" not in out.split("epoch 1/1")[1]
    assert float(out.split("test accuracy ")[1].split("%")[0]) > 70


def test_mnist_reads_idx_files(capsys, tmp_path):
    sample = data.load_sample()
    for (images, labels), X, y in ((data.IDX_FILES["train"], sample.X_train[:300],
                                    sample.y_train[:300]),
                                   (data.IDX_FILES["test"], sample.X_test[:100],
                                    sample.y_test[:100])):
        data.write_idx(tmp_path / (images + ".gz"), X.reshape(-1, 28, 28))
        data.write_idx(tmp_path / labels, y)
    code, out, err = run(capsys, "mnist", *FAST, "--data", str(tmp_path), "--epochs", "1",
                         "--hidden", "16", "--batch-size", "50")
    assert code == 0, err
    assert f"IDX files in {tmp_path}: 270 training, 30 validation, 100 test" in out


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "5000"], "--batch-size 5000 is larger than the 3600 training examples"),
    (["--data", "/nonexistent/mnist"], "no such folder"),
    (["--val-size", "4000"], "--val-size must be between 0 and 3999"),
    (["--lr", "1e9", "--optimizer", "sgd", "--schedule", "constant"], "the loss became"),
])
def test_mnist_errors_are_one_line_and_status_1(capsys, argv, message):
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "1", "--hidden", "16", *argv)
    assert code == 1
    assert err.startswith("adjit mnist: error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--hidden", "0"], ["--epochs", "-1"], ["--lr", "abc"],
                                  ["--optimizer", "lbfgs"], ["--checkpoint", "two"]])
def test_mnist_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(["mnist", *argv])
    assert e.value.code == 2 and "adjit mnist: error:" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None,
                    reason="matplotlib is installed")
def test_plot_without_matplotlib_fails_before_training(capsys, tmp_path):
    code, out, err = run(capsys, "mnist", *FAST, "--plot", str(tmp_path / "c.png"))
    assert code == 1 and "pip install" in err and "epoch" not in out


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="matplotlib is not installed")
def test_plot_draws_the_curves(capsys, tmp_path):
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "2", "--hidden", "16",
                         "--plot", str(tmp_path / "c.png"))
    assert code == 0, err
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_inspect_mnist_prints_ir_and_forward_backward_update(capsys):
    code, out, err = run(capsys, "inspect", "--mnist", "--backend", "numpy", "--hidden", "16",
                         "--batch-size", "8")
    assert code == 0, err
    assert "## IR after the passes" in out and "v0: f32[16,784] = input params['W1']" in out
    assert "def train_step(" in out and "# backward" in out and "optim.py" in out
    assert "## memory estimate" in out


USER_FILE = '''
import numpy as np
import adjit


def loss(params, X, y):
    h = np.tanh(X @ params["W"].T)
    return -np.mean(adjit.log_softmax(h) * adjit.one_hot(y, 3))


def double(x):
    return x * 2
'''


def test_inspect_a_user_function(capsys, tmp_path):
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    code, out, err = run(capsys, "inspect", f"{f}:loss", "--arg", "params.W=float64[3,5]",
                         "--arg", "X=float64[4,5]", "--arg", "y=int64[4]", "--backend",
                         "numpy", "--show", "code")
    assert code == 0, err
    assert "value_and_grad of loss with respect to params" in out
    assert "h = np.tanh(X @ params[\"W\"].T)" in out and "# backward" in out
    assert "## IR" not in out
    code, out, err = run(capsys, "inspect", f"{f}:double", "--arg", "x=float32[3]",
                         "--backend", "numpy")
    assert code == 0 and "grad needs a scalar output" in err and "def double(x)" in out


@pytest.mark.parametrize("argv, message", [
    ([], "nothing to inspect"),
    (["{f}:nothere"], "has no function 'nothere' (functions there: loss, double)"),
    (["{f}:loss", "--arg", "X=float32[2,5]"], "needs --arg for params, y"),
    (["{f}:loss", "--arg", "Z=float32[2]"], "has no argument 'Z'"),
    (["{f}:double", "--arg", "x=float99[2]"], "unknown dtype"),
    (["{f}:double", "--arg", "x=[2]"], "cannot read the argument spec"),
    (["{f}:double", "--arg", "x=float32[2]", "--show", "asm"], "unknown part 'asm'"),
    (["nofile.py:f"], "nofile.py: no such file"),
])
def test_inspect_errors(capsys, tmp_path, argv, message):
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    code, out, err = run(capsys, "inspect", *[a.format(f=f) for a in argv])
    assert code == 1 and message in err


def test_memory_subcommand_without_its_module(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_has_memory_study", lambda: False)
    code, out, err = run(capsys, "memory", "--depth", "4")
    assert code == 1 and "memory_study" in err

"""The `adjit` command: help texts, `adjit mnist` end to end, `adjit inspect`, errors."""

import importlib.util
import re
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


class Model:
    def loss(self, w, x):
        return np.sum((x @ w) ** 2)
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
    (["{f}:nothere"], "has no function 'nothere' (functions there: loss, double;"),
    (["{f}:loss", "--arg", "X=float32[2,5]"], "needs --arg for params, y"),
    (["{f}:loss", "--arg", "X=float32[2,5]"], "--arg params=int64[128] (integer labels)"),
    # sweep 29: an instance method asked for --arg self=float32[128,784]; --wrt of integer
    # labels said "loss raised ValueError"
    (["{f}:Model.loss", "--arg", "w=float32[2]"], "Model.loss is an instance method"),
    (["{f}:loss", "--arg", "params.W=float64[3,5]", "--arg", "X=float64[4,5]", "--arg",
      "y=int64[4]", "--wrt", "y"], "--wrt y: cannot differentiate loss"),
    (["{f}:loss", "--arg", "Z=float32[2]"], "has no argument 'Z'"),
    (["{f}:double", "--arg", "x=float99[2]"], "unknown dtype"),
    (["{f}:double", "--arg", "x=[2]"], "cannot read the argument spec"),
    (["{f}:double", "--arg", "x=float32[2]", "--show", "asm"], "unknown part 'asm'"),
    (["nofile.py:f"], "nofile.py: no such file"),
    (["{f}:loss", "--arg", "params.V=float32[3,5]", "--arg", "X=float32[2,5]", "--arg",
      "y=int64[2]"], "raised KeyError 'W' at model.py:"),
])
def test_inspect_errors(capsys, tmp_path, argv, message):
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    code, out, err = run(capsys, "inspect", *[a.format(f=f) for a in argv])
    assert code == 1 and message in err


def test_inspect_refuses_a_second_wrt(capsys, tmp_path):
    # sweep 29: --wrt w --wrt x differentiated x alone, silently
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    with pytest.raises(SystemExit) as e:
        cli.main(["inspect", f"{f}:loss", "--arg", "params.W=float64[3,5]", "--arg",
                  "X=float64[4,5]", "--arg", "y=int64[4]", "--wrt", "params", "--wrt", "X"])
    assert e.value.code == 2 and "--wrt given twice" in capsys.readouterr().err


def test_memory_subcommand_without_its_module(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_has_memory_study", lambda: False)
    code, out, err = run(capsys, "memory", "--depth", "4")
    assert code == 1 and "memory_study" in err


# -- regressions found by using the command -----------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--save", "{tmp}/no/such/dir/p.npz"], "the folder"),
    # without the plot extra, the missing matplotlib is found first: also before training
    (["--plot", "{tmp}/no/such/dir/c.png"], "the folder|--plot needs matplotlib"),
    (["--save", "{tmp}"], "is a folder"),
    (["--dataset", "fashion"], "add --download, or pass the folder"),
    (["--data", "{tmp}/train-images-idx3-ubyte"], "is a file; pass --data the folder"),
])
def test_mnist_problems_are_found_before_training(capsys, tmp_path, argv, message):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"")
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "1", "--hidden", "8", *argv)
    assert code == 1 and err.startswith("adjit mnist: error: "), err
    assert any(m in err for m in message.split("|")), err
    assert "Traceback" not in err and "epoch" not in out


def test_mnist_save_reports_the_file_it_writes(capsys, tmp_path):
    code, out, err = run(capsys, "mnist", *FAST, "--epochs", "1", "--hidden", "8",
                         "--val-size", "0", "--save", str(tmp_path / "weights"))
    assert code == 0, err
    assert f"saved the parameters to {tmp_path / 'weights.npz'}" in out
    assert (tmp_path / "weights.npz").is_file()


@pytest.mark.parametrize("argv", [["--lr", "inf"], ["--lr", "nan"], ["--seed", "-1"],
                                  ["--seed", "x"]])
def test_mnist_bad_numbers_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(["mnist", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {argv[0]}" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--arg", "x=float32[2]", "--arg", "x=float32[3]"], "x is given twice"),
    (["--arg", "x=float32[2]", "--arg", "x.a=float32[3]"], "already given as one array"),
    (["--arg", "x.a=float32[2]", "--arg", "x=float32[3]"], "already given as x.KEY"),
    (["--arg", "x.=float32[2]"], "NAME.KEY=SPEC"),
    (["--arg", "=float32[2]"], "expected NAME=SPEC"),
    (["--arg", "x=float64[999999999,999999999]"], "GiB, more memory than is free"),
])
def test_inspect_bad_arg_specs(capsys, tmp_path, argv, message):
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    code, out, err = run(capsys, "inspect", f"{f}:double", "--backend", "numpy", *argv)
    assert code == 1 and err.startswith("adjit inspect: error: ") and message in err, err


def test_inspect_wrt_a_label_is_an_error_not_a_fallback(capsys, tmp_path):
    f = tmp_path / "model.py"
    f.write_text(USER_FILE)
    code, out, err = run(capsys, "inspect", f"{f}:loss", "--arg", "params.W=float64[3,5]",
                         "--arg", "X=float64[4,5]", "--arg", "y=int64[4]", "--wrt", "y",
                         "--backend", "numpy")
    assert code == 1 and "--wrt y: " in err and "int64" in err and out == ""


def test_inspect_a_loss_with_aux_values_shows_its_gradient(capsys, tmp_path):
    """A function returning (loss, aux) gets the has_aux gradient program (the CLI has no
    has_aux option, and the note used to tell the user to pass one)."""
    f = tmp_path / "aux.py"
    f.write_text("import numpy as np\n\ndef loss(w, x):\n    z = x @ w\n"
                 "    return np.sum(z ** 2), {'z': z}\n")
    code, out, err = run(capsys, "inspect", f"{f}:loss", "--arg", "w=float64[3]",
                         "--arg", "x=float64[4,3]", "--backend", "numpy", "--show", "code")
    assert code == 0, err
    assert "value_and_grad (has_aux" in out and "# backward" in out and err == ""


@pytest.mark.parametrize("argv, status, message", [
    (["--depth", "4", "--width", "0"], 2, "argument --width"),
    (["--depth", "4", "--batch", "-1"], 2, "argument --batch"),
    (["--depth", "4", "--budget", "xyz"], 2, "argument --budget"),
    (["--depth", "4", "--repeat", "0"], 2, "argument --repeat"),
    (["--depth", "abc"], 2, "argument --depth"),
    (["--depth", "4", "--width", "16", "--batch", "8", "--budget", "0.0001"], 1,
     "is too small"),
    (["--depth", "4", "--width", "16", "--plot", "/nonexistent/dir/m.png"], 1, "the folder"),
])
def test_memory_bad_settings(capsys, argv, status, message):
    try:
        code = cli.main(["memory", *argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == status and message in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_memory_budget_too_small_says_the_mib_to_give_and_keeps_the_table(capsys):
    # sweep 27: the error spoke the API's bytes (memory_budget=561152) and dropped the table
    code = cli.main(["memory", "--depth", "4", "--width", "16", "--batch", "8", "--budget",
                     "0.0001", "--repeat", "1"])
    out, err = capsys.readouterr()
    assert code == 1 and "store-all" in out and "sqrt" in out
    assert re.search(r"--budget 0\.00 MiB is too small: no schedule goes below \d+\.\d\d MiB, "
                     r"give --budget \d+\.\d\d or more", err), err


def test_inspect_sets_keyword_only_arguments(capsys, tmp_path):
    # sweep 27: --arg mode=b for `*, mode="a"` advised --static mode, which then failed
    src = tmp_path / "kw.py"
    src.write_text("import numpy as np\n\ndef scaled(W, x, scale=2.0, *, mode='a'):\n"
                   "    h = np.tanh(x @ W) if mode == 'a' else np.maximum(x @ W, 0)\n"
                   "    return np.sum(h * scale)\n")
    for mode, op in (("a", "tanh"), ("b", "maximum")):
        code, out, err = run(capsys, "inspect", f"{src}:scaled", "--arg", "W=float32[3,2]",
                             "--arg", "x=float32[4,3]", "--arg", f"mode={mode}",
                             "--backend", "numpy", "--show", "ir")
        assert code == 0 and op in out, err


def test_inspect_a_skipped_default_keeps_its_value(capsys, tmp_path):
    """--arg b=7 for f(w, a=1.0, b=100.0): the call is positional, so a keeps its default."""
    src = tmp_path / "f2.py"
    src.write_text("import numpy as np\ndef f(w, a=1.0, b=100.0):\n    return np.sum(w * a) + b\n")
    code, out, err = run(capsys, "inspect", f"{src}:f", "--arg", "w=float64[3]", "--arg", "b=7",
                         "--show", "ir", "--backend", "numpy")
    assert code == 0, err
    assert "= input a" in out and "i64[] = input b" in out


def test_inspect_a_file_that_does_not_import_and_empty_widths(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x:\n    return x\n")
    code, out, err = run(capsys, "inspect", f"{bad}:f", "--arg", "x=float64[3]")
    assert code != 0 and "could not be imported: SyntaxError" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit):
        cli.main(["mnist", "--hidden", "256,,256"])
    assert "an empty width" in capsys.readouterr().err


def test_output_paths_expand_home_and_plots_get_a_known_suffix(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from adjit.nn.commands import check_output_path
    from adjit.nn.data import DataError
    monkeypatch.setenv("HOME", str(tmp_path))
    assert check_output_path("--save", "~/m.npz") == str(tmp_path / "m.npz")
    assert check_output_path("--plot", "~/curves", plot=True) == str(tmp_path / "curves.png")
    with pytest.raises(DataError, match="cannot write .txt"):
        check_output_path("--plot", "~/x.txt", plot=True)


def test_inspect_reports_the_users_exception_in_one_line(capsys, tmp_path):
    f = tmp_path / "m2.py"
    f.write_text("import numpy as np\n"
                 "def cols(x):\n    return np.sum(x) * x.shape[1]\n"
                 "def boom(x):\n    raise RuntimeError('boom')\n"
                 "def ridge(w, t, lam=0.1):\n    return np.sum((w - t) ** 2) + lam\n")
    code, out, err = run(capsys, "inspect", f"{f}:cols", "--arg", "x=float64[3]")
    assert code == 1 and "IndexError: tuple index out of range at m2.py:3" in err
    code, out, err = run(capsys, "inspect", f"{f}:boom", "--arg", "x=float64[3]")
    assert code == 1 and "RuntimeError: boom at m2.py:5" in err and "Traceback" not in err
    code, out, err = run(capsys, "inspect", f"{f}:ridge", "--arg", "w=float64[3]", "--arg",
                         "t=float64[3]", "--wrt", "lam")
    assert code == 1 and "give it a value with --arg lam=" in err


def test_inspect_static_configuration_arguments(capsys, tmp_path):
    """A loop count given with --arg n=2 is traced unless --static names it (sweep 24: the
    error said static_argnums, which the command had no option for)."""
    src = tmp_path / "m2.py"
    src.write_text("import numpy as np\ndef f(W, x, n):\n    h = x\n    for i in range(n):\n"
                   "        h = np.tanh(h @ W)\n    return np.sum(h ** 2)\n")
    base = ["inspect", f"{src}:f", "--arg", "W=float64[3,3]", "--arg", "x=float64[2,3]",
            "--arg", "n=2", "--backend", "numpy"]
    code, out, err = run(capsys, *base)
    assert code == 1 and "(with adjit inspect: --static n)" in err
    code, out, err = run(capsys, *base, "--static", "n", "--show", "code")
    assert code == 0, err
    assert "def value_and_grad_f(W, x)" in out and "# backward" in out
    code, out, err = run(capsys, *base, "--static", "W")
    assert code == 1 and "the argument differentiated is data" in err
    code, out, err = run(capsys, *base, "--static", "m")
    assert code == 1 and "--static m: not an argument" in err


def test_inspect_a_static_string_argument(capsys, tmp_path):
    src = tmp_path / "act.py"
    src.write_text("import numpy as np\ndef f(W, x, act):\n    h = x @ W\n"
                   "    h = np.tanh(h) if act == 'tanh' else np.maximum(h, 0)\n"
                   "    return np.sum(h ** 2)\n")
    base = ["inspect", f"{src}:f", "--arg", "W=float64[3,3]", "--arg", "x=float64[2,3]",
            "--arg", "act=relu", "--backend", "numpy", "--show", "code"]
    code, out, err = run(capsys, *base)
    assert code == 1 and "add --static act" in err
    code, out, err = run(capsys, *base, "--static", "act")
    assert code == 0, err
    code_lines = [ln for ln in out.splitlines() if not ln.strip().startswith("#")]
    assert any("np.maximum(" in ln for ln in code_lines)
    assert not any("np.tanh(" in ln for ln in code_lines)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None,
                    reason="matplotlib is installed")
def test_memory_plot_without_matplotlib_fails_before_the_table(capsys, tmp_path):
    # sweep 29: it failed only after the whole table had run
    code, out, err = run(capsys, "memory", "--depth", "4", "--width", "16", "--batch", "8",
                         "--plot", str(tmp_path / "m.png"))
    assert code == 1 and "needs matplotlib" in err and "store-all" not in out


def test_memory_budget_label_keeps_a_fraction_of_a_mib(capsys):
    # sweep 29: --budget 0.5 was labelled "budget 0 MiB" (4.5: "budget 4 MiB")
    code, out, err = run(capsys, "memory", "--depth", "8", "--width", "256", "--batch", "512",
                         "--budget", "4.5", "--repeat", "1")
    assert code == 0 and "budget 4.5 MiB" in out

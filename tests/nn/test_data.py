"""Tests for adjit.nn.data: IDX reading and its errors, the bundled sample, downloads, batches."""

import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

from adjit.nn import data
from adjit.nn.data import DataError

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist


def idx_bytes(magic, dims, payload):
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + payload


def write_mnist_dir(folder, n_train=6, n_test=4, gz=True, dotted=False):
    """Write a tiny but well-formed set of the four MNIST files; return the arrays."""
    rng = np.random.default_rng(1)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = data.IDX_FILES[split]
        X = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        for stem, a in ((images, X), (labels, y)):
            name = stem.replace("-idx", ".idx") if dotted else stem
            data.write_idx(folder / (name + (".gz" if gz else "")), a)
        arrays[split] = (X.reshape(n, 784), y)
    return arrays


# --- read_idx -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_roundtrip(tmp_path, suffix, dtype):
    a = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4)
    path = tmp_path / ("x-idx3" + suffix)
    data.write_idx(path, a)
    got = data.read_idx(path)
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, a)
    assert got.flags.writeable


def test_gzip_detected_by_magic_bytes_not_name(tmp_path):
    raw = idx_bytes(0x801, [3], bytes([7, 8, 9]))
    (tmp_path / "labels").write_bytes(gzip.compress(raw))
    (tmp_path / "labels.gz").write_bytes(raw)  # misnamed: raw data with a .gz name
    for name in ("labels", "labels.gz"):
        assert data.read_idx(tmp_path / name).tolist() == [7, 8, 9]


def test_known_header_layout(tmp_path):
    path = tmp_path / "imgs"
    path.write_bytes(idx_bytes(0x803, [2, 2, 3], bytes(range(12))))
    got = data.read_idx(path)
    assert got.shape == (2, 2, 3) and got[1, 1, 2] == 11


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_file(tmp_path, gz):
    raw = idx_bytes(0x803, [10, 28, 28], bytes(1234))
    path = tmp_path / ("train-images-idx3-ubyte" + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(DataError, match="truncated") as info:
        data.read_idx(path)
    msg = str(info.value)
    assert str(path) in msg and "7840 bytes" in msg and "found 1234" in msg
    assert "--download" in msg


def test_cut_gzip_stream(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    full = gzip.compress(idx_bytes(0x801, [1000], bytes(1000)))
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match="gzip data ends early"):
        data.read_idx(path)


def test_too_long_file(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(0x801, [3], bytes(5)))
    with pytest.raises(DataError, match="2 unexpected bytes after the 3 bytes"):
        data.read_idx(path)


@pytest.mark.parametrize("head", [b"\x08\x03\x00\x00", b"\x00\x00\x07\x01", b"\x00\x00\x08\x00"])
def test_wrong_magic(tmp_path, head):
    path = tmp_path / "imgs"
    path.write_bytes(head + bytes(100))
    with pytest.raises(DataError, match="not an IDX file: magic number 0x") as info:
        data.read_idx(path)
    assert "0x00000803" in str(info.value) and str(path) in str(info.value)


def test_html_error_page_is_named(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"<html><body>403 Forbidden</body></html>")
    with pytest.raises(DataError, match="looks like text or HTML"):
        data.read_idx(path)


def test_header_shorter_than_declared_dims(tmp_path):
    path = tmp_path / "imgs"
    path.write_bytes(b"\x00\x00\x08\x03" + bytes(6))
    with pytest.raises(DataError, match="truncated: the header declares 3 dimensions"):
        data.read_idx(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data.read_idx(tmp_path / "nope")


# --- load_idx_dir -------------------------------------------------------------------------


@pytest.mark.parametrize("gz,dotted", [(True, False), (False, False), (True, True)])
def test_load_idx_dir(tmp_path, gz, dotted):
    arrays = write_mnist_dir(tmp_path, gz=gz, dotted=dotted)
    X_train, y_train, X_test, y_test = data.load_idx_dir(tmp_path)
    assert X_train.shape == (6, 784) and X_test.shape == (4, 784) and X_train.dtype == np.uint8
    np.testing.assert_array_equal(X_train, arrays["train"][0])
    np.testing.assert_array_equal(y_test, arrays["test"][1])


def test_load_idx_dir_lists_missing_files(tmp_path):
    write_mnist_dir(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DataError) as info:
        data.load_idx_dir(tmp_path)
    msg = str(info.value)
    assert "missing train-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]" in msg
    assert "t10k-images-idx3-ubyte.gz" in msg  # what is there is listed too
    assert "--download" in msg


def test_load_idx_dir_no_folder(tmp_path):
    with pytest.raises(DataError, match="no such folder"):
        data.load_idx_dir(tmp_path / "absent")


def test_load_idx_dir_count_mismatch(tmp_path):
    write_mnist_dir(tmp_path)
    data.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(5, np.uint8))
    with pytest.raises(DataError, match="has 6 images but train-labels-idx1-ubyte.gz has 5"):
        data.load_idx_dir(tmp_path)


def test_load_idx_dir_rejects_wrong_image_size(tmp_path):
    write_mnist_dir(tmp_path)
    data.write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", np.zeros((4, 32, 32), np.uint8))
    with pytest.raises(DataError, match=r"28x28 pixels.*shape \(4, 32, 32\)"):
        data.load_idx_dir(tmp_path)


def test_load_idx_dir_rejects_bad_labels(tmp_path):
    write_mnist_dir(tmp_path)
    data.write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.array([1, 2, 10, 3], np.uint8))
    with pytest.raises(DataError, match="label 10 at index 2 is outside 0..9"):
        data.load_idx_dir(tmp_path)


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_debian_fashion_mnist():
    X_train, y_train, X_test, y_test = data.load_idx_dir(FASHION_DIR)
    assert X_train.shape == (60000, 784) and X_test.shape == (10000, 784)
    assert np.bincount(y_train).tolist() == [6000] * 10
    assert np.bincount(y_test).tolist() == [1000] * 10


# --- the bundled sample -------------------------------------------------------------------


def test_sample():
    ds = data.load_sample()
    assert isinstance(ds, data.Dataset) and ds.name == "mnist-sample"
    assert ds.X_train.shape == (4000, 784) and ds.X_test.shape == (1000, 784)
    assert ds.X_train.dtype == ds.y_train.dtype == np.uint8
    assert set(ds.y_train.tolist()) == set(ds.y_test.tolist()) == set(range(10))
    assert ds.X_train.max() == 255 and ds.X_train.min() == 0
    data.check_dataset(data.to_float(ds.X_train), ds.y_train)
    # Real digits: a few hundred ink pixels of 784, not noise.
    assert 50 < (ds.X_test > 0).sum(axis=1).mean() < 300


def test_sample_split_is_deterministic_and_disjoint():
    a, b, c = data.load_sample(), data.load_sample(), data.load_sample(split_seed=1)
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert not np.array_equal(a.y_test, c.y_test)
    rows = {r.tobytes() for r in a.X_train}
    assert sum(r.tobytes() in rows for r in a.X_test) <= 2  # MNIST has a handful of duplicates
    with pytest.raises(DataError, match="test_fraction"):
        data.load_sample(test_fraction=1.0)


def test_load_without_data_uses_sample():
    assert data.load().name == "mnist-sample"


# --- download -----------------------------------------------------------------------------


@pytest.fixture
def fake_mirror(tmp_path, monkeypatch):
    """Serve four small files through file:// URLs, with a first mirror that is down."""
    served = tmp_path / "mirror"
    served.mkdir()
    write_mnist_dir(served)
    hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in served.iterdir()}
    mirrors = [(tmp_path / "down").as_uri() + "/", served.as_uri() + "/"]
    monkeypatch.setitem(data.SOURCES, "mnist", {"mirrors": mirrors, "sha256": hashes})
    return served, hashes


def test_download_fetches_and_verifies(tmp_path, fake_mirror, monkeypatch):
    monkeypatch.setenv("ADJIT_CACHE", str(tmp_path / "cache"))
    folder = data.download(progress=False)
    assert folder == tmp_path / "cache" / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(fake_mirror[1])  # no temp files
    assert data.load_idx_dir(folder)[0].shape == (6, 784)


def test_download_keeps_good_files_and_replaces_bad_ones(tmp_path, fake_mirror, monkeypatch):
    dest = tmp_path / "dest"
    data.download(dest, progress=False)
    kept, bad = dest / "train-images-idx3-ubyte.gz", dest / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(b"garbage")
    fetched = []
    real_fetch = data._fetch

    def recording_fetch(url, *args):
        fetched.append(url)
        return real_fetch(url, *args)

    monkeypatch.setattr(data, "_fetch", recording_fetch)
    data.download(dest, progress=False)
    assert [u.rsplit("/", 1)[1] for u in fetched] == [bad.name, bad.name]  # down mirror, then ok
    assert hashlib.sha256(bad.read_bytes()).hexdigest() == fake_mirror[1][bad.name]
    assert kept.stat().st_size > 0


def test_download_hash_mismatch(tmp_path, fake_mirror, monkeypatch):
    wrong = dict(fake_mirror[1], **{"train-labels-idx1-ubyte.gz": "0" * 64})
    monkeypatch.setitem(data.SOURCES["mnist"], "sha256", wrong)
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as info:
        data.download(dest, progress=False)
    msg = str(info.value)
    assert "does not match the expected " + "0" * 64 in msg and "(offline?)" not in msg
    assert not (dest / "train-labels-idx1-ubyte.gz").exists()
    assert not any(p.name.endswith(".part") for p in dest.iterdir())


def test_download_offline(tmp_path, monkeypatch):
    down = (tmp_path / "down").as_uri() + "/"
    monkeypatch.setitem(data.SOURCES["mnist"], "mirrors", [down])
    with pytest.raises(DataError, match=r"\(offline\?\)(.|\n)*--data DIR"):
        data.download(tmp_path / "dest", progress=False)


def test_download_unknown_dataset():
    with pytest.raises(DataError, match="unknown dataset 'cifar'"):
        data.download(dataset="cifar")


def test_hashes_look_like_sha256():
    for source in data.SOURCES.values():
        assert len(source["sha256"]) == 4
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in source["sha256"].values())


# --- preprocessing and checks -------------------------------------------------------------


def test_to_float():
    X = np.array([[[0, 255], [51, 102]]], dtype=np.uint8)
    got = data.to_float(X)
    assert got.dtype == np.float32 and got.shape == (1, 4)
    np.testing.assert_allclose(got, [[0, 1, 0.2, 0.4]])
    with pytest.raises(DataError, match="expects uint8"):
        data.to_float(got)


@pytest.mark.parametrize("X,y,match", [
    (np.zeros((3, 4)), np.array([0, 1, 10]), "label 10 at index 2 is outside 0..9"),
    (np.zeros((3, 4)), np.array([0, -1, 2]), "label -1 at index 1"),
    (np.zeros((2, 4)), np.array([0.0, 1.0]), "labels must be integers.*astype"),
    (np.array([[0.0, np.nan], [np.inf, 1]]), np.array([0, 1]), "2 NaN or infinite.*row 0"),
    (np.zeros(4), np.array([0, 1, 2, 3]), "2-D array"),
    (np.zeros((2, 4)), np.eye(2, dtype=int), "1-D array.*argmax"),
    (np.zeros((3, 4)), np.array([0, 1]), "3 images but 2 labels"),
    (np.zeros((0, 4)), np.zeros(0, int), "empty"),
])
def test_check_dataset_errors(X, y, match):
    with pytest.raises(DataError, match=match):
        data.check_dataset(X, y)


def test_check_dataset_num_classes():
    data.check_dataset(np.zeros((2, 3), np.uint8), np.array([0, 2]), num_classes=3)
    with pytest.raises(DataError, match="outside 0..1"):
        data.check_dataset(np.zeros((2, 3)), np.array([0, 2]), num_classes=2)


# --- batches ------------------------------------------------------------------------------


def _epoch(n=10, batch_size=3, **kw):
    X, y = np.arange(n * 2).reshape(n, 2), np.arange(n)
    return [(Xb.copy(), yb.copy()) for Xb, yb in data.batches(X, y, batch_size, **kw)]


def test_batches_cover_every_sample_once():
    got = _epoch()
    assert [len(yb) for _, yb in got] == [3, 3, 3, 1]
    ys = np.concatenate([yb for _, yb in got])
    assert sorted(ys.tolist()) == list(range(10))
    for Xb, yb in got:
        np.testing.assert_array_equal(Xb[:, 0], 2 * yb)  # rows stay paired with their labels


def test_batches_reproducible_and_differ_per_epoch():
    first = [yb.tolist() for _, yb in _epoch(seed=3, epoch=0)]
    assert first == [yb.tolist() for _, yb in _epoch(seed=3, epoch=0)]
    assert first != [yb.tolist() for _, yb in _epoch(seed=3, epoch=1)]
    assert first != [yb.tolist() for _, yb in _epoch(seed=4, epoch=0)]
    assert sorted(sum(first, [])) != sum(first, [])  # actually shuffled


def test_batches_with_generator_advances():
    rng = np.random.default_rng(0)
    a = [yb.tolist() for _, yb in _epoch(seed=rng)]
    b = [yb.tolist() for _, yb in _epoch(seed=rng)]
    assert a != b
    rng = np.random.default_rng(0)
    assert a == [yb.tolist() for _, yb in _epoch(seed=rng)]


def test_batches_drop_last_and_no_shuffle():
    assert [yb.tolist() for _, yb in _epoch(shuffle=False)] == [
        [0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    got = _epoch(drop_last=True)
    assert [len(yb) for _, yb in got] == [3, 3, 3] == [3] * data.num_batches(10, 3, True)
    assert len(_epoch()) == data.num_batches(10, 3)


@pytest.mark.parametrize("batch_size,match", [
    (0, "positive integer"), (-2, "positive integer"), (2.0, "positive integer"),
    (True, "positive integer"), (11, "batch_size 11 is larger than the 10 samples"),
])
def test_batches_bad_batch_size(batch_size, match):
    # Raised at the call, not at the first next(), so a bad setting fails before training.
    with pytest.raises(DataError, match=match):
        data.batches(np.zeros((10, 2)), np.zeros(10, int), batch_size)


def test_batches_move_the_permutation_once():
    moved = []

    def to_device(order):
        moved.append(order.copy())
        return order
    X, y = np.arange(20).reshape(10, 2), np.arange(10)
    got = list(data.batches(X, y, 3, seed=1, epoch=2, drop_last=True, order_to=to_device))
    ref = list(data.batches(X, y, 3, seed=1, epoch=2, drop_last=True))
    assert len(moved) == 1 and len(got) == len(ref) == 3
    for (a, b), (c, d) in zip(got, ref):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_check_dataset_value_targets():
    X = np.zeros((3, 2), np.float32)
    data.check_dataset(X, np.ones((3, 1)), num_classes=None)
    data.check_dataset(X, np.ones(3, np.float32), num_classes=None)
    with pytest.raises(data.DataError, match="floating point"):
        data.check_dataset(X, np.ones(3, np.int64), num_classes=None)
    with pytest.raises(data.DataError, match="3 inputs but 2 targets"):
        data.check_dataset(X, np.ones(2), num_classes=None)
    with pytest.raises(data.DataError, match="NaN or infinite values in the targets"):
        data.check_dataset(X, np.array([0.0, np.inf, 1.0]), num_classes=None)


def test_load_idx_dir_given_a_file(tmp_path):
    f = tmp_path / "train-images-idx3-ubyte.gz"
    f.write_bytes(b"")
    with pytest.raises(data.DataError, match="is a file; pass --data the folder"):
        data.load_idx_dir(f)

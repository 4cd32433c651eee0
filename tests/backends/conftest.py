"""`--shard K/N`: run every N-th test starting at K (0-based), so benchmarks/gpu_check.py can
run the GPU tests in several processes at once (kernel compilation is the slow part)."""


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, help="K/N: run only tests K, K+N, K+2N, ...")


def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard", default=None)
    if not shard:
        return
    k, n = (int(v) for v in shard.split("/"))
    keep = [item for i, item in enumerate(items) if i % n == k]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep

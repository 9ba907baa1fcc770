"""Shared fixtures: the embedded target pair is loaded once per test process.

`make test` runs the suite on two pytest-xdist workers (`-n 2 --dist worksteal`). Each worker then
gets its share of the cores as torch threads, and OMP_NUM_THREADS tells the processes a test starts
(papermill kernels, torchrun, `graft` subprocesses) the same, so the box is never oversubscribed:
OpenMP spin-waits on more threads than cores cost tens of times the work. The slow tests are put
first, longest first (`@pytest.mark.slow(seconds=...)`, a rough CI time), so the worker that takes
the longest one is not left with it at the end while the other worker idles.
"""

import os
import tempfile
from pathlib import Path

# Whatever the suite measures stays in its own home: a cost profile measured under the suite's load (a workbook test
# at one thread a worker) must not land in the user's GRAFT_HOME, where every later run on this machine would price
# and decide with it. One folder per run, shared by its workers.
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID", os.getpid())
os.environ["GRAFT_COSTS"] = str(Path(tempfile.gettempdir()) / f"graft-test-costs-{RUN_ID}")

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, (os.cpu_count() or 2) // WORKERS))
if WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(THREADS)

import pytest
import torch

torch.set_num_threads(THREADS)


def pytest_collection_modifyitems(items):
    """Slow tests (`@pytest.mark.slow`) first, longest `seconds` first; the rest in file order."""

    def key(item):
        slow = item.get_closest_marker("slow")
        return (slow is None, -(slow.kwargs.get("seconds", 0) if slow else 0))

    items.sort(key=key)


@pytest.fixture(scope="session")
def embedded_pair():
    from graftlib.models import load_pair

    return load_pair(device="cpu")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one thread is fastest (OpenMP spin-waits cost 30x on a shared 2-core box)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)

"""Shared fixtures: the embedded target pair is loaded once per test session."""

import pytest
import torch

torch.set_num_threads(2)


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

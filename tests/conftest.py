"""Shared fixtures: the embedded target pair is loaded once per test session."""

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def embedded_pair():
    from graftlib.models import load_pair

    return load_pair(device="cpu")

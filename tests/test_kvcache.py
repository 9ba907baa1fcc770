"""The buffered target cache and the tree commit: kept rows move to the front of the tree region."""

import pytest
import torch
from transformers.cache_utils import Cache

from graftlib.core.kvcache import BufferedLayer, SharedKV
from graftlib.core.verify import commit_cache, kept_rows


def filled_cache(layers: int, start: int, n: int, value_dim: int = 4, capacity: int = 16) -> tuple[Cache, list]:
    """A cache of `layers` BufferedLayers holding start + n positions of distinct K/V values."""
    cache = Cache(layers=[BufferedLayer(capacity) for _ in range(layers)])
    ref = []
    for i, layer in enumerate(cache.layers):
        k = torch.arange(2 * 3 * (start + n) * 4, dtype=torch.float32).reshape(2, 3, start + n, 4) + 1000 * i
        v = -torch.arange(2 * 3 * (start + n) * value_dim, dtype=torch.float32).reshape(2, 3, start + n, value_dim)
        layer.update(k[:, :, :start], v[:, :, :start])
        layer.update(k[:, :, start:], v[:, :, start:])  # the tree region
        ref.append((k, v))
    return cache, ref


@pytest.mark.parametrize("value_dim", [4, 5])  # 4: keys and values share one buffer (`kv`); 5: apart
@pytest.mark.parametrize("keep", [[0, 2, 5], [0, 1, 2], [0], [0, 3]])
def test_commit_keeps_the_accepted_rows(value_dim, keep):
    start, n = 5, 6
    cache, ref = filled_cache(2, start, n, value_dim)
    assert (cache.layers[0].kv is not None) == (value_dim == 4)
    commit_cache(cache, start, keep, kept_rows(keep, "cpu"))
    rows = list(range(start)) + [start + j for j in keep]
    for layer, (k, v) in zip(cache.layers, ref):
        assert layer.get_seq_length() == start + len(keep)
        assert torch.equal(layer.keys, k[:, :, rows]) and torch.equal(layer.values, v[:, :, rows])


def test_commit_after_growth_and_batch_select():
    """A grown buffer keeps its shared layout; after dropping batch rows keys and values are apart."""
    cache, ref = filled_cache(1, 9, 6, capacity=10)  # 15 positions: the buffer grew
    layer = cache.layers[0]
    assert layer.capacity >= 15 and layer.kv is not None
    assert torch.equal(layer.keys, ref[0][0]) and torch.equal(layer.values, ref[0][1])
    layer.batch_select_indices(torch.tensor([1]))
    assert layer.kv is None
    commit_cache(cache, 9, [0, 4])
    rows = list(range(9)) + [9, 13]
    assert torch.equal(layer.keys, ref[0][0][1:, :, rows]) and torch.equal(layer.values, ref[0][1][1:, :, rows])


def shared_cache(layers: int, start: int, n: int, capacity: int = 16,
                 dtype: torch.dtype = torch.float32) -> tuple[Cache, list]:
    """`filled_cache` with the layers in one shared buffer (`SharedKV`), filled as forwards do: every
    layer's prefix, then every layer's tree region."""
    store = SharedKV(layers)
    cache = Cache(layers=[BufferedLayer(capacity, store, i) for i in range(layers)])
    ref = []
    for i in range(layers):
        k = (torch.arange(2 * 3 * (start + n) * 4).reshape(2, 3, start + n, 4) + 100 * i).to(dtype)
        ref.append((k, -k - 7))
    for part in (slice(0, start), slice(start, start + n)):
        for layer, (k, v) in zip(cache.layers, ref):
            layer.update(k[:, :, part], v[:, :, part])
    return cache, ref


@pytest.mark.parametrize("keep", [[0, 2, 5], [0, 1, 2], [0], [], [0, 1, 3, 4, 5]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("host", [True, False])  # the compiled in-place gather, or the device path's index_select
@pytest.mark.parametrize("capacity", [16, 8])  # 8: the buffer grew while filling (the host view follows it)
def test_shared_commit_keeps_the_accepted_rows_of_every_layer(keep, dtype, host, capacity):
    start, n = 5, 6
    cache, ref = shared_cache(3, start, n, capacity, dtype)
    store = cache.layers[0].shared
    assert store.complete and all(layer.kv.data_ptr() == store.buf[2 * i].data_ptr()
                                  for i, layer in enumerate(cache.layers))
    assert store.host is not None and store.host.ctypes.data == store.buf.data_ptr()
    if not host:
        store.host = None
    commit_cache(cache, start, keep, kept_rows(keep, "cpu"))
    rows = list(range(start)) + [start + j for j in keep]
    for layer, (k, v) in zip(cache.layers, ref):
        assert layer.get_seq_length() == start + len(keep)
        assert torch.equal(layer.keys, k[:, :, rows]) and torch.equal(layer.values, v[:, :, rows])
        assert layer.keys.data_ptr() == layer.kbuf.data_ptr()  # still a view of the shared buffer


def test_shared_buffer_grows_for_every_layer_and_a_layer_can_leave():
    cache, ref = shared_cache(2, 9, 6, capacity=10)  # 15 positions: the shared buffer grew
    store = cache.layers[0].shared
    assert store.buf.shape[3] >= 15 and all(layer.capacity == store.buf.shape[3] for layer in cache.layers)
    for layer, (k, v) in zip(cache.layers, ref):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)
    cache.layers[1].batch_select_indices(torch.tensor([0, 1]))  # leaves: committed layer by layer from now on
    assert not store.complete
    commit_cache(cache, 9, [0, 4])
    rows = list(range(9)) + [9, 13]
    for layer, (k, v) in zip(cache.layers, ref):
        assert torch.equal(layer.keys, k[:, :, rows]) and torch.equal(layer.values, v[:, :, rows])


def test_a_layer_of_another_shape_keeps_its_own_buffers():
    store = SharedKV(2)
    a, b = BufferedLayer(8, store, 0), BufferedLayer(8, store, 1)
    a.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    b.update(torch.ones(1, 2, 3, 5), torch.ones(1, 2, 3, 5))  # another head size
    assert store.members == [a, None] and not store.complete and b.kv is not None

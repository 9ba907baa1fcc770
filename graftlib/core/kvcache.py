"""Target KV cache with preallocated buffers (no per-step concatenation), HF `Cache`-compatible.

HF's `DynamicLayer.update` concatenates the new K/V onto the old ones, copying the whole cache
of every layer at every forward: O(prefix) memory traffic per step for AR and speculative
decoding alike. `BufferedLayer` keeps K/V in a [b, kv_heads, capacity, head_dim] buffer that
grows by doubling; `keys`/`values` are views of the filled part, `update` writes in place, and
`crop` only moves the length. Keys and values of one head size share one [2, ...] buffer (`kv`), so
a gather over positions moves both in one op. The tree commit (`graftlib.core.verify.commit_cache`) gathers the
accepted rows in place and crops, so nothing else is copied.

Shared buffer (`target_cache(shared=True)`, what the decode loop uses): every layer's keys and
values live in one [2L, b, kv_heads, capacity, head_dim] tensor (`SharedKV`; layer i's keys and
values are rows 2i and 2i + 1), so the tree commit's gather over positions and the views after its
crop are one op each for the whole cache instead of a few per layer (in host memory the gather is one
compiled in-place pass, `graftlib.core.kernels.gather_positions`: no index tensor, no copy out). Layers join on their
first update when their shapes match the buffer's; one that does not, or that leaves (batch selection),
keeps its own buffers and the cache is committed layer by layer (`SharedKV.complete`).

Invariant: `layer.keys is buffer[:, :, :length]` (same for values) after every operation, so
code written against `DynamicLayer` (reading `.keys` / `.values`, `get_seq_length`) sees the
same tensors it would with the HF cache.
"""

from array import array

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from graftlib.core.kernels import gather_positions

HOST_WIDTHS = {2: torch.int16, 4: torch.int32}  # an entry's width -> the integers a host gather copies it as


class SharedKV:
    """The keys and values of every layer of a cache in one [2L, b, h, capacity, d] buffer (module doc)."""

    def __init__(self, layers: int):
        self.members: list[BufferedLayer | None] = [None] * layers  # the layers whose buffers are views of `buf`
        self.buf: torch.Tensor | None = None
        self.host: np.ndarray | None = None  # `buf` in host memory: [2L * b * h, capacity, d] integers of its width

    @property
    def complete(self) -> bool:
        """Every layer's keys and values are in `buf`."""
        return all(layer is not None for layer in self.members)

    def join(self, layer: "BufferedLayer", like: torch.Tensor, value_dim: int) -> bool:
        """Point `layer`'s buffers into `buf` (allocated on the first join, shaped like `like` [b, h, n, d],
        with the layer's capacity); False when the shapes, dtype, device or capacity differ."""
        b, h, _, d = like.shape
        if self.buf is None and value_dim == d:
            self._allocate(like.new_empty(2 * len(self.members), b, h, layer.capacity, d))
        buf = self.buf
        if (buf is None or value_dim != d or buf.shape[1:] != (b, h, layer.capacity, d) or buf.dtype != like.dtype
                or buf.device != like.device):
            return False
        self.members[layer.index] = layer
        self._point(layer)
        return True

    def leave(self, layer: "BufferedLayer") -> None:
        if self.members[layer.index] is layer:
            self.members[layer.index] = None

    def grow(self, need: int) -> None:
        """A larger `buf` (at least `need` positions, at least double), every member re-pointed into it."""
        old = self.buf
        cap = max(need, 2 * old.shape[3])
        self._allocate(old.new_empty(*old.shape[:3], cap, old.shape[4]))
        self.buf[:, :, :, :old.shape[3]] = old
        for layer in self.members:
            if layer is not None:
                layer.capacity = cap
                self._point(layer)
                layer._views()

    def _allocate(self, buf: torch.Tensor) -> None:
        self.buf = buf
        self.host = None
        if buf.device.type == "cpu" and buf.element_size() in HOST_WIDTHS:
            planes = buf.view(HOST_WIDTHS[buf.element_size()]).numpy()
            self.host = planes.reshape(-1, *planes.shape[3:])

    def _point(self, layer: "BufferedLayer") -> None:
        i = 2 * layer.index
        layer.kv = self.buf[i:i + 2]
        layer.kbuf, layer.vbuf = self.buf[i], self.buf[i + 1]

    def gather(self, start: int, keep: list[int], index: torch.Tensor | None = None) -> None:
        """The positions start + keep[j] of every layer's keys and values moved to start + j (`keep`: an
        accepted root path, ascending). Host memory: one compiled in-place pass (`gather_positions`);
        on a device one gather, `index` the device's `keep` when the caller has it."""
        if self.host is not None:
            gather_positions(self.host, start, np.frombuffer(array("q", keep), np.int64))
            return
        rows = (index if index is not None else torch.tensor(keep, device=self.buf.device)) + start
        self.buf.narrow(3, start, len(keep)).copy_(self.buf.index_select(3, rows))

    def crop(self, length: int) -> None:
        """Every member's length set to `length`, their key / value views made in two ops."""
        views = self.buf.narrow(3, 0, length).unbind()
        for layer in self.members:
            layer.length = length
            layer.keys, layer.values = views[2 * layer.index], views[2 * layer.index + 1]


class BufferedLayer(DynamicLayer):
    def __init__(self, capacity: int = 1024, shared: SharedKV | None = None, index: int = 0):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.kv: torch.Tensor | None = None  # [2, b, h, capacity, d]: kbuf and vbuf as one tensor, when shapes match
        self.shared, self.index = shared, index  # the cache's shared buffer, if any, and this layer's place in it

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._allocate(key_states, value_states.shape[-1], self.capacity)
        self.is_initialized = True
        self._views()

    def _allocate(self, like: torch.Tensor, value_dim: int, cap: int) -> None:
        """kbuf / vbuf of `cap` positions: views into the cache's shared buffer when the layer joins it,
        else one [2, ...] tensor `kv` when keys and values have one head size (a gather over positions,
        the tree commit, is then one op for both), else two."""
        if self.shared is not None and self.shared.join(self, like, value_dim):
            return
        b, h, _, d = like.shape
        if value_dim == d:
            self.kv = like.new_empty(2, b, h, cap, d)
            self.kbuf, self.vbuf = self.kv.unbind()
        else:
            self.kv = None
            self.kbuf, self.vbuf = like.new_empty(b, h, cap, d), like.new_empty(b, h, cap, value_dim)

    def _views(self) -> None:
        self.keys = self.kbuf[:, :, :self.length]
        self.values = self.vbuf[:, :, :self.length]

    def _grow(self, need: int) -> None:
        if self.shared is not None and self.shared.members[self.index] is self:
            self.shared.grow(need)
            return
        cap = max(need, 2 * self.capacity)
        kbuf, vbuf = self.kbuf, self.vbuf
        self._allocate(kbuf, vbuf.shape[-1], cap)
        self.kbuf[:, :, :self.length] = kbuf[:, :, :self.length]
        self.vbuf[:, :, :self.length] = vbuf[:, :, :self.length]
        self.capacity = cap

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self.capacity:
            self._grow(self.length + n)
        self.kbuf[:, :, self.length:self.length + n] = key_states
        self.vbuf[:, :, self.length:self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """HF semantics: a negative count removes that many tokens from the end."""
        if tokens_to_remove > 0:
            raise ValueError("BufferedLayer.crop takes a negative count of tokens to remove")
        if self.is_initialized and tokens_to_remove:
            self.length = max(self.length + tokens_to_remove, 0)
            self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows `indices` (batched generation drops finished rows)."""
        if self.is_initialized:
            if self.shared is not None:
                self.shared.leave(self)
            self.kbuf, self.vbuf, self.kv = self.kbuf[indices], self.vbuf[indices], None  # separate from now on
            self._views()

    def write_rows(self, rows: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Overwrite batch rows `rows` at the last n = keys.shape[-2] filled positions with `keys` /
        `values` [len(rows), h, n, d] (batched generation refills a finished row with a new prompt's
        prefill, right-aligned to the cache's end; the caller masks the row's positions before it)."""
        n = keys.shape[-2]
        if n > self.length:
            raise ValueError(f"BufferedLayer.write_rows: {n} positions into a cache of {self.length}")
        self.kbuf[rows, :, self.length - n:self.length] = keys
        self.vbuf[rows, :, self.length - n:self.length] = values

    def shift_front(self, delta: int) -> None:
        """Insert `delta` > 0 zero positions at the front (every row), or drop -`delta` from it: batched
        generation keeps the cache as wide as its oldest live row and no wider."""
        if not self.is_initialized or delta == 0:
            return
        if delta > 0:
            if self.length + delta > self.capacity:
                self._grow(self.length + delta)
            self.kbuf[:, :, delta:self.length + delta] = self.kbuf[:, :, :self.length].clone()
            self.vbuf[:, :, delta:self.length + delta] = self.vbuf[:, :, :self.length].clone()
            self.kbuf[:, :, :delta] = 0
            self.vbuf[:, :, :delta] = 0
        else:
            cut = min(-delta, self.length)
            self.kbuf[:, :, :self.length - cut] = self.kbuf[:, :, cut:self.length].clone()
            self.vbuf[:, :, :self.length - cut] = self.vbuf[:, :, cut:self.length].clone()
            delta = -cut
        self.length += delta
        self._views()

    def reset(self) -> None:
        self.length = 0
        if self.is_initialized:
            self._views()


def target_cache(config, capacity: int = 1024, shared: bool = False) -> Cache:
    """`BufferedLayer`s for full-attention targets (`shared`: in one buffer, module doc); HF's
    DynamicCache when some layers slide."""
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        return DynamicCache(config=config)
    n = config.num_hidden_layers
    store = SharedKV(n) if shared else None
    return Cache(layers=[BufferedLayer(capacity, store, i) for i in range(n)])

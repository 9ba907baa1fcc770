"""Target KV cache with preallocated buffers (no per-step concatenation), HF `Cache`-compatible.

HF's `DynamicLayer.update` concatenates the new K/V onto the old ones, copying the whole cache
of every layer at every forward: O(prefix) memory traffic per step for AR and speculative
decoding alike. `BufferedLayer` keeps K/V in a [b, kv_heads, capacity, head_dim] buffer that
grows by doubling; `keys`/`values` are views of the filled part, `update` writes in place, and
`crop` only moves the length. Keys and values of one head size share one [2, ...] buffer (`kv`), so
a gather over positions moves both in one op. The tree commit (`graftlib.core.verify.commit_cache`) gathers the
accepted rows in place and crops, so nothing else is copied.

Invariant: `layer.keys is buffer[:, :, :length]` (same for values) after every operation, so
code written against `DynamicLayer` (reading `.keys` / `.values`, `get_seq_length`) sees the
same tensors it would with the HF cache.
"""

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


class BufferedLayer(DynamicLayer):
    def __init__(self, capacity: int = 1024):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.kv: torch.Tensor | None = None  # [2, b, h, capacity, d]: kbuf and vbuf as one tensor, when shapes match

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._allocate(key_states, value_states.shape[-1], self.capacity)
        self.is_initialized = True
        self._views()

    def _allocate(self, like: torch.Tensor, value_dim: int, cap: int) -> None:
        """kbuf / vbuf of `cap` positions; one [2, ...] tensor `kv` when keys and values have one head
        size (a gather over positions, the tree commit, is then one op for both)."""
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


def target_cache(config, capacity: int = 1024) -> Cache:
    """`BufferedLayer`s for full-attention targets; HF's DynamicCache when some layers slide."""
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        return DynamicCache(config=config)
    return Cache(layers=[BufferedLayer(capacity) for _ in range(config.num_hidden_layers)])

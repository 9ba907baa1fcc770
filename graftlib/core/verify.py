"""Target forward, greedy verdicts, and KV-cache commit.

- `target_forward` runs the decoder body once over new tokens (prefill, one AR token, or a
  whole tree with its 4D mask) against the HF `DynamicCache`, and returns the final hidden
  states plus, when asked, the drafter's context features. It does not apply the LM head:
- `LazyArgmax` applies the 49152-way LM head only to the rows the greedy walk visits. On a CPU
  the head over every node of a large tree costs more than the body; the walk needs just
  (accepted + 1) rows. Rows are computed one matvec at a time, which is also exactly how the
  AR baseline computes its logits. On an accelerator (`eager`) the head over all rows is one
  product and the walk reads its argmax back once: one device sync per round, not one per row.
- `commit_cache` keeps the K/V of the accepted tree nodes: an in-place gather of the accepted
  rows to the front of the appended region, then a crop (with `graftlib.core.kvcache`'s buffered
  layers a length change; nothing else is copied; their keys and values share one buffer, one
  gather per layer). A contiguous path (rows 0..a-1) needs no index;
  otherwise one index upload serves every layer (`kept_rows`), except in a shared buffer in host
  memory, which one compiled pass gathers in place (`graftlib.core.kvcache.SharedKV.gather`).

Invariant: after `commit_cache(cache, start, keep)` the cache holds exactly `start + len(keep)`
positions, and position `start + j` holds the K/V of tree node `keep[j]`, whose position id
was `start + depth(keep[j]) = start + j` because accepted nodes form a root path.
"""

from array import array
from dataclasses import dataclass

import torch


@dataclass
class TargetOutput:
    hidden: torch.Tensor  # [n, H] final-norm hidden states (LM head input)
    hidden_states: tuple[torch.Tensor, ...] | None  # HF per-layer states [1, n, H] (index 0 = embeddings)


def target_forward(model, input_ids: torch.Tensor, position_ids: torch.Tensor, cache,
                   attention_mask: torch.Tensor | None = None, with_states: bool = False) -> TargetOutput:
    """input_ids/position_ids [1, n]; attention_mask None (causal) or additive [1, 1, n, past + n]."""
    out = model.model(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_mask=attention_mask,
        cache=cache,
        use_cache=True,
        output_hidden_states=with_states,
    )
    return TargetOutput(out.last_hidden_state[0], out.hidden_states if with_states else None)


class LazyArgmax:
    """`argmax(lm_head(hidden[i]))` of row i, read on first access (list-like for the walk).

    Lazy (default): row i is one matvec when the walk first reads it, which is also exactly how the
    AR baseline computes its logits. Eager (`eager=True`, the decode loop's choice off the CPU): the
    head over every row and its argmax are launched at construction and the first access reads all
    rows back in one transfer, so the walk costs one device sync instead of one per visited row.
    """

    def __init__(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor, eager: bool = False):
        self.hidden = hidden
        self.weight = lm_head_weight
        self.rows: dict[int, int] = {}  # lazy: the rows read so far
        self.tokens: list[int] | None = None  # every row's token, once read back
        self.pending = (hidden @ lm_head_weight.T).argmax(-1) if eager else None  # [n] on the device

    def __getitem__(self, i: int) -> int:
        if self.tokens is not None:
            return self.tokens[i]
        if self.pending is not None:
            return self.all_rows()[i]
        if i not in self.rows:
            self.rows[i] = int(torch.mv(self.weight, self.hidden[i]).argmax())
        return self.rows[i]

    def all_rows(self) -> list[int]:
        """Every node's target token (for traces / the mismatch metric; costs the full head when lazy)."""
        if self.tokens is None:
            top = self.pending if self.pending is not None else (self.hidden @ self.weight.T).argmax(-1)
            self.tokens = top.tolist()
            self.pending = None
        return self.tokens


def kept_rows(keep: list[int], device: torch.device | str) -> torch.Tensor | None:
    """The device index of the kept tree rows `keep`; None when they are rows 0..len(keep)-1 (a slice).
    Made from the ints' buffer (`array`): a tensor from a list parses every element in Python."""
    if keep == list(range(len(keep))):
        return None
    return torch.frombuffer(array("q", keep), dtype=torch.int64).to(device)


def commit_cache(cache, start: int, keep: list[int], index: torch.Tensor | None = None) -> None:
    """Compact the appended tree region of every layer to the accepted nodes `keep` (root first).

    `index`: `kept_rows(keep, device)` when the caller has it, so one upload serves every layer on
    that device as well as the caller's own gathers (on the shared buffer's device, when it has one,
    since every layer is there). A cache in one shared buffer
    (`graftlib.core.kvcache.SharedKV`) is gathered and cropped in one op each for all layers (in host
    memory the gather reads `keep` itself, not `index`)."""
    n = len(keep)
    contiguous = keep == list(range(n))
    shared = getattr(cache.layers[0], "shared", None)
    if shared is not None and shared.complete:
        if not contiguous:
            shared.gather(start, keep, index if index is not None and index.device == shared.buf.device else None)
        shared.crop(start + n)
        return
    rows: dict[torch.device, torch.Tensor] = {}  # per device: start + keep, the kept positions
    for layer in cache.layers:
        if not contiguous:
            dev = layer.keys.device
            if dev not in rows:
                base = index if index is not None and index.device == dev else torch.tensor(keep, device=dev)
                rows[dev] = base + start
            kv = getattr(layer, "kv", None)  # a `BufferedLayer`'s keys and values in one tensor
            if kv is not None:
                kv[:, :, :, start:start + n] = kv.index_select(3, rows[dev])
            else:
                layer.keys[:, :, start:start + n] = layer.keys.index_select(2, rows[dev])
                layer.values[:, :, start:start + n] = layer.values.index_select(2, rows[dev])
        layer.crop(start + n - layer.get_seq_length())

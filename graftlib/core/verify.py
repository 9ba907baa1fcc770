"""Target forward, greedy verdicts, and KV-cache commit.

- `target_forward` runs the decoder body once over new tokens (prefill, one AR token, or a
  whole tree with its 4D mask) against the HF `DynamicCache`, and returns the final hidden
  states plus, when asked, the drafter's context features. It does not apply the LM head:
- `LazyArgmax` applies the 49152-way LM head only to the rows the greedy walk visits. On a CPU
  the head over every node of a large tree costs more than the body; the walk needs just
  (accepted + 1) rows. Rows are computed one matvec at a time, which is also exactly how the
  AR baseline computes its logits.
- `commit_cache` keeps the K/V of the accepted tree nodes: an in-place gather of the accepted
  rows to the front of the appended region, then a crop (with `graftlib.core.kvcache`'s buffered
  layers a length change; nothing else is copied).

Invariant: after `commit_cache(cache, start, keep)` the cache holds exactly `start + len(keep)`
positions, and position `start + j` holds the K/V of tree node `keep[j]`, whose position id
was `start + depth(keep[j]) = start + j` because accepted nodes form a root path.
"""

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
    """`argmax(lm_head(hidden[i]))` computed on first access of row i (list-like for the walk)."""

    def __init__(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor):
        self.hidden = hidden
        self.weight = lm_head_weight
        self.rows: dict[int, int] = {}

    def __getitem__(self, i: int) -> int:
        if i not in self.rows:
            self.rows[i] = int(torch.mv(self.weight, self.hidden[i]).argmax())
        return self.rows[i]

    def all_rows(self) -> list[int]:
        """Every node's target token (for traces / the mismatch metric; costs the full head)."""
        tokens = (self.hidden @ self.weight.T).argmax(-1).tolist()
        self.rows.update(enumerate(tokens))
        return tokens


def commit_cache(cache, start: int, keep: list[int]) -> None:
    """Compact the appended tree region of every layer to the accepted nodes `keep` (root first)."""
    n = len(keep)
    contiguous = keep == list(range(n))
    for layer in cache.layers:
        if not contiguous:
            idx = torch.tensor(keep, device=layer.keys.device) + start
            layer.keys[:, :, start:start + n] = layer.keys.index_select(2, idx)
            layer.values[:, :, start:start + n] = layer.values.index_select(2, idx)
        layer.crop(start + n - layer.get_seq_length())

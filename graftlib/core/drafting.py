"""What the decode loop asks of a drafter: the `Drafter` protocol.

The loop (`graftlib.core.decode`) drafts one block per round from the root token and the target
features the drafter has not seen yet; it never names a concrete drafter class. A drafter
(`graftlib.models.drafter.DFlashDrafter` today; another drafter family goes next to it in
`graftlib.models`) provides:
  block_size          root + D masked positions drafted per round (D = block_size - 1)
  config              `mask_token_id` (the masked positions' token) and `input_embedding_scale`
  context_features    HF hidden states of the target -> the features the drafter conditions on
  new_cache()         an empty context cache for one decode (extended by every call)
  __call__            (noise embeddings [1, q, H], pending features, start, cache) -> hidden [1, q, H]
  head_weight/draft_logits/id_map  the draft LM head over its vocabulary and the map to target ids
Invariant: the features passed to a call are exactly the committed positions not yet in `cache`.
"""

from typing import Protocol

import torch


class Drafter(Protocol):
    config: object

    @property
    def block_size(self) -> int: ...

    @property
    def id_map(self) -> torch.Tensor | None: ...

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor: ...

    def new_cache(self) -> object: ...

    def head_weight(self, lm_head_weight: torch.Tensor) -> torch.Tensor: ...

    def draft_logits(self, hidden: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor: ...

    def __call__(self, noise_embedding: torch.Tensor, target_hidden: torch.Tensor, start: int,
                 cache: object = None) -> torch.Tensor: ...

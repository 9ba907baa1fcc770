"""Exactness diagnostics: where two greedy decodes diverge, and whether that is a near-tie.

Speculative decoding at T = 0 must reproduce greedy AR decoding token for token. A multi-token
(tree) forward can round differently from a one-token forward, so a divergence is acceptable
only when, at the first differing position, the target's top-2 logits (recomputed by a plain
full forward over prompt + the common prefix) are within `tol` of each other. Anything else is
a bug, and `check_exact` says so with the position and the gap.
"""

from dataclasses import dataclass

import torch


@dataclass
class Divergence:
    position: int  # index into the generated tokens
    ours: int
    reference: int
    top2_gap: float  # target logit gap between its top-2 tokens at that position

    def is_near_tie(self, tol: float) -> bool:
        return self.top2_gap <= tol


def first_divergence(target, prompt_ids: list[int], reference: list[int], ours: list[int]) -> Divergence | None:
    """None if `ours` equals `reference`; else the first difference with the target's top-2 gap."""
    if ours == reference:
        return None
    n = min(len(ours), len(reference))
    pos = next((i for i in range(n) if ours[i] != reference[i]), n)
    if pos == n:  # one is a prefix of the other: a length difference, never a tie
        return Divergence(pos, ours[pos] if pos < len(ours) else -1,
                          reference[pos] if pos < len(reference) else -1, float("inf"))
    with torch.inference_mode():
        ids = torch.tensor([prompt_ids + reference[:pos]], device=target.device)
        logits = target(ids).logits[0, -1].float()
    top2 = torch.topk(logits, 2).values
    return Divergence(pos, ours[pos], reference[pos], float(top2[0] - top2[1]))


def check_exact(target, prompt_ids: list[int], reference: list[int], ours: list[int], tol: float = 1e-3) -> None:
    """Raise AssertionError unless `ours == reference` or the first difference is a near-tie."""
    d = first_divergence(target, prompt_ids, reference, ours)
    if d is not None and not d.is_near_tie(tol):
        raise AssertionError(
            f"output differs from greedy AR at generated position {d.position}: ours {d.ours} vs AR "
            f"{d.reference}; target top-2 logit gap there {d.top2_gap:.3g} > tol {tol} (not a near-tie: a bug)")

"""Exactness verdicts: is a greedy speculative decode the target's own greedy decode?

At T = 0 speculative decoding must reproduce greedy AR decoding token for token. A multi-token
(tree) forward does not round like the one-token AR step, though: in float32 the two differ by
about 1e-5 of a logit, in bfloat16 by a few units in the last place of the logits (a verify of M
rows and the 1-row step accumulate in other orders and round every layer's output to 8 bits of
mantissa). So where the target's top-2 logits are that close, the two decodes may legitimately
pick different tokens, and from there on they follow different texts.

Every decode gets one `Verdict`:
  exact     the tokens equal AR's;
  tie       the first difference is a certified near-tie: a plain full forward of the target over
            prompt + the common prefix (a third computation, neither decode's) puts both tokens,
            ours and AR's, within `tol` of its largest logit;
  mismatch  anything else (a length difference, a token far from the top, a gap above `tol`): a bug.
`gap` is max(l_max - l[ours], l_max - l[AR's]) in that forward; when the two tokens are the top 2
it is their top-2 gap. A token that is not near the top is never a tie, whatever the dtype.

The tolerance (`near_tie_tol`, the one place it is stated) follows the dtype and the logits'
scale: NEAR_TIE_ULPS units in the last place of the largest logit's magnitude in that dtype
(bfloat16 at logits in [16, 32): one unit 0.125, tol 0.5; float16 there: 0.0156, tol 0.0625),
never below FLOAT32_TOL, which is the float32 tolerance (float32 differences are ~1e-5).
"""

import math
from dataclasses import asdict, dataclass

import torch

NEAR_TIE_ULPS = 4  # units in the last place of the largest logit, in the decode's dtype
FLOAT32_TOL = 1e-3  # float32 (and the floor of every dtype): tree vs one-row logits differ by ~1e-5
VERDICTS = ("exact", "tie", "mismatch")


def near_tie_tol(dtype: torch.dtype, scale: float) -> float:
    """The largest gap that certifies a tie in `dtype` at logits of magnitude `scale` (module doc)."""
    if dtype in (torch.float32, torch.float64) or not math.isfinite(scale) or scale <= 0:
        return FLOAT32_TOL
    ulp = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(scale))
    return max(FLOAT32_TOL, NEAR_TIE_ULPS * ulp)


@dataclass
class Divergence:
    position: int  # index into the generated tokens (of the turn)
    ours: int
    reference: int
    top2_gap: float  # max(l_max - l[ours], l_max - l[reference]) in the plain forward; inf: a length difference
    tol: float = FLOAT32_TOL  # the tolerance at that position (dtype and logit scale)

    def is_near_tie(self, tol: float | None = None) -> bool:
        return self.top2_gap <= (self.tol if tol is None else tol)


@dataclass
class Verdict:
    kind: str  # one of VERDICTS
    divergence: Divergence | None = None

    def to_dict(self) -> dict:
        """{"verdict": kind, "divergence": {position, ours, reference, top2_gap, tol} or None} (a record's fields)."""
        d = self.divergence
        return {"verdict": self.kind, "divergence": None if d is None else
                {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(d).items()}}


def first_divergence(target, prompt_ids: list[int], reference: list[int], ours: list[int]) -> Divergence | None:
    """None if `ours` equals `reference`; else the first difference with its gap and tolerance."""
    if ours == reference:
        return None
    n = min(len(ours), len(reference))
    pos = next((i for i in range(n) if ours[i] != reference[i]), n)
    if pos == n:  # one is a prefix of the other: a length difference, never a tie
        return Divergence(pos, ours[pos] if pos < len(ours) else -1,
                          reference[pos] if pos < len(reference) else -1, math.inf)
    with torch.inference_mode():
        ids = torch.tensor([prompt_ids + reference[:pos]], device=target.device)
        logits = target(ids).logits[0, -1]
    dtype = getattr(target, "dtype", logits.dtype)  # the weights' dtype: HF may upcast the logits
    logits = logits.float()
    top = float(logits.max())
    gap = top - min(float(logits[ours[pos]]), float(logits[reference[pos]]))
    return Divergence(pos, ours[pos], reference[pos], gap, near_tie_tol(dtype, abs(top)))


def verdict(target, prompt_ids: list[int], reference: list[int], ours: list[int]) -> Verdict:
    """The decode's verdict against the AR `reference` (module doc)."""
    d = first_divergence(target, prompt_ids, reference, ours)
    if d is None:
        return Verdict("exact")
    return Verdict("tie" if d.is_near_tie() else "mismatch", d)


def check_exact(target, prompt_ids: list[int], reference: list[int], ours: list[int], tol: float | None = None) -> None:
    """Raise AssertionError unless `ours == reference` or the first difference is a near-tie (at `tol`,
    default the dtype's `near_tie_tol`)."""
    d = first_divergence(target, prompt_ids, reference, ours)
    if d is not None and not d.is_near_tie(tol):
        raise AssertionError(
            f"output differs from greedy AR at generated position {d.position}: ours {d.ours} vs AR "
            f"{d.reference}; target logit gap there {d.top2_gap:.3g} > tol {d.tol if tol is None else tol} "
            "(not a near-tie: a bug)")

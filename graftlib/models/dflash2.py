"""DFlash 2's two parts, graftlib's own implementation: the block-local dynamic convolution and the pairwise
candidate selector. `graftlib.models.drafter` adds them to a DFlash drafter whose config names them.

Layout and arithmetic are those of the public DFlash 2 drafters (z-lab's `DFlash2DraftModel`, vLLM Speculators'
`dflash2`; checkpoint keys `layers.{i}.attention_conv.*`, `layers.{i}.mlp_conv.*`, `candidate_selector.*`;
config keys `conv_kernel_size`, `conv_group_size`, `selector_rank`, `selector_top_k` in `dflash_config`).

Convolution (`BlockConv`), around each sublayer (attention, MLP) of every draft layer:
    conv(x)_t = sum_{tap < K} (base[tap] + delta_t[tap, group]) * x_{t - tap}
with a learned kernel `base` and a token-dependent `delta_t` from one projection of the sublayer's input. Taps
never cross a block boundary, so a packed row of many blocks computes what each block alone does; identity
initialisation (`identity_`) makes a warm start compute the plain drafter's function exactly.

Selector (`CandidateSelector`): at block position t a candidate b after predecessor a scores
S_t(a, b) = U_t(b) + <A(a) * W h_t, B(b)> (U_t the unary draft logits, A / B codebooks [V, r]); the public walk
takes from the anchor the argmax of S_t(a, .) after the token chosen before (`walk`).

`pack_selector` / `unpack_selector`: a selector trained on a frozen drafter ships alone, its successor codebook
cut to the draft vocabulary's rows (no other row is ever read).

Details: docs/internals.md, `graftlib.models.dflash2`.
"""

import torch
from torch import nn


def block_conv(x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, block_size: int, group_size: int):
    """conv(x) of the module doc. x [..., n, H] (n positions, blocks of `block_size` side by side from 0),
    delta [..., n, K, G] the dynamic kernel, base [K, H]."""
    *lead, n, H = x.shape
    K, G = base.shape[0], H // group_size
    groups = x.view(*lead, n, G, group_size)
    in_block = torch.arange(n, device=x.device) % block_size
    out = torch.zeros_like(groups)
    for tap in range(K):
        shifted = groups if tap == 0 else torch.cat([groups.new_zeros(*lead, tap, G, group_size),
                                                     groups[..., :n - tap, :, :]], dim=-3)
        coeff = base[tap].to(x.dtype).view(G, group_size) + delta[..., tap, :, None]  # [..., n, G, group]
        valid = (in_block >= tap).to(x.dtype).view(n, 1, 1)
        out = out + shifted * coeff * valid
    return out.view_as(x)


class BlockConv(nn.Module):
    """The two convolutions around one sublayer (module doc): `prepare` convolves its input and returns the
    output side's dynamic kernel, `finish` convolves its output with it."""

    def __init__(self, hidden_size: int, kernel_size: int, group_size: int, block_size: int):
        super().__init__()
        self.kernel_size, self.group_size, self.block_size = kernel_size, group_size, block_size
        self.groups = hidden_size // group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden_size))
        self.kernel_projection = nn.Linear(hidden_size, 2 * kernel_size * self.groups, bias=False)
        self.identity_()

    @torch.no_grad()
    def identity_(self) -> None:
        """Both convolutions the identity: base tap 0 one, the rest and the projection zero."""
        self.base_kernel.zero_()
        self.base_kernel[:, 0] = 1.0
        self.kernel_projection.weight.zero_()

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        delta = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel_size, self.groups)
        return block_conv(x, delta[..., 0, :, :], self.base_kernel[0], self.block_size, self.group_size), \
            delta[..., 1, :, :]

    def finish(self, y: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return block_conv(y, delta, self.base_kernel[1], self.block_size, self.group_size)


class CandidateSelector(nn.Module):
    """S_t(a, b) of the module doc; parameter names and shapes are the public checkpoints'."""

    def __init__(self, vocab_size: int, hidden_size: int, rank: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.hidden_projection = nn.Linear(hidden_size, rank, bias=False)

    def transition(self, hidden: torch.Tensor, prev: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """T_t(a, b): hidden [..., H], prev [...] predecessor ids, cand [..., k] candidate ids -> [..., k]."""
        context = self.predecessor_codebook[prev] * self.hidden_projection(hidden).to(self.predecessor_codebook.dtype)
        return (context.unsqueeze(-2) * self.successor_codebook[cand]).sum(-1)

    def walk(self, hidden: torch.Tensor, logits: torch.Tensor, anchor: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The public T = 0 walk of one block: hidden [D, H], logits [D, V] -> (path [D], candidates [D, k])."""
        unary, cand = torch.topk(logits, self.top_k, dim=-1)
        prev = torch.tensor(anchor, device=logits.device)
        path = []
        for t in range(hidden.shape[0]):
            scores = unary[t] + self.transition(hidden[t], prev, cand[t]).to(unary.dtype)
            prev = cand[t, torch.argmax(scores)]
            path.append(prev)
        return torch.stack(path), cand


SELECTOR_PREFIX = "candidate_selector."
_SUCCESSORS = SELECTOR_PREFIX + "successor_codebook"


def pack_selector(state: dict[str, torch.Tensor], d2t: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The selector tensors of a drafter state, the successor codebook cut to rows `d2t` (the target ids of the
    draft vocabulary; None: a drafter without one, every row kept)."""
    parts = {k: v for k, v in state.items() if k.startswith(SELECTOR_PREFIX)}
    return parts if d2t is None else {**parts, _SUCCESSORS: parts[_SUCCESSORS][d2t].contiguous()}


def unpack_selector(parts: dict[str, torch.Tensor], d2t: torch.Tensor | None,
                    vocab_size: int) -> dict[str, torch.Tensor]:
    """`pack_selector`'s inverse on the rows it kept: the successor codebook [vocab_size, r], zero elsewhere."""
    if d2t is None:
        return parts
    rows = parts[_SUCCESSORS]
    full = rows.new_zeros(vocab_size, rows.shape[1])
    full[d2t] = rows
    return {**parts, _SUCCESSORS: full}

"""Sampling at T > 0: the target's processed distribution and the lossless tree walk.

Plain sampling draws each token from `probs(logits)`: logits / T, then top-k (keep the k largest),
then top-p (the smallest set of most likely tokens whose mass reaches p, the first token always
kept), renormalized. `Sampling.probs` is that function, used by the AR baseline and by every
speculative method alike; T = 0 is greedy (argmax) and leaves every code path as it was.

Why the output law is the target's: every method builds its candidate set deterministically from the draft,
so the tree is fixed before the target is consulted. `LazySample` draws at an accepted node i the target's
token x_i ~ probs(target logits at i), and the walk (`tree.greedy_walk`) moves to the child carrying x_i or
stops and emits x_i as the bonus: each emitted token is a draw from the target's distribution given exactly
the tokens before it, and the tree only decides how many draws one forward pays for.

Randomness: one `torch.Generator` per decode, seeded from `Sampling.seed`, on the target's device,
consumed only by `LazySample` rows in the order the walk visits them, so a seed reproduces a decode
run to run on the same device. A run over many prompts seeds each from the run's seed and the
prompt's uid (`prompt_sampling`), so every method and command (bench, replay, calibrate) decodes
a prompt with the same stream. The tree may be built from tempered draft log-probs
(`Sampling.temper`), which changes which candidates are drafted, never the output law.

Details: docs/internals.md, `graftlib.core.sampling`.
"""

import hashlib
from dataclasses import asdict, dataclass, replace

import torch

from graftlib.core.errors import require


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy (argmax), bit for bit the T = 0 code path
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    seed: int = 0

    def check(self) -> "Sampling":
        require(0 <= self.temperature <= 100, f"temperature must be in [0, 100], got {self.temperature}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        require(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., V] logits -> [..., V] float32 probabilities after T, top-k and top-p (module doc)."""
        x = logits.float() / self.temperature
        if self.top_k and self.top_k < x.shape[-1]:
            kth = x.topk(self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        p = torch.softmax(x, dim=-1)
        if self.top_p < 1:
            sorted_p, order = p.sort(dim=-1, descending=True)
            before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
            drop = torch.zeros_like(p, dtype=torch.bool).scatter(-1, order, before >= self.top_p)
            p = p.masked_fill(drop, 0.0)
            p = p / p.sum(-1, keepdim=True)
        return p

    def temper(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits as the tree builders should rank them at this temperature (identity at T = 0)."""
        return logits if self.greedy else logits.float() / self.temperature

    def generator(self, device: torch.device) -> torch.Generator | None:
        return None if self.greedy else torch.Generator(device).manual_seed(self.seed)

    def setting(self) -> dict:
        """What a result's setting (or a calibration's meta) records: {"sampling": fields} at T > 0,
        nothing at T = 0, so greedy settings and their ids stay what they were before sampling existed."""
        return {} if self.greedy else {"sampling": asdict(self)}


GREEDY = Sampling()


def prompt_sampling(sampling: Sampling, uid: str) -> Sampling:
    """The prompt's own seed at T > 0 (the run's seed and the prompt's uid); T = 0 unchanged."""
    if sampling.greedy:
        return sampling
    digest = int(hashlib.sha256(f"{sampling.seed}/{uid}".encode()).hexdigest()[:8], 16)
    return replace(sampling, seed=digest)


class LazySample:
    """The target's token at tree node i, drawn on first access (list-like, like `LazyArgmax`)."""

    def __init__(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor, sampling: Sampling,
                 generator: torch.Generator):
        self.hidden, self.weight, self.sampling, self.gen = hidden, lm_head_weight, sampling, generator
        self.rows: dict[int, int] = {}

    def __getitem__(self, i: int) -> int:
        if i not in self.rows:
            p = self.sampling.probs(torch.mv(self.weight, self.hidden[i]))
            self.rows[i] = int(torch.multinomial(p, 1, generator=self.gen))
        return self.rows[i]

    def all_rows(self) -> list[int]:
        """Every node's target token: the visited rows' draws, then the others drawn in index order."""
        return [self[i] for i in range(self.hidden.shape[0])]

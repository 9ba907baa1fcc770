"""The drafter trainers' samples: data directories loaded, the held-out split, the draft vocabulary,
and the anchors both trainers draw (`graftlib.training.drafter.trainer` holds the trainer, `training_run` the run).

Both trainers read the same `graft drafter-data` sequences and draw the same unit: an *anchor* `a` in
the response (`prompt_len <= a <= len - 2`), the last committed token of a decode round, with at least
one label after it. One anchor's drafts (a DFlash block; an EAGLE-3 chain unrolled from it) count as
one *block*. Rows (sequences) are drawn in proportion to their anchor count, up to `blocks_per_seq`
anchors without replacement inside a row (`sample_anchors`). `heldout_split` splits by a hash of each
uid, so both trainers hold out the same sequences; `choose_draft_vocab` takes the most frequent response
ids and `draft_index` maps target ids to draft ids; `anchor_rows` holds the per-row tensors both packers
start from. `IGNORE` marks a label without a loss.
"""

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from graftlib.core.errors import require
from graftlib.training.drafter.data.store import Sequence, load_dataset
from graftlib.training.drafter.data.target_data import base_uid

IGNORE = -100


def n_anchors(s: Sequence) -> int:
    return max(len(s.tokens) - 1 - s.prompt_len, 0)


def pool_of(uid: str) -> str:
    """A sequence's pool: its uid's prefix ("gsm8k/12" -> "gsm8k", "sharegpt/x@branch2" -> "sharegpt")."""
    return uid.split("/", 1)[0]


def spread_by_pool(seqs: list[Sequence], n: int) -> list[Sequence]:
    """The first `n` of `seqs` taken round-robin over their pools (the uid's prefix: "gsm8k/12" is
    gsm8k's, pools in name order, each in its own order): a few loop-tau prompts then cover chat,
    the tasks and the regular set alike instead of whichever pool comes first."""
    pools: dict[str, list[Sequence]] = {}
    for s in seqs:
        pools.setdefault(pool_of(s.uid), []).append(s)
    queues = [pools[k] for k in sorted(pools)]
    out = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out[:n]


def heldout_split(seqs: list[Sequence], frac: float) -> tuple[list[Sequence], list[Sequence]]:
    """(train, heldout) by a hash of each prompt's uid (`base_uid`: a prompt's branches side by side):
    stable when the data grows."""
    def held(s: Sequence) -> bool:
        return int(hashlib.sha256(base_uid(s.uid).encode()).hexdigest()[:8], 16) < frac * 2 ** 32

    usable = [s for s in seqs if n_anchors(s) > 0]
    train = [s for s in usable if not held(s)]
    heldout = [s for s in usable if held(s)]
    if not heldout and len(train) > 1:  # tiny data sets: hold out one sequence anyway
        heldout = [train.pop()]
    require(train and heldout, f"too little drafter data: {len(usable)} usable sequences (need 2 or more)")
    return train, heldout


def choose_draft_vocab(seqs: list[Sequence], size: int, vocab_size: int) -> torch.Tensor:
    """The `size` target ids most frequent in the responses (ties and the rest: prompts, then id)."""
    resp = torch.zeros(vocab_size, dtype=torch.long)
    prompt = torch.zeros(vocab_size, dtype=torch.long)
    for s in seqs:
        resp += torch.bincount(s.tokens[s.prompt_len:], minlength=vocab_size)
        prompt += torch.bincount(s.tokens[:s.prompt_len], minlength=vocab_size)
    key = resp * (prompt.max() + 1) + prompt  # lexicographic (response count, prompt count)
    order = sorted(range(vocab_size), key=lambda i: (-int(key[i]), i))
    return torch.tensor(order[:size], dtype=torch.long)


def draft_index(draft_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Target id -> its draft id, IGNORE for target ids outside the draft vocabulary."""
    t2d = torch.full((vocab_size,), IGNORE, dtype=torch.long, device=draft_ids.device)
    t2d[draft_ids] = torch.arange(len(draft_ids), device=draft_ids.device)
    return t2d


def to_draft(t2d: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Target ids (IGNORE kept) -> draft ids (IGNORE where outside the draft vocabulary)."""
    return t2d[ids.clamp(min=0)].masked_fill(ids < 0, IGNORE)


def sample_anchors(gen: torch.Generator, seqs: list[Sequence], weights: torch.Tensor, n_blocks: int,
                   per_seq: int) -> tuple[list[Sequence], list[list[int]]]:
    """ceil(n_blocks / per_seq) rows drawn by anchor count, each with up to per_seq sorted anchors."""
    rows = torch.multinomial(weights, -(-n_blocks // per_seq), replacement=True, generator=gen).tolist()
    picked, anchors = [], []
    for i in rows:
        s = seqs[i]
        perm = torch.randperm(n_anchors(s), generator=gen)[:per_seq]
        picked.append(s)
        anchors.append(sorted((perm + s.prompt_len).tolist()))
    return picked, anchors


@dataclass
class AnchorRows:
    """The per-row tensors both packers start from: row r is `seqs[r]` with its anchors."""

    anchor: torch.Tensor  # [R, A] anchors (0 for padding)
    valid: torch.Tensor  # [R, A] bool
    ctx: torch.Tensor  # [R, C, F] features of positions < C = the batch's last anchor (zero past a row's)
    toks: torch.Tensor  # [R, width] tokens by position, IGNORE past a sequence's end
    topk_ids: torch.Tensor | None  # [R, width, K] the target's top-k over tokens[p] by position p, IGNORE if none
    topk_logp: torch.Tensor | None  # [R, width, K] their log-probs

    def labels(self, pos: torch.Tensor) -> torch.Tensor:
        """The tokens at positions `pos` [R, ...] (IGNORE past a sequence's end; padded anchors are the
        caller's to mask)."""
        R = pos.shape[0]
        return self.toks.gather(1, pos.reshape(R, -1)).view(pos.shape)

    def soft(self, pos: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The top-k ids [*pos.shape, K] (IGNORE where `labels` is) and log-probs at positions `pos`."""
        if self.topk_ids is None:
            return None, None
        R, K = pos.shape[0], self.topk_ids.shape[-1]
        flat = pos.reshape(R, -1, 1).expand(-1, -1, K)
        ids = self.topk_ids.gather(1, flat).view(*pos.shape, K).masked_fill((labels < 0)[..., None], IGNORE)
        return ids, self.topk_logp.gather(1, flat).view(*pos.shape, K)


def anchor_rows(seqs: list[Sequence], anchors: list[list[int]], spare: int) -> AnchorRows:
    """`AnchorRows` of sequences and their anchors; `spare` IGNORE columns past the longest sequence
    let labels run past the end."""
    R, A = len(seqs), max(len(a) for a in anchors)
    C = max(max(a) for a in anchors)
    feats = seqs[0].features
    ctx = torch.zeros(R, C, feats.shape[1], dtype=feats.dtype, device=feats.device)
    width = max(len(s.tokens) for s in seqs) + spare
    toks = torch.full((R, width), IGNORE, dtype=torch.long)
    anchor = torch.zeros(R, A, dtype=torch.long)
    valid = torch.zeros(R, A, dtype=torch.bool)
    soft = all(s.topk_ids is not None for s in seqs)
    tk_ids = tk_logp = None
    if soft:
        K = seqs[0].topk_ids.shape[1]
        tk_ids = torch.full((R, width, K), IGNORE, dtype=torch.long)
        tk_logp = torch.zeros(R, width, K, dtype=torch.float32)
    for r, (s, a) in enumerate(zip(seqs, anchors)):
        anchor[r, :len(a)] = torch.tensor(a)
        valid[r, :len(a)] = True
        ctx[r, :max(a)] = s.features[:max(a)]
        toks[r, :len(s.tokens)] = s.tokens
        if soft:
            tk_ids[r, s.prompt_len:len(s.tokens)] = s.topk_ids.to("cpu", torch.long)
            tk_logp[r, s.prompt_len:len(s.tokens)] = s.topk_logp.to("cpu", torch.float32)
    return AnchorRows(anchor, valid, ctx, toks, tk_ids, tk_logp)


def load_data(data_dirs: list[str | Path], layer_ids: list[int] | None) -> tuple[list, list[Sequence]]:
    """The sequences of one or more `graft drafter-data` directories (same target and layers), each uid
    once: pools overlap (the `drafter` pool holds task items that the `tdes` pool holds too), and a
    response answered in two directories is kept from the first that has it, so that it is neither
    seen twice in training nor counted twice in the held-out set."""
    indexes, seqs, uids = [], [], set()
    for d in data_dirs:
        index, part = load_dataset(d, layer_ids)
        if indexes:
            first = indexes[0]
            require(index.target == first.target and index.target_layer_ids == first.target_layer_ids,
                    f"drafter data {d} ({index.target}, layers {index.target_layer_ids}) does not match "
                    f"{data_dirs[0]} ({first.target}, layers {first.target_layer_ids})")
        indexes.append(index)
        seqs.extend(s for s in part if s.uid not in uids)
        uids.update(s.uid for s in part)
    return indexes, seqs


def batch_to(batch, device):
    """A copy of a batch dataclass with its tensors moved to `device`."""
    return replace(batch, **{k: v.to(device, non_blocking=True) for k, v in vars(batch).items()
                             if isinstance(v, torch.Tensor)})


def target_layer_shape(tc) -> dict:
    """The shape of one target layer (a drafter layer is made like it): widths, heads, norm eps, RoPE."""
    rope = getattr(tc, "rope_parameters", None) or {}
    return dict(hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
                head_dim=getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads,
                rms_norm_eps=tc.rms_norm_eps, rope_theta=float(rope.get("rope_theta",
                                                                        getattr(tc, "rope_theta", 10000.0))),
                vocab_size=tc.vocab_size, max_position_embeddings=tc.max_position_embeddings)



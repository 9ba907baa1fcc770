"""Shared machinery of graftlib's drafter trainers: DFlash (`drafter_train`) and EAGLE-3 (`eagle3_train`).

Samples. Both trainers read the same `graft drafter-data` sequences and draw the same unit: an
*anchor* `a` in the response (`prompt_len <= a <= len - 2`), the last committed token of a decode
round, with at least one label after it. One anchor's drafts (a DFlash block; an EAGLE-3 chain
unrolled from it) count as one *block*. Rows (sequences) are drawn in proportion to their anchor
count, up to `blocks_per_seq` anchors without replacement inside a row (`sample_anchors`).

What lives here, so that the trainers differ only in their model, packing and forward:
- `LoopConfig`: the settings both share (schedule, budget, split, evaluation, checkpoints); the budget
  counts wall time or, with `clock="cpu"`, this process's CPU time (runs sharing a loaded machine then
  still get, and compare at, equal compute);
- data: `load_data` (one or more data directories), `anchor_rows` (the per-row tensors both packers
  start from), `heldout_split` (by a hash of each uid, so both
  trainers hold out the same sequences), `choose_draft_vocab` (the most frequent response ids),
  `draft_index` (target id -> draft id);
- `lr_factor` (warmup-stable-decay, cosine or linear), `native_bf16`;
- `mixed_loss`: (1 - distill) * hard CE + distill * soft CE on the stored top-k, weighted per label;
- `DepthStats`: per-depth top-1/4/16 hit rates and the offline chain tau;
- `LoopTrainer`: AdamW (`weight_decay` on the weight matrices), the optimizer step, the sampler's generator,
  fixed evaluation anchors, exact checkpoint / resume; `feature_dropout` drops context features of the
  training batches (both trainers read them as `batch.ctx`), a regularizer: a drafter trained for hours on
  a few million response tokens learns them by heart (top-1 at depth 1 0.66 on its training
  chat, 0.36 on unseen chat);
- `begin`, `prepare_run`, `run_loop`, `training_record`: the run (data and target; the step / evaluate /
  checkpoint loop under the time budget; SIGTERM or SIGINT ends it after the current step with a
  checkpoint, also in a background job whose shell ignores SIGINT: `stop_requests`) and the
  `training.json` record;
  `evaluate_only`: a checkpoint scored on other data (`--eval-data`, e.g. fresh greedy responses);
- `add_loop_args`, `loop_config_kwargs`: the shared command-line options.

Evaluation anchors are drawn once (seed + 1) from the held-out *greedy* sequences (a sampled
response is no reference for the target's greedy token; `Sequence.greedy` checks each against its
stored top-1; all held-out sequences if none is greedy).
Their labels are the stored tokens, i.e. the target's greedy tokens. With the same `heldout`,
`seed`, `eval_blocks` and `blocks_per_seq`, the two trainers score exactly the same anchors against
the same labels, so their numbers compare side by side.

Checkpoints (`checkpoint/`): the trained module (`model.safetensors`, what the trainer's
`model_state` gives), the AdamW state, the sampler's generator and torch's global one (feature dropout
draws from it) (`optimizer.safetensors`), step, time,
blocks and labels seen (the tokens predicted with a loss), and config (`state.json`); written under a temporary name, then renamed. Resuming refuses a
checkpoint trained with other settings, except those in `RESUMABLE_CHANGES`, and then continues
exactly as an uninterrupted run would (the trainers' tests compare the tensors).
"""

import contextlib
import hashlib
import json
import math
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import portable
from graftlib.core.records import append_record, keep_records
from graftlib.training.drafter_data import Sequence, base_uid, eos_ids, load_dataset, sampled

IGNORE = -100
# Settings a resumed run may change; every other config field must match the checkpoint.
RESUMABLE_CHANGES = ("minutes", "max_steps", "eval_every", "log_every", "tau_prompts", "tau_tokens",
                     "eval_blocks", "checkpoint_minutes")


@dataclass
class LoopConfig:
    target_layer_ids: list[int] | None = None  # None: every layer stored in the data
    draft_vocab: int = 8192  # 0: the full target vocabulary
    blocks_per_step: int = 192
    blocks_per_seq: int = 32
    lr: float = 6e-4
    warmup: float = 0.04  # fraction of the run (steps or time budget)
    schedule: str = "wsd"  # warmup-stable-decay (resumable, extendable), "cosine" or "linear"
    decay: float = 0.2  # wsd: the last fraction of the run decays linearly to zero
    distill: float = 0.0  # weight of the soft loss on the target's stored top-k (0: hard labels only)
    weight_decay: float = 0.01
    feature_dropout: float = 0.0  # dropout on the target's context features of training batches (regularization)
    grad_clip: float = 1.0
    bf16: bool | None = None  # None: bf16 autocast where the device computes it natively, else fp32
    minutes: float | None = 50.0  # time budget (the schedule follows it when max_steps is None)
    clock: str = "wall"  # what the budget counts: "wall" seconds, or "cpu" seconds of this process
    max_steps: int | None = None
    heldout: float = 0.04  # fraction of sequences held out (by uid hash)
    eval_every: int = 400
    eval_blocks: int = 384
    eval_blocks_per_seq: int | None = None  # the held-out anchors' grouping per row (None: blocks_per_seq); the
    # anchors drawn depend on it, so two recipes that train with different blocks_per_seq still score the same anchors
    log_every: int = 20
    checkpoint_minutes: float = 5.0  # a checkpoint at least this often (besides every evaluation)
    seed: int = 0

    def check(self) -> None:
        require(self.draft_vocab >= 0, f"draft_vocab must be >= 0 (0 = full vocabulary), got {self.draft_vocab}")
        require(self.blocks_per_step >= 1 and self.blocks_per_seq >= 1, "blocks_per_step and blocks_per_seq must be >= 1")
        require(self.eval_blocks_per_seq is None or self.eval_blocks_per_seq >= 1,
                f"eval_blocks_per_seq must be >= 1, got {self.eval_blocks_per_seq}")
        require(self.lr > 0, f"lr must be > 0, got {self.lr}")
        require(0 <= self.warmup < 1, f"warmup must be in [0, 1), got {self.warmup}")
        require(self.schedule in ("wsd", "cosine", "linear"),
                f"schedule {self.schedule!r} is not 'wsd', 'cosine' or 'linear'")
        require(0 < self.decay <= 1, f"decay must be in (0, 1], got {self.decay}")
        require(0 <= self.distill <= 1, f"distill must be in [0, 1], got {self.distill}")
        require(0 <= self.feature_dropout < 1, f"feature_dropout must be in [0, 1), got {self.feature_dropout}")
        require(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        require(self.minutes is not None or self.max_steps is not None, "give a time budget (minutes) or max_steps")
        require(self.minutes is None or self.minutes > 0, f"minutes must be > 0, got {self.minutes}")
        require(self.clock in ("wall", "cpu"), f"clock {self.clock!r} is not 'wall' or 'cpu'")
        require(self.max_steps is None or self.max_steps >= 0,
                f"max_steps must be >= 0 (0: only evaluate a warm start), got {self.max_steps}")
        require(0 < self.heldout < 1, f"heldout must be in (0, 1), got {self.heldout}")
        require(self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}")


# ----------------------------------------------------------------------------- data


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
                rms_norm_eps=tc.rms_norm_eps, rope_theta=float(rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0))),
                vocab_size=tc.vocab_size, max_position_embeddings=tc.max_position_embeddings)


# ----------------------------------------------------------------------------- optimization


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 autocast pays on `device`: CUDA, or a CPU whose oneDNN has bf16 kernels (AVX512-BF16 /
    AMX). On an AVX2-only CPU bf16 matmuls are emulated: measured here, a 192-block step took 40 s in
    bf16 against 1.8 s in fp32 (the backward's matmuls)."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def lr_factor(progress: float, warmup: float, schedule: str, decay: float = 0.2) -> float:
    """The lr multiplier at `progress` in [0, 1] of the run. "wsd" (warmup-stable-decay) holds the
    peak until the last `decay` of the run, so a run resumed with a larger budget continues on the
    plateau and decays once, at its new end; "cosine" and "linear" decay from the warmup on."""
    if progress < warmup:
        return progress / warmup
    if schedule == "wsd":
        return min(1.0, max(0.0, (1 - progress) / decay))
    q = min(max((progress - warmup) / (1 - warmup), 0.0), 1.0)
    return 0.5 * (1 + math.cos(math.pi * q)) if schedule == "cosine" else 1 - q


def mixed_loss(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, distill: float,
               soft: tuple[torch.Tensor, torch.Tensor] | None, t2d: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Weighted (1 - distill) * CE(hard label) + distill * soft CE on the target's top-k.

    logits [N, draft vocab] (float), labels [N] draft ids, weight [N]; soft = (target ids [N, K],
    IGNORE where none; their log-probs [N, K]). The stats carry the total weight, so that losses of
    several batches average as one, and the hard CE alone (`ce`), which compares runs of any
    `distill`. The soft term is -sum_i p_i log q(i) over the
    stored top-k ids that lie in the draft vocabulary (`t2d`), p renormalized over them: the forward
    KL(p || q) up to p's entropy."""
    per = F.cross_entropy(logits, labels, reduction="none")
    stats = {"ce": ((per.detach() * weight).sum() / weight.sum().clamp(min=1e-9)).item()}  # hard CE alone
    if distill > 0:
        require(soft is not None, "distill > 0 needs drafter data with top-k log-probs (graft drafter-data --top-k 16)")
        did = to_draft(t2d, soft[0])
        ok = did >= 0
        p = torch.softmax(soft[1].float().masked_fill(~ok, float("-inf")), -1).nan_to_num(0.0)
        logq = torch.log_softmax(logits, -1).gather(1, did.clamp(min=0))
        soft_ce = -(p * logq).sum(-1)
        per = (1 - distill) * per + distill * soft_ce
        stats["soft"] = ((soft_ce * weight).sum() / weight.sum().clamp(min=1e-9)).item()
    loss = (per * weight).sum() / weight.sum().clamp(min=1e-9)
    pred = logits.detach().argmax(-1)
    return loss, {"acc": (pred == labels).float().mean().item(), "labels": len(labels),
                  "weight": weight.sum().item(), **stats}


class DepthStats:
    """Held-out hit rates by draft depth and the offline chain tau (1 + the leading run of top-1
    hits, counted over chains that have a depth-1 label).

    Two per-depth views. `acc_by_depth[d - 1]`: the top-1 hit rate at depth d, whatever happened before
    it; what it conditions on is the trainer's (a DFlash block predicts every depth from the anchor at
    once; the EAGLE-3 unroll is teacher-forced, so its depth d sees the true tokens before it).
    `chain_by_depth[d - 1]`: the share of chains whose leading run of hits reaches depth d, i.e. a chain
    decode accepts d drafts or more; the same quantity for every family, and offline tau = 1 + its sum.
    With the pools of the batch rows (`add(..., pools)`), `by_pool` gives each pool's (the uid's prefix:
    gsm8k, sharegpt, regular, ...) depth-1 hit rate, offline tau and chain count: which text the drafter
    has learned, and which it has only memorized when the seen anchors are scored the same way."""

    KS = (1, 4, 16)

    def __init__(self, depth: int, device):
        self.depth, self.device = depth, device
        self.hits = torch.zeros(len(self.KS), depth, device=device)
        self.counts = torch.zeros(depth, device=device)
        self.chains: list[torch.Tensor] = []
        self.pools: dict[str, DepthStats] = {}

    def add(self, top: torch.Tensor, labels: torch.Tensor, pools: list[str] | None = None) -> None:
        """top [N, D, k] predicted target ids (best first), labels [N, D] target ids (IGNORE: none);
        `pools`: the pool of each of the batch's R rows, whose N / R chains follow one another."""
        if pools is not None:
            row = torch.arange(top.shape[0], device=top.device) // (top.shape[0] // len(pools))
            for name in sorted(set(pools)):
                sub = torch.tensor([p == name for p in pools], device=top.device)[row]
                self.pools.setdefault(name, DepthStats(self.depth, self.device)).add(top[sub], labels[sub])
        has = labels >= 0
        for i, k in enumerate(self.KS):
            self.hits[i] += ((top[..., :k] == labels[..., None]).any(-1) & has).sum(0).float()
        self.counts += has.sum(0).float()
        right = (top[..., 0] == labels) & has
        self.chains.append(right.long().cumprod(-1).sum(-1)[has[:, 0]])  # leading run of hits per chain

    def result(self) -> dict:
        rate = self.hits / self.counts.clamp(min=1)
        names = ("acc_by_depth", "top4_by_depth", "top16_by_depth")
        runs = torch.cat(self.chains)
        depths = torch.arange(1, self.hits.shape[1] + 1, device=runs.device)
        reach = (runs[:, None] >= depths).float().mean(0)  # [D]: P(run >= d)
        out = {**{n: [round(a, 4) for a in r.tolist()] for n, r in zip(names, rate)},
               "chain_by_depth": [round(a, 4) for a in reach.tolist()],
               "offline_tau": 1 + runs.float().mean().item()}
        if self.pools:
            out["by_pool"] = {name: st.summary() for name, st in self.pools.items()}
        return out

    def summary(self) -> dict:
        """A pool's entry of `by_pool`: its depth-1 hit rate, offline tau and number of chains."""
        r = self.result()
        return {"top1_d1": r["acc_by_depth"][0], "offline_tau": round(r["offline_tau"], 3),
                "chains": sum(len(c) for c in self.chains)}


class LoopTrainer:
    """What both trainers share: the anchor sampler, AdamW and its step, evaluation anchors, checkpoints.

    A subclass builds `self.drafter` (the trained module), then calls `init_optimizer()`, and
    defines `pack(seqs, anchors)` (a batch on the device with an `n_blocks` count), `batch_loss(batch)`,
    `evaluate()`, and `model_state()` / `load_model_state(state, where)`."""

    def __init__(self, cfg: LoopConfig, target, train: list[Sequence], heldout: list[Sequence],
                 sampled_uids: frozenset[str] = frozenset()):
        cfg.check()
        self.cfg, self.target, self.train_seqs, self.heldout_seqs = cfg, target, train, heldout
        # the target's greedy responses among the held-out (a sampled one is no exactness reference)
        self.greedy_heldout = [s for s in heldout if s.uid not in sampled_uids and s.greedy()]
        self.sampled_uids = sampled_uids
        self.device = target.device
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else native_bf16(self.device)
        self.compute_dtype = torch.bfloat16 if self.bf16 else torch.float32
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.weights = torch.tensor([n_anchors(s) for s in train], dtype=torch.float64)
        self.step_no, self.elapsed_s, self.blocks_seen, self.labels_seen = 0, 0.0, 0, 0
        self.warm_start = False  # a subclass that starts from trained weights sets it: step 0 is then evaluated

    def init_optimizer(self) -> None:
        params = [(n, p) for n, p in self.drafter.named_parameters() if p.requires_grad]
        decay = [p for _, p in params if p.ndim >= 2]
        other = [p for _, p in params if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": self.cfg.weight_decay},
                                      {"params": other, "weight_decay": 0.0}], lr=self.cfg.lr, betas=(0.9, 0.95))

    def now(self) -> float:
        """The budget's clock: wall time, or this process's CPU time (`clock="cpu"`: on a shared machine,
        the compute a run actually got, so runs that shared the CPUs with others still compare)."""
        return time.process_time() if self.cfg.clock == "cpu" else time.perf_counter()

    def progress(self) -> float:
        cfg, p = self.cfg, 0.0
        if cfg.max_steps:
            p = max(p, (self.step_no + 1) / cfg.max_steps)
        if cfg.minutes:
            p = max(p, self.elapsed_s / (60 * cfg.minutes))
        return min(p, 1.0)

    def sample(self, gen: torch.Generator, seqs: list[Sequence], weights: torch.Tensor, n_blocks: int):
        return self.pack(*sample_anchors(gen, seqs, weights, n_blocks, self.cfg.blocks_per_seq))

    def step(self) -> dict:
        """One optimizer step on `blocks_per_step` fresh blocks."""
        t0 = self.now()
        lr = self.cfg.lr * lr_factor(self.progress(), self.cfg.warmup, self.cfg.schedule, self.cfg.decay)
        for g in self.opt.param_groups:
            g["lr"] = lr
        batch = self.sample(self.gen, self.train_seqs, self.weights, self.cfg.blocks_per_step)
        if self.cfg.feature_dropout > 0:  # the global generator: checkpointed with the run ("rng.torch")
            batch = replace(batch, ctx=F.dropout(batch.ctx, self.cfg.feature_dropout))
        loss, stats = self.batch_loss(batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.step_no += 1
        self.blocks_seen += batch.n_blocks
        self.labels_seen += stats["labels"]
        dt = self.now() - t0
        self.elapsed_s += dt
        return {"step": self.step_no, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item(),
                "blocks": batch.n_blocks, "blocks_per_s": batch.n_blocks / dt, **stats}

    def eval_batches(self, seqs: list[Sequence] | None = None, seed_offset: int = 1) -> list:
        """The fixed evaluation batches (see the module doc), packed `blocks_per_step` at a time, each with
        the pools of its rows (`pool_of`): anchors of the held-out greedy sequences (or of `seqs`), drawn
        with seed + `seed_offset`."""
        gen = torch.Generator().manual_seed(self.cfg.seed + seed_offset)
        seqs = seqs if seqs is not None else (self.greedy_heldout or self.heldout_seqs)
        if not seqs:
            return []
        w = torch.tensor([n_anchors(s) for s in seqs], dtype=torch.float64)
        per = self.cfg.eval_blocks_per_seq or self.cfg.blocks_per_seq
        picked, anchors = sample_anchors(gen, seqs, w, self.cfg.eval_blocks, per)
        rows = max(1, self.cfg.blocks_per_step // per)
        return [(self.pack(picked[i:i + rows], anchors[i:i + rows]), [pool_of(s.uid) for s in picked[i:i + rows]])
                for i in range(0, len(picked), rows)]

    def seen_batches(self) -> list:
        """As many fixed anchors of the training sequences (but the sampled responses; seed + 2): the held-out
        evaluation repeated on text the drafter trains on, so that each eval record shows how far apart
        seen and unseen text are (`seen_ce`, `seen_acc_by_depth`; a large gap: the data is being learned
        by heart, and more of it helps more than more passes)."""
        return self.eval_batches([s for s in self.train_seqs if s.uid not in self.sampled_uids], seed_offset=2)

    def seen_record(self, scores: dict | None) -> dict:
        """The seen-text part of an eval record from `scores` (a trainer's `score` of `seen_batches`)."""
        if scores is None:
            return {}
        return {"seen_ce": scores["ce"], "seen_acc_by_depth": scores["acc_by_depth"],
                "seen_offline_tau": scores["offline_tau"], "seen_by_pool": scores.get("by_pool", {})}

    # -- checkpoints

    def save_checkpoint(self, path: Path, extra: dict | None = None) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.model_state().items()},
                  tmp / "model.safetensors", metadata={"format": "pt"})
        opt = self.opt.state_dict()
        tensors = {f"state.{pid}.{k}": v.contiguous() for pid, st in opt["state"].items() for k, v in st.items()}
        tensors["rng.sampler"] = self.gen.get_state()
        tensors["rng.torch"] = torch.get_rng_state()
        tensors = {k: v.cpu() for k, v in tensors.items()}
        save_file(tensors, tmp / "optimizer.safetensors", metadata={"format": "pt"})
        state = {"step": self.step_no, "elapsed_s": self.elapsed_s, "blocks_seen": self.blocks_seen,
                 "labels_seen": self.labels_seen,
                 "param_groups": opt["param_groups"], "config": asdict(self.cfg), **(extra or {})}
        (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
        old = path.with_name(path.name + ".old")
        if path.exists():
            path.replace(old)
        tmp.replace(path)
        shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, path: Path) -> dict:
        path = Path(path)
        try:
            state = json.loads((path / "state.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise GraftError(f"cannot read checkpoint {path}: {e}") from None
        saved, now, default = state["config"], asdict(self.cfg), asdict(type(self.cfg)())
        # a setting added since the checkpoint was written had its default then
        diff = [f"{k} {saved.get(k, default[k])!r} -> {now[k]!r}" for k in now
                if k not in RESUMABLE_CHANGES and saved.get(k, default[k]) != now[k]]
        require(not diff, f"checkpoint {path} was trained with other settings: {'; '.join(diff)}")
        self.load_model_state(load_file(path / "model.safetensors"), str(path))
        tensors = load_file(path / "optimizer.safetensors")
        opt_state: dict[int, dict] = {}
        for name, v in tensors.items():
            if name.startswith("state."):
                _, pid, key = name.split(".", 2)
                opt_state.setdefault(int(pid), {})[key] = v
        self.opt.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
        self.gen.set_state(tensors["rng.sampler"])
        if "rng.torch" in tensors:  # absent from checkpoints written before feature dropout existed
            torch.set_rng_state(tensors["rng.torch"])
        self.step_no, self.elapsed_s, self.blocks_seen = state["step"], state["elapsed_s"], state["blocks_seen"]
        self.labels_seen = state.get("labels_seen", 0)  # absent from checkpoints written before it was counted
        return state


# ----------------------------------------------------------------------------- the run


@dataclass
class Run:
    """A training run's inputs: the data, its split, the frozen target."""

    data_dirs: list
    indexes: list
    seqs: list[Sequence]
    layer_ids: list[int]
    train: list[Sequence]
    heldout: list[Sequence]
    target: object
    eos: list[int]
    sampled_uids: frozenset[str]
    load_s: float
    eval_dirs: list | None = None  # evaluate-only: the held-out sequences are these directories' (all of them)
    described: dict | None = None  # data generated in this process (no index): its training.json "data"
    target_name: str | None = None

    @property
    def data_info(self) -> dict:
        return {"sequences": len(self.seqs), "train_sequences": len(self.train)}


def prepare_run(data_dir, cfg: LoopConfig, device: str, eval_data: list | None = None) -> Run:
    """Load one or more `graft drafter-data` directories, split them, and load their target. With
    `eval_data` (directories of the same target and layers), every usable sequence there is the held-out
    set instead (an evaluate-only run: `evaluate_only`)."""
    from graftlib.models.target import load_target

    cfg.check()
    data_dirs = list(data_dir) if isinstance(data_dir, (list, tuple)) else [data_dir]
    t0 = time.perf_counter()
    indexes, seqs = load_data(data_dirs, cfg.target_layer_ids)
    train, held = heldout_split(seqs, cfg.heldout)
    sampled_uids = frozenset(s.uid for ix in indexes for s in seqs if sampled(s.uid, ix.sample_share))
    if eval_data:
        ev_indexes, ev_seqs = load_data(list(eval_data), cfg.target_layer_ids)
        ev, first = ev_indexes[0], indexes[0]
        require(ev.target == first.target and ev.target_layer_ids == first.target_layer_ids,
                f"evaluation data {eval_data[0]} ({ev.target}, layers {ev.target_layer_ids}) does not match the "
                f"training data ({first.target}, layers {first.target_layer_ids})")
        held = [s for s in ev_seqs if n_anchors(s) > 0]
        require(held, f"no usable sequences in the evaluation data {eval_data}")
        seqs = seqs + ev_seqs
        sampled_uids |= {s.uid for ix in ev_indexes for s in ev_seqs if sampled(s.uid, ix.sample_share)}
    target, tokenizer = load_target(indexes[0].target, device=device, dtype=torch.float32)
    if target.device.type != "cpu":  # features (memory-mapped on disk) move to the accelerator once
        for s in seqs:
            s.features = s.features.to(target.device, non_blocking=True)
    return Run(data_dirs, indexes, seqs, cfg.target_layer_ids or indexes[0].target_layer_ids, train, held, target,
               eos_ids(target, tokenizer), sampled_uids, time.perf_counter() - t0, eval_data)


@dataclass
class Started:
    """What `begin` hands a trainer's `train`: the trainer and its run, the output paths, and for an
    evaluate-only run the evaluation record's path (then there is nothing left to do)."""

    trainer: LoopTrainer
    run: Run
    ckpt: Path
    metrics: Path
    final: Path
    eval_path: Path | None = None


def begin(data_dir, out_dir, cfg: LoopConfig, resume: bool, device: str, eval_data: list | None,
          make_trainer, log) -> Started:
    """A run's start, shared by the trainers: output paths, data and target, `make_trainer(cfg, run)`,
    then either the evaluate-only run (`eval_data`; the checkpoint's own settings, except those a
    resume may change) or the resume of out/checkpoint."""
    ckpt, metrics, final = output_dirs(out_dir, resume or bool(eval_data))
    if eval_data:
        cfg = checkpoint_config(ckpt, cfg)
    t_start = time.perf_counter()
    run = prepare_run(data_dir, cfg, device, eval_data)
    trainer = make_trainer(cfg, run)
    if eval_data:
        return Started(trainer, run, ckpt, metrics, final, evaluate_only(trainer, ckpt, run, log))
    if resume:
        resume_from(trainer, ckpt, run, log, metrics)
    log(f"start-up: data + target {run.load_s:.0f} s, trainer {time.perf_counter() - t_start - run.load_s:.0f} s")
    return Started(trainer, run, ckpt, metrics, final)


def checkpoint_config(ckpt: Path, cfg: LoopConfig) -> LoopConfig:
    """`cfg` with the checkpoint's settings, except the ones a resumed run may change."""
    try:
        saved = json.loads((Path(ckpt) / "state.json").read_text())["config"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise GraftError(f"cannot read checkpoint {ckpt}: {e}") from None
    now = asdict(cfg)
    return type(cfg)(**{**now, **{k: v for k, v in saved.items() if k in now and k not in RESUMABLE_CHANGES}})


def output_dirs(out: str | Path, resume: bool) -> tuple[Path, Path, Path]:
    """(checkpoint/, metrics.jsonl, drafter/) under `out`, refusing to overwrite or to resume nothing."""
    out = Path(out)
    ckpt = out / "checkpoint"
    require(resume or not ckpt.exists(), f"{ckpt} exists: pass --resume to continue it, or choose another --out")
    require(not resume or ckpt.exists(), f"nothing to resume: {ckpt} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    return ckpt, out / "metrics.jsonl", out / "drafter"


def resume_from(trainer: LoopTrainer, ckpt: Path, run: Run, log, metrics: Path) -> None:
    """Load the checkpoint and forget the `metrics` records of the steps after it: the run repeats those
    steps, so its records end as an uninterrupted run's (one per logged step and evaluation). Every
    record up to the checkpoint's step was written before the checkpoint (`_run_loop` evaluates, then
    saves), so none of those is lost."""
    state = trainer.load_checkpoint(ckpt)
    dropped = keep_records(metrics, lambda r: r.get("step", 0) <= trainer.step_no)
    log(f"resumed {ckpt} at step {trainer.step_no} ({trainer.elapsed_s / 60:.1f} min trained)"
        + (f"; {dropped} records of the steps after it dropped from {metrics.name}" if dropped else ""))
    if state.get("data") != run.data_info:
        log(f"note: the data changed since the checkpoint ({state.get('data')} -> {run.data_info})")


def evaluate_only(trainer: LoopTrainer, ckpt: Path, run: Run, log) -> Path:
    """Load the checkpoint, evaluate it on `run`'s evaluation data, write `eval-<first dir name>.json`
    beside the checkpoint (the evaluation, its data and the checkpoint's step); returns its path."""
    require(ckpt.exists(), f"nothing to evaluate: {ckpt} does not exist")
    trainer.load_checkpoint(ckpt)
    record = {**trainer.evaluate(), "eval_data": [portable(d) for d in run.eval_dirs],
              "heldout_sequences": len(run.heldout), "greedy_sequences": len(trainer.greedy_heldout),
              "eval_blocks": trainer.cfg.eval_blocks, "checkpoint": portable(ckpt)}
    log(eval_line(record))
    path = ckpt.parent / f"eval-{Path(run.eval_dirs[0]).name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def eval_line(e: dict) -> str:
    acc = e["acc_by_depth"]
    picks = ", ".join(f"d{d} {acc[d - 1]:.2f}" for d in (1, 2, 4, 8) if d <= len(acc))
    data = f", matches data {e['tau_matches_data']}" if "tau_matches_data" in e else ""
    loop = f", loop tau {e['tau']:.2f} (exact {e.get('tau_exact')}{data})" if "tau" in e else ""
    ce = f" (hard CE {e['heldout_ce']:.3f})" if "heldout_ce" in e else ""
    seen = (f"; seen text: hard CE {e['seen_ce']:.3f}, top-1 d1 {e['seen_acc_by_depth'][0]:.2f}"
            if "seen_ce" in e else "")
    pools = e.get("by_pool") or {}
    seen_pools = e.get("seen_by_pool") or {}
    by_pool = "; by pool (held-out / seen top-1 d1, offline tau): " + ", ".join(
        f"{name} {p['top1_d1']:.2f}/{seen_pools[name]['top1_d1']:.2f} {p['offline_tau']:.1f}/"
        f"{seen_pools[name]['offline_tau']:.1f}" if name in seen_pools else
        f"{name} {p['top1_d1']:.2f} {p['offline_tau']:.1f}" for name, p in pools.items()) if pools else ""
    return (f"eval @ step {e['step']}: held-out loss {e['heldout_loss']:.3f}{ce}, top-1 {picks}, offline tau "
            f"{e['offline_tau']:.2f}{loop}{seen}{by_pool}, {e['eval_s']:.0f} s")


@contextlib.contextmanager
def stop_requests():
    """A list that SIGTERM and SIGINT append their number to while the block runs (handlers restored
    after). The loop polls it between steps, so a stop never lands inside a step or a checkpoint
    write; SIGINT is caught even where the shell that started a background job set it to ignored.
    Off the main thread (where Python cannot install handlers) the list stays empty."""
    requests: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda signum, frame: requests.append(signum)) for s in signals}
    try:
        yield requests
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_loop(trainer: LoopTrainer, ckpt: Path, metrics: Path, data_info: dict, log) -> dict:
    """Steps until the budget (minutes of training + evaluation on the trainer's clock, or max_steps;
    max_steps 0 with a warm start: its step-0 evaluation only, the way to score a trained drafter on
    another run's held-out anchors); logs, evaluates at step 0 of a warm start and every
    `eval_every` steps, checkpoints at each evaluation and every `checkpoint_minutes`, and when a stop
    is requested (`stop_requests`): then it raises KeyboardInterrupt after the checkpoint.
    Returns the final evaluation (made at the last step if the last periodic one was earlier)."""
    with stop_requests() as stops:
        return _run_loop(trainer, ckpt, metrics, data_info, log, stops)


def _run_loop(trainer: LoopTrainer, ckpt: Path, metrics: Path, data_info: dict, log, stops: list[int]) -> dict:
    cfg = trainer.cfg
    last_eval: dict = {}
    last_ckpt = time.perf_counter()

    def evaluate() -> dict:  # with the blocks and labels seen so far: the learning curve's x axis
        return {**trainer.evaluate(), "blocks_seen": trainer.blocks_seen, "labels_seen": trainer.labels_seen}

    def done() -> bool:
        if cfg.max_steps is not None and trainer.step_no >= cfg.max_steps:
            return True
        return cfg.minutes is not None and trainer.elapsed_s >= 60 * cfg.minutes

    require(cfg.max_steps != 0 or trainer.warm_start,
            "max_steps 0 trains nothing: it evaluates a warm start on this run's held-out split (give --init-drafter)")
    if trainer.warm_start and trainer.step_no == 0:  # where a warm start begins: the curve's first point
        t0 = trainer.now()
        last_eval = evaluate()
        append_record(metrics, last_eval)
        trainer.elapsed_s += trainer.now() - t0
    try:
        while not done():
            if stops:
                raise KeyboardInterrupt(f"signal {stops[0]}")
            rec = trainer.step()
            if trainer.step_no % cfg.log_every == 0:
                rec = {"kind": "train", "elapsed_s": round(trainer.elapsed_s, 1), **rec}
                append_record(metrics, rec)
                log(f"step {rec['step']}: loss {rec['loss']:.3f} acc {rec['acc']:.3f} lr {rec['lr']:.2e} "
                    f"{rec['blocks_per_s']:.0f} blocks/s, {trainer.elapsed_s / 60:.1f} min")
            if trainer.step_no % cfg.eval_every == 0:
                t0 = trainer.now()
                last_eval = evaluate()
                append_record(metrics, last_eval)
                log(eval_line(last_eval))
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
                trainer.elapsed_s += trainer.now() - t0  # evaluation counts against the budget
            elif time.perf_counter() - last_ckpt > 60 * cfg.checkpoint_minutes:
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        trainer.save_checkpoint(ckpt, {"data": data_info})
        log(f"interrupted: checkpoint saved at step {trainer.step_no}; continue with --resume")
        raise
    if last_eval.get("step") != trainer.step_no:
        last_eval = evaluate()
        append_record(metrics, last_eval)
        log(eval_line(last_eval))
    trainer.save_checkpoint(ckpt, {"data": data_info})
    return last_eval


def training_record(trainer: LoopTrainer, run: Run, draft_vocab_size: int, wall_s: float, final_eval: dict,
                    command: str | None) -> dict:
    """The `training.json` record: hardware, data, split, work done, config, final evaluation, command."""
    from graftlib.models import hardware

    anchors = int(trainer.weights.sum())
    data, target = run.described, run.target_name
    if data is None:
        index = run.indexes[0]
        tots = [ix.totals() for ix in run.indexes]
        tot = {k: sum(t[k] for t in tots) for k in ("n_seqs", "prompt_tokens", "response_tokens", "seconds")}
        target = index.target
        data = {"dirs": [portable(d) for d in run.data_dirs], "pools": [ix.pool for ix in run.indexes],
                "sequences": tot["n_seqs"], "prompt_tokens": tot["prompt_tokens"],
                "response_tokens": tot["response_tokens"], "max_response_tokens": index.max_response_tokens,
                "generation_s": tot["seconds"], "stored_layer_ids": index.target_layer_ids}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hardware": hardware(trainer.device), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "target": target, "data": data,
        "split": {"train_sequences": len(run.train), "heldout_sequences": len(run.heldout), "train_anchors": anchors},
        "steps": trainer.step_no, "blocks_seen": trainer.blocks_seen, "labels_seen": trainer.labels_seen,
        "epochs_over_anchors": round(trainer.blocks_seen / max(anchors, 1), 3),
        "train_s": round(trainer.elapsed_s, 1), "wall_s_this_run": round(wall_s, 1),
        "process_cpu_s_this_run": round(time.process_time(), 1),  # CPU time of this process (shared machines)
        "draft_vocab_size": draft_vocab_size, "config": asdict(trainer.cfg), "final_eval": final_eval,
        "command": command,
    }


# ----------------------------------------------------------------------------- command line


def add_loop_args(p, d: LoopConfig, data: bool = True) -> None:
    """The options every drafter trainer takes (defaults from `d`; `data`: --data and --resume too)."""
    if data:
        p.add_argument("--data", required=True, nargs="+", help="one or more directories written by `graft drafter-data`")
    p.add_argument("--out", required=True, help="output directory (checkpoint/, metrics.jsonl, drafter/)")
    p.add_argument("--minutes", type=float, default=d.minutes, help=f"time budget; the lr schedule follows it (default {d.minutes})")
    p.add_argument("--max-steps", type=int, default=None, help="step budget (with --minutes: whichever ends first)")
    p.add_argument("--clock", default=d.clock, choices=("wall", "cpu"),
                   help=f"what --minutes counts: wall time or this process's CPU time, for equal compute on a "
                        f"shared machine (default {d.clock})")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="target layers used as context (a subset of the data's; default: all of them)")
    p.add_argument("--draft-vocab", type=int, default=d.draft_vocab,
                   help=f"draft vocabulary size, 0 = full target vocabulary (default {d.draft_vocab})")
    p.add_argument("--blocks-per-step", type=int, default=d.blocks_per_step,
                   help=f"anchors (blocks of drafts) per step (default {d.blocks_per_step})")
    p.add_argument("--blocks-per-seq", type=int, default=d.blocks_per_seq,
                   help=f"anchors packed into one sequence's row (default {d.blocks_per_seq})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help=f"steps between evaluations (default {d.eval_every})")
    p.add_argument("--eval-blocks", type=int, default=d.eval_blocks, help=f"held-out anchors evaluated (default {d.eval_blocks})")
    p.add_argument("--eval-blocks-per-seq", type=int, default=None,
                   help="the held-out anchors' grouping per row (default: --blocks-per-seq); give another recipe's "
                        "--blocks-per-seq to score exactly its held-out anchors")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast (default: bf16 where it is native)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast even where it is emulated (slow on AVX2 CPUs)")
    p.add_argument("--schedule", default=d.schedule, choices=("wsd", "cosine", "linear"),
                   help=f"lr schedule (default {d.schedule}: warmup, plateau, decay over the last --decay)")
    p.add_argument("--decay", type=float, default=d.decay, help=f"wsd: decaying fraction of the run (default {d.decay})")
    p.add_argument("--distill", type=float, default=d.distill,
                   help=f"weight of the soft loss on the target's stored top-k log-probs (default {d.distill})")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help=f"AdamW weight decay of the weight matrices (default {d.weight_decay})")
    p.add_argument("--feature-dropout", type=float, default=d.feature_dropout,
                   help=f"dropout on the target's context features while training, against memorizing the data "
                        f"(default {d.feature_dropout}: off)")
    p.add_argument("--checkpoint-minutes", type=float, default=d.checkpoint_minutes,
                   help=f"checkpoint at least this often (default {d.checkpoint_minutes})")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--seed", type=int, default=d.seed)
    if data:
        p.add_argument("--resume", action="store_true", help="continue out/checkpoint")
        p.add_argument("--eval-data", nargs="+", default=None, metavar="DIR",
                       help="no training: evaluate out/checkpoint on every sequence of these drafter-data directories "
                            "(same target and layers) and write out/eval-<DIR>.json")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def loop_config_kwargs(args) -> dict:
    """The `LoopConfig` fields given by `add_loop_args`' options."""
    return dict(target_layer_ids=args.target_layer_ids, draft_vocab=args.draft_vocab,
                blocks_per_step=args.blocks_per_step, blocks_per_seq=args.blocks_per_seq, lr=args.lr,
                eval_every=args.eval_every, eval_blocks=args.eval_blocks,
                eval_blocks_per_seq=args.eval_blocks_per_seq, minutes=args.minutes,
                max_steps=args.max_steps, clock=args.clock, bf16=False if args.fp32 else True if args.bf16 else None,
                seed=args.seed, schedule=args.schedule, decay=args.decay, distill=args.distill,
                weight_decay=args.weight_decay, feature_dropout=args.feature_dropout,
                checkpoint_minutes=args.checkpoint_minutes)


def run_command(args, train_fn, cfg: LoopConfig) -> int:
    """A trainer's `_main`: threads, device, then `train_fn(data, out, cfg, resume=, device=, command=, eval_data=)`."""
    from graftlib.models.target import default_device

    if args.threads:
        torch.set_num_threads(args.threads)
    train_fn(args.data, args.out, cfg, resume=args.resume, device=args.device or default_device(),
             command="graft " + " ".join(sys.argv[1:]), eval_data=args.eval_data)
    return 0

"""Shared machinery of graftlib's drafter trainers: DFlash (`dflash_train`) and EAGLE-3 (`eagle3_train`).

Samples. Both trainers read the same `graft drafter-data` sequences and draw the same unit: an
*anchor* `a` in the response (`prompt_len <= a <= len - 2`), the last committed token of a decode
round, with at least one label after it. One anchor's drafts (a DFlash block; an EAGLE-3 chain
unrolled from it) count as one *block*. Rows (sequences) are drawn in proportion to their anchor
count, up to `blocks_per_seq` anchors without replacement inside a row (`sample_anchors`).

What lives here, so that the trainers differ only in model, packing and forward: `LoopConfig` (schedule,
budget in wall or CPU time, split, evaluation, checkpoints), `lr_factor`, `mixed_loss` ((1 - distill) hard
CE + distill soft CE on the stored top-k), `DepthStats` (per-depth hit rates, offline chain tau) and
`LoopTrainer` (AdamW, the step, fixed evaluation anchors, exact checkpoint / resume, `feature_dropout`).

Evaluation anchors are drawn once from the held-out greedy sequences: with the same split settings the two
trainers score exactly the same anchors against the same labels.

Checkpoints (`checkpoint/`): module, AdamW and generator states, counters and config, written under a
temporary name and renamed; resuming refuses other settings (but `RESUMABLE_CHANGES`) and then continues
exactly as an uninterrupted run would.

Details: docs/internals.md, `graftlib.training.drafter.trainer`.
"""

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from graftlib.core.errors import GraftError, require
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.samples import n_anchors, pool_of, sample_anchors, to_draft

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
        require(self.blocks_per_step >= 1 and self.blocks_per_seq >= 1,
                "blocks_per_step and blocks_per_seq must be >= 1")
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

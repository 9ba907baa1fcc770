"""Train a DFlash drafter for a target on `graftlib.training.drafter_data` (the DFlash recipe, FACTS.md 1).

Recipe. Anchors `a` are drawn in the response part (`prompt_len <= a <= len - 2`, so every
anchor has a label). A block is `[tokens[a], mask x (block_size - 1)]` embedded with the
target's frozen embeddings at RoPE positions `a .. a + block_size - 1`; its context is the
stored target features of positions `< a` (also RoPE positions `0 .. a - 1`). Block position
k predicts `tokens[a + k]` (labels past the sequence end are ignored), cross-entropy weighted
by `exp(-(k - 1) / gamma)`. AdamW, linear warmup then cosine (or linear) decay, grad clipping.

Packing. One row per sampled sequence holds up to `blocks_per_seq` blocks side by side; the
row's context is its features up to its last anchor, and `block_mask` lets a query of block b
see the context positions `< anchor_b` and its own block only (bidirectional inside, blocks
blind to each other), with per-block positions passed to `DFlashDrafter.forward`. So one
packed forward equals the separate single-block forwards the decode loop runs
(tests/test_drafter_train.py checks this). Rows are sampled in proportion to their anchor
count, anchors without replacement inside a row.

CPU savers (all options of `TrainConfig`): a reduced draft vocabulary (the most frequent ids of
the training responses, then of the prompts; stored as the drafter's `d2t` buffer, so decoding
maps it back; training takes logits over the draft ids only and ignores labels outside it),
bf16 autocast where the device has native bf16 (`native_bf16`; fp32 on AVX2 CPUs). Optionally
(`init_from_target`) the drafter's layers start from the target's last layers (Llama/Qwen3 names map
one to one; q_norm/k_norm start at ones) and `fc` as the identity on the deepest stored layer with
`hidden_norm` = that next layer's input norm, so the context starts as what the target's next layer sees.
Measured against random init at equal time (6 CPU
minutes, same data and held-out split, `make drafter-ablation`), random init reached twice the
depth-1 top-1 rate (0.26 vs 0.13) and offline chain tau 1.34 vs 1.15, so it is the default; a
second layer (-37% steps) and a 16k draft vocabulary (-30% steps) were also worse at equal time. The target's embeddings and LM head stay frozen and are
never saved with the drafter.

Evaluation (every `eval_every` steps, on sequences held out by a hash of their uid): loss and
per-depth top-1 / top-4 / top-16 hit rates on fixed held-out blocks, the offline chain tau over those blocks, and
the number that matters, the in-loop chain tau of `graftlib.methods.decoder.Decoder` (method dflash)
on a few held-out prompts, checked token for token against the stored greedy response.

Output directory: `checkpoint/` (drafter + AdamW state + sampler RNG in safetensors, step and
config in JSON; `--resume` continues it exactly), `metrics.jsonl` (train and eval lines), and
`drafter/` (the final drafter via `save_drafter`, z-lab layout, bf16 weights, plus `training.json`).
"""

import hashlib
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import portable
from graftlib.core.records import append_record
from graftlib.models.drafter import DFlashConfig, DFlashDrafter, init_weights, load_state_strict, save_drafter
from graftlib.training.blocks import IGNORE, Batch, FlatBlocks, pack_blocks
from graftlib.training.drafter_data import Sequence, eos_ids, load_dataset, sampled

# Settings a resumed run may change; every other TrainConfig field must match the checkpoint.
RESUMABLE_CHANGES = ("minutes", "max_steps", "eval_every", "log_every", "tau_prompts", "tau_tokens",
                     "eval_blocks", "checkpoint_minutes")


@dataclass
class TrainConfig:
    layers: int = 1
    target_layer_ids: list[int] | None = None  # None: every layer stored in the data
    block_size: int | None = None  # None: the embedded drafter's (16)
    mask_token_id: int | None = None  # None: the embedded drafter's
    draft_vocab: int = 8192  # 0: the full target vocabulary
    blocks_per_step: int = 192
    blocks_per_seq: int = 32
    lr: float = 6e-4
    warmup: float = 0.04  # fraction of the run (steps or time budget)
    schedule: str = "wsd"  # warmup-stable-decay (resumable, extendable), "cosine" or "linear"
    decay: float = 0.2  # wsd: the last fraction of the run decays linearly to zero
    distill: float = 0.0  # weight of the soft loss on the target's stored top-k (0: hard labels only)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    gamma: float = 7.0
    bf16: bool | None = None  # None: bf16 autocast where the device computes it natively, else fp32
    init_from_target: bool = False  # measured: worse at equal time (ablation.json)
    fc_init: str = "last"  # "last": identity on the deepest stored layer; "random"
    minutes: float | None = 50.0  # time budget (the schedule follows it when max_steps is None)
    max_steps: int | None = None
    heldout: float = 0.04  # fraction of sequences held out (by uid hash)
    eval_every: int = 400
    eval_blocks: int = 384
    tau_prompts: int = 4
    tau_tokens: int = 64
    log_every: int = 20
    checkpoint_minutes: float = 5.0  # a checkpoint at least this often (besides every evaluation)
    seed: int = 0

    def check(self) -> None:
        require(self.layers >= 1, f"layers must be >= 1, got {self.layers}")
        require(self.draft_vocab >= 0, f"draft_vocab must be >= 0 (0 = full vocabulary), got {self.draft_vocab}")
        require(self.blocks_per_step >= 1 and self.blocks_per_seq >= 1, "blocks_per_step and blocks_per_seq must be >= 1")
        require(self.lr > 0, f"lr must be > 0, got {self.lr}")
        require(0 <= self.warmup < 1, f"warmup must be in [0, 1), got {self.warmup}")
        require(self.schedule in ("wsd", "cosine", "linear"),
                f"schedule {self.schedule!r} is not 'wsd', 'cosine' or 'linear'")
        require(0 < self.decay <= 1, f"decay must be in (0, 1], got {self.decay}")
        require(0 <= self.distill <= 1, f"distill must be in [0, 1], got {self.distill}")
        require(self.fc_init in ("last", "random"), f"fc_init {self.fc_init!r} is not 'last' or 'random'")
        require(self.minutes is not None or self.max_steps is not None, "give a time budget (minutes) or max_steps")
        require(self.minutes is None or self.minutes > 0, f"minutes must be > 0, got {self.minutes}")
        require(self.max_steps is None or self.max_steps >= 1, f"max_steps must be >= 1, got {self.max_steps}")
        require(0 < self.heldout < 1, f"heldout must be in (0, 1), got {self.heldout}")
        require(self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}")


# ----------------------------------------------------------------------------- model


def embedded_defaults() -> DFlashConfig:
    from graftlib.models.drafter import EMBEDDED_DRAFTER_DIR

    return DFlashConfig.from_dict(json.loads((EMBEDDED_DRAFTER_DIR / "config.json").read_text()))


def drafter_config(target_config, cfg: TrainConfig, layer_ids: list[int], draft_vocab_size: int | None) -> DFlashConfig:
    """A drafter shaped like one target layer (so it can start from one), block/mask from cfg."""
    tc, base = target_config, embedded_defaults()
    rope = getattr(tc, "rope_parameters", None) or {}
    return DFlashConfig(
        hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size, num_hidden_layers=cfg.layers,
        num_attention_heads=tc.num_attention_heads, num_key_value_heads=tc.num_key_value_heads,
        head_dim=getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads,
        rms_norm_eps=tc.rms_norm_eps, rope_theta=float(rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0))),
        vocab_size=tc.vocab_size, max_position_embeddings=tc.max_position_embeddings,
        block_size=cfg.block_size or base.block_size,
        mask_token_id=base.mask_token_id if cfg.mask_token_id is None else cfg.mask_token_id,
        target_layer_ids=list(layer_ids), num_target_layers=tc.num_hidden_layers,
        draft_vocab_size=draft_vocab_size,
    )


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


@torch.no_grad()
def init_from_target(drafter: DFlashDrafter, target, fc_init: str) -> None:
    """Drafter layer i <- target layer L - n + i; final norm <- target's; fc as in the module doc."""
    layers = target.model.layers
    n = len(drafter.layers)
    for i, layer in enumerate(drafter.layers):
        src = layers[len(layers) - n + i].state_dict()
        for name, p in layer.named_parameters():
            if name in src:
                require(src[name].shape == p.shape, f"cannot start drafter layer from target: {name} "
                                                    f"{tuple(src[name].shape)} != {tuple(p.shape)}")
                p.copy_(src[name])
            else:
                assert name.endswith(("q_norm.weight", "k_norm.weight")), name
                p.fill_(1.0)
    drafter.norm.weight.copy_(target.model.norm.weight)
    if fc_init == "last":
        cfg = drafter.config
        deepest = max(range(len(cfg.target_layer_ids)), key=lambda j: cfg.target_layer_ids[j])
        h = cfg.hidden_size
        drafter.fc.weight.zero_()
        drafter.fc.weight[:, deepest * h:(deepest + 1) * h] = torch.eye(h)
        nxt = min(cfg.target_layer_ids[deepest] + 1, len(layers) - 1)
        drafter.hidden_norm.weight.copy_(layers[nxt].input_layernorm.weight)


def make_drafter(cfg: TrainConfig, target, layer_ids: list[int], d2t: torch.Tensor | None) -> DFlashDrafter:
    torch.manual_seed(cfg.seed)
    drafter = DFlashDrafter(drafter_config(target.config, cfg, layer_ids, len(d2t) if d2t is not None else None))
    init_weights(drafter)
    if cfg.init_from_target:
        init_from_target(drafter, target, cfg.fc_init)
    if d2t is not None:
        drafter.d2t.copy_(d2t)
    return drafter.float().train()


# ----------------------------------------------------------------------------- packing


def n_anchors(s: Sequence) -> int:
    return max(len(s.tokens) - 1 - s.prompt_len, 0)


def heldout_split(seqs: list[Sequence], frac: float) -> tuple[list[Sequence], list[Sequence]]:
    """(train, heldout) by a hash of each uid: stable when the data grows."""
    def held(s: Sequence) -> bool:
        return int(hashlib.sha256(s.uid.encode()).hexdigest()[:8], 16) < frac * 2 ** 32

    usable = [s for s in seqs if n_anchors(s) > 0]
    train = [s for s in usable if not held(s)]
    heldout = [s for s in usable if held(s)]
    if not heldout and len(train) > 1:  # tiny data sets: hold out one sequence anyway
        heldout = [train.pop()]
    require(train and heldout, f"too little drafter data: {len(usable)} usable sequences (need 2 or more)")
    return train, heldout


# ----------------------------------------------------------------------------- trainer


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


class Trainer:
    """The drafter, the frozen target parts it needs, AdamW and the block sampler."""

    def __init__(self, cfg: TrainConfig, target, train: list[Sequence], heldout: list[Sequence],
                 layer_ids: list[int], eos: list[int], sampled_uids: frozenset[str] = frozenset(),
                 flat: bool | None = None):
        cfg.check()
        self.cfg, self.target, self.train_seqs, self.heldout_seqs, self.eos = cfg, target, train, heldout, eos
        # the loop-tau prompts: held-out greedy responses only (a sampled one is no exactness reference)
        self.tau_seqs = [s for s in heldout if s.uid not in sampled_uids]
        self.device = target.device
        vocab = target.config.vocab_size
        d2t = choose_draft_vocab(train, cfg.draft_vocab, vocab) if 0 < cfg.draft_vocab < vocab else None
        self.drafter = make_drafter(cfg, target, layer_ids, d2t).to(self.device)
        self.embed = target.get_input_embeddings()
        self.bf16 = cfg.bf16 if cfg.bf16 is not None else native_bf16(self.device)
        self.compute_dtype = torch.bfloat16 if self.bf16 else torch.float32
        self._use_vocab()
        bs = self.drafter.block_size
        k = torch.arange(bs, dtype=torch.float32)
        self.depth_weight = torch.where(k > 0, torch.exp(-(k - 1) / cfg.gamma), torch.zeros(bs)).to(self.device)
        decay = [p for n, p in self.drafter.named_parameters() if p.ndim >= 2]
        other = [p for n, p in self.drafter.named_parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": other, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.weights = torch.tensor([n_anchors(s) for s in train], dtype=torch.float64)
        # flat (default: on an accelerator): every sequence concatenated there once, blocks gathered, not copied
        flat = self.device.type != "cpu" if flat is None else flat
        self.flat_train = FlatBlocks(train, self.device) if flat else None
        self.flat_held = FlatBlocks(heldout, self.device) if flat and heldout else None
        self.step_no, self.elapsed_s, self.blocks_seen = 0, 0.0, 0
        self.eval_batches = self._eval_batches()

    def _use_vocab(self) -> None:
        """Target-id <-> draft-id maps and the frozen LM head rows of the drafter's vocabulary."""
        vocab, dev = self.target.config.vocab_size, self.device
        self.d2t = self.drafter.d2t.clone() if self.drafter.config.draft_vocab_size else torch.arange(vocab, device=dev)
        self.t2d = torch.full((vocab,), IGNORE, dtype=torch.long, device=dev)
        self.t2d[self.d2t] = torch.arange(len(self.d2t), device=dev)
        self.head = self.target.lm_head.weight.detach()[self.d2t].to(self.compute_dtype)

    # -- sampling and loss

    def sample(self, gen: torch.Generator, seqs: list[Sequence], weights: torch.Tensor, n_blocks: int,
               flat: FlatBlocks | None = None) -> Batch:
        """Rows in proportion to their anchors, anchors without replacement inside a row; packed by
        `flat` (the same sequences concatenated on the device: no per-row copies) when given."""
        per = self.cfg.blocks_per_seq
        rows = torch.multinomial(weights, -(-n_blocks // per), replacement=True, generator=gen).tolist()
        anchors = []
        for i in rows:
            s = seqs[i]
            perm = torch.randperm(n_anchors(s), generator=gen)[:per]
            anchors.append(sorted((perm + s.prompt_len).tolist()))
        bs, mask_id = self.drafter.block_size, self.drafter.config.mask_token_id
        if flat is not None:
            return flat.pack(rows, anchors, bs, mask_id)
        return pack_blocks([seqs[i] for i in rows], anchors, bs, mask_id).to(self.device)

    def hidden(self, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            emb = self.embed(batch.ids) * self.drafter.config.input_embedding_scale
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.drafter(emb, batch.ctx.to(self.compute_dtype), 0, block_mask=batch.mask,
                                ctx_positions=batch.ctx_pos, q_positions=batch.q_pos)

    def loss(self, batch: Batch, h: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Depth-weighted (1 - distill) * CE(hard label) + distill * soft CE on the target's top-k.

        The soft term is -sum_i p_i log q(i) over the stored top-k ids that lie in the draft
        vocabulary, p renormalized over them: the forward KL(p || q) up to p's entropy."""
        labels = self.t2d[batch.labels.clamp(min=0)].masked_fill(batch.labels < 0, IGNORE)
        sel = labels >= 0
        w = self.depth_weight[batch.depth].expand_as(labels)[sel]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = F.linear(h[sel], self.head).float()
        per = F.cross_entropy(logits, labels[sel], reduction="none")
        stats = {}
        if self.cfg.distill > 0:
            require(batch.soft_ids is not None, "distill > 0 needs drafter data with top-k log-probs "
                                                "(graft drafter-data --top-k 16)")
            ids = batch.soft_ids[sel]  # [N, K] target ids
            did = self.t2d[ids.clamp(min=0)].masked_fill(ids < 0, IGNORE)
            ok = did >= 0
            p = torch.softmax(batch.soft_logp[sel].float().masked_fill(~ok, float("-inf")), -1).nan_to_num(0.0)
            logq = torch.log_softmax(logits, -1).gather(1, did.clamp(min=0))
            soft = -(p * logq).sum(-1)
            per = (1 - self.cfg.distill) * per + self.cfg.distill * soft
            stats["soft"] = ((soft * w).sum() / w.sum().clamp(min=1e-9)).item()
        loss = (per * w).sum() / w.sum().clamp(min=1e-9)
        pred = logits.detach().argmax(-1)
        return loss, {"acc": (pred == labels[sel]).float().mean().item(), "labels": int(sel.sum()), **stats}

    def progress(self) -> float:
        cfg, p = self.cfg, 0.0
        if cfg.max_steps:
            p = max(p, (self.step_no + 1) / cfg.max_steps)
        if cfg.minutes:
            p = max(p, self.elapsed_s / (60 * cfg.minutes))
        return min(p, 1.0)

    def step(self) -> dict:
        """One optimizer step on `blocks_per_step` fresh blocks."""
        t0 = time.perf_counter()
        lr = self.cfg.lr * lr_factor(self.progress(), self.cfg.warmup, self.cfg.schedule, self.cfg.decay)
        for g in self.opt.param_groups:
            g["lr"] = lr
        batch = self.sample(self.gen, self.train_seqs, self.weights, self.cfg.blocks_per_step, self.flat_train)
        loss, stats = self.loss(batch, self.hidden(batch))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.step_no += 1
        self.blocks_seen += batch.n_blocks
        dt = time.perf_counter() - t0
        self.elapsed_s += dt
        return {"step": self.step_no, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item(),
                "blocks": batch.n_blocks, "blocks_per_s": batch.n_blocks / dt, **stats}

    # -- evaluation

    def _eval_batches(self) -> list[Batch]:
        gen = torch.Generator().manual_seed(self.cfg.seed + 1)
        w = torch.tensor([n_anchors(s) for s in self.heldout_seqs], dtype=torch.float64)
        n, out = self.cfg.eval_blocks, []
        while n > 0:
            out.append(self.sample(gen, self.heldout_seqs, w, min(n, self.cfg.blocks_per_step), self.flat_held))
            n -= out[-1].n_blocks
        return out

    @torch.no_grad()
    def evaluate(self) -> dict:
        t0 = time.perf_counter()
        bs = self.drafter.block_size
        tot_loss, tot_w = 0.0, 0.0
        ks = (1, 4, 16)
        dev = self.device
        hits, counts, tau_blocks = torch.zeros(len(ks), bs, device=dev), torch.zeros(bs, device=dev), []
        for batch in self.eval_batches:
            h = self.hidden(batch)
            loss, _ = self.loss(batch, h)
            labels = self.t2d[batch.labels.clamp(min=0)].masked_fill(batch.labels < 0, IGNORE)
            w = self.depth_weight[batch.depth].expand_as(labels)[labels >= 0].sum().item()
            tot_loss, tot_w = tot_loss + loss.item() * w, tot_w + w
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.bf16):
                top = self.d2t[F.linear(h, self.head).topk(min(max(ks), len(self.d2t)), dim=-1).indices]  # [R, Q, 16]
            has = batch.labels >= 0
            depth = batch.depth.expand_as(has)
            for i, k in enumerate(ks):
                hit_k = (top[..., :k] == batch.labels[..., None]).any(-1) & has
                hits[i] += torch.bincount(depth[hit_k], minlength=bs).float()
            right = (top[..., 0] == batch.labels) & has
            counts += torch.bincount(depth[has], minlength=bs).float()
            R = right.shape[0]
            chain = right.view(R, -1, bs)[:, :, 1:].long().cumprod(-1).sum(-1) + 1  # [R, B]
            tau_blocks.append(chain[has.view(R, -1, bs)[:, :, 1]].float())  # real blocks have a depth-1 label
        rate = (hits / counts.clamp(min=1))[:, 1:]  # [k, depth 1..D]
        out = {"kind": "eval", "step": self.step_no, "elapsed_s": round(self.elapsed_s, 1),
               "heldout_loss": tot_loss / max(tot_w, 1e-9), "acc_by_depth": [round(a, 4) for a in rate[0].tolist()],
               "top4_by_depth": [round(a, 4) for a in rate[1].tolist()],
               "top16_by_depth": [round(a, 4) for a in rate[2].tolist()],
               "offline_tau": torch.cat(tau_blocks).mean().item(), **self.loop_tau()}
        out["eval_s"] = round(time.perf_counter() - t0, 1)
        return out

    def loop_tau(self) -> dict:
        """Chain tau of the real decode loop on the first held-out prompts (and exactness)."""
        from graftlib.methods.decoder import Decoder

        seqs = self.tau_seqs[:self.cfg.tau_prompts]
        if not seqs:
            return {}
        was_training = self.drafter.training
        self.drafter.eval()
        dec = Decoder.for_method(self.target, self.drafter, "dflash", self.drafter.block_size - 1, self.eos)
        accepted = rounds = exact = 0
        for s in seqs:
            n = min(self.cfg.tau_tokens, s.response_len)
            res = dec.decode(s.tokens[:s.prompt_len].tolist(), n)
            accepted += sum(r.accepted for r in res.rounds)
            rounds += len(res.rounds)
            exact += res.tokens == s.tokens[s.prompt_len:s.prompt_len + n].tolist()
        self.drafter.train(was_training)
        return {"tau": accepted / max(rounds, 1), "tau_exact": f"{exact}/{len(seqs)}"}

    # -- checkpoints

    def save_checkpoint(self, path: Path, extra: dict | None = None) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.drafter.state_dict().items()},
                  tmp / "model.safetensors", metadata={"format": "pt"})
        opt = self.opt.state_dict()
        tensors = {f"state.{pid}.{k}": v.contiguous() for pid, st in opt["state"].items() for k, v in st.items()}
        tensors["rng.sampler"] = self.gen.get_state()
        tensors = {k: v.cpu() for k, v in tensors.items()}
        save_file(tensors, tmp / "optimizer.safetensors", metadata={"format": "pt"})
        state = {"step": self.step_no, "elapsed_s": self.elapsed_s, "blocks_seen": self.blocks_seen,
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
        saved, now = state["config"], asdict(self.cfg)
        diff = [f"{k} {saved.get(k)!r} -> {now[k]!r}" for k in now
                if k not in RESUMABLE_CHANGES and saved.get(k) != now[k]]
        require(not diff, f"checkpoint {path} was trained with other settings: {'; '.join(diff)}")
        load_state_strict(self.drafter, load_file(path / "model.safetensors"), str(path))
        self._use_vocab()  # the checkpoint's d2t, even if the data grew since
        tensors = load_file(path / "optimizer.safetensors")
        opt_state: dict[int, dict] = {}
        for name, v in tensors.items():
            if name.startswith("state."):
                _, pid, key = name.split(".", 2)
                opt_state.setdefault(int(pid), {})[key] = v
        self.opt.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
        self.gen.set_state(tensors["rng.sampler"])
        self.step_no, self.elapsed_s, self.blocks_seen = state["step"], state["elapsed_s"], state["blocks_seen"]
        return state


# ----------------------------------------------------------------------------- the run


def load_data(data_dirs: list[str | Path], layer_ids: list[int] | None) -> tuple[list, list[Sequence]]:
    """The sequences of one or more `graft drafter-data` directories (same target and layers)."""
    indexes, seqs = [], []
    for d in data_dirs:
        index, part = load_dataset(d, layer_ids)
        if indexes:
            first = indexes[0]
            require(index.target == first.target and index.target_layer_ids == first.target_layer_ids,
                    f"drafter data {d} ({index.target}, layers {index.target_layer_ids}) does not match "
                    f"{data_dirs[0]} ({first.target}, layers {first.target_layer_ids})")
        indexes.append(index)
        seqs.extend(part)
    return indexes, seqs


def train(data_dir: str | Path | list[str | Path], out_dir: str | Path, cfg: TrainConfig, resume: bool = False,
          device: str = "cpu", log=print, command: str | None = None) -> Path:
    """Train a drafter on one or more `graft drafter-data` directories; returns the saved drafter directory."""
    from graftlib.models.target import load_target

    cfg.check()
    data_dirs = list(data_dir) if isinstance(data_dir, (list, tuple)) else [data_dir]
    t_start = time.perf_counter()
    indexes, seqs = load_data(data_dirs, cfg.target_layer_ids)
    index = indexes[0]
    target, tokenizer = load_target(index.target, device=device, dtype=torch.float32)
    tots = [ix.totals() for ix in indexes]
    tot = {k: sum(t[k] for t in tots) for k in ("n_seqs", "prompt_tokens", "response_tokens", "seconds")}
    data = {"dirs": [portable(d) for d in data_dirs], "pools": [ix.pool for ix in indexes],
            "sequences": tot["n_seqs"], "prompt_tokens": tot["prompt_tokens"], "response_tokens": tot["response_tokens"],
            "max_response_tokens": index.max_response_tokens, "generation_s": tot["seconds"],
            "stored_layer_ids": index.target_layer_ids}
    sampled_uids = frozenset(s.uid for ix in indexes for s in seqs if sampled(s.uid, ix.sample_share))
    log(f"start-up: data + target {time.perf_counter() - t_start:.0f} s")
    return train_on(seqs, target, tokenizer, index.target, out_dir, cfg, data, sampled_uids, resume=resume,
                    log=log, command=command)


def train_on(seqs: list[Sequence], target, tokenizer, target_name: str, out_dir: str | Path, cfg: TrainConfig,
             data: dict, sampled_uids: frozenset[str] = frozenset(), resume: bool = False, log=print,
             command: str | None = None) -> Path:
    """Train on sequences in memory (read from disk by `train`, or just generated by
    `graftlib.training.drafter_pipeline`); `data` describes them in training.json."""
    from graftlib.models import hardware

    cfg.check()
    out = Path(out_dir)
    ckpt, metrics, final = out / "checkpoint", out / "metrics.jsonl", out / "drafter"
    require(resume or not ckpt.exists(), f"{ckpt} exists: pass --resume to continue it, or choose another --out")
    require(not resume or ckpt.exists(), f"nothing to resume: {ckpt} does not exist")
    require(len(seqs) > 1, f"{len(seqs)} sequences: nothing to train and hold out")
    layer_ids = cfg.target_layer_ids or data["stored_layer_ids"]
    train_seqs, held = heldout_split(seqs, cfg.heldout)
    t_start = time.perf_counter()
    trainer = Trainer(cfg, target, train_seqs, held, layer_ids, eos_ids(target, tokenizer), sampled_uids)
    out.mkdir(parents=True, exist_ok=True)
    data_info = {"sequences": len(seqs), "train_sequences": len(train_seqs)}
    if resume:
        state = trainer.load_checkpoint(ckpt)
        log(f"resumed {ckpt} at step {trainer.step_no} ({trainer.elapsed_s / 60:.1f} min trained)")
        if state.get("data") != data_info:
            log(f"note: the data changed since the checkpoint ({state.get('data')} -> {data_info})")
    anchors = int(trainer.weights.sum())
    log(f"start-up: trainer {time.perf_counter() - t_start:.0f} s")
    log(f"training a {cfg.layers}-layer drafter on {len(train_seqs)} sequences ({anchors} anchors; "
        f"{len(held)} held out), layers {layer_ids}, draft vocab {len(trainer.d2t)}, "
        f"{cfg.blocks_per_step} blocks/step, {'bf16' if trainer.bf16 else 'fp32'}")
    last_eval: dict = {}
    t_wall = last_ckpt = time.perf_counter()

    def done() -> bool:
        if cfg.max_steps is not None and trainer.step_no >= cfg.max_steps:
            return True
        return cfg.minutes is not None and trainer.elapsed_s >= 60 * cfg.minutes

    try:
        while not done():
            rec = trainer.step()
            if trainer.step_no % cfg.log_every == 0:
                rec = {"kind": "train", "elapsed_s": round(trainer.elapsed_s, 1), **rec}
                append_record(metrics, rec)
                log(f"step {rec['step']}: loss {rec['loss']:.3f} acc {rec['acc']:.3f} lr {rec['lr']:.2e} "
                    f"{rec['blocks_per_s']:.0f} blocks/s, {trainer.elapsed_s / 60:.1f} min")
            if trainer.step_no % cfg.eval_every == 0:
                t0 = time.perf_counter()
                last_eval = trainer.evaluate()
                append_record(metrics, last_eval)
                log(_eval_line(last_eval))
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
                trainer.elapsed_s += last_ckpt - t0  # evaluation counts against the budget
            elif time.perf_counter() - last_ckpt > 60 * cfg.checkpoint_minutes:
                trainer.save_checkpoint(ckpt, {"data": data_info})
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        trainer.save_checkpoint(ckpt, {"data": data_info})
        log(f"interrupted: checkpoint saved at step {trainer.step_no}; continue with --resume")
        raise
    if last_eval.get("step") != trainer.step_no:
        last_eval = trainer.evaluate()
        append_record(metrics, last_eval)
        log(_eval_line(last_eval))
    trainer.save_checkpoint(ckpt, {"data": data_info})
    trainer.drafter.eval()
    save_drafter(trainer.drafter, final, torch.bfloat16)  # shipped like z-lab's: bf16 weights
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hardware": hardware(target.device), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "target": target_name, "data": data,
        "split": {"train_sequences": len(train_seqs), "heldout_sequences": len(held), "train_anchors": anchors},
        "steps": trainer.step_no, "blocks_seen": trainer.blocks_seen,
        "epochs_over_anchors": round(trainer.blocks_seen / max(anchors, 1), 3),
        "train_s": round(trainer.elapsed_s, 1), "wall_s_this_run": round(time.perf_counter() - t_wall, 1),
        "draft_vocab_size": len(trainer.d2t), "config": asdict(cfg), "final_eval": last_eval,
        "command": command,
    }
    (final / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    log(f"saved drafter to {final} ({trainer.step_no} steps, {trainer.elapsed_s / 60:.1f} min)")
    return final


def ablation_summary(run_dirs: list[str | Path], baseline: str = "base") -> list[dict]:
    """One row per finished training run (its `drafter/training.json`): what differs from the
    `baseline` run's config, the work done in the same time budget, and the final held-out
    evaluation (top-1 / top-4 at depths 1, 2, 4, offline and in-loop chain tau). Runs without a
    finished drafter are skipped, so a partial sweep summarizes what it has."""
    runs = {Path(d).name: json.loads((Path(d) / "drafter" / "training.json").read_text())
            for d in run_dirs if (Path(d) / "drafter" / "training.json").is_file()}
    require(baseline in runs, f"ablation: no finished baseline run named {baseline!r} among {sorted(runs)}")
    ignore = {"minutes", "max_steps", "eval_every", "log_every", "tau_prompts", "tau_tokens", "eval_blocks"}
    base_cfg = runs[baseline]["config"]
    rows = []
    for name, r in runs.items():
        e, cfg = r["final_eval"], r["config"]
        rows.append({
            "run": name, "changes": {k: v for k, v in cfg.items() if k not in ignore and base_cfg.get(k) != v},
            "minutes": round(r["train_s"] / 60, 1), "steps": r["steps"], "blocks_seen": r["blocks_seen"],
            **{f"top1_d{d}": e["acc_by_depth"][d - 1] for d in (1, 2, 4)},
            **{f"top4_d{d}": e["top4_by_depth"][d - 1] for d in (1, 2, 4)},
            "heldout_loss": e["heldout_loss"], "offline_tau": e["offline_tau"], "loop_tau": e.get("tau"),
        })
    return sorted(rows, key=lambda row: (row["run"] != baseline, -row["offline_tau"]))


def write_ablation(root: str | Path, out: str | Path, baseline: str = "base",
                   command: str = "make drafter-ablation") -> list[dict]:
    """`ablation_summary` of every run under `root`, saved as JSON at `out` (with the command)."""
    rows = ablation_summary(sorted(Path(root).iterdir()), baseline)
    Path(out).write_text(json.dumps({"command": command, "baseline": baseline, "runs": rows}, indent=1) + "\n")
    return rows


def _eval_line(e: dict) -> str:
    acc = e["acc_by_depth"]
    picks = ", ".join(f"d{d} {acc[d - 1]:.2f}" for d in (1, 2, 4, 8) if d <= len(acc))
    return (f"eval @ step {e['step']}: held-out loss {e['heldout_loss']:.3f}, top-1 {picks}, offline tau "
            f"{e['offline_tau']:.2f}, loop tau {e.get('tau', float('nan')):.2f} (exact {e.get('tau_exact')}), "
            f"{e['eval_s']:.0f} s")


def config_from_args(args) -> TrainConfig:
    """The `TrainConfig` of the options `add_train_args` registers (also sets --threads)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return TrainConfig(
        layers=args.layers, target_layer_ids=args.target_layer_ids, draft_vocab=args.draft_vocab,
        blocks_per_step=args.blocks_per_step, blocks_per_seq=args.blocks_per_seq, lr=args.lr,
        eval_every=args.eval_every, minutes=args.minutes, max_steps=args.max_steps,
        bf16=False if args.fp32 else True if args.bf16 else None, fc_init=args.fc_init, init_from_target=args.init_from_target,
        tau_prompts=args.tau_prompts, tau_tokens=args.tau_tokens, seed=args.seed, schedule=args.schedule,
        decay=args.decay, distill=args.distill, checkpoint_minutes=args.checkpoint_minutes,
    )


def _main(args) -> int:
    from graftlib.models.target import default_device

    cfg = config_from_args(args)
    train(args.data, args.out, cfg, resume=args.resume, device=args.device or default_device(),
          command="graft " + " ".join(sys.argv[1:]))
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-drafter", help="train a DFlash drafter on `graft drafter-data` output",
        description="DFlash recipe (random anchors, packed blocks, depth-weighted CE) with periodic held-out "
                    "evaluation including the in-loop chain tau; resumable; saves the drafter in the z-lab layout.",
    )
    p.add_argument("--data", required=True, nargs="+", help="one or more directories written by `graft drafter-data`")
    p.add_argument("--out", required=True, help="output directory (checkpoint/, metrics.jsonl, drafter/)")
    p.add_argument("--resume", action="store_true", help="continue out/checkpoint")
    add_train_args(p)
    p.set_defaults(func=_main)


def add_train_args(p) -> None:
    """The training options shared by `graft train-drafter` and `graft drafter-pipeline`."""
    d = TrainConfig()
    p.add_argument("--minutes", type=float, default=d.minutes, help=f"time budget; the lr schedule follows it (default {d.minutes})")
    p.add_argument("--max-steps", type=int, default=None, help="step budget (with --minutes: whichever ends first)")
    p.add_argument("--layers", type=int, default=d.layers, help=f"drafter layers (default {d.layers})")
    p.add_argument("--target-layer-ids", type=int, nargs="+", default=None,
                   help="target layers used as context (a subset of the data's; default: all of them)")
    p.add_argument("--draft-vocab", type=int, default=d.draft_vocab,
                   help=f"draft vocabulary size, 0 = full target vocabulary (default {d.draft_vocab})")
    p.add_argument("--blocks-per-step", type=int, default=d.blocks_per_step, help=f"default {d.blocks_per_step}")
    p.add_argument("--blocks-per-seq", type=int, default=d.blocks_per_seq,
                   help=f"blocks packed into one sequence's row (default {d.blocks_per_seq})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr})")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help=f"steps between evaluations (default {d.eval_every})")
    p.add_argument("--tau-prompts", type=int, default=d.tau_prompts, help=f"held-out prompts for loop tau (default {d.tau_prompts})")
    p.add_argument("--tau-tokens", type=int, default=d.tau_tokens, help=f"tokens per loop-tau prompt (default {d.tau_tokens})")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast (default: bf16 where it is native)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast even where it is emulated (slow on AVX2 CPUs)")
    p.add_argument("--schedule", default=d.schedule, choices=("wsd", "cosine", "linear"),
                   help=f"lr schedule (default {d.schedule}: warmup, plateau, decay over the last --decay)")
    p.add_argument("--decay", type=float, default=d.decay, help=f"wsd: decaying fraction of the run (default {d.decay})")
    p.add_argument("--distill", type=float, default=d.distill,
                   help=f"weight of the soft loss on the target's stored top-k log-probs (default {d.distill})")
    p.add_argument("--checkpoint-minutes", type=float, default=d.checkpoint_minutes,
                   help=f"checkpoint at least this often (default {d.checkpoint_minutes})")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--fc-init", default=d.fc_init, choices=("last", "random"), help=f"default {d.fc_init}")
    p.add_argument("--init-from-target", action="store_true",
                   help="start the layers from the target's last ones (default: random init, which learned ~2x "
                        "faster at equal time in the shipped drafter's ablation)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")

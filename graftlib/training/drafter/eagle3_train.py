"""Train graftlib's own EAGLE-3 drafter for a target on `graftlib.training.drafter.data.target_data` (the release's
recipe: SafeAILab/EAGLE, eagle/traineagle3).

Model: a `graftlib.models.eagle3.Eagle3Drafter` shaped like one target layer, `fc` over the three stored target
layers, the target's frozen input embedding, and its own `lm_head` over a reduced draft vocabulary (the most
frequent response ids), which starts from the target's LM head rows (`head_init="target"`).

Training-time test (the release unrolls 7 steps): for an anchor a, step 0 reads (fc(feature a - 1), token a)
and predicts a + 1; step j feeds step j - 1's output state back with the stored token a + j and predicts
a + 1 + j, attending to the committed prefix and its own chain, as the decode loop's `Eagle3Cache` holds it.
Loss: sum over steps of 0.8^j times `trainer.mixed_loss`, normalized.

Packing: the context once per sequence row, the unroll on its sampled anchors only.

Output: `checkpoint/`, `metrics.jsonl` and `drafter/` in the public EAGLE-3 layout (`save_eagle3`, bf16, no
embed_tokens) with `training.json` and `lineage.jsonl`; `--init-drafter DIR` warm-starts a trained drafter.

Details: docs/internals.md, `graftlib.training.drafter.eagle3_train`.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from graftlib.core.errors import require
from graftlib.models.drafter import init_weights, load_state_strict
from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR, Eagle3Config, Eagle3Drafter, load_eagle3, save_eagle3
from graftlib.training.drafter import lineage
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.samples import (
    IGNORE,
    anchor_rows,
    batch_to,
    choose_draft_vocab,
    draft_index,
    target_layer_shape,
    to_draft,
)
from graftlib.training.drafter.trainer import DepthStats, LoopConfig, LoopTrainer, mixed_loss
from graftlib.training.drafter.training_run import (
    add_loop_args,
    begin,
    loop_config_kwargs,
    run_command,
    run_loop,
    training_record,
)

EMBEDDED = "embedded"  # --init-drafter's name for the shipped drafter (EMBEDDED_EAGLE3_DIR)


@dataclass
class Eagle3TrainConfig(LoopConfig):
    ttt_steps: int = 7  # training-time test: steps unrolled on the drafter's own outputs (the release's 7)
    step_weight: float = 0.8  # loss weight step_weight ** j of step j (the release's)
    eval_depth: int = 15  # steps unrolled at evaluation (the DFlash block's 15 depths)
    head_init: str = "target"  # "target": lm_head and norm from the target's; "random"
    init_drafter: str | None = None  # warm start: a trained EAGLE-3 directory, or "embedded" (the shipped one)

    def check(self) -> None:
        super().check()
        require(self.ttt_steps >= 1, f"ttt_steps must be >= 1, got {self.ttt_steps}")
        require(0 < self.step_weight <= 1, f"step_weight must be in (0, 1], got {self.step_weight}")
        require(self.eval_depth >= 1, f"eval_depth must be >= 1, got {self.eval_depth}")
        require(self.head_init in ("target", "random"), f"head_init {self.head_init!r} is not 'target' or 'random'")
        require(self.init_drafter is None or self.head_init == "target",
                "head_init applies to a random start only: a warm start (init_drafter) keeps its trained head")


# ----------------------------------------------------------------------------- model


def make_drafter(cfg: Eagle3TrainConfig, target, layer_ids: list[int], draft_ids: torch.Tensor) -> Eagle3Drafter:
    """A random EAGLE-3 drafter shaped like one target layer, over the draft vocabulary `draft_ids`
    (sorted target ids), sharing the target's embedding; head per `cfg.head_init`."""
    tc = target.config
    require(len(layer_ids) == 3, f"EAGLE-3 fuses three target layers (low, mid, high); the data gives {layer_ids}")
    torch.manual_seed(cfg.seed)
    drafter = Eagle3Drafter(Eagle3Config(**target_layer_shape(tc), draft_vocab_size=len(draft_ids),
                                         target_hidden_size=tc.hidden_size, target_layer_ids=list(layer_ids)))
    init_weights(drafter)
    drafter.embed_tokens = target.get_input_embeddings()  # frozen, shared, never saved
    with torch.no_grad():
        drafter.d2t.copy_(draft_ids - torch.arange(len(draft_ids)))
        drafter.t2d.zero_()
        drafter.t2d[draft_ids] = True
        if cfg.head_init == "target":
            drafter.lm_head.weight.copy_(target.lm_head.weight[draft_ids])
            drafter.norm.weight.copy_(target.model.norm.weight)
    return drafter.float().train()


def init_dir(init_drafter: str | None) -> Path | None:
    """The directory of the warm start `init_drafter` (a path or "embedded"; None: no warm start)."""
    if init_drafter is None:
        return None
    return EMBEDDED_EAGLE3_DIR if init_drafter == EMBEDDED else Path(init_drafter)


def warm_drafter(cfg: Eagle3TrainConfig, target, layer_ids: list[int]) -> Eagle3Drafter:
    """The trained EAGLE-3 drafter `cfg.init_drafter` to continue: its weights and draft vocabulary (`d2t`),
    loaded strictly, sharing the target's embedding; refused unless it fits this run (the target: `fit`; the
    data's target layers, the release's default when its config names none; the draft vocabulary size asked for)."""
    path = init_dir(cfg.init_drafter)
    require(path.is_dir(), f"init_drafter {cfg.init_drafter}: {path} is not a directory")
    embed = target.get_input_embeddings()
    drafter = load_eagle3(path, target_embed=embed.weight).fit(target.config)  # fits the target (widths, vocabulary)
    vocab = target.config.vocab_size
    want_vocab = cfg.draft_vocab if 0 < cfg.draft_vocab < vocab else vocab
    diff = [f"{name} {have} (asked {want})" for name, have, want in (
        ("target layers", list(drafter.layer_ids), list(layer_ids)),
        ("draft vocabulary", drafter.config.draft_vocab_size, want_vocab),
    ) if have != want]
    require(not diff, f"init_drafter {cfg.init_drafter} does not fit this run: {'; '.join(diff)}")
    drafter = drafter.float().requires_grad_(True).train()
    drafter.embed_tokens = embed  # frozen, shared, never saved (as `make_drafter`'s)
    return drafter


# ----------------------------------------------------------------------------- packing


@dataclass
class ChainBatch:
    ctx: torch.Tensor  # [R, C, F] target features of indices 0..C-1
    ctx_ids: torch.Tensor  # [R, C] the token beside each feature: tokens[index + 1]
    index: torch.Tensor  # [R, A] i = anchor - 1 (0 for padding)
    chain_ids: torch.Tensor  # [R, A, D] step j's input token: tokens[anchor + j]
    labels: torch.Tensor  # [R, A, D] step j's label: tokens[anchor + 1 + j], IGNORE where none
    n_blocks: int
    soft_ids: torch.Tensor | None = None  # [R, A, D, K] the target's top-k ids for each label, IGNORE if none
    soft_logp: torch.Tensor | None = None  # [R, A, D, K] their log-probs

    def to(self, device) -> "ChainBatch":
        return batch_to(self, device)


def pack_chains(seqs: list[Sequence], anchors: list[list[int]], depth: int) -> ChainBatch:
    """Rows of `depth`-step chains: row r holds the chains of `seqs[r]` at `anchors[r]` (module doc)."""
    rows = anchor_rows(seqs, anchors, depth + 1)
    anchor, valid, C = rows.anchor, rows.valid, rows.ctx.shape[1]  # indices 0 .. C - 1 = last anchor - 1
    pos = anchor[:, :, None] + torch.arange(depth + 1)  # [R, A, D + 1]: anchor + j
    seq = rows.labels(pos)
    labels = seq[..., 1:].masked_fill(~valid[..., None], IGNORE)
    soft_ids, soft_logp = rows.soft(pos[..., 1:], labels)
    return ChainBatch(rows.ctx, rows.toks[:, 1:C + 1].clamp(min=0), (anchor - 1).clamp(min=0),
                      seq[..., :depth].clamp(min=0), labels, int(valid.sum()), soft_ids, soft_logp)


def unroll(drafter: Eagle3Drafter, batch: ChainBatch, steps: int) -> list[torch.Tensor]:
    """The output hidden states [R, A, H] of steps 0..steps-1 of every chain (the module doc's
    training-time test), through the drafter's own attention and layer pieces."""
    layer, attn = drafter.midlayer, drafter.midlayer.self_attn
    R, C = batch.ctx_ids.shape
    A = batch.index.shape[1]
    h_ctx = drafter.fuse(batch.ctx.to(drafter.fc.weight.dtype))  # stored features are fp16
    x_ctx = layer.mix(drafter.embed_tokens(batch.ctx_ids).to(h_ctx.dtype), h_ctx)
    ctx_pos = torch.arange(C, device=h_ctx.device)
    k, v = attn.key_value(x_ctx, ctx_pos)
    idx = batch.index

    def at_anchors(t: torch.Tensor) -> torch.Tensor:
        return t.gather(1, idx[..., None].expand(-1, -1, t.shape[-1]))

    hidden, x = at_anchors(h_ctx), at_anchors(x_ctx)
    mask = (ctx_pos <= idx[..., None])[:, None]  # [R, 1, A, C]: the committed prefix up to index i
    own = torch.eye(A, dtype=torch.bool, device=mask.device).expand(R, 1, A, A)  # a chain's own step
    outs = []
    for j in range(steps):
        if j:
            x = layer.mix(drafter.embed_tokens(batch.chain_ids[:, :, j]).to(hidden.dtype), hidden)
            kj, vj = attn.key_value(x, idx + j)
            k, v, mask = torch.cat([k, kj], 2), torch.cat([v, vj], 2), torch.cat([mask, own], -1)
        hidden = layer.finish(hidden, attn.attend(attn.query(x, idx + j), k, v, mask))
        outs.append(hidden)
    return outs


# ----------------------------------------------------------------------------- trainer


class Eagle3Trainer(LoopTrainer):
    """The EAGLE-3 drafter and `LoopTrainer`'s loop machinery."""

    def __init__(self, cfg: Eagle3TrainConfig, target, train: list[Sequence], heldout: list[Sequence],
                 layer_ids: list[int], sampled_uids: frozenset[str] = frozenset()):
        super().__init__(cfg, target, train, heldout, sampled_uids)
        vocab = target.config.vocab_size
        if cfg.init_drafter:
            self.drafter = warm_drafter(cfg, target, layer_ids).to(self.device)
            self.warm_start = True
        else:
            subset = 0 < cfg.draft_vocab < vocab
            ids = choose_draft_vocab(train, cfg.draft_vocab, vocab) if subset else torch.arange(vocab)
            self.drafter = make_drafter(cfg, target, layer_ids, ids.sort().values).to(self.device)
        self._use_vocab()
        self.step_weights = cfg.step_weight ** torch.arange(max(cfg.ttt_steps, cfg.eval_depth), device=self.device)
        self.init_optimizer()
        self.eval_set = self.eval_batches()
        self.seen_set = self.seen_batches()

    def _use_vocab(self) -> None:
        d2t = self.drafter.d2t
        self.draft_ids = d2t + torch.arange(len(d2t), device=d2t.device)
        self.t2d = draft_index(self.draft_ids, self.target.config.vocab_size)

    def model_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.drafter.state_dict().items() if k != "embed_tokens.weight"}

    def load_model_state(self, state: dict[str, torch.Tensor], where: str) -> None:
        load_state_strict(self.drafter, {**state, "embed_tokens.weight": self.drafter.embed_tokens.weight}, where)
        self._use_vocab()

    def pack(self, seqs: list[Sequence], anchors: list[list[int]]) -> ChainBatch:
        return pack_chains(seqs, anchors, max(self.cfg.ttt_steps, self.cfg.eval_depth)).to(self.device)

    def hidden(self, batch: ChainBatch, steps: int) -> torch.Tensor:
        """[R, A, steps, H] output hidden states of the unroll."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return torch.stack(unroll(self.drafter, batch, steps), 2)

    def loss(self, batch: ChainBatch, h: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """`mixed_loss` over the first h.shape[2] steps' labels in the draft vocabulary, step j
        weighted step_weight ** j."""
        steps = h.shape[2]
        labels = to_draft(self.t2d, batch.labels[:, :, :steps])
        sel = labels >= 0
        w = self.step_weights[:steps].expand_as(labels)[sel]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.drafter.logits(h[sel]).float()
        soft = None
        if batch.soft_ids is not None:
            soft = (batch.soft_ids[:, :, :steps][sel], batch.soft_logp[:, :, :steps][sel])
        return mixed_loss(logits, labels[sel], w, self.cfg.distill, soft, self.t2d)

    def batch_loss(self, batch: ChainBatch) -> tuple[torch.Tensor, dict]:
        return self.loss(batch, self.hidden(batch, self.cfg.ttt_steps))

    @torch.no_grad()
    def score(self, batches: list) -> dict | None:
        """Loss (over the trained steps), hard CE, per-depth hit rates and offline tau over fixed batches, the
        unroll taken to `eval_depth` (None: no batches)."""
        if not batches:
            return None
        was_training = self.drafter.training
        self.drafter.eval()
        depth, steps = self.cfg.eval_depth, self.cfg.ttt_steps
        stats = DepthStats(depth, self.device)
        tot_loss = tot_ce = tot_w = 0.0
        for batch, pools in batches:
            h = self.hidden(batch, depth)
            loss, info = self.loss(batch, h[:, :, :steps])
            tot_loss, tot_ce = tot_loss + loss.item() * info["weight"], tot_ce + info["ce"] * info["weight"]
            tot_w += info["weight"]
            k = min(max(DepthStats.KS), len(self.draft_ids))
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                top = self.draft_ids[self.drafter.logits(h).topk(k, dim=-1).indices]  # [R, A, D, k]
            stats.add(top.reshape(-1, depth, k), batch.labels[:, :, :depth].reshape(-1, depth), pools)
        self.drafter.train(was_training)
        return {"loss": tot_loss / max(tot_w, 1e-9), "ce": tot_ce / max(tot_w, 1e-9), **stats.result()}

    def evaluate(self) -> dict:
        t0 = time.perf_counter()
        held = self.score(self.eval_set)
        out = {"kind": "eval", "step": self.step_no, "elapsed_s": round(self.elapsed_s, 1),
               "heldout_loss": held.pop("loss"), "heldout_ce": held.pop("ce"), **held,
               **self.seen_record(self.score(self.seen_set))}
        out["eval_s"] = round(time.perf_counter() - t0, 1)
        return out


# ----------------------------------------------------------------------------- the run


def train(data_dir: str | Path | list[str | Path], out_dir: str | Path, cfg: Eagle3TrainConfig, resume: bool = False,
          device: str = "cpu", log=print, command: str | None = None, eval_data: list | None = None) -> Path:
    """Train an EAGLE-3 drafter on one or more `graft drafter-data` directories; returns the saved
    drafter directory (public EAGLE-3 layout + training.json), or with `eval_data` only evaluates
    out/checkpoint there and returns the evaluation record's path."""
    cfg.check()
    st = begin(data_dir, out_dir, cfg, resume, device, eval_data, lambda c, run: Eagle3Trainer(
        c, run.target, run.train, run.heldout, run.layer_ids, run.sampled_uids), log)
    if st.eval_path:
        return st.eval_path
    trainer, run = st.trainer, st.run
    log(f"training an EAGLE-3 drafter on {len(run.train)} sequences ({int(trainer.weights.sum())} anchors; "
        f"{len(run.heldout)} held out), layers {run.layer_ids}, draft vocab {len(trainer.draft_ids)}, "
        f"{cfg.ttt_steps} unrolled steps, {cfg.blocks_per_step} chains/step, {'bf16' if trainer.bf16 else 'fp32'}")
    if trainer.step_no == 0:  # the warm start's lineage as it is now, not when the run ends
        lineage.save_parent(st.final.parent, init_dir(cfg.init_drafter))
    t_wall = time.perf_counter()
    last_eval = run_loop(trainer, st.ckpt, st.metrics, run.data_info, log)
    trainer.drafter.eval()
    final = save_eagle3(trainer.drafter, st.final, torch.bfloat16)
    record = training_record(trainer, run, len(trainer.draft_ids), time.perf_counter() - t_wall, last_eval, command)
    record["layout"] = "EAGLE-3 (config.json + model.safetensors; embed_tokens is the target's)"
    (final / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    lineage.save_curves(st.metrics, final, init_dir(cfg.init_drafter))
    log(f"saved EAGLE-3 drafter to {final} ({trainer.step_no} steps, {trainer.elapsed_s / 60:.1f} min)")
    return final


def _main(args) -> int:
    cfg = Eagle3TrainConfig(ttt_steps=args.ttt_steps, step_weight=args.step_weight, eval_depth=args.eval_depth,
                            head_init=args.head_init, init_drafter=args.init_drafter, **loop_config_kwargs(args))
    return run_command(args, train, cfg)


def add_parser(subparsers) -> None:
    d = Eagle3TrainConfig()
    p = subparsers.add_parser(
        "train-eagle3", help="train an EAGLE-3 drafter on `graft drafter-data` output",
        description="EAGLE-3 recipe (fc over three target layers, one layer, own reduced-vocabulary head; "
                    "training-time test unrolled on the drafter's own outputs) with periodic held-out "
                    "evaluation (per-depth top-1, offline chain tau); resumable; saves the public EAGLE-3 layout.",
    )
    add_loop_args(p, d)
    p.add_argument("--ttt-steps", type=int, default=d.ttt_steps,
                   help=f"training-time test: steps unrolled on the drafter's own outputs (default {d.ttt_steps})")
    p.add_argument("--step-weight", type=float, default=d.step_weight,
                   help=f"loss weight w ** j of unrolled step j (default {d.step_weight})")
    p.add_argument("--eval-depth", type=int, default=d.eval_depth,
                   help=f"steps unrolled at evaluation (default {d.eval_depth})")
    p.add_argument("--head-init", default=d.head_init, choices=("target", "random"),
                   help=f"lm_head and final norm from the target's (default {d.head_init}) or random")
    p.add_argument("--init-drafter", default=None, metavar="DIR",
                   help=f"warm start from a trained EAGLE-3 drafter (a directory, or '{EMBEDDED}' for the shipped "
                        "one): its weights and draft vocabulary (--draft-vocab must match it); the schedule starts "
                        "anew (a checkpoint, --resume, continues exactly instead); the run's drafter carries the "
                        "lineage of both (lineage.jsonl)")
    p.set_defaults(func=_main)

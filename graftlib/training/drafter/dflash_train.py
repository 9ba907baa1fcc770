"""Train a DFlash drafter for a target on `graftlib.training.drafter.data.target_data` (the DFlash recipe of
z-lab/dflash).

Recipe: anchors `a` in the response; a block `[tokens[a], mask x (block_size - 1)]` embedded with the target's
frozen embeddings, its context the stored target features of positions `< a`; block position k predicts
`tokens[a + k]` with cross-entropy weighted by `exp(-(k - 1) / gamma)` (plus, with `distill`, the soft loss on
the stored top-k). Sampling, schedule, loss mixing, evaluation and checkpoints are `trainer`'s.

Packing: one row per sampled sequence, several blocks side by side, one forward equal to the separate
single-block forwards of the decode loop (`graftlib.training.drafter.blocks`).

DFlash 2's parts (`conv_kernel_size`, `selector_rank`): the convolutions train with the loss above, the
selector with its own (depth-weighted cross-entropy over the unary top-k candidates' scores U(b) + T(a, b));
a warm start adds them computing the same function, `parts_only` trains them alone.

Output: `checkpoint/` (exact `--resume`), `metrics.jsonl`, and `drafter/` (z-lab layout, bf16, with
`training.json`, `metrics.jsonl` and `lineage.jsonl`), which `graft ship-drafter` ships. Evaluation: per-depth
hit rates and the offline chain tau on fixed held-out blocks, and the in-loop chain tau of method dflash.

Details: docs/internals.md, `graftlib.training.drafter.dflash_train`.
"""

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from graftlib.core.errors import require
from graftlib.models.dflash2 import SELECTOR_PREFIX
from graftlib.models.drafter import (
    EMBEDDED_DRAFTER,
    EMBEDDED_DRAFTER_DIR,
    load_state_strict,
    save_drafter,
)
from graftlib.training.drafter import lineage
from graftlib.training.drafter.blocks import Batch, FlatBlocks, pack_blocks
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.dflash_init import TrainConfig, make_drafter, warm_drafter
from graftlib.training.drafter.samples import (
    choose_draft_vocab,
    draft_index,
    spread_by_pool,
    to_draft,
)
from graftlib.training.drafter.trainer import DepthStats, LoopTrainer, mixed_loss
from graftlib.training.drafter.training_run import (
    Run,
    add_loop_args,
    begin,
    loop_config_kwargs,
    output_dirs,
    run_command,
    run_loop,
    training_record,
)

# ----------------------------------------------------------------------------- trainer


class Trainer(LoopTrainer):
    """The DFlash drafter, the frozen target parts it needs, and `LoopTrainer`'s loop machinery."""

    def __init__(self, cfg: TrainConfig, target, train: list[Sequence], heldout: list[Sequence],
                 layer_ids: list[int], eos: list[int], sampled_uids: frozenset[str] = frozenset(),
                 flat: bool | None = None):
        super().__init__(cfg, target, train, heldout, sampled_uids)
        self.eos = eos
        # flat (default: on an accelerator): every sequence concatenated there once, blocks gathered, not copied
        use_flat = self.device.type != "cpu" if flat is None else flat
        self.flat = FlatBlocks(list(train) + list(heldout), self.device) if use_flat else None
        vocab = target.config.vocab_size
        if cfg.init_drafter:
            self.drafter = warm_drafter(cfg, target, layer_ids).to(self.device)
            self.warm_start = True
        else:
            d2t = choose_draft_vocab(train, cfg.draft_vocab, vocab) if 0 < cfg.draft_vocab < vocab else None
            self.drafter = make_drafter(cfg, target, layer_ids, d2t).to(self.device)
        if cfg.parts_only:  # the warm start's weights frozen: only DFlash 2's parts train
            for name, p in self.drafter.named_parameters():
                p.requires_grad_("_conv." in name or name.startswith(SELECTOR_PREFIX))
        self.embed = target.get_input_embeddings()
        self._use_vocab()
        bs = self.drafter.block_size
        k = torch.arange(bs, dtype=torch.float32)
        self.depth_weight = torch.where(k > 0, torch.exp(-(k - 1) / cfg.gamma), torch.zeros(bs)).to(self.device)
        self.init_optimizer()
        self.eval_set = self.eval_batches()
        self.seen_set = self.seen_batches()

    def _use_vocab(self) -> None:
        """Target-id <-> draft-id maps and the frozen LM head rows of the drafter's vocabulary."""
        vocab, dev = self.target.config.vocab_size, self.device
        self.draft_ids = self.drafter.d2t.clone() if self.drafter.config.draft_vocab_size else torch.arange(vocab,
                                                                                                            device=dev)
        self.t2d = draft_index(self.draft_ids, vocab)
        self.frozen_head = self.target.lm_head.weight.detach()[self.draft_ids].to(self.compute_dtype)

    def head(self) -> torch.Tensor:
        """The draft LM head [V_draft, H]: the drafter's own (trained) or the target's frozen rows."""
        return self.drafter.lm_head.weight if self.drafter.config.draft_head else self.frozen_head

    def model_state(self) -> dict[str, torch.Tensor]:
        return self.drafter.state_dict()

    def load_model_state(self, state: dict[str, torch.Tensor], where: str) -> None:
        load_state_strict(self.drafter, state, where)
        self._use_vocab()  # the checkpoint's d2t, even if the data grew since

    # -- packing and loss

    def pack(self, seqs: list[Sequence], anchors: list[list[int]]) -> Batch:
        bs, mask_id = self.drafter.block_size, self.drafter.config.mask_token_id
        if self.flat is not None:
            return self.flat.pack_seqs(seqs, anchors, bs, mask_id)
        return pack_blocks(seqs, anchors, bs, mask_id).to(self.device)

    def hidden(self, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            emb = self.embed(batch.ids) * self.drafter.config.input_embedding_scale
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.drafter(emb, batch.ctx.to(self.compute_dtype), 0, block_mask=batch.mask,
                                ctx_positions=batch.ctx_pos, q_positions=batch.q_pos)

    def loss(self, batch: Batch, h: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """`mixed_loss` over the block's labels in the draft vocabulary, weighted exp(-(k - 1) / gamma)."""
        labels = to_draft(self.t2d, batch.labels)
        sel = labels >= 0
        w = self.depth_weight[batch.depth].expand_as(labels)[sel]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = F.linear(h[sel], self.head()).float()
        soft = (batch.soft_ids[sel], batch.soft_logp[sel]) if batch.soft_ids is not None else None
        loss, info = mixed_loss(logits, labels[sel], w, self.cfg.distill, soft, self.t2d)
        if not self.drafter.config.selector_rank:
            return loss, info
        sel_loss, sel_info = self.selector_loss(h[sel], predecessors(batch)[sel], logits, labels[sel], w)
        return loss + self.cfg.selector_alpha * sel_loss, {**info, **sel_info}

    def selector_loss(self, h: torch.Tensor, prev: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor,
                      w: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The selector's weighted CE over the unary top-k (module doc): h [N, H], prev [N] target ids,
        logits [N, V_draft] (float, with their gradient), labels [N] draft ids, w [N]."""
        selector = self.drafter.candidate_selector
        k = min(selector.top_k, logits.shape[-1])
        cand = logits.detach().topk(k, dim=-1).indices
        hit = cand == labels[:, None]
        present = hit.any(-1)
        cand[:, -1] = torch.where(present, cand[:, -1], labels)
        target = torch.where(present, hit.int().argmax(-1), k - 1)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            trans = selector.transition(h, prev, self.draft_ids[cand])
        scores = logits.gather(1, cand) + trans.float()
        per = F.cross_entropy(scores, target, reduction="none")
        loss = (per * w).sum() / w.sum().clamp(min=1e-9)
        return loss, {"sel_ce": loss.item(), "sel_acc": (scores.detach().argmax(-1) == target).float().mean().item()}

    def batch_loss(self, batch: Batch) -> tuple[torch.Tensor, dict]:
        return self.loss(batch, self.hidden(batch))

    # -- evaluation

    @torch.no_grad()
    def score(self, batches: list) -> dict | None:
        """Loss, hard CE, per-depth hit rates and offline tau over fixed batches (None: no batches)."""
        if not batches:
            return None
        bs = self.drafter.block_size
        tot_loss, tot_ce, tot_w = 0.0, 0.0, 0.0
        stats = DepthStats(bs - 1, self.device)
        walked = []
        for batch, pools in batches:
            h = self.hidden(batch)
            loss, info = self.loss(batch, h)
            tot_loss, tot_ce = tot_loss + loss.item() * info["weight"], tot_ce + info["ce"] * info["weight"]
            tot_w += info["weight"]
            k = min(max(DepthStats.KS), len(self.draft_ids))
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                top = self.draft_ids[F.linear(h, self.head()).topk(k, dim=-1).indices]  # [R, Q, k]
            R = top.shape[0]
            stats.add(top.view(R, -1, bs, k)[:, :, 1:].reshape(-1, bs - 1, k),
                      batch.labels.view(R, -1, bs)[:, :, 1:].reshape(-1, bs - 1), pools)
            if self.drafter.config.selector_rank:
                walked.append(self.selector_walk(h, batch))
        out = {"loss": tot_loss / max(tot_w, 1e-9), "ce": tot_ce / max(tot_w, 1e-9), **stats.result()}
        if walked:
            accepted = torch.cat(walked)
            out["sel_offline_tau"] = 1 + accepted.float().mean().item() if len(accepted) else float("nan")
        return out

    @torch.no_grad()
    def selector_walk(self, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Accepted drafts of the selector's walk (module doc) on each block of `batch` that has a depth-1
        label: [n blocks], h [R, Q, H] the drafter's states."""
        selector, bs = self.drafter.candidate_selector, self.drafter.block_size
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            values, idx = F.linear(h, self.head()).float().topk(min(selector.top_k, len(self.draft_ids)), dim=-1)
        H = h.shape[-1]
        h, values, idx = h.reshape(-1, bs, H), values.reshape(-1, bs, idx.shape[-1]), idx.reshape(-1, bs, idx.shape[-1])
        labels, anchors = batch.labels.reshape(-1, bs), batch.ids.reshape(-1, bs)[:, 0]
        keep = labels[:, 1] >= 0
        h, values, idx, labels, prev = h[keep], values[keep], idx[keep], labels[keep], anchors[keep]
        alive = torch.ones(len(labels), dtype=torch.bool, device=h.device)
        accepted = torch.zeros(len(labels), dtype=torch.long, device=h.device)
        for t in range(1, bs):
            cand = self.draft_ids[idx[:, t]]
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                trans = selector.transition(h[:, t], prev, cand)
            prev = cand.gather(1, (values[:, t] + trans.float()).argmax(-1, keepdim=True))[:, 0]
            alive &= prev == labels[:, t]
            accepted += alive
        return accepted

    def evaluate(self) -> dict:
        t0 = time.perf_counter()
        held = self.score(self.eval_set)
        out = {"kind": "eval", "step": self.step_no, "elapsed_s": round(self.elapsed_s, 1),
               "heldout_loss": held.pop("loss"), "heldout_ce": held.pop("ce"), **held, **self.loop_tau(),
               **self.seen_record(self.score(self.seen_set))}
        out["eval_s"] = round(time.perf_counter() - t0, 1)
        return out

    def loop_tau(self) -> dict:
        """Chain tau of the real decode loop on `tau_prompts` held-out greedy prompts spread over the
        data's pools (`spread_by_pool`), and exactness: `tau_exact` counts decodes equal to the target's
        own greedy AR decode here (same precision and device), `tau_matches_data` those equal to the
        stored response (data made by a bf16 or batched target may legitimately differ from it)."""
        from graftlib.methods.decoder import Decoder

        seqs = spread_by_pool(self.greedy_heldout, self.cfg.tau_prompts)
        if not seqs:
            return {}
        was_training = self.drafter.training
        self.drafter.eval()
        dec = Decoder.for_method(self.target, self.drafter, "dflash", self.drafter.block_size - 1, eos_ids=self.eos)
        ar = Decoder.for_method(self.target, self.drafter, "ar", 1, eos_ids=self.eos)
        accepted = rounds = exact = matches_data = 0
        for s in seqs:
            n = min(self.cfg.tau_tokens, s.response_len)
            prompt = s.tokens[:s.prompt_len].tolist()
            res = dec.decode(prompt, n)
            accepted += sum(r.accepted for r in res.rounds)
            rounds += len(res.rounds)
            exact += res.tokens == ar.decode(prompt, n).tokens
            matches_data += res.tokens == s.tokens[s.prompt_len:s.prompt_len + n].tolist()
        out = {"tau": accepted / max(rounds, 1), "tau_exact": f"{exact}/{len(seqs)}",
               "tau_matches_data": f"{matches_data}/{len(seqs)}"}
        if self.drafter.config.selector_rank:  # the selector's chain in the loop (`graftlib.methods.selector`)
            sel = Decoder.for_method(self.target, self.drafter, "dflash2", self.drafter.block_size - 1,
                                     eos_ids=self.eos)
            runs = [sel.decode(s.tokens[:s.prompt_len].tolist(), min(self.cfg.tau_tokens, s.response_len))
                    for s in seqs]
            out["sel_tau"] = sum(r.accepted for x in runs for r in x.rounds) / max(sum(len(x.rounds) for x in runs), 1)
        self.drafter.train(was_training)
        return out


def predecessors(batch: Batch) -> torch.Tensor:
    """[R, Q] the true token before each block position's label: the anchor at depth 1, else the label before
    (target ids; 0 where there is none, and then there is no label either)."""
    depth_one = (batch.depth == 1)[None, :]
    return torch.where(depth_one, batch.ids.roll(1, -1), batch.labels.roll(1, -1)).clamp(min=0)


# ----------------------------------------------------------------------------- the run


def train(data_dir: str | Path | list[str | Path], out_dir: str | Path, cfg: TrainConfig, resume: bool = False,
          device: str = "cpu", log=print, command: str | None = None, eval_data: list | None = None) -> Path:
    """Train a drafter on one or more `graft drafter-data` directories; returns the saved drafter directory,
    or with `eval_data` only evaluates out/checkpoint there and returns the evaluation record's path."""
    cfg.check()
    st = begin(data_dir, out_dir, cfg, resume, device, eval_data, lambda c, run: Trainer(
        c, run.target, run.train, run.heldout, run.layer_ids, run.eos, run.sampled_uids), log)
    if st.eval_path:
        return st.eval_path
    return fit(st.trainer, st.run, st.ckpt, st.metrics, st.final, log, command)


def train_run(run: Run, out_dir: str | Path, cfg: TrainConfig, log=print, command: str | None = None) -> Path:
    """Train from scratch on a prepared `Run` (generated in this process by
    `graftlib.training.drafter.pipeline`); returns the saved drafter directory."""
    cfg.check()
    ckpt, metrics, final = output_dirs(out_dir, False)
    t_start = time.perf_counter()
    trainer = Trainer(cfg, run.target, run.train, run.heldout, run.layer_ids, run.eos, run.sampled_uids)
    log(f"start-up: trainer {time.perf_counter() - t_start:.0f} s")
    return fit(trainer, run, ckpt, metrics, final, log, command)


def fit(trainer: "Trainer", run: Run, ckpt: Path, metrics: Path, final: Path, log, command: str | None) -> Path:
    """The run loop, then the drafter saved (bf16, z-lab layout) with its training.json."""
    cfg = trainer.cfg
    log(f"training a {cfg.layers}-layer drafter on {len(run.train)} sequences ({int(trainer.weights.sum())} anchors; "
        f"{len(run.heldout)} held out), layers {run.layer_ids}, draft vocab {len(trainer.draft_ids)}, "
        f"{cfg.blocks_per_step} blocks/step, {'bf16' if trainer.bf16 else 'fp32'}")
    if trainer.step_no == 0:  # the warm start's lineage as it is now, not when the run ends (`lineage.save_curves`)
        lineage.save_parent(final.parent, init_dir(cfg.init_drafter))
    t_wall = time.perf_counter()
    last_eval = run_loop(trainer, ckpt, metrics, run.data_info, log)
    trainer.drafter.eval()
    save_drafter(trainer.drafter, final, torch.bfloat16)  # shipped like z-lab's: bf16 weights
    record = training_record(trainer, run, len(trainer.draft_ids), time.perf_counter() - t_wall, last_eval, command)
    (final / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    lineage.save_curves(metrics, final, init_dir(cfg.init_drafter))
    log(f"saved drafter to {final} ({trainer.step_no} steps, {trainer.elapsed_s / 60:.1f} min)")
    return final


def init_dir(init_drafter: str | None) -> str | Path | None:
    """The directory of the warm start `init_drafter` (a path or "embedded"; None: no warm start)."""
    return EMBEDDED_DRAFTER_DIR if init_drafter == EMBEDDED_DRAFTER else init_drafter


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
                   command: str = "experiments/drafter-ablation.sh") -> list[dict]:
    """`ablation_summary` of every run under `root`, saved as JSON at `out` (with the command)."""
    rows = ablation_summary(sorted(Path(root).iterdir()), baseline)
    Path(out).write_text(json.dumps({"command": command, "baseline": baseline, "runs": rows}, indent=1) + "\n")
    return rows


def config_from_args(args) -> TrainConfig:
    """The `TrainConfig` of `add_loop_args` + `add_drafter_args`' options."""
    return TrainConfig(layers=args.layers, gamma=args.gamma, fc_init=args.fc_init,
                       init_from_target=args.init_from_target,
                       init_drafter=args.init_drafter, draft_head=args.draft_head, anchor_context=args.anchor_context,
                       conv_kernel_size=args.conv_kernel_size, selector_rank=args.selector_rank,
                       selector_top_k=args.selector_top_k, selector_alpha=args.selector_alpha,
                       parts_only=args.parts_only,
                       tau_prompts=args.tau_prompts, tau_tokens=args.tau_tokens, **loop_config_kwargs(args))


def _main(args) -> int:
    return run_command(args, train, config_from_args(args))


def add_drafter_args(p, d: TrainConfig) -> None:
    """The DFlash trainer's own options (beside `add_loop_args`')."""
    p.add_argument("--layers", type=int, default=d.layers, help=f"drafter layers (default {d.layers})")
    p.add_argument("--gamma", type=float, default=d.gamma,
                   help=f"depth decay of the loss weights exp(-(k - 1) / gamma); smaller focuses the first depths "
                        f"(default {d.gamma})")
    p.add_argument("--tau-prompts", type=int, default=d.tau_prompts,
                   help=f"held-out prompts for loop tau (default {d.tau_prompts})")
    p.add_argument("--tau-tokens", type=int, default=d.tau_tokens,
                   help=f"tokens per loop-tau prompt (default {d.tau_tokens})")
    p.add_argument("--fc-init", default=d.fc_init, choices=("last", "random"), help=f"default {d.fc_init}")
    p.add_argument("--init-from-target", action="store_true",
                   help="start the layers from the target's last ones (default: random init, which learned ~2x "
                        "faster at equal time in the shipped drafter's ablation)")
    p.add_argument("--draft-head", action="store_true",
                   help="the drafter's own LM head over its draft vocabulary, trained (starts as the target's rows; "
                        "default: the target's head, frozen)")
    p.add_argument("--anchor-context", action="store_true",
                   help="every block position's input adds a projection of the anchor's context feature and "
                        "embedding (starts at zero; module doc of graftlib.models.drafter)")
    p.add_argument("--conv-kernel-size", type=int, default=d.conv_kernel_size, metavar="K",
                   help="DFlash 2's block-local dynamic convolution around every sublayer with K taps (starts as the "
                        "identity; default 0: none)")
    p.add_argument("--selector-rank", type=int, default=d.selector_rank, metavar="R",
                   help="DFlash 2's pairwise path selector of rank R, trained by its CE over the unary top-k "
                        "(default 0: none)")
    p.add_argument("--selector-top-k", type=int, default=d.selector_top_k,
                   help=f"the selector's candidates per position (default {d.selector_top_k})")
    p.add_argument("--selector-alpha", type=float, default=d.selector_alpha,
                   help=f"weight of the selector's loss (default {d.selector_alpha})")
    p.add_argument("--parts-only", action="store_true",
                   help="train only DFlash 2's parts of the warm start, its other weights frozen (a selector alone "
                        "then "
                        "leaves the draft distributions, and the TDES scorer and SABA calibration fitted on them, as "
                        "they were)")
    p.add_argument("--init-drafter", default=None, metavar="DIR",
                   help="warm start from a trained drafter (a directory, or 'embedded' for the shipped one): its "
                        "weights and draft vocabulary; --draft-vocab must match it; a larger --layers appends "
                        "layers that start as no-ops (grow_layers). The schedule "
                        "starts anew (a checkpoint, --resume, continues exactly instead)")


def add_parser(subparsers) -> None:
    d = TrainConfig()
    p = subparsers.add_parser(
        "train-drafter", help="train a DFlash drafter on `graft drafter-data` output",
        description="DFlash recipe (random anchors, packed blocks, depth-weighted CE) with periodic held-out "
                    "evaluation including the in-loop chain tau; resumable; saves the drafter in the z-lab layout.",
    )
    add_loop_args(p, d)
    add_drafter_args(p, d)
    p.set_defaults(func=_main)

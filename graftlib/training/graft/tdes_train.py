"""TDES training: distil the target's parent-child preferences into the scorer (eqs. 7-12).

`train_tdes` over `graftlib.training.graft.traces` rounds trains f_theta of eq. 6
(`graftlib.methods.tdes.TDESNet`) with:
- KL (eq. 9): for each accepted node p at depth d-1 < D, KL(pi_tgt || pi_theta) over C_{p,d} =
  the depth-d candidate pool, pi_tgt = softmax(z^tgt) (eq. 7), pi_theta = softmax(log q + f_theta)
  (eq. 8; no beta, as in the paper);
- pairs (eq. 10): on every loose-mismatch round (t* in the depth-(d*+1) pool, not a child of p*),
  v+ = (p*, t*) and v- = t* under another parent in the tree (same child, wrong parent) or a tree
  child of p* (competing child, right parent); softplus(gamma - f(v+) + f(v-)), gamma = 1.0 by
  default (one logit unit: f is on the log q scale); pairs whose parents carry the same token are
  dropped (f cannot tell them apart);
- BCE (eq. 11): every verified tree edge, y = [c == target argmax at p], positive weight
  w1 = #negatives / #positives over the training edges;
- total (eq. 12) = lambda_KL L_KL + lambda_pair L_pair + lambda_BCE L_BCE.
Each epoch visits every KL group, edge and pair once, in `steps` minibatches.

The result is a `TDESScorer` (what the decode loop runs) with the net to save; `graft train-tdes`
(`add_parser`) trains one from a trace directory and saves it.
"""

import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.methods.tdes import TDESNet, TDESScorer
from graftlib.training.graft.traces import PROVENANCE_KEYS, TraceRound, is_loose_mismatch, load_traces


@dataclass
class TDESConfig:
    m: int = 64
    beta: float = 0.2  # inference weight of f~ (eq. 4); not used in training
    gamma: float = 1.0  # pairwise margin (eq. 10)
    epochs: int = 8
    lr: float = 2e-3
    weight_decay: float = 1e-4
    lambda_kl: float = 1.0
    lambda_pair: float = 1.0
    lambda_bce: float = 0.25
    batch_groups: int = 512  # KL groups per step (edges and pairs are split into as many steps)
    val_fraction: float = 0.05  # prompts held out for the offline report
    seed: int = 0
    device: str = "cpu"


# ----------------------------------------------------------------------------- training data


@dataclass
class TDESData:
    """Flat training tensors. KL groups [G] (+ [G, K]); edges [E]; pairs [P]; depths are 1-based."""

    kl_parent: torch.Tensor
    kl_depth: torch.Tensor
    kl_children: torch.Tensor
    kl_logq: torch.Tensor
    kl_target: torch.Tensor
    e_parent: torch.Tensor
    e_child: torch.Tensor
    e_depth: torch.Tensor
    e_label: torch.Tensor
    pos_parent: torch.Tensor
    pos_child: torch.Tensor
    neg_parent: torch.Tensor
    neg_child: torch.Tensor
    pair_depth: torch.Tensor

    def sizes(self) -> dict[str, int]:
        return {"kl_groups": len(self.kl_parent), "edges": len(self.e_parent),
                "positive_edges": int(self.e_label.sum()), "pairs": len(self.pos_parent)}

    def to(self, device) -> "TDESData":
        return TDESData(**{k: v.to(device) for k, v in self.__dict__.items()})


def _long(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.long)


def mismatch_pairs(r: TraceRound) -> list[tuple[int, int, int, int, int]]:
    """(p+, c+, p-, c-, d) token pairs of one loose-mismatch round (empty otherwise)."""
    if not is_loose_mismatch(r):
        return []
    p, t = r.last, r.bonus
    d = r.depths[p] + 1
    tp = r.tokens[p]
    out = []
    for n in range(1, len(r.tokens)):
        if r.depths[n] != d:
            continue
        q = r.parents[n]
        if r.tokens[n] == t and q != p and r.tokens[q] != tp:  # same child, wrong parent
            out.append((tp, t, r.tokens[q], t, d))
        elif q == p and r.tokens[n] != t:  # competing child, right parent
            out.append((tp, t, tp, r.tokens[n], d))
    return out


def build_data(rounds: list[TraceRound]) -> TDESData:
    """KL groups of accepted parents with target logits, every tree edge, mismatch pairs."""
    kl = {"p": [], "d": [], "c": [], "q": [], "z": []}
    ep, ec, ed, ey = [], [], [], []
    pairs = []
    for r in rounds:
        require(r.cand_ids is not None, "TDES training needs rounds with candidate pools")
        rows = {n: j for j, n in enumerate(r.logit_nodes)}
        for n in r.accepted_nodes:
            if n in rows and r.depths[n] < r.cand_ids.shape[0]:
                d = r.depths[n]
                kl["p"].append(r.tokens[n])
                kl["d"].append(d + 1)
                kl["c"].append(r.cand_ids[d])
                kl["q"].append(r.cand_logq[d])
                kl["z"].append(r.child_logits[rows[n]].float())
        for n in range(1, len(r.tokens)):
            p = r.parents[n]
            ep.append(r.tokens[p])
            ec.append(r.tokens[n])
            ed.append(r.depths[n])
            ey.append(float(r.tokens[n] == r.target_next[p]))
        pairs += mismatch_pairs(r)
    k = rounds[0].cand_ids.shape[1] if rounds else 0
    stack = (lambda xs, dt: torch.stack(xs).to(dt) if xs else torch.zeros(0, k, dtype=dt))
    pt = _long(pairs).reshape(-1, 5)
    return TDESData(_long(kl["p"]), _long(kl["d"]), stack(kl["c"], torch.long), stack(kl["q"], torch.float32),
                    stack(kl["z"], torch.float32), _long(ep), _long(ec), _long(ed), torch.tensor(ey),
                    pt[:, 0], pt[:, 1], pt[:, 2], pt[:, 3], pt[:, 4])


# ----------------------------------------------------------------------------- losses + training


def losses(net: TDESNet, data: TDESData, cfg: TDESConfig, w1: float, kl_idx=None, e_idx=None,
           p_idx=None) -> dict[str, torch.Tensor]:
    """The three terms of eq. 12 (each 0 when its set is empty) and their weighted sum."""
    zero = net.u.sum() * 0.0
    out = {}
    g = kl_idx if kl_idx is not None else slice(None)
    if len(data.kl_parent[g]):
        f = net(data.kl_parent[g][:, None], data.kl_children[g], data.kl_depth[g][:, None])  # [G, K]
        log_theta = torch.log_softmax(data.kl_logq[g] + f, -1)  # eq. 8
        log_tgt = torch.log_softmax(data.kl_target[g], -1)  # eq. 7
        out["kl"] = (log_tgt.exp() * (log_tgt - log_theta)).sum(-1).mean()  # eq. 9
    else:
        out["kl"] = zero
    i = p_idx if p_idx is not None else slice(None)
    if len(data.pos_parent[i]):
        d = data.pair_depth[i]
        margin = cfg.gamma - net(data.pos_parent[i], data.pos_child[i], d) + net(data.neg_parent[i], data.neg_child[i],
                                                                                 d)
        out["pair"] = F.softplus(margin).mean()  # eq. 10
    else:
        out["pair"] = zero
    j = e_idx if e_idx is not None else slice(None)
    if len(data.e_parent[j]):
        f = net(data.e_parent[j], data.e_child[j], data.e_depth[j])
        pos_weight = torch.tensor(w1, device=f.device)
        out["bce"] = F.binary_cross_entropy_with_logits(f, data.e_label[j], pos_weight=pos_weight)  # eq. 11
    else:
        out["bce"] = zero
    out["total"] = cfg.lambda_kl * out["kl"] + cfg.lambda_pair * out["pair"] + cfg.lambda_bce * out["bce"]
    return out


def _chunks(n: int, steps: int, gen: torch.Generator, device) -> list[torch.Tensor]:
    parts = list(torch.randperm(n, generator=gen).chunk(steps)) if n else []
    empty = torch.zeros(0, dtype=torch.long)
    return [(parts[s] if s < len(parts) else empty).to(device) for s in range(steps)]


def top1_agreement(rounds: list[TraceRound], scorer: TDESScorer | None) -> float:
    """Share of accepted parents whose best child under S (log q, or S_TDES) is the target's best child."""
    hits = total = 0
    for r in rounds:
        rows = {n: j for j, n in enumerate(r.logit_nodes)}
        for n in r.accepted_nodes:
            if n not in rows or r.depths[n] >= r.cand_ids.shape[0]:
                continue
            d = r.depths[n]
            ids, lq = r.cand_ids[d].tolist(), r.cand_logq[d].tolist()
            s = lq if scorer is None else scorer.child_scores(r.tokens[n], d + 1, ids, lq)
            hits += int(np.argmax(s)) == int(r.child_logits[rows[n]].float().argmax())
            total += 1
    return hits / total if total else float("nan")


def split_rounds(rounds: list[TraceRound], fraction: float, seed: int) -> tuple[list, list]:
    """Hold out whole prompts (about `fraction` of them) for validation."""
    prompts = sorted({r.prompt for r in rounds})
    n_val = round(fraction * len(prompts)) if len(prompts) > 1 else 0
    rng = np.random.default_rng(seed)
    val = set(rng.permutation(prompts)[:n_val].tolist()) if n_val else set()
    return [r for r in rounds if r.prompt not in val], [r for r in rounds if r.prompt in val]


def train_tdes(rounds: list[TraceRound], embed: torch.Tensor, cfg: TDESConfig | None = None,
               meta: dict | None = None, log=print) -> tuple[TDESScorer, TDESNet, dict]:
    """Train f_theta on trace rounds (eq. 12); returns (scorer with beta = cfg.beta, net, summary)."""
    cfg = cfg or TDESConfig()
    require(len(rounds) > 0, "no trace rounds to train on")
    require(cfg.epochs >= 1, f"epochs must be >= 1, got {cfg.epochs}")
    depths = int(rounds[0].cand_ids.shape[0])
    vocab = embed.shape[0]
    top = max(max(r.tokens) for r in rounds)
    require(top < vocab, f"trace token id {top} is outside the embedding table of {vocab} rows (another target?)")
    train, val = split_rounds(rounds, cfg.val_fraction, cfg.seed)
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    net = TDESNet(embed, cfg.m, depths).to(device)
    data = build_data(train).to(device)
    val_data = build_data(val).to(device) if val else None
    sizes = data.sizes()
    n_pos = sizes["positive_edges"]
    w1 = max((sizes["edges"] - n_pos) / n_pos, 1.0) if n_pos else 1.0
    log(f"TDES data: {len(train)} train / {len(val)} val rounds; {sizes}; w1 = {w1:.2f}")
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    steps = max(1, math.ceil(max(sizes["kl_groups"], 1) / cfg.batch_groups))
    history = []
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        net.train()
        kl_b = _chunks(sizes["kl_groups"], steps, gen, device)
        e_b = _chunks(sizes["edges"], steps, gen, device)
        p_b = _chunks(sizes["pairs"], steps, gen, device)
        sums = {"kl": 0.0, "pair": 0.0, "bce": 0.0, "total": 0.0}
        for s in range(steps):
            out = losses(net, data, cfg, w1, kl_b[s], e_b[s], p_b[s])
            opt.zero_grad(set_to_none=True)
            out["total"].backward()
            opt.step()
            for k in sums:
                sums[k] += out[k].detach().item() / steps
        row = {"epoch": epoch + 1, **{k: round(v, 5) for k, v in sums.items()}, "s": round(net.s.item(), 4)}
        if val_data is not None:  # eq. 12 on the held-out prompts' rounds: what the epoch did beyond its own data
            with torch.no_grad():
                row["val_total"] = round(losses(net, val_data, cfg, w1)["total"].item(), 5)
        history.append(row)
        log(f"epoch {epoch + 1}/{cfg.epochs}: " + " ".join(f"{k}={v:.4f}" for k, v in sums.items())
            + f" s={net.s.item():.3f}")
    net.eval()
    summary = {"rounds_train": len(train), "rounds_val": len(val), "prompts": len({r.prompt for r in rounds}),
               **sizes, "w1": w1, "history": history, "seconds": round(time.perf_counter() - t0, 2)}
    config = {**(meta or {}), "train": asdict(cfg), "data": summary}
    scorer = TDESScorer.from_net(net, cfg.beta, config)
    if val:
        summary["val_top1_agreement"] = {"ddtree": top1_agreement(val, None), "tdes": top1_agreement(val, scorer)}
        log(f"val top-1 agreement with the target over C_(p,d): DDTree "
            f"{summary['val_top1_agreement']['ddtree']:.3f}, TDES {summary['val_top1_agreement']['tdes']:.3f}")
    return scorer, net, summary


# ----------------------------------------------------------------------------- CLI


def target_embedding(name: str) -> torch.Tensor:
    """The target's input embedding table [V, E] on the CPU (float32)."""
    from graftlib.models.target import load_target

    model, _ = load_target(name, device="cpu")
    return model.get_input_embeddings().weight.detach().float().cpu()


def train_from_traces(traces, out, cfg: TDESConfig, target: str | None = None, tasks: list[str] | None = None,
                      embed: torch.Tensor | None = None, command: str | None = None, log=print) -> TDESScorer:
    """Train a scorer on a trace directory (`tasks`: those tasks' rounds only) and save it at `out`.
    `embed`: the target's embeddings when already loaded (default: loaded on the CPU by name). The
    config records the traces' target, drafter, pair identity and hardware (checked on use by
    `graftlib.inputs.artifacts`) and the command."""
    index, rounds = load_traces(traces, tasks)
    name = target or index.get("target")
    require(name not in (None, "?"), "the traces do not name their target: pass --target")
    meta = {"target": name, "traces": portable(traces), "drafter": index.get("drafter"),
            "drafter_id": index.get("drafter_id"), "pool": index.get("pool"),
            **{k: index[k] for k in PROVENANCE_KEYS if k in index},
            "trace_budget": index.get("budget"), "tasks": tasks or "all",
            "command": command or "graft " + " ".join(sys.argv[1:])}
    scorer, net, _ = train_tdes(rounds, target_embedding(name) if embed is None else embed.detach().float().cpu(),
                                cfg, meta, log)
    scorer.save(out, net)
    return scorer


def _main(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TDESConfig(m=args.m, beta=args.beta, gamma=args.gamma, epochs=args.epochs, lr=args.lr,
                     weight_decay=args.weight_decay, lambda_kl=args.lambda_kl, lambda_pair=args.lambda_pair,
                     lambda_bce=args.lambda_bce, batch_groups=args.batch_groups, val_fraction=args.val_fraction,
                     seed=args.seed, device=args.device or "cpu")
    scorer = train_from_traces(args.traces, args.out, cfg, args.target, args.tasks)
    print(f"TDES scorer saved to {args.out} (beta {scorer.beta}, m {scorer.m}, depths {scorer.depths})")
    return 0


def add_parser(subparsers) -> None:
    d = TDESConfig()
    p = subparsers.add_parser("train-tdes", help="train the TDES edge scorer on target traces",
                              description="Distil parent-child preferences from `graft traces` output (eqs. 7-12).")
    p.add_argument("--traces", required=True, help="trace directory from `graft traces`")
    p.add_argument("--out", required=True, help="FILE.safetensors (+ FILE.json) or a directory (tdes.*)")
    p.add_argument("--target", default=None, help="target whose embeddings are used (default: the traces')")
    p.add_argument("--tasks", nargs="+", default=None, help="train on these tasks' rounds only (e.g. gsm8k)")
    p.add_argument("--m", type=int, default=d.m, help=f"scoring dimension (default {d.m})")
    p.add_argument("--beta", type=float, default=d.beta, help=f"inference weight stored with the scorer ({d.beta})")
    p.add_argument("--gamma", type=float, default=d.gamma, help=f"pairwise margin (default {d.gamma})")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"default {d.epochs}")
    p.add_argument("--lr", type=float, default=d.lr, help=f"AdamW learning rate (default {d.lr})")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help=f"default {d.weight_decay}")
    p.add_argument("--lambda-kl", type=float, default=d.lambda_kl)
    p.add_argument("--lambda-pair", type=float, default=d.lambda_pair)
    p.add_argument("--lambda-bce", type=float, default=d.lambda_bce)
    p.add_argument("--batch-groups", type=int, default=d.batch_groups, help="KL groups per step")
    p.add_argument("--val-fraction", type=float, default=d.val_fraction, help="prompts held out for the report")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default=None, help="cpu or cuda (default cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.set_defaults(func=_main)

"""Target-Distilled Edge Scoring (TDES): a bi-tower parent-child scorer trained on DDTree traces.

Scorer (eq. 6): over the target's frozen token embeddings e (E-dim),
    f_theta(p, c, d) = s * (g_p(e_p) + u_d)^T (g_c(e_c) + u_d) / sqrt(m),
with linear g_p, g_c: R^E -> R^m, depth embeddings u_d (d = 1..D) and s = softplus(s_raw) > 0.
Centred over the candidate children C_{p,d} (eq. 5): f~ = f - mean_{c' in C_{p,d}} f(p, c', d).
Edge score (eq. 4): S_TDES(v) = log q_{t,d}(c) + beta * f~(p, c, d); path score = the sum (eq. 13).

Inference (`TDESScorer`, an `EdgeScorer`): the projections depend on the token id only, so the
tables P = g_p(E), C = g_c(E) ([V, m] each) are computed once for the whole vocabulary when the
scorer is made or loaded (one [V, E] x [E, m] product, tens of ms for V = 49152). A call
is a gather + a small product in numpy: a = s / sqrt(m) * (P[p] + u_d), and per depth the centred
child side B~ = (C[C_d] + u_d) - mean_rows(...), cached for the round's pool (recognised by the
identity of the `child_ids` / `logq` lists the builder passes), so f~ = B~ a. Scores are added to
log q in float64, so beta = 0 gives exactly log q (and DDTree's tree).

Training (eqs. 7-12, `train_tdes`) over `graftlib.traces` rounds:
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

Saved as `<name>.safetensors` (the parameters of f_theta only, fp32, a few hundred kB) and
`<name>.json` (config: beta, m, depths, vocabulary and embedding size, target name, training
summary, the command); `--out DIR` uses DIR/tdes.*. Loading takes the target's embedding table and
rebuilds P and C from it, refusing a table of another shape.
"""

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from graftlib.builders import HeapTreeBuilder
from graftlib.drafter import load_state_strict
from graftlib.errors import GraftError, require
from graftlib.paths import ASSETS_DIR
from graftlib.traces import TraceRound, is_loose_mismatch

FORMAT = 2  # 2: parameters only (1 stored the [V, m] tables too)
TDES_ENV = "GRAFT_TDES"
DEFAULT_PATH = ASSETS_DIR / "tdes" / "default.safetensors"  # trained on the `tdes` pool
GSM8K_PATH = ASSETS_DIR / "tdes" / "gsm8k.safetensors"  # trained on gsm8k only (Figure 5)


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


# ----------------------------------------------------------------------------- model


class TDESNet(torch.nn.Module):
    """f_theta of eq. 6 over a frozen embedding table [V, E]; depths are 1-based."""

    def __init__(self, embed: torch.Tensor, m: int, depths: int):
        super().__init__()
        require(m >= 1 and depths >= 1, f"m and depths must be >= 1, got m={m}, depths={depths}")
        self.register_buffer("embed", embed.detach().float(), persistent=False)
        e = embed.shape[1]
        self.m, self.depths = m, depths
        self.g_p = torch.nn.Linear(e, m)
        self.g_c = torch.nn.Linear(e, m)
        self.u = torch.nn.Parameter(torch.zeros(depths, m))
        self.s_raw = torch.nn.Parameter(torch.tensor(math.log(math.e - 1.0)))  # softplus -> s = 1

    @property
    def s(self) -> torch.Tensor:
        return F.softplus(self.s_raw)

    def _project(self, g: torch.nn.Linear, ids: torch.Tensor) -> torch.Tensor:
        uniq, inv = ids.unique(return_inverse=True)
        return g(self.embed[uniq])[inv]

    def forward(self, parent: torch.Tensor, child: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """f_theta for broadcastable id tensors (parent/depth [...], child [...]) -> [...]."""
        u = self.u[depth - 1]
        a = self._project(self.g_p, parent) + u
        b = self._project(self.g_c, child) + u
        return self.s * (a * b).sum(-1) / math.sqrt(self.m)

    @torch.no_grad()
    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """P = g_p(E), C = g_c(E), each [V, m] float32."""
        return self.g_p(self.embed).float(), self.g_c(self.embed).float()


# ----------------------------------------------------------------------------- inference


class TDESScorer:
    """S_TDES(v) = log q + beta * f~ (eqs. 4-6) from precomputed [V, m] tables; an `EdgeScorer`."""

    def __init__(self, parent_table, child_table, u, s: float, beta: float = 0.2, config: dict | None = None):
        self.P = np.array(parent_table, dtype=np.float32, order="C")  # copies: never views of a net
        self.C = np.array(child_table, dtype=np.float32, order="C")
        self.u = np.array(u, dtype=np.float32, order="C")
        require(self.P.shape == self.C.shape and self.P.shape[1] == self.u.shape[1],
                f"TDES tables {self.P.shape}, {self.C.shape} and depth embeddings {self.u.shape} do not fit")
        self.s = float(s)
        self.beta = float(beta)
        self.scale = self.s / math.sqrt(self.P.shape[1])
        self.config = dict(config or {})
        self._pool: dict[int, tuple] = {}  # depth -> (child_ids, logq, centred child side, logq array)

    @property
    def vocab(self) -> int:
        return self.P.shape[0]

    @property
    def m(self) -> int:
        return self.P.shape[1]

    @property
    def depths(self) -> int:
        return self.u.shape[0]

    @classmethod
    def from_net(cls, net: TDESNet, beta: float = 0.2, config: dict | None = None) -> "TDESScorer":
        P, C = net.tables()
        return cls(P.cpu().numpy(), C.cpu().numpy(), net.u.detach().cpu().numpy(), float(net.s.detach()), beta,
                   config)

    def f(self, parent_token: int, depth: int, child_ids) -> np.ndarray:
        """f_theta(p, c, d) for c in child_ids (eq. 6), float32 [K]."""
        u = self.u[depth - 1]
        return (self.C[np.asarray(child_ids)] + u) @ ((self.P[parent_token] + u) * self.scale)

    def f_centred(self, parent_token: int, depth: int, child_ids) -> np.ndarray:
        """f~ (eq. 5): f minus its mean over C_{p,d} = child_ids."""
        f = self.f(parent_token, depth, child_ids)
        return f - f.mean()

    def _child_side(self, depth: int, child_ids: list[int], logq: list[float]) -> tuple[np.ndarray, np.ndarray]:
        hit = self._pool.get(depth)
        if hit is None or hit[0] is not child_ids or hit[1] is not logq:
            if depth > self.depths or depth < 1:
                raise GraftError(f"TDES scorer trained for depths 1..{self.depths}, asked depth {depth}")
            b = self.C[np.asarray(child_ids)] + self.u[depth - 1]
            hit = (child_ids, logq, b - b.mean(0), np.asarray(logq, dtype=np.float64))
            self._pool[depth] = hit
        return hit[2], hit[3]

    def child_scores(self, parent_token: int, depth: int, child_ids: list[int], logq: list[float]) -> list[float]:
        """log q + beta * f~ for the children C_{p,d} = child_ids at `depth` under `parent_token` (eq. 4)."""
        b, lq = self._child_side(depth, child_ids, logq)
        a = (self.P[parent_token] + self.u[depth - 1]) * self.scale
        return (lq + self.beta * (b @ a).astype(np.float64)).tolist()

    def builder(self, depth: int | None = None) -> HeapTreeBuilder:
        """A TDES tree builder (eq. 13); `depth` (the drafter's D) is checked against the trained depths."""
        require(depth is None or depth <= self.depths,
                f"TDES scorer trained for depths 1..{self.depths}, the drafter drafts {depth}")
        return HeapTreeBuilder(self, name="tdes")

    # ------------------------------------------------------------------------- storage

    def save(self, path: str | Path, net: TDESNet) -> Path:
        """FILE.safetensors: the parameters of f_theta only (g_p, g_c, u, s: a few hundred kB; the
        [V, m] tables are recomputed from the target's embeddings at load); FILE.json: the config."""
        weights, meta = scorer_paths(path)
        weights.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().float().contiguous() for k, v in net.state_dict().items()}
        tmp = weights.with_name(weights.name + ".partial")
        save_file(tensors, tmp, metadata={"format": str(FORMAT)})
        tmp.replace(weights)
        config = {**self.config, "format": FORMAT, "beta": self.beta, "m": self.m, "depths": self.depths,
                  "vocab": self.vocab, "embed_dim": net.g_p.in_features}
        meta.write_text(json.dumps(config, indent=1, default=str) + "\n")
        return weights

    @classmethod
    def load(cls, path: str | Path, embed: torch.Tensor, beta: float | None = None) -> "TDESScorer":
        """The scorer at `path` over the target embedding table `embed` [V, E] (the one it was trained on)."""
        weights, _ = scorer_paths(path)
        config = scorer_config(path)
        require(tuple(embed.shape) == (config["vocab"], config["embed_dim"]),
                f"TDES scorer {weights} was trained on a {config['vocab']} x {config['embed_dim']} embedding table "
                f"(target {config.get('target')}); this target's is {embed.shape[0]} x {embed.shape[1]}")
        net = TDESNet(embed, config["m"], config["depths"])
        load_state_strict(net, load_file(weights), str(weights))
        return cls.from_net(net, config["beta"] if beta is None else beta, config)


def scorer_config(path: str | Path) -> dict:
    """The JSON config of a saved scorer (beta, m, depths, vocabulary, training summary, command)."""
    weights, meta = scorer_paths(path)
    require(weights.is_file() and meta.is_file(), f"no TDES scorer at {path}: expected {weights} and {meta} "
                                                  f"(train one with `graft train-tdes`)")
    try:
        config = json.loads(meta.read_text())
    except json.JSONDecodeError as e:
        raise GraftError(f"TDES config {meta} is malformed: {e}") from None
    require(config.get("format") == FORMAT, f"TDES scorer {meta} has format {config.get('format')}, expected {FORMAT}")
    return config


def scorer_id(path: str | Path) -> str:
    """12 hex digits of sha256 over the scorer's weights file: results of a retrained scorer saved
    at the same path never share a setting (or a resume) with the old one's."""
    weights, _ = scorer_paths(path)
    require(weights.is_file(), f"no TDES scorer at {path}: expected {weights}")
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:12]


def default_scorer_path() -> Path:
    """The shipped scorer (trained on the `tdes` pool), or $GRAFT_TDES when set."""
    return Path(os.environ.get(TDES_ENV) or DEFAULT_PATH)


def load_scorer(path: str | Path | None, embed: torch.Tensor, beta: float | None = None) -> "TDESScorer":
    """A TDES scorer by path (None: `default_scorer_path()`) over the target's embeddings, optionally
    with another beta. Building the tables is one [V, E] x [E, m] product per tower (tens of ms)."""
    return TDESScorer.load(Path(path) if path is not None else default_scorer_path(), embed, beta)


def scorer_paths(path: str | Path) -> tuple[Path, Path]:
    """FILE.safetensors -> (FILE.safetensors, FILE.json); a directory DIR -> DIR/tdes.{safetensors,json}."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return path, path.with_suffix(".json")
    return path / "tdes.safetensors", path / "tdes.json"


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
        margin = cfg.gamma - net(data.pos_parent[i], data.pos_child[i], d) + net(data.neg_parent[i], data.neg_child[i], d)
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
        history.append({"epoch": epoch + 1, **{k: round(v, 5) for k, v in sums.items()}, "s": round(net.s.item(), 4)})
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
    from graftlib.target import load_target

    model, _ = load_target(name, device="cpu")
    return model.get_input_embeddings().weight.detach().float().cpu()


def _main(args) -> int:
    from graftlib.traces import load_traces

    if args.threads:
        torch.set_num_threads(args.threads)
    index, rounds = load_traces(args.traces, args.tasks)
    name = args.target or index.get("target")
    require(name not in (None, "?"), "the traces do not name their target: pass --target")
    cfg = TDESConfig(m=args.m, beta=args.beta, gamma=args.gamma, epochs=args.epochs, lr=args.lr,
                     weight_decay=args.weight_decay, lambda_kl=args.lambda_kl, lambda_pair=args.lambda_pair,
                     lambda_bce=args.lambda_bce, batch_groups=args.batch_groups, val_fraction=args.val_fraction,
                     seed=args.seed, device=args.device or "cpu")
    meta = {"target": name, "traces": str(args.traces), "drafter": index.get("drafter"),
            "drafter_id": index.get("drafter_id"), "pool": index.get("pool"),
            "trace_budget": index.get("budget"), "tasks": args.tasks or "all",
            "command": "graft " + " ".join(sys.argv[1:])}
    scorer, net, _ = train_tdes(rounds, target_embedding(name), cfg, meta)
    path = scorer.save(args.out, net)
    print(f"TDES scorer saved to {path} (beta {scorer.beta}, m {scorer.m}, depths {scorer.depths})")
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

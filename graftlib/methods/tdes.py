"""Target-Distilled Edge Scoring (TDES) at inference: the bi-tower parent-child scorer and its files.

Scorer (eq. 6): over the target's frozen token embeddings e (E-dim),
    f_theta(p, c, d) = s * (g_p(e_p) + u_d)^T (g_c(e_c) + u_d) / sqrt(m),
with linear g_p, g_c: R^E -> R^m, depth embeddings u_d (d = 1..D) and s = softplus(s_raw) > 0.
Centred over the candidate children C_{p,d} (eq. 5): f~ = f - mean_{c' in C_{p,d}} f(p, c', d).
Edge score (eq. 4): S_TDES(v) = log q_{t,d}(c) + beta * f~(p, c, d); path score = the sum (eq. 13).

Inference (`TDESScorer`, an `EdgeScorer`): the projections depend on the token id only, so the
tables P = g_p(E), C = g_c(E) ([V, m] each) are computed once for the whole vocabulary when the
scorer is made or loaded (one [V, E] x [E, m] product, tens of ms for V = 49152). With
a = s / sqrt(m) (P[p] + u_d) and the centred child side B~ = (C[C_d] + u_d) - mean_rows(...),
    log q + beta f~ = [P[p] | 1] . [W_d ; base_d],   W_d = beta s / sqrt(m) B~^T [m, K],
    base_d = log q + u_d . W_d,
and [P | 1] once per scorer. Centring cancels u_d on the child side, so W_d = beta s / sqrt(m)
(C[C_d] - mean C[C_d])^T (`child_sides`). `child_scores` (the `EdgeScorer` call) caches one pool's
[W_d ; base_d] per depth (recognised by the identity of the `child_ids` / `logq` objects) and is
one product per call. The tree builder uses the batched form instead (`pool_scores` ->
`RoundScores`): the child sides of many depths from one gather, the scores of each depth's
likeliest parents from one batched product and their rankings from one argsort, read back as
lists, so the heap makes no numpy call for nearly every node it adds. beta = 0 makes W_d zero and
every score exactly log q (DDTree's tree).

Training (eqs. 7-12) lives in `graftlib.training.tdes_train`.

Saved as `<name>.safetensors` (the parameters of f_theta only, fp32, a few hundred kB) and
`<name>.json` (config: beta, m, depths, vocabulary and embedding size, target name, training
summary, the command); `--out DIR` uses DIR/tdes.*. Loading takes the target's embedding table and
rebuilds P and C from it, refusing a table of another shape.
"""

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from graftlib.core.builders import HeapTreeBuilder
from graftlib.core.errors import GraftError, require
from graftlib.core.paths import ASSETS_DIR
from graftlib.models.drafter import load_state_strict

FORMAT = 2  # 2: parameters only (1 stored the [V, m] tables too)
TDES_ENV = "GRAFT_TDES"
DEFAULT_PATH = ASSETS_DIR / "tdes" / "default.safetensors"  # trained on the `tdes` pool
GSM8K_PATH = ASSETS_DIR / "tdes" / "gsm8k.safetensors"  # trained on gsm8k only (Figure 5)


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
        parent = np.asarray(parent_table, dtype=np.float32)
        self.C = np.array(child_table, dtype=np.float32, order="C")  # copies: never views of a net
        self.u = np.array(u, dtype=np.float32, order="C")
        require(parent.ndim == 2 and parent.shape == self.C.shape and parent.shape[1] == self.u.shape[1],
                f"TDES tables {parent.shape}, {self.C.shape} and depth embeddings {self.u.shape} do not fit")
        # [P | 1]: a call's scores are one product with [W_d ; base_d] (module doc)
        self.P1 = np.concatenate([parent, np.ones((parent.shape[0], 1), np.float32)], axis=1)
        self.P = self.P1[:, :-1]
        self.s = float(s)
        self.beta = float(beta)
        self.scale = self.s / math.sqrt(self.P.shape[1])
        self.config = dict(config or {})
        self._pool: dict[int, tuple] = {}  # depth -> (child_ids, logq, [W_d ; base_d])
        self._means: dict[int, np.ndarray] = {}  # k -> [1, k] of 1 / k (`_mean_row`)

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

    def child_sides(self, ids: np.ndarray, logq: np.ndarray, u: np.ndarray) -> np.ndarray:
        """[W_d ; base_d]^T of n pools in one batched pass, float32 [n, K, m + 1]: with u = the pools'
        depth embeddings u_d [n, m], log q + beta * f~ = side[i] @ [P[p] | 1] for any parent p.

        `ids` [n, K] token ids, `logq` [n, K]. Centring over a pool cancels u_d on the child side
        ((C[c] + u_d) - mean(C[c'] + u_d) = C[c] - mean C[c']), so
        W_d^T = beta s / sqrt(m) (C[ids_d] - mean C[ids_d]) and base_d = log q + W_d^T u_d.
        """
        n, k = ids.shape
        c = self.C[ids]  # [n, K, m]: the one gather
        c -= np.matmul(self._mean_row(k), c)  # the pools' means (a BLAS product)
        c *= self.beta * self.scale  # W_d^T
        side = np.empty((n, k, self.m + 1), np.float32)
        side[:, :, :-1] = c
        np.add(logq, np.matmul(c, u[:, :, None])[:, :, 0], out=side[:, :, -1])  # base_d
        return side

    def _mean_row(self, k: int) -> np.ndarray:
        """[1, k] of 1 / k (float32): a product with it averages k rows (kept per k)."""
        row = self._means.get(k)
        if row is None:
            row = self._means[k] = np.full((1, k), 1.0 / k, np.float32)
        return row

    def _check_depth(self, depth: int) -> None:
        if depth > self.depths or depth < 1:
            raise GraftError(f"TDES scorer trained for depths 1..{self.depths}, asked depth {depth}")

    def _child_side(self, depth: int, child_ids, logq) -> np.ndarray:
        """One pool's [W_d ; base_d]^T ([K, m + 1]), cached for the pool last asked at `depth`
        (recognised by the identity of the `child_ids` / `logq` objects)."""
        hit = self._pool.get(depth)
        if hit is None or hit[0] is not child_ids or hit[1] is not logq:
            self._check_depth(depth)
            ids = np.asarray(child_ids, dtype=np.int64)[None]
            side = self.child_sides(ids, np.asarray(logq, dtype=np.float32)[None], self.u[depth - 1:depth])[0]
            hit = (child_ids, logq, side)
            self._pool[depth] = hit
        return hit[2]

    def child_scores(self, parent_token: int, depth: int, child_ids: list[int], logq: list[float]) -> np.ndarray:
        """log q + beta * f~ (float32 [K]) for the children C_{p,d} = child_ids at `depth` under
        `parent_token` (eq. 4): one [K, m + 1] x [m + 1] product per call."""
        return self._child_side(depth, child_ids, logq) @ self.P1[parent_token]

    def pool_scores(self, cand, depths: int) -> "RoundScores":
        """The round's scoring prepared in one batched pass (`graftlib.core.builders.PoolScorer`)."""
        return RoundScores(self, cand, min(depths, cand.depth, self.depths))

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


class RoundScores:
    """TDES edge scores of one round's pools, prepared in a few batched numpy calls per chunk of depths.

    Per depth d: the child side [W_d ; base_d]^T (`TDESScorer.child_sides`, one gather per chunk)
    and, for the likeliest parents, every child's score at once: at depth d >= 2 the parents are
    depth d - 1's candidates, and the `PARENTS` best of them by log q (where nearly every node of a
    tree sits) get their score rows S [PARENTS, K] from one batched product per chunk, with each row's
    ranking from one batched argsort and its `LEAD` best children and their scores read back as
    Python lists. So a node's leading children (`leading`: all the heap needs for nearly every node,
    since leaves are never asked for a second child and few nodes get more than `LEAD`) are a dict and
    list lookup; a parent asked for more reads its whole ranking once (`ranked`). Any other parent
    (the root, or one outside the block) costs one [K, m + 1] x [m + 1] product, as `child_scores`.

    Depths are prepared on first use, `FIRST` at once and then doubling up to n (the deepest a tree
    of the round's budget can reach): a bushy tree is often far shallower than n, but each chunk
    costs a fixed number of numpy calls, which dominate at these sizes, so the first chunk is
    generous; the chunk sizes change only how much is prepared, not a value. The values are those of
    `child_scores` for the same pool up to float32 rounding of the batched products; a parent is
    always scored the same way within a round, so its `leading`, `row` and `ranked` agree.
    """

    PARENTS = 8  # parent candidates per depth scored in the batched pass
    LEAD = 4  # leading children per block parent read back with the preparation
    FIRST = 8  # depths prepared with the first request

    def __init__(self, scorer: TDESScorer, cand, n: int):
        self.scorer, self.cand, self.n, self.P1 = scorer, cand, n, scorer.P1
        self.r = min(self.PARENTS, cand.width)
        self.ready = 0  # depths 1..ready are prepared
        # per depth index d - 1: (chunk's sides, offset); and for d >= 2 (index 0 is depth 1's placeholder):
        self.side_at: list[tuple[np.ndarray, int]] = []
        self.rows_at: list = [None]  # (chunk's S, chunk's rankings, offset)
        self.block: list[dict[int, int]] = [{}]  # parent token -> row of S (depth 1: none)
        self.lead_j: list = [None]  # per block row: the leading children's pool indices
        self.lead_s: list = [None]  # and their scores
        if n > 0:
            self._prepare(min(n, self.FIRST))

    def _prepare(self, hi: int) -> None:
        """Depths ready + 1 .. hi."""
        lo, ids, logq = self.ready, self.cand.id_table, self.cand.logq_table
        side = self.scorer.child_sides(ids[lo:hi], logq[lo:hi], self.scorer.u[lo:hi])  # [hi - lo, K, m + 1]
        self.side_at += [(side, i) for i in range(hi - lo)]
        first = max(lo, 1)  # block depths first + 1 .. hi; their parents are rows first - 1 .. hi - 2
        if hi > first:
            parents = ids[first - 1:hi - 1, :self.r]
            S = np.matmul(self.P1[parents], side[first - lo:].transpose(0, 2, 1))  # [depths, r, K]
            order = np.argsort(-S, axis=2, kind="stable")  # rankings (rank 0 = the first max)
            self.rows_at += [(S, order, i) for i in range(hi - first)]
            self.lead_j += order[:, :, :self.LEAD].tolist()
            self.lead_s += np.sort(S, axis=2)[:, :, :-self.LEAD - 1:-1].tolist()  # the same ranks' values
            self.block += [{t: i for i, t in enumerate(row)} for row in parents.tolist()]
        self.ready = hi

    def _at(self, parent_token: int, depth: int) -> int | None:
        """The parent's row in depth's block (None: not in it), preparing the depth first."""
        if depth > self.ready:
            if depth > self.n:
                self.scorer._check_depth(depth)  # beyond the trained depths: raises
                raise ValueError(f"depth {depth} was not prepared (n = {self.n})")
            self._prepare(min(self.n, max(depth, 2 * self.ready)))
        return self.block[depth - 1].get(parent_token)

    def _gemv(self, parent_token: int, depth: int) -> np.ndarray:
        side, i = self.side_at[depth - 1]
        return side[i] @ self.P1[parent_token]

    def leading(self, parent_token: int, depth: int) -> tuple[list[int], list[float]]:
        """(pool indices, scores) of the first ranks of `parent_token`'s children at `depth` (at least
        the best one; ties by pool index)."""
        i = self._at(parent_token, depth)
        if i is None:
            scores = self._gemv(parent_token, depth)
            j = int(scores.argmax())
            return [j], [float(scores[j])]
        return self.lead_j[depth - 1][i], self.lead_s[depth - 1][i]

    def row(self, parent_token: int, depth: int) -> np.ndarray:
        """Every child's score (float32 [K]) under `parent_token` at `depth`."""
        i = self._at(parent_token, depth)
        if i is None:
            return self._gemv(parent_token, depth)
        S, _, k = self.rows_at[depth - 1]
        return S[k, i]

    def ranked(self, parent_token: int, depth: int) -> tuple[list[int], list[float]]:
        """(pool indices by score, stable descending; the scores by pool index) as lists: a parent's
        whole ranking, read once when it gets a second child."""
        i = self._at(parent_token, depth)
        if i is None:
            scores = self._gemv(parent_token, depth)
            return np.argsort(-scores, kind="stable").tolist(), scores.tolist()
        S, order, k = self.rows_at[depth - 1]
        return order[k, i].tolist(), S[k, i].tolist()

    def __call__(self, parent_token: int, depth: int) -> np.ndarray:
        return self.row(parent_token, depth)


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

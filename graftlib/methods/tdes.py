"""Target-Distilled Edge Scoring (TDES) at inference: the bi-tower parent-child scorer and its files.

Scorer (eq. 6): over the target's frozen token embeddings e (E-dim),
    f_theta(p, c, d) = s * (g_p(e_p) + u_d)^T (g_c(e_c) + u_d) / sqrt(m),
with linear g_p, g_c: R^E -> R^m, depth embeddings u_d (d = 1..D) and s = softplus(s_raw) > 0.
Centred over the candidate children C_{p,d} (eq. 5): f~ = f - mean_{c' in C_{p,d}} f(p, c', d).
Edge score (eq. 4): S_TDES(v) = log q_{t,d}(c) + beta * f~(p, c, d); path score = the sum (eq. 13).

Inference (`TDESScorer`, a `BilinearScorer`): the projections depend on the token id only, so P = g_p(E) and
C = g_c(E) are tables over the vocabulary, made once; centring cancels u_d on the child side, so every edge
score of a parent is one product log q + beta f~ = X_d y with X_d = [C[C_d] - mean C[C_d] | log q_d] and
y = [beta s / sqrt(m) (P[p] + u_d) | 1]. The compiled heap scores with these tables (`bilinear_tables`,
`graftlib.core.kernels._score_row`), the one scoring path: `child_scores` calls the same kernel for one pool, and
the plain reference (eq. 6 term by term) lives in tests/test_tdes.py. beta = 0 gives exactly log q (DDTree's tree).

Training (eqs. 7-12) lives in `graftlib.training.graft.tdes_train`.

Saved as `<name>.safetensors` (f_theta's parameters, fp32) and `<name>.json` (beta, m, depths, sizes, target,
training summary, the command); loading rebuilds P and C from the target's embeddings.

Details: docs/internals.md, `graftlib.methods.tdes`.
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
from graftlib.core.kernels import edge_scores, heap_tables
from graftlib.core.paths import ASSETS_DIR
from graftlib.models.drafter import load_state_strict

FORMAT = 2  # 2: parameters only (1 stored the [V, m] tables too)
TDES_ENV = "GRAFT_TDES"
DEFAULT_PATH = ASSETS_DIR / "tdes" / "default.safetensors"  # trained on the `tdes` pool


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
    """S_TDES(v) = log q + beta * f~ (eqs. 4-6) from precomputed [V, m] tables; a `BilinearScorer`."""

    def __init__(self, parent_table, child_table, u, s: float, beta: float = 0.2, config: dict | None = None):
        self.P = np.array(parent_table, dtype=np.float32, order="C")  # copies: never views of a net
        self.C = np.array(child_table, dtype=np.float32, order="C")
        self.u = np.array(u, dtype=np.float32, order="C")
        require(self.P.ndim == 2 and self.P.shape == self.C.shape and self.P.shape[1] == self.u.shape[1],
                f"TDES tables {self.P.shape}, {self.C.shape} and depth embeddings {self.u.shape} do not fit")
        self.s = float(s)
        self.beta = float(beta)
        self.scale = self.s / math.sqrt(self.P.shape[1])
        k = self.beta * self.scale  # beta * s / sqrt(m): where beta enters the decode's edge scores (eq. 4)
        # the sides' tables (module doc): [k P | 1], [k u | 0], [C | 0]
        self.P1 = np.concatenate([self.P * k, np.ones((self.P.shape[0], 1), np.float32)], axis=1)
        self.u0 = np.concatenate([self.u * k, np.zeros((self.u.shape[0], 1), np.float32)], axis=1)
        self.C0 = np.concatenate([self.C, np.zeros((self.C.shape[0], 1), np.float32)], axis=1)
        self.tables = heap_tables((self.P1, self.u0, self.C0))  # the heap's inputs, for `child_scores`
        self.config = dict(config or {})

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

    def _check_depth(self, depth: int) -> None:
        if depth > self.depths or depth < 1:
            raise GraftError(f"TDES scorer trained for depths 1..{self.depths}, asked depth {depth}")

    def child_scores(self, parent_token: int, depth: int, child_ids: list[int], logq: list[float]) -> np.ndarray:
        """log q + beta * f~ (float32 [K]) for the children C_{p,d} = child_ids at `depth` under `parent_token`
        (eq. 4): the compiled heap's own edge scores (`kernels.edge_scores`), for callers outside the heap (the
        scorer's evaluation in training, the tests' reference heap)."""
        self._check_depth(depth)
        ids = np.zeros((depth, len(child_ids)), np.int32)
        lq = np.zeros((depth, len(child_ids)), np.float32)
        ids[-1], lq[-1] = child_ids, logq
        return edge_scores(ids, lq, self.tables, parent_token, depth - 1)

    def bilinear_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([k P | 1], [k u | 0], [C | 0]): the sides' tables (module doc), for the compiled heap
        (`graftlib.core.builders.BilinearScorer`)."""
        return self.P1, self.u0, self.C0

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
        net = TDESNet(embed.detach().float().cpu(), config["m"], config["depths"])  # the tables feed the host heap
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

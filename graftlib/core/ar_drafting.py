"""The draft step of an autoregressive (AR) drafter: a draft tree grown depth by depth.

An AR drafter (EAGLE-3, `graftlib.models.eagle3`) predicts one token per forward from target
features and its own KV cache, so a round's draft is a loop of drafter forwards, one per depth,
each over the frontier nodes a tree policy picks. Build tree, verify, accept, commit and update
stay the decode loop's own (`graftlib.core.decode`): an AR-drafted tree is verified like DDTree's.

`DraftPool` (plain data, like `graftlib.core.tree.Tree`) holds every node proposed in the round:
tokens, parents, depths and the path log-prob log q (the sum of the draft log-probs on its edges),
the nodes forwarded (whose children are in the pool), and per drafter forward its seconds and its
input rows (the context step's pending pairs, then each depth's frontier). A
`TreePolicy` (in `graftlib.methods`: EAGLE-2's dynamic tree, OPT-Tree) says how many children a
forwarded node offers (`children`), which of the newest nodes to forward next (`expand`; [] stops)
and, as the loop's `TreeBuilder`, which pool nodes form the verified tree (`build`). A child's log q
is at most its parent's, so the `n` best pool nodes (ties to the earlier node) contain their own
ancestors: `DraftPool.best` always names a tree.

`TreeDraftLoop` is the decode loop with this draft step: `draft` grows the pool, `tree_round`
adds the per-forward times and rows to the round record (`RoundRecord.t_draft_steps` and
`draft_rows`, the context step first; the modeled cost prices them, `graftlib.inputs.cost_profile`),
`advance` queues the emitted tokens as the next context step's pairs.

Details: docs/internals.md, `graftlib.core.ar_drafting`.
"""

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from graftlib.core.builders import BudgetController
from graftlib.core.decode import DecodeLoop, DecodeResult, RoundOutcome, SpecState
from graftlib.core.errors import require
from graftlib.core.sampling import GREEDY, Sampling
from graftlib.core.timing import StageTimer
from graftlib.core.tree import Tree


@runtime_checkable
class ARDrafter(Protocol):
    """What the draft step asks of an AR drafter model (`graftlib.models.eagle3.Eagle3Drafter`)."""

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor: ...

    def new_cache(self) -> object: ...  # has `length` and `crop(n)`

    def __call__(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: object,
                 extra_mask: torch.Tensor | None = None) -> torch.Tensor: ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor: ...  # [n, V_draft]

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor: ...


@dataclass
class DraftPool:
    """Every node an AR drafter proposed in one round; node 0 is the root (module doc)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    logq: list[float]  # log q of the path root..node; 0 at the root
    forwarded: list[int] = field(default_factory=list)  # nodes run through the drafter, in cache order
    step_times: list[float] = field(default_factory=list)  # seconds per drafter forward, context step first
    step_rows: list[int] = field(default_factory=list)  # input rows of each drafter forward, context step first

    @classmethod
    def root(cls, token: int) -> "DraftPool":
        return cls([token], [-1], [0], [0.0])

    @property
    def size(self) -> int:
        """Draft nodes in the pool (root excluded)."""
        return len(self.tokens) - 1

    def add(self, token: int, parent: int, logq: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.logq.append(logq)
        return len(self.tokens) - 1

    def best(self, n: int, nodes: list[int] | None = None) -> list[int]:
        """The `n` best of `nodes` (ascending; default: every draft node) by path log q, ties to the
        earlier node; returned in pool order."""
        ids = list(range(1, len(self.tokens))) if nodes is None else sorted(nodes)
        if n >= len(ids):
            return ids
        scores = torch.tensor(self.logq[1:] if nodes is None else [self.logq[i] for i in ids], dtype=torch.float64)
        order = torch.sort(scores, descending=True, stable=True).indices[:n].tolist()
        return sorted(ids[j] for j in order)

    def mass(self, n: int, nodes: list[int]) -> float:
        """Sum of the path probabilities of the `n` best of `nodes`: the expected number of accepted
        drafts of that tree if the target followed the draft distribution (OPT-Tree's objective)."""
        return torch.tensor([self.logq[i] for i in self.best(n, nodes)], dtype=torch.float64).exp().sum().item()

    def tree(self, keep: list[int]) -> Tree:
        """The tree of the pool nodes `keep` (pool order, containing their ancestors), root first."""
        index = {0: 0}
        tree = Tree.root_only(self.tokens[0])
        for i in keep:
            require(self.parents[i] in index, f"pool node {i}: its parent {self.parents[i]} is not kept")
            index[i] = tree.add(self.tokens[i], index[self.parents[i]], self.logq[i])
        return tree


class TreePolicy(Protocol):
    """Which nodes an AR drafter expands at each depth, and which it keeps (module doc)."""

    name: str

    @property
    def max_depth(self) -> int: ...  # the deepest draft depth it grows

    def children(self, budget: int) -> int: ...  # children per forwarded node (its top-k draft tokens)

    def expand(self, pool: DraftPool, new: list[int], budget: int) -> list[int]: ...

    def build(self, root_token: int, pool: DraftPool, budget: int) -> Tree: ...

    def feedback(self, record: dict) -> None: ...


class KeepBest:
    """The rerank of both released policies: the verified tree is the pool's `budget` best nodes."""

    def build(self, root_token: int, pool: DraftPool, budget: int) -> Tree:
        return pool.tree(pool.best(budget))

    def feedback(self, record: dict) -> None:
        pass


@dataclass
class ARDraftState:
    """The AR drafter's part of a `SpecState`: its KV cache and the token after each pending feature."""

    kv: object
    tokens: list[int] = field(default_factory=list)


class ARTreeDrafter:
    """An AR drafter model with a tree policy, as the decode loop's drafter (`grow` is the draft step)."""

    def __init__(self, model: ARDrafter, policy: TreePolicy):
        self.model = model
        self.policy = policy

    @property
    def block_size(self) -> int:
        """Root + the deepest draft depth (the position slack a decode needs)."""
        return self.policy.max_depth + 1

    def context_features(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.model.context_features(hidden_states)

    def new_cache(self) -> ARDraftState:
        return ARDraftState(self.model.new_cache())

    def head_weight(self, lm_head_weight: torch.Tensor) -> None:
        """None: an AR drafter drafts with its own head (`logits`), not the target's."""

    def grow(self, st: SpecState, budget: int) -> DraftPool:
        """The draft step: context step, then one forward per depth while the policy expands."""
        state, model, policy = st.draft_cache, self.model, self.policy
        n, dev = st.features.shape[1], st.features.device
        require(len(state.tokens) == n, f"AR drafter context: {n} pending features but {len(state.tokens)} tokens")
        timer = StageTimer(dev)
        out = model(torch.tensor([state.tokens], device=dev), st.features,
                    torch.arange(st.start - n, st.start, device=dev), state.kv)[0, -1:]  # the root's output
        st.features, state.tokens = st.features[:, :0], []
        committed = state.kv.length
        pool = DraftPool.root(st.root)
        k = policy.children(budget)
        new = self._children(pool, [0], out, k)
        pool.step_times.append(timer.lap())
        pool.step_rows.append(n)
        outs, row = out, {0: 0}  # drafter outputs of the root and the forwarded nodes; node -> row
        while front := policy.expand(pool, new, budget):
            hidden = outs[[row[pool.parents[i]] for i in front]][None]
            ids = torch.tensor([[pool.tokens[i] for i in front]], device=dev)
            positions = torch.tensor([st.start - 1 + pool.depths[i] for i in front], device=dev)
            o = model(ids, hidden, positions, state.kv, self.tree_mask(pool, front).to(dev))[0]
            row.update({i: len(row) + j for j, i in enumerate(front)})
            outs = torch.cat([outs, o])
            pool.forwarded += front
            new = self._children(pool, front, o, k)
            pool.step_times.append(timer.lap())
            pool.step_rows.append(len(front))
        state.kv.crop(committed)
        return pool

    @staticmethod
    def tree_mask(pool: DraftPool, front: list[int]) -> torch.Tensor:
        """[f, forwarded + f] bool: frontier node r sees its forwarded ancestors and itself."""
        col = {node: j for j, node in enumerate(pool.forwarded)}
        f, m = len(front), len(pool.forwarded)
        mask = torch.zeros(f, m + f, dtype=torch.bool)
        for r, i in enumerate(front):
            mask[r, m + r] = True
            p = pool.parents[i]
            while p > 0:
                mask[r, col[p]] = True
                p = pool.parents[p]
        return mask

    def _children(self, pool: DraftPool, parents: list[int], out: torch.Tensor, k: int) -> list[int]:
        """Add each parent's top-k draft tokens (draft ids mapped to target ids) with their path log q."""
        logq = torch.log_softmax(self.model.logits(out).float(), dim=-1)
        top, idx = logq.topk(min(k, logq.shape[-1]), dim=-1)
        tokens, top = self.model.target_ids(idx).tolist(), top.tolist()
        new = []
        for p, toks, lq in zip(parents, tokens, top):
            base = pool.logq[p]
            new += [pool.add(t, p, base + q) for t, q in zip(toks, lq)]
        return new


class TreeDraftLoop(DecodeLoop):
    """The decode loop whose draft step is an AR drafter growing its tree (module doc)."""

    def __init__(self, target, drafter: ARDrafter, policy: TreePolicy, controller: BudgetController,
                 eos_ids: list[int] | None = None, sampling: Sampling = GREEDY):
        require(isinstance(drafter, ARDrafter), f"{policy.name} drafts with an autoregressive drafter (EAGLE-3), "
                                                f"not a {type(drafter).__name__}")
        super().__init__(target, ARTreeDrafter(drafter, policy), policy, controller, eos_ids, sampling)

    def start_state(self, result: DecodeResult, cache, features: torch.Tensor, gen: torch.Generator | None = None,
                    prompt_ids: list[int] | None = None, timer: StageTimer | None = None) -> SpecState:
        """The prompt's features pair with the prompt's next tokens, the last one with the root."""
        require(prompt_ids is not None, "an AR drafter's first context step needs the prompt's tokens")
        st = super().start_state(result, cache, features, gen, prompt_ids, timer)
        st.draft_cache.tokens = list(prompt_ids[1:]) + [st.root]
        return st

    def draft(self, st: SpecState, k: int) -> DraftPool:
        """Step `draft`: the pool of the round (context step + one forward per depth)."""
        return self.drafter.grow(st, k)

    def tree_round(self, st: SpecState, cand: DraftPool | None, budget: int, timer: StageTimer,
                   record_trees: bool = False) -> RoundOutcome:
        step = super().tree_round(st, cand, budget, timer, record_trees)
        if cand is not None:
            step.record.t_draft_steps, step.record.draft_rows = cand.step_times, cand.step_rows
        return step

    def advance(self, result: DecodeResult, st: SpecState, step: RoundOutcome, max_new_tokens: int,
                stop_at_eos: bool) -> bool:
        """Step `update`: the round's features (queued by the loop) pair with the tokens it emitted."""
        st.draft_cache.tokens += step.new
        return super().advance(result, st, step, max_new_tokens, stop_at_eos)

"""The decoding loop: AR baseline and speculative decoding, one code path for CPU and CUDA.

A speculative round is six named steps (batch size 1, T = 0); `draft`, `tree_round` (build tree .. commit, for a
given budget, restorable by a crop) and `advance` (update) are separate methods so `graftlib.training.graft.replay`
can run the same round with other budgets from a saved `SpecState`:
  gate        controller.speculate(start): draft this round, or take one plain AR step (budget 0)
  draft       drafter([root, mask x D] at positions start.., new context features) -> logits [D, V]
  build tree  budget = controller.budget(cand, start) (0: an AR step after all); tree = builder.build(..)
  verify      target body over [root, nodes] (N+1 tokens, positions start + depth, 4D mask)
  accept      greedy walk: longest root path whose tokens equal the target's argmax tokens
  commit      compact the target KV cache to the accepted nodes; emit their tokens + the bonus
  update      the accepted nodes' target features feed the next draft; feedback hooks

Exactness: every emitted token is the target's argmax given the committed prefix: the output is greedy AR's (up to
certified near-ties). At T > 0 (`graftlib.core.sampling`) a node's verdict is a seeded draw from the target's
processed distribution and the walk follows it: the output law is AR sampling's. Budget 0 is one plain AR step.

`DecodeLoop.decode(prompt_ids)` returns the tokens and one `RoundRecord` per round, timed by one `StageTimer.mark`
per sub-step (`graftlib.core.timing.STAGES`) and built by keyword (`tree_record`). The lab's instruments are attached,
not run by every decode: `observers` get each drafted round (Figure 1(b)'s mismatch, `bench.record_mismatch`), a
`SplitLog` passed to `decode` every mark (`graftlib.lab.run.costs.host_overhead`). The loop knows only the
`TreeBuilder` / `BudgetController` interfaces (`graftlib.core.builders`) and the `Drafter` protocol; methods by name
are built in `graftlib.methods.registry`, an AR drafter's draft step is `graftlib.core.ar_drafting.TreeDraftLoop`.

Details: docs/internals.md, `graftlib.core.decode`.
"""

from dataclasses import asdict, dataclass, field

import torch

from graftlib.core.builders import BudgetController, Candidates, TreeBuilder, top_k
from graftlib.core.drafting import Drafter
from graftlib.core.errors import require
from graftlib.core.kernels import warm_up
from graftlib.core.kvcache import target_cache
from graftlib.core.sampling import GREEDY, LazySample, Sampling
from graftlib.core.timing import SplitLog, StageTimer
from graftlib.core.tree import MaskBuffer, Tree, greedy_walk, is_leaf, verify_inputs
from graftlib.core.verify import LazyArgmax, commit_cache, kept_rows, target_forward


@dataclass
class RoundRecord:
    accepted: int  # a_t: accepted draft nodes + the bonus token
    budget: int
    nodes: int  # draft nodes in the verified tree (root excluded)
    prefix_len: int  # tokens in the target cache before the round
    t_draft: float
    t_tree: float
    t_verify: float
    t_commit: float
    last_depth: int = 0  # d*: depth of the last accepted node
    # t* is in the tree at depth d* + 1 under another parent (tree.parent_mismatch): set by an observer that asks
    mismatch: bool = False
    tree: dict | None = None  # tokens / parents / depths (record_trees)
    target_next: list[int] | None = None  # target argmax token at every node (record_trees)
    accepted_nodes: list[int] | None = None
    t_draft_steps: list[float] | None = None  # AR drafters: seconds per drafter forward (core.ar_drafting)
    draft_rows: list[int] | None = None  # AR drafters: input rows per drafter forward (context step first)
    # the walk ended at a leaf (tree.is_leaf): a_t is a lower bound of what a deeper tree accepts
    censored: bool = False


@dataclass
class DecodeResult:
    tokens: list[int]
    prompt_len: int
    prefill_s: float
    decode_s: float  # wall time after the first token (prefill excluded)
    rounds: list[RoundRecord] = field(default_factory=list)
    stop: str = "length"

    @property
    def mat(self) -> float:
        """Mean accepted tokens per round (bonus included); AR: 1."""
        return sum(r.accepted for r in self.rounds) / len(self.rounds) if self.rounds else 1.0

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput: tokens after the first one over decode time (prefill excluded)."""
        return (len(self.tokens) - 1) / self.decode_s if self.decode_s > 0 else float("nan")

    def stage_ms(self) -> dict[str, float]:
        n = max(len(self.rounds), 1)
        return {k: 1000 * sum(getattr(r, f"t_{k}") for r in self.rounds) / n
                for k in ("draft", "tree", "verify", "commit")}

    def to_dict(self) -> dict:
        return asdict(self)


class DecodeLoop:
    """Target + drafter + (builder, controller). `builder=None` means AR decoding. `observers`: functions each
    drafted round's record, tree, accepted path and bonus token are handed to (`tree_record`)."""

    def __init__(self, target, drafter: Drafter | None, builder: TreeBuilder | None = None,
                 controller: BudgetController | None = None, eos_ids: list[int] | None = None,
                 sampling: Sampling = GREEDY):
        self.target = target
        # f(record, tree, accepted, bonus) per drafted round (`tree_record`): what the lab measures beyond the loop
        self.observers: list = []
        self.sampling = sampling.check()
        self.drafter = drafter
        self.builder = builder
        self.controller = controller
        self.device = target.device
        self.lm_head = target.lm_head.weight
        self.embed = target.get_input_embeddings()
        self.draft_head = drafter.head_weight(self.lm_head) if drafter is not None else None
        self.eos_ids = set(eos_ids or [])
        self.max_positions = target.config.max_position_embeddings
        # greedy verdicts: all tree rows in one head product and one read-back off the CPU (one sync a
        # round); on the CPU the rows the walk visits, one matvec each (`graftlib.core.verify.LazyArgmax`)
        self.eager_verdicts = self.device.type != "cpu"
        require(builder is None or drafter is not None, "speculative methods need a drafter")
        # candidates drafted per depth: the controller's largest budget, or more where the builder reads more
        self.pool = max(controller.max_budget, getattr(builder, "pool", 0)) if controller is not None else 0
        if builder is not None:
            warm_up()  # the host kernels compiled (or loaded) before any decode is timed

    def check_prompt(self, prompt_ids: list[int], max_new_tokens: int) -> None:
        require(len(prompt_ids) > 0, "empty prompt: nothing to condition on")
        require(max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {max_new_tokens}")
        slack = self.drafter.block_size if self.builder is not None else 0
        need = len(prompt_ids) + max_new_tokens + slack
        require(need <= self.max_positions,
                f"prompt too long: {len(prompt_ids)} prompt tokens + {max_new_tokens} new + {slack} draft slack"
                f" = {need} > the target's context of {self.max_positions} positions")

    @torch.inference_mode()
    def decode(self, prompt_ids: list[int], max_new_tokens: int = 256, record_trees: bool = False,
               stop_at_eos: bool = True, splits: SplitLog | None = None) -> DecodeResult:
        """`splits`: charge each round's sub-steps to it (`graftlib.core.timing`; host-overhead measurements)."""
        self.check_prompt(prompt_ids, max_new_tokens)
        speculative = self.builder is not None
        tree_room = (self.controller.max_budget + 1) if speculative else 1
        cache = target_cache(self.target.config, len(prompt_ids) + max_new_tokens + tree_room, shared=True)
        timer = StageTimer(self.device, splits)
        ids = torch.tensor([prompt_ids], device=self.device)
        out = target_forward(self.target, ids, torch.arange(len(prompt_ids), device=self.device)[None],
                             cache, with_states=speculative)
        gen = self.sampling.generator(self.device)  # None at T = 0; else this decode's only randomness
        root = self.verdict(out.hidden[-1:], gen)[0]
        result = DecodeResult([root], len(prompt_ids), timer.lap(), 0.0)
        t_decode = timer.t
        eos = stop_at_eos and root in self.eos_ids
        if speculative:
            features = self.drafter.context_features(out.hidden_states)  # [1, n, F]
            st = self.start_state(result, cache, features, gen, prompt_ids, timer)
            self._speculate(result, st, max_new_tokens, record_trees, stop_at_eos, timer, eos)
        else:
            self._autoregress(result, cache, max_new_tokens, stop_at_eos, eos, gen)
        result.decode_s = timer.now() - t_decode
        return result

    def verdict(self, hidden: torch.Tensor, gen: torch.Generator | None) -> LazyArgmax | LazySample:
        """The target's token at each row of `hidden` [n, H], computed on first access: its argmax
        (T = 0), or a draw from its processed distribution with the decode's generator."""
        if gen is None:
            return LazyArgmax(hidden, self.lm_head, self.eager_verdicts)
        return LazySample(hidden, self.lm_head, self.sampling, gen)

    def _autoregress(self, result: DecodeResult, cache, max_new_tokens: int, stop_at_eos: bool, eos: bool,
                     gen: torch.Generator | None = None):
        pos = result.prompt_len
        while not eos and len(result.tokens) < max_new_tokens:
            tok = torch.tensor([[result.tokens[-1]]], device=self.device)
            out = target_forward(self.target, tok, torch.tensor([[pos]], device=self.device), cache)
            nxt = self.verdict(out.hidden, gen)[0]
            result.tokens.append(nxt)
            pos += 1
            eos = stop_at_eos and nxt in self.eos_ids
        result.stop = "eos" if eos else "length"

    def start_state(self, result: DecodeResult, cache, features: torch.Tensor, gen: torch.Generator | None = None,
                    prompt_ids: list[int] | None = None, timer: StageTimer | None = None) -> "SpecState":
        """The state before the first round: prompt in the target cache, root = the first token
        (`prompt_ids`: for drafters that pair each feature with the next token, `core.ar_drafting`;
        `timer`: the decode's, for the host-overhead splits)."""
        return SpecState(cache, self.drafter.new_cache(), features, result.prompt_len,
                         result.tokens[-1], gen, timer, self.mask_buffer(cache))

    def mask_buffer(self, cache) -> MaskBuffer | None:
        """The decode's reusable verify mask: rows for the largest tree, columns for the cache's capacity
        (None when the cache does not say it: each round then makes its own mask)."""
        layers = getattr(cache, "layers", None) or [None]
        capacity = getattr(layers[0], "capacity", None)
        if capacity is None or self.controller is None:
            return None
        return MaskBuffer(self.controller.max_budget + 1, capacity, self.device, self.lm_head.dtype)

    def draft(self, st: "SpecState", k: int) -> Candidates:
        """Step `draft`: block [root, mask x D] -> per-depth top-k candidates (extends the draft cache
        with the pending context features, which are then consumed)."""
        drafter, D = self.drafter, self.drafter.block_size - 1
        block = torch.tensor([[st.root] + [drafter.config.mask_token_id] * D], device=self.device)
        noise = self.embed(block) * drafter.config.input_embedding_scale  # [1, D+1, H]
        h = drafter(noise, st.features, st.start, st.draft_cache)[0, 1:]  # [D, H]
        st.features = st.features[:, :0]
        logits = self.sampling.temper(drafter.draft_logits(h, self.draft_head))  # [D, V_draft]
        top = top_k(logits, k, drafter.id_map, h)  # on the device
        if st.timer is not None:
            st.timer.mark("draft_forward")
        return Candidates.from_top_k(top, h)

    def tree_round(self, st: "SpecState", cand: Candidates, budget: int, timer: StageTimer,
                   record_trees: bool = False) -> "RoundOutcome":
        """Steps `build tree` .. `commit` of one round for a given budget; `st` itself is not advanced.

        Afterwards the target cache holds `st.start + accepted` positions; cropping it back to
        `st.start` (`commit_cache(cache, st.start, [])`) restores the state before the call, so
        the same round can be replayed with another budget (`graftlib.training.graft.replay`). Budget 0: one AR
        step (`cand` is not read).
        """
        if budget == 0:
            return self.ar_round(st, timer)
        # build tree
        tree = self.builder.build(st.root, cand, budget)
        timer.mark("tree_build")
        vi = verify_inputs(tree, st.start, self.device, self.lm_head.dtype, st.masks)
        timer.mark("verify_inputs")
        # verify: [1, N+1] tokens at positions start + depth
        out = target_forward(self.target, vi.input_ids, vi.position_ids, st.cache, vi.attention_mask, True)
        verdict = self.verdict(out.hidden, st.gen)
        timer.mark("verify_forward")
        # accept (T > 0: the walk draws the target's token at each node it reaches)
        accepted, bonus = greedy_walk(vi.edges, verdict)
        timer.mark("walk")
        # commit: KV of accepted nodes; their features feed the next draft
        idx = kept_rows(accepted, self.device)  # None: the accepted path is rows 0..a-1
        commit_cache(st.cache, st.start, accepted, idx)
        features = self.drafter.context_features(out.hidden_states)  # [1, N+1, F]
        features = features[:, :len(accepted)] if idx is None else features.index_select(1, idx)  # [1, a, F]
        timer.mark("commit")
        record = self.tree_record(tree, accepted, bonus, budget, st.start, timer.take(), record_trees)
        if record_trees:
            record.target_next = verdict.all_rows()
        return RoundOutcome(record, [tree.tokens[i] for i in accepted[1:]] + [bonus], features)

    def tree_record(self, tree: Tree, accepted: list[int], bonus: int, budget: int, start: int, times: dict,
                    record_trees: bool = False) -> RoundRecord:
        """The round's record (built by keyword), handed to the loop's observers (e.g. Figure 1's parent-child
        mismatch, `graftlib.lab.run.bench.record_mismatch`) with the round's tree, path and bonus."""
        last = accepted[-1]
        record = RoundRecord(accepted=len(accepted), budget=budget, nodes=tree.num_nodes, prefix_len=start,
                             last_depth=tree.depths[last], censored=is_leaf(tree.parents, last), **times)
        if record_trees:
            record.tree = {"tokens": tree.tokens, "parents": tree.parents, "depths": tree.depths, "scores": tree.scores}
            record.accepted_nodes = accepted
        for observe in self.observers:
            observe(record, tree, accepted, bonus)
        return record

    def ar_round(self, st: "SpecState", timer: StageTimer) -> "RoundOutcome":
        """Budget 0: the root through the target at position `start` (causal, no mask), its verdict
        (argmax, or a draw at T > 0) is the round's token; restorable by the same crop as `tree_round`.
        Its stages: the gate and budget choice (tree), the forward (verify), the features (commit)."""
        timer.mark("verify_inputs")
        out = target_forward(self.target, torch.tensor([[st.root]], device=self.device),
                             torch.tensor([[st.start]], device=self.device), st.cache, None, True)
        nxt = self.verdict(out.hidden, st.gen)[0]
        timer.mark("walk")
        features = self.drafter.context_features(out.hidden_states)  # [1, 1, F]
        timer.mark("commit")
        record = RoundRecord(accepted=1, budget=0, nodes=0, prefix_len=st.start, **timer.take())
        return RoundOutcome(record, [nxt], features)

    def _speculate(self, result: DecodeResult, st: "SpecState", max_new_tokens: int, record_trees: bool,
                   stop_at_eos: bool, timer: StageTimer, eos: bool):
        self.controller.reset()  # a Decoder may decode many prompts: no history crosses between them
        timer.mark("prefill")  # the prompt's drafter context and start state: before the first round, untimed
        while not eos and len(result.tokens) < max_new_tokens:
            # gate + draft (the budget choice is timed with the tree)
            cand, budget = None, 0
            go = self.controller.speculate(st.start)
            timer.mark("gate")
            if go:
                cand = self.draft(st, self.pool)
                timer.mark("candidates")
                budget = self.controller.budget(cand, st.start)
                timer.mark("budget")
            # build tree .. commit (budget 0: one AR step)
            step = self.tree_round(st, cand, budget, timer, record_trees)
            # update
            eos = self.advance(result, st, step, max_new_tokens, stop_at_eos)
            timer.mark("update")
        result.stop = "eos" if eos else "length"

    def advance(self, result: DecodeResult, st: "SpecState", step: "RoundOutcome", max_new_tokens: int,
                stop_at_eos: bool) -> bool:
        """Step `update`: record + feedback hooks, move `st` past the round, emit tokens; True at EOS."""
        result.rounds.append(step.record)
        record = dict(vars(step.record))  # a shallow copy: hooks read it
        self.controller.feedback(record)
        if self.builder is not self.controller:  # a rule that is both (a stop, a predictor) hears each round once
            self.builder.feedback(record)
        st.start += step.record.accepted
        # [1, pending + a, F]: after a draft nothing is pending; after AR steps their features are
        st.features = torch.cat([st.features, step.features], dim=1) if st.features.shape[1] else step.features
        st.root = step.new[-1]
        for tok in step.new:
            if len(result.tokens) >= max_new_tokens:
                break
            result.tokens.append(tok)
            if stop_at_eos and tok in self.eos_ids:
                return True
        return False


@dataclass
class SpecState:
    """What a round starts from: target cache (`start` positions), drafter cache, pending features."""

    cache: object
    draft_cache: object  # the drafter's context cache (`Drafter.new_cache`)
    features: torch.Tensor  # [1, n, F] target features not yet seen by the drafter
    start: int  # tokens in the target cache; the root sits at position `start`
    root: int  # the previous round's bonus token (not yet in the target cache)
    gen: torch.Generator | None = None  # the decode's generator at T > 0 (None: greedy)
    timer: StageTimer | None = None  # the decode's timer (the draft step's split, `graftlib.core.timing`)
    masks: MaskBuffer | None = None  # the decode's verify mask, rewritten in place each round (`tree.MaskBuffer`)


@dataclass
class RoundOutcome:
    record: RoundRecord
    new: list[int]  # accepted draft tokens + the bonus token
    features: torch.Tensor  # [1, a, F] target features of the accepted nodes (next draft's context)

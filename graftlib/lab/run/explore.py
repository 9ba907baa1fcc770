"""Look at single rounds: one decode with everything a round decided kept, for the explore_rounds notebook.

`explore` replays one prompt with a tree method (same-prefix replay, `graftlib.training.graft.replay`): the
reference trajectory is the method's own decode (at T = 0 the same tokens as AR), every round is also
run at each budget of `grid` from the same prefix, cache and drafter output (the oracle), and the
round keeps its tree, its candidates and, for SABA's methods, its state s_t. `compare_tree` builds
another builder's tree from the same candidates at the same budget and walks it along the target's
own continuation (the committed tokens that follow the round: at T = 0 the walk the target would
make), so two methods' trees of one round sit side by side without another target forward.
`saba_curves` evaluates SABA's G_t(B), C_t(B) and U_t(B) over a grid for a kept state.

An AR-drafted method (EAGLE-3, OPT-Tree) is decoded once with its trees kept: its tree grows with its own
drafter, so it has no DFlash draft to replay or to build another method's tree from.

Invariants: the reference rounds are exactly the decode's (the replay restores the cache after
every grid budget); a round's candidates are the ones its tree was built from.
"""

from dataclasses import dataclass, field
from types import SimpleNamespace

from graftlib.core.builders import Candidates
from graftlib.core.errors import require
from graftlib.core.sampling import GREEDY, Sampling
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import AR_METHODS, MethodInputs
from graftlib.methods.saba import BudgetGrid, SabaController
from graftlib.methods.saba_params import SabaParams
from graftlib.training.graft.replay import ReplayDecoder, ReplaySpec, oracle_rows, replay_decoder


@dataclass
class Exploration:
    """One explored decode: its rounds (with trees), their candidates, SABA states and oracle rows."""

    tokens: list[int]  # the decode's tokens (the first from the prefill)
    rounds: list  # RoundRecord, with tree / accepted_nodes / target_next
    candidates: list[Candidates | None]  # per round (None: an AR step)
    states: list[list[float] | None]  # SABA's s_t per round (None: no SABA, or an AR step)
    oracle: list[dict]  # `oracle_rows` of the replay: per round the grid's TPS, B*_t and retained throughput
    starts: list[int] = field(default_factory=list)  # index in `tokens` of each round's root token
    tps: list[dict[int, float]] = field(default_factory=list)  # per round, measured a_t(B) / l_t(B) per grid budget

    def continuation(self, t: int) -> list[int]:
        """The committed tokens after round t's root (what the target emitted from there on)."""
        return self.tokens[self.starts[t] + 1:]


class _Keeping(ReplayDecoder):
    """A replay decoder that keeps each reference round's candidates (the replay drafts every round, even
    one a gate runs as an AR step) and SABA's state s_t of each drafted round."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept: list[Candidates] = []
        self.states: list[list[float] | None] = []

    def draft(self, st, k):
        cand = super().draft(st, k)
        self.kept.append(cand)
        return cand

    def advance(self, result, st, step, max_new_tokens, stop_at_eos):
        saba = isinstance(self.controller, SabaController) and step.record.budget > 0
        self.states.append(list(self.controller.last_state) if saba else None)
        return super().advance(result, st, step, max_new_tokens, stop_at_eos)


def explore(pair, prompt_ids: list[int], method: str = "graft", budget: int = 64, grid=(1, 2, 4, 8, 16, 32, 64),
            max_new_tokens: int = 64, params: SabaParams | None = None, sampling: Sampling = GREEDY) -> Exploration:
    """Replay `prompt_ids` with `method` (capped at `budget`) over `grid`, keeping every round. An AR-drafted
    method (EAGLE-3, OPT-Tree: the tree grows with its own drafter, so no DFlash draft can be replayed or
    rebuilt) is decoded once with its trees kept, without candidates, states or oracle."""
    if method in AR_METHODS:
        dec = Decoder.for_method(pair.target, pair.eagle3_drafter(), method, budget, eos_ids=pair.eos_ids,
                                 sampling=sampling)
        res = dec.decode(prompt_ids, max_new_tokens, record_trees=True)
        n = len(res.rounds)
        none = [None] * n
        return Exploration(res.tokens, res.rounds, none, list(none), [{"best_budget": None, "retained": None}] * n,
                           _starts(res.rounds), [{} for _ in range(n)])
    dec = replay_decoder(pair.target, pair.drafter, method, budget, ReplaySpec(tuple(grid), sampling=sampling),
                         MethodInputs(saba=params), eos_ids=pair.eos_ids, cls=_Keeping)
    res = dec.replay(prompt_ids, max_new_tokens, record_trees=True)
    rounds = res.decode.rounds
    require(len(dec.kept) == len(rounds) == len(dec.states), "explore: one draft and one state per round")
    starts = _starts(rounds)
    cands = [c if r.budget > 0 else None for c, r in zip(dec.kept, rounds)]
    tps: list[dict[int, float]] = [{} for _ in rounds]
    for rec in res.records:
        if not rec.reference:
            tps[rec.round][rec.budget] = rec.tps
    return Exploration(res.decode.tokens, rounds, cands, dec.states, oracle_rows(res.records), starts, tps)


def _starts(rounds) -> list[int]:
    """Index in the decode's tokens of each round's root token."""
    starts, pos = [], 0
    for r in rounds:
        starts.append(pos)
        pos += r.accepted
    return starts


def compare_tree(ex: Exploration, t: int, builder, budget: int | None = None) -> SimpleNamespace:
    """Round t's tree by another `builder` (a `TreeBuilder`) from the same candidates, at round t's own
    budget unless given, walked along the target's continuation: a record `draw_tree` / `tree_lines` read."""
    rec, cand = ex.rounds[t], ex.candidates[t]
    require(cand is not None, f"round {t} is an AR step: it drafted nothing to build a tree from")
    budget = budget or rec.budget
    tree = builder.build(rec.tree["tokens"][0], cand, budget)
    follow = ex.continuation(t)
    children = {(p, tok): n for n, (p, tok) in enumerate(zip(tree.parents, tree.tokens)) if n}
    path = [0]
    for tok in follow:
        nxt = children.get((path[-1], tok))
        if nxt is None:
            break
        path.append(nxt)
    bonus = follow[len(path) - 1] if len(path) - 1 < len(follow) else None
    target_next = [bonus if n == path[-1] else None for n in range(len(tree.tokens))]
    return SimpleNamespace(tree={"tokens": tree.tokens, "parents": tree.parents, "depths": tree.depths,
                                 "scores": tree.scores},
                           accepted_nodes=path, target_next=target_next if bonus is not None else None,
                           budget=budget, nodes=tree.num_nodes, accepted=len(path))


def saba_curves(params: SabaParams, state: list[float], prefix_len: int, depth: int, grid) -> dict[str, list[float]]:
    """SABA's terms over `grid` for state s_t: E[a_t(B)] (gain side), C_t(B) in ms, U_t(B) in tokens/s."""
    ev = BudgetGrid(params, list(grid))
    extra, _ = ev.extras(state, depth)
    costs = [c0 + prefix_len * dc for c0, dc in zip(ev.cost0, ev.slope)]
    expected = [1.0 + e for e in extra]
    return {"B": [int(b) for b in ev.budgets], "expected_tokens": expected, "cost_ms": [1e3 * c for c in costs],
            "utility": [a / c for a, c in zip(expected, costs)]}


def plot_round(ex: Exploration, t: int, decode, other_builder, params: SabaParams, depth: int,
               labels: tuple[str, str] = ("GRAFT", "DDTree")):
    """Round t in three panels: its tree beside `other_builder`'s from the same candidates (each marking
    what the other lacks, `lab.tree_view.draw_tree`), and SABA's U_t(B) (model) beside the replay's
    measured a_t(B) / l_t(B), with the chosen budget and the oracle's."""
    import matplotlib
    import matplotlib.pyplot as plt

    from graftlib.lab.report.tree_view import draw_tree

    rec = ex.rounds[t]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    if ex.candidates[t] is None and rec.tree is not None:  # an AR-drafted method's tree: nothing to compare it with
        draw_tree(axes[0], rec, decode, title=f"{labels[0]}: {rec.nodes} nodes, accepted {rec.accepted}")
        axes[1].set_axis_off()
        axes[1].text(0.5, 0.5, f"{labels[0]} grows its tree with its own drafter:\nno DFlash draft to build "
                     f"{labels[1]}'s from", ha="center", va="center", transform=axes[1].transAxes, fontsize=8)
    elif ex.candidates[t] is None:
        for ax in axes[:2]:
            ax.set_axis_off()
        axes[0].text(0.5, 0.5, f"round {t}: an AR step (SABA's gate)", ha="center", transform=axes[0].transAxes)
    else:
        other = compare_tree(ex, t, other_builder)
        draw_tree(axes[0], rec, decode, other=other.tree,
                  title=f"{labels[0]}: B={rec.budget}, accepted {rec.accepted}")
        draw_tree(axes[1], other, decode, other=rec.tree,
                  title=f"{labels[1]} at the same budget, same draft: accepted {other.accepted}")
    ax = axes[2]
    measured = ex.tps[t]
    if measured:
        budgets = sorted(measured)
        ax.plot(budgets, [measured[b] for b in budgets], "s--", color="gray", label="measured a_t(B) / l_t(B) (replay)")
        best = ex.oracle[t]["best_budget"]
        if best in measured:
            ax.plot([best], [measured[best]], "*", ms=14, color="gold", mec="black", label=f"oracle B* = {best}")
    handles = []
    if ex.states[t] is not None:  # the model's own scale (its calibration's costs): an axis of its own, on the right
        grid = [b for b in params.grid if b <= max(measured or [rec.budget])] or [rec.budget]
        curves = saba_curves(params, ex.states[t], rec.prefix_len, depth, grid)
        model = ax.twinx()
        handles += model.plot(curves["B"], curves["utility"], "o-", color="tab:blue",
                              label="SABA's U_t(B) (model, eq. 14; right axis)")
        model.set_ylabel("U_t(B): expected tokens / modeled s", color="tab:blue")
        model.tick_params(axis="y", colors="tab:blue")
    ax.axvline(rec.budget, color="tab:green", ls=":", label=f"chosen B_t = {rec.budget}")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(measured or []) | {rec.budget}) or [rec.budget]
    # plain numbers, no mathtext ("2^{1}"): the panel is redrawn on every slider move, and one failed mathtext parse
    # anywhere in the kernel leaves matplotlib's shared parser cache stale for every later one
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("budget B (nodes)")
    ax.set_ylabel("measured tokens / s (replay; left axis)")
    own, labels = ax.get_legend_handles_labels()
    ax.legend(own + handles, labels + [h.get_label() for h in handles], fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.18), ncol=2)
    fig.tight_layout()
    return fig

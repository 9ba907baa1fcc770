"""Target traces of DDTree rounds (TDES training data) and the parent-child mismatch metric.

A round (`TraceRound`): the verified tree (node 0 = root), the target's argmax at every node (`target_next`),
the accepted path, the round's candidate pools C_d (`cand_ids`, `cand_logq` = log q_{t,d}) and, for verified
nodes above depth D, the target logits over the next depth's pool (`child_logits`, `logit_nodes`).

Collected (`collect_traces`) without a hook in the decode loop: `CandidateTap` wraps the round's builder
to keep each pool, and the collector replays the target's verify passes (prefill, then each recorded tree
with its mask and commit), whose argmax must equal `target_next` (`replay_disagree`, expected 0).

Mismatch metric (defined here once, pure functions over a round). Let p* be the last accepted
node, d* its depth, t* = target_next[p*] the target's next token (the bonus). The round *could
have continued* iff d* < D. It is a *mismatch* iff t* is in the tree at depth d* + 1 under a
parent other than p*; a *loose mismatch* iff t* is in the depth-(d* + 1) candidate pool but not a
child of p*. Rates divide by the rounds that could have continued.

On disk (`out/`): `index.json` (shared settings, the pair and hardware, one entry per finished shard) and
`shard-NNNNN.safetensors` (the rounds of a range of the pool's prompts, back to back). Re-running skips
finished shards; an index written with other settings is refused.

Details: docs/internals.md, `graftlib.training.graft.traces`.
"""

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from graftlib.core.builders import Candidates, FixedBudget, HeapTreeBuilder, TreeBuilder
from graftlib.core.errors import require
from graftlib.core.hardware import hardware_id
from graftlib.core.kvcache import target_cache
from graftlib.core.records import read_json_index, write_json_atomic
from graftlib.core.tree import Tree, parent_mismatch, verify_inputs
from graftlib.core.verify import commit_cache, target_forward
from graftlib.models.strength import TaskStrengths, drafting_along
from graftlib.models.target import DTYPES

INDEX = "index.json"
FORMAT = 1
LOGIT_ROWS = ("all", "accepted")
SHARED_KEYS = ("target", "drafter", "drafter_id", "pool", "budget", "max_new_tokens", "max_prompt_tokens",
               "shard_size", "child_logits")  # and "strength" (the strength file's id) for a construction's traces
PROVENANCE_KEYS = ("pair", "hardware")  # stored when the index is made, passed on to the scorer (not compared)


# ----------------------------------------------------------------------------- rounds + metric


@dataclass
class TraceRound:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    target_next: list[int]  # target argmax at every node
    accepted_nodes: list[int]  # root path, root first
    cand_ids: torch.Tensor | None = None  # int64 [D, K] candidate pool C_d per depth d = 1..D
    cand_logq: torch.Tensor | None = None  # float32 [D, K] log q_{t,d}
    logit_nodes: list[int] = field(default_factory=list)  # nodes with a child_logits row
    child_logits: torch.Tensor | None = None  # [len(logit_nodes), K] target logits over C_{depth+1}
    prompt: int = -1
    prefix_len: int = 0

    def __post_init__(self):
        if self.cand_ids is not None:
            self.cand_ids = torch.as_tensor(self.cand_ids, dtype=torch.long)
            self.cand_logq = torch.as_tensor(self.cand_logq, dtype=torch.float32)

    @property
    def last(self) -> int:
        """p*: the last accepted node."""
        return self.accepted_nodes[-1]

    @property
    def bonus(self) -> int:
        """t*: the target's next token after the accepted path."""
        return self.target_next[self.last]

    @property
    def max_depth(self) -> int | None:
        return None if self.cand_ids is None else int(self.cand_ids.shape[0])


def _depth_limit(r: TraceRound, max_depth: int | None) -> int:
    d = max_depth if max_depth is not None else r.max_depth
    require(d is not None, "the round has no candidate pools: pass max_depth (the drafter's D)")
    return d


def could_continue(r: TraceRound, max_depth: int | None = None) -> bool:
    """d* < D: the drafter offered tokens beyond the last accepted node."""
    return r.depths[r.last] < _depth_limit(r, max_depth)


def is_mismatch(r: TraceRound, max_depth: int | None = None) -> bool:
    """t* is in the tree at depth d* + 1, but under a parent other than p*."""
    if not could_continue(r, max_depth):
        return False
    return parent_mismatch(r.tokens, r.parents, r.depths, r.last, r.bonus)


def is_loose_mismatch(r: TraceRound, max_depth: int | None = None) -> bool:
    """t* is in the depth-(d* + 1) candidate pool, but not a child of p*."""
    if not could_continue(r, max_depth):
        return False
    require(r.cand_ids is not None, "the loose mismatch needs the round's candidate pools")
    p, t = r.last, r.bonus
    in_pool = bool((r.cand_ids[r.depths[p]] == t).any())
    child_of_p = any(r.parents[n] == p and r.tokens[n] == t for n in range(1, len(r.tokens)))
    return in_pool and not child_of_p


def mismatch_stats(rounds: list[TraceRound], max_depth: int | None = None, loose: bool = True) -> dict:
    """Counts and rates of (loose) mismatch rounds among the rounds that could have continued."""
    eligible = [r for r in rounds if could_continue(r, max_depth)]
    n = len(eligible)
    out = {"rounds": len(rounds), "eligible": n, "mismatch": sum(is_mismatch(r, max_depth) for r in eligible),
           "mat": sum(len(r.accepted_nodes) for r in rounds) / max(len(rounds), 1)}
    out["rate"] = out["mismatch"] / n if n else 0.0
    if loose:
        out["loose_mismatch"] = sum(is_loose_mismatch(r, max_depth) for r in eligible)
        out["loose_rate"] = out["loose_mismatch"] / n if n else 0.0
    return out


# ----------------------------------------------------------------------------- collection


class CandidateTap:
    """A `TreeBuilder` wrapper that keeps every round's candidate pools (ids, log q) in order."""

    def __init__(self, inner: TreeBuilder):
        self.inner = inner
        self.name = inner.name
        self.pools: list[Candidates] = []

    def build(self, root_token: int, cand: Candidates, budget: int) -> Tree:
        self.pools.append(Candidates(cand.ids, cand.logq, cand.top1_prob))
        return self.inner.build(root_token, cand, budget)

    def feedback(self, record: dict) -> None:
        self.inner.feedback(record)


@torch.inference_mode()
def replay_hidden(target, prompt_ids: list[int], records: list, max_new_tokens: int, tree_room: int):
    """Yield each round's verify hidden states [N+1, H] by replaying the recorded trees and commits."""
    device = target.device
    cache = target_cache(target.config, len(prompt_ids) + max_new_tokens + tree_room,
                         shared=True)  # as the decode loop's
    ids = torch.tensor([prompt_ids], device=device)
    target_forward(target, ids, torch.arange(len(prompt_ids), device=device)[None], cache)
    start = len(prompt_ids)
    for rec in records:
        assert rec.prefix_len == start, (rec.prefix_len, start)
        tree = Tree(rec.tree["tokens"], rec.tree["parents"], rec.tree["depths"])
        vi = verify_inputs(tree, start, device, target.lm_head.weight.dtype)
        out = target_forward(target, vi.input_ids, vi.position_ids, cache, vi.attention_mask)
        yield out.hidden
        commit_cache(cache, start, rec.accepted_nodes)
        start += len(rec.accepted_nodes)


def child_logit_rows(hidden: torch.Tensor, lm_head: torch.Tensor, depths: list[int], nodes: list[int],
                     cand_ids: torch.Tensor) -> torch.Tensor:
    """z[j, k] = lm_head[cand_ids[depth(n_j), k]] . hidden[n_j] for nodes n_j at depth < D -> float32 [n, K]."""
    if not nodes:
        return torch.zeros(0, cand_ids.shape[1])
    idx = torch.tensor(nodes, device=hidden.device)
    rows = cand_ids.to(hidden.device)[torch.tensor([depths[n] for n in nodes], device=hidden.device)]  # [n, K]
    w = lm_head[rows]  # [n, K, H]
    return torch.einsum("nkh,nh->nk", w.float(), hidden[idx].float()).cpu()


@torch.no_grad()
def rounds_of_decode(target, prompt_ids: list[int], result, pools: list[Candidates], max_new_tokens: int,
                     tree_room: int, child_logits: str = "all") -> tuple[list[TraceRound], int]:
    """TraceRounds of one decode (records with trees + the tapped pools); also the replay disagreements."""
    assert len(pools) == len(result.rounds), (len(pools), len(result.rounds))
    out, disagree = [], 0
    lm_head = target.lm_head.weight
    hiddens = replay_hidden(target, prompt_ids, result.rounds, max_new_tokens, tree_room)
    for rec, cand, hidden in zip(result.rounds, pools, hiddens):
        replayed = (hidden @ lm_head.T).argmax(-1).tolist()  # as LazyArgmax.all_rows, same dtype
        disagree += sum(a != b for a, b in zip(replayed, rec.target_next))
        D = cand.depth
        depths = rec.tree["depths"]
        pick = range(len(depths)) if child_logits == "all" else rec.accepted_nodes
        nodes = [n for n in pick if depths[n] < D]
        ids = torch.tensor(cand.ids, dtype=torch.long)
        z = child_logit_rows(hidden, lm_head, depths, nodes, ids)
        out.append(TraceRound(list(rec.tree["tokens"]), list(rec.tree["parents"]), list(depths),
                              list(rec.target_next), list(rec.accepted_nodes), ids, torch.tensor(cand.logq),
                              nodes, z, prefix_len=rec.prefix_len))
    return out, disagree


def collect_prompt(target, drafter, prompt_ids: list[int], budget: int, max_new_tokens: int,
                   eos_ids: list[int] | None = None, child_logits: str = "all") -> tuple[list[TraceRound], dict]:
    """One DDTree decode with trees recorded and target logits replayed -> (rounds, stats)."""
    from graftlib.methods.decoder import Decoder

    require(child_logits in LOGIT_ROWS, f"child_logits must be one of {LOGIT_ROWS}, got {child_logits!r}")
    tap = CandidateTap(HeapTreeBuilder())
    decoder = Decoder(target, drafter, tap, FixedBudget(budget), eos_ids)
    res = decoder.decode(prompt_ids, max_new_tokens, record_trees=True)
    rounds, disagree = rounds_of_decode(target, prompt_ids, res, tap.pools, max_new_tokens, budget + 1,
                                        child_logits)
    return rounds, {"new_tokens": len(res.tokens), "rounds": len(rounds), "replay_disagree": disagree,
                    "stop": res.stop}


@dataclass
class TraceConfig:
    """What `graft traces` collects: `n` prompts of `pool` decoded by DDTree at `budget` for `max_new_tokens`, in
    shards of `shard_size` prompts, with the target's logits of `child_logits` rows (`LOGIT_ROWS`), for at most
    `max_minutes` (then a re-run continues)."""

    target: str = "smollm2-135m"
    drafter: str = "embedded"
    pool: str = "tdes"
    n: int = 256
    budget: int = 64
    max_new_tokens: int = 256
    max_prompt_tokens: int = 1024
    shard_size: int = 16
    child_logits: str = "all"
    max_minutes: float | None = None
    dtype: str | None = None  # float32 / bfloat16 / float16; None: the device's
    strength: str | None = None  # a drafter-strength file: each prompt drafted at its task's strength (a construction)


def collect_traces(pair, prompts: list[list[int]], out: str | Path, cfg: TraceConfig, *, settings: dict | None = None,
                   uids: list[str] | None = None, before_prompt=None, log=print) -> dict:
    """Collect (or resume) DDTree traces of `prompts` (token ids) into shards under `out` as `cfg` says (its
    budget, new tokens, shard size, logit rows and time limit; `pair`: its target, drafter and eos ids); returns
    the index.

    `settings` (target/drafter names, pool, max_prompt_tokens) is stored in the index and must match
    on resume, together with budget, max_new_tokens, shard_size and child_logits. `before_prompt(i, ids)`, when
    given, runs before prompt i decodes (a drafter-strength construction follows its continuation there).
    """
    from tqdm import tqdm

    target, drafter, eos_ids = pair.target, pair.drafter, pair.eos_ids
    budget, max_new_tokens, shard_size, child_logits = cfg.budget, cfg.max_new_tokens, cfg.shard_size, cfg.child_logits
    max_minutes = cfg.max_minutes

    require(budget >= 1, f"budget must be >= 1, got {budget}")
    require(shard_size >= 1, f"shard_size must be >= 1, got {shard_size}")
    require(child_logits in LOGIT_ROWS, f"child_logits must be one of {LOGIT_ROWS}, got {child_logits!r}")
    out = Path(out)
    shared = {"target": "?", "drafter": "?", "drafter_id": "?", "pool": "?", "max_prompt_tokens": None,
              **(settings or {}),
              "budget": budget, "max_new_tokens": max_new_tokens, "shard_size": shard_size,
              "child_logits": child_logits}
    keys = SHARED_KEYS + (("strength",) if "strength" in shared else ())
    index = open_index(out, {k: shared[k] for k in keys}, {k: shared[k] for k in PROVENANCE_KEYS if k in shared})
    done = {s["file"]: s for s in index["shards"]}
    plan = []
    for first in range(0, len(prompts), shard_size):
        count = min(shard_size, len(prompts) - first)
        name = f"shard-{first // shard_size:05d}.safetensors"
        entry = done.get(name)
        if entry is None or entry["count"] < count or not (out / name).is_file():
            plan.append((name, first, count))
    log(f"traces in {out}: {len(index['shards'])} shards done, {len(plan)} to make ({len(prompts)} prompts, "
        f"budget {budget}, {max_new_tokens} new tokens)")
    t_start = time.perf_counter()
    bar = tqdm(total=sum(c for _, _, c in plan), unit="prompt", dynamic_ncols=True)
    for name, first, count in plan:
        if max_minutes is not None and time.perf_counter() - t_start > 60 * max_minutes:
            log(f"time budget of {max_minutes} min reached; re-run to continue")
            break
        t0 = time.perf_counter()
        rounds, stats = [], []
        for i in range(first, first + count):
            if before_prompt is not None:
                before_prompt(i, prompts[i])
            rs, st = collect_prompt(target, drafter, prompts[i], budget, max_new_tokens, eos_ids, child_logits)
            for r in rs:
                r.prompt = i
            rounds += rs
            stats.append(st)
            bar.update(1)
        write_shard(out / name, rounds)
        mm = mismatch_stats(rounds) if rounds else {}
        entry = {"file": name, "first": first, "count": count, "rounds": len(rounds),
                 "new_tokens": sum(s["new_tokens"] for s in stats),
                 "replay_disagree": sum(s["replay_disagree"] for s in stats),
                 "mat": round(mm.get("mat", 0.0), 4), "eligible": mm.get("eligible", 0),
                 "mismatch": mm.get("mismatch", 0), "loose_mismatch": mm.get("loose_mismatch", 0),
                 "seconds": round(time.perf_counter() - t0, 2)}
        if uids is not None:
            entry["uids"] = uids[first:first + count]
        if rounds:
            entry["depth"], entry["k"] = (int(x) for x in rounds[0].cand_ids.shape)
        index["shards"] = [s for s in index["shards"] if s["file"] != name] + [entry]
        write_index(out, index)
        bar.write(f"{name}: {count} prompts, {len(rounds)} rounds, MAT {entry['mat']:.2f}, "
                  f"mismatch {entry['mismatch']}/{entry['eligible']}, loose {entry['loose_mismatch']}")
    bar.close()
    return index


# ----------------------------------------------------------------------------- storage


def _i32(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int32)


def write_shard(path: Path, rounds: list[TraceRound]) -> None:
    require(all(r.cand_ids is not None for r in rounds), "every stored round needs its candidate pools")
    if rounds:
        cand_ids = torch.stack([r.cand_ids for r in rounds]).to(torch.int32)
        cand_logq = torch.stack([r.cand_logq for r in rounds]).float()
        logits = torch.cat([r.child_logits for r in rounds]).to(torch.float16)
    else:
        cand_ids, cand_logq, logits = torch.zeros(0, 0, 0, dtype=torch.int32), torch.zeros(0, 0, 0), torch.zeros(0, 0)
    tensors = {
        "round_prompt": _i32([r.prompt for r in rounds]),
        "prefix_len": _i32([r.prefix_len for r in rounds]),
        "n_nodes": _i32([len(r.tokens) for r in rounds]),
        "n_accepted": _i32([len(r.accepted_nodes) for r in rounds]),
        "n_rows": _i32([len(r.logit_nodes) for r in rounds]),
        "tokens": _i32([t for r in rounds for t in r.tokens]),
        "parents": _i32([t for r in rounds for t in r.parents]),
        "depths": _i32([t for r in rounds for t in r.depths]),
        "target_next": _i32([t for r in rounds for t in r.target_next]),
        "accepted_nodes": _i32([t for r in rounds for t in r.accepted_nodes]),
        "logit_nodes": _i32([t for r in rounds for t in r.logit_nodes]),
        "cand_ids": cand_ids.contiguous(),
        "cand_logq": cand_logq.contiguous(),
        "child_logits": logits.contiguous(),
    }
    tmp = path.with_name(path.name + ".partial")
    save_file(tensors, tmp, metadata={"format": str(FORMAT)})
    tmp.replace(path)


def read_shard(path: Path) -> list[TraceRound]:
    t = load_file(path)
    cols = {k: t[k].tolist() for k in ("tokens", "parents", "depths", "target_next", "accepted_nodes",
                                        "logit_nodes")}
    n_nodes, n_acc, n_rows = t["n_nodes"].tolist(), t["n_accepted"].tolist(), t["n_rows"].tolist()
    out, o_node, o_acc, o_row = [], 0, 0, 0
    for i, (n, a, k) in enumerate(zip(n_nodes, n_acc, n_rows)):
        out.append(TraceRound(
            cols["tokens"][o_node:o_node + n], cols["parents"][o_node:o_node + n], cols["depths"][o_node:o_node + n],
            cols["target_next"][o_node:o_node + n], cols["accepted_nodes"][o_acc:o_acc + a],
            t["cand_ids"][i].long(), t["cand_logq"][i], cols["logit_nodes"][o_row:o_row + k],
            t["child_logits"][o_row:o_row + k], int(t["round_prompt"][i]), int(t["prefix_len"][i])))
        o_node, o_acc, o_row = o_node + n, o_acc + a, o_row + k
    require(o_node == len(cols["tokens"]) and o_row == len(cols["logit_nodes"]), f"trace shard {path} is inconsistent")
    return out


def read_index(out: Path) -> dict | None:
    return read_json_index(Path(out) / INDEX, FORMAT, "trace")


def write_index(out: Path, index: dict) -> None:
    write_json_atomic(Path(out) / INDEX, index)


def open_index(out: Path, shared: dict, provenance: dict | None = None) -> dict:
    """The directory's index, created on first use (with `provenance`: the pair's identity and the
    hardware, which `graft train-tdes` passes on to the scorer); refuses one written with other settings."""
    index = read_index(out)
    if index is None:
        out.mkdir(parents=True, exist_ok=True)
        index = {"format": FORMAT, **shared, **(provenance or {}), "shards": []}
        write_index(out, index)
        return index
    diff = [f"{k} {index.get(k)!r} (asked {shared[k]!r})" for k in SHARED_KEYS if index.get(k) != shared[k]]
    require(not diff, f"traces in {out} were made with other settings: {'; '.join(diff)}; use another --out")
    return index


def load_traces(out: str | Path, tasks: list[str] | None = None) -> tuple[dict, list[TraceRound]]:
    """All finished shards of a trace directory, in prompt order; `tasks` keeps the rounds of those
    tasks' prompts only (by the prompt uids `task/...` the index records)."""
    out = Path(out)
    index = read_index(out)
    require(index is not None and index["shards"], f"no traces in {out}: run `graft traces --out {out}`")
    rounds = []
    for shard in sorted(index["shards"], key=lambda s: s["first"]):
        part = read_shard(out / shard["file"])
        if tasks is not None:
            uids = shard.get("uids")
            require(uids is not None, f"traces in {out} do not record prompt uids: cannot filter by task")
            part = [r for r in part if uids[r.prompt - shard["first"]].split("/")[0] in tasks]
        rounds += part
    require(rounds, f"no trace rounds in {out}" + (f" for tasks {tasks}" if tasks else ""))
    return index, rounds


# ----------------------------------------------------------------------------- CLI


def make_traces(out: str | Path, cfg: TraceConfig, device: str | None = None, pair=None) -> dict:
    """Load the pair (unless given) and the pool, then collect (or resume) traces in `out`. The index
    names the drafter's weights (`drafter_id`): traces of a retrained drafter never resume old ones."""
    from graftlib.data.prompts import format_prompt, pool
    from graftlib.models.pair import load_pair

    require(cfg.n >= 1, f"n must be >= 1, got {cfg.n}")
    items = pool(cfg.pool, limit=cfg.n)
    pair = pair or load_pair(cfg.target, cfg.drafter, device, dtype=cfg.dtype)
    if not pair.drafter_trained:
        print("warning: the drafter is untrained; traces of an untrained drafter teach TDES little")
    prompts = [format_prompt(item, pair.tokenizer, cfg.max_prompt_tokens).input_ids for item in items]
    settings = {"target": cfg.target, "drafter": cfg.drafter, "drafter_id": pair.describe()["drafter_id"],
                "pool": cfg.pool, "max_prompt_tokens": cfg.max_prompt_tokens,
                "pair": pair.identity().to_dict(), "hardware": hardware_id(pair.device, pair.target.dtype)}
    drafter, before = pair.drafter, None
    if cfg.strength:  # the verified decodes draft along greedy AR's tokens, each prompt at its task's strength
        strengths = TaskStrengths(cfg.strength)
        drafter, before = drafting_along(pair.target, pair.drafter, strengths, [i.task for i in items],
                                         cfg.max_new_tokens + 2 * pair.drafter.block_size, pair.eos_ids)
        settings["strength"] = strengths.id
    return collect_traces(replace(pair, drafter=drafter), prompts, out, cfg, settings=settings,
                          uids=[i.uid for i in items], before_prompt=before)


def _main(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TraceConfig(target=args.target, drafter=args.drafter, pool=args.pool, n=args.n, budget=args.budget,
                      max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                      shard_size=args.shard_size, child_logits=args.child_logits, max_minutes=args.max_minutes,
                      dtype=args.dtype, strength=args.strength)
    index = make_traces(args.out, cfg, args.device)
    shards = index["shards"]
    tot = {k: sum(s[k] for s in shards) for k in ("rounds", "eligible", "mismatch", "loose_mismatch",
                                                   "replay_disagree")}
    el = max(tot["eligible"], 1)
    print(f"traces: {tot['rounds']} rounds in {len(shards)} shards ({args.out}); mismatch rate "
          f"{tot['mismatch'] / el:.3f}, loose {tot['loose_mismatch'] / el:.3f}; replay disagreements "
          f"{tot['replay_disagree']}")
    return 0


def add_parser(subparsers) -> None:
    d = TraceConfig()
    p = subparsers.add_parser("traces", help="collect DDTree target traces for TDES training",
                              description="DDTree decodes of training-pool prompts with trees, candidate pools "
                                          "and target logits over the next depth's candidates; resumable shards.")
    p.add_argument("--out", required=True, help="trace directory (re-running skips finished shards)")
    p.add_argument("--pool", default=d.pool, help=f"prompt pool: tdes or tdes-gsm8k (default {d.pool})")
    p.add_argument("--n", type=int, default=d.n, help=f"prompts (default {d.n})")
    p.add_argument("--budget", type=int, default=d.budget, help=f"DDTree nodes per round (default {d.budget})")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help=f"default {d.max_new_tokens}")
    p.add_argument("--max-prompt-tokens", type=int, default=d.max_prompt_tokens,
                   help=f"cut longer questions (default {d.max_prompt_tokens})")
    p.add_argument("--shard-size", type=int, default=d.shard_size, help=f"prompts per shard (default {d.shard_size})")
    p.add_argument("--child-logits", default=d.child_logits, choices=LOGIT_ROWS,
                   help="target logits over the next depth's pool for every verified node or accepted ones only")
    p.add_argument("--target", default=d.target, help=f"target model (default {d.target})")
    p.add_argument("--drafter", default=d.drafter, help="'embedded' or a DFlash checkpoint directory")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=list(DTYPES),
                   help="the pair's dtype (default: float32 on a CPU, bfloat16 on CUDA)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--max-minutes", type=float, default=None, help="start no new shard after this many minutes")
    p.add_argument("--strength", default=None, help="a drafter-strength file (graft calibrate-strength): each prompt "
                   "drafted at its task's calibrated strength, a construction (graftlib.models.strength)")
    p.set_defaults(func=_main)


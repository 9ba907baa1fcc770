"""Host overhead per speculative round, split by stage, and the host<->device syncs per round.

Between a GPU's kernels every millisecond of Python is throughput lost (the paper puts TDES + SABA
under 0.5 ms a round). This measures the loop's own host work with forwards that cost almost nothing:
a tiny random Llama target and DFlash drafter (`random_pair`; block 16, so D = 15) whose drafts are
peaky and often the target's argmax, so trees are deep and the walk and cache compaction do real work.

Stages are the decode loop's splits (`graftlib.core.decode`, `graftlib.core.timing.SplitLog`): candidates
(the pools read back), saba (the controller's choice), tree (the compiled heap), tdes (the tree stage's
excess over DDTree's at the same budget: TDES scores inside the heap, `fused_tdes`), verify_inputs, walk,
commit, update. host = their sum; the forwards are reported apart. GRAFT runs SABA with a flat cost and no
AR gates (`measuring_params`), so every method builds trees of B nodes and SABA's whole decision is timed.

Protocol: per (method, B) one warm-up decode, then `repeats` timed decodes interleaved across the rows
(rotated order); per stage the median over all rounds. Clocks: on a CPU the thread's CPU time (a stage
longer than a scheduler slice otherwise reads several times its work), on CUDA wall time with every split
synchronizing. Syncs (`SyncCounter`, a TorchFunctionMode in one counted decode per row): the calls that
make the host wait for the device (.item(), .tolist(), .cpu(), bool/int/float of a tensor, shape-dependent
ops), blocking uploads and the `StageTimer` laps counted apart; on a CPU nothing waits, and the counts are
what the same code does on a GPU.

`host_overhead_table(device, budgets, methods, rounds)` returns the table (JSON-ready), `format_host_table`
prints it; `graft host-overhead` runs both and writes results/host-overhead.jsonl.
"""

import platform
import statistics
import sys
import time

import torch
from torch.overrides import TorchFunctionMode

from graftlib.core.builders import BudgetController, FixedBudget, HeapTreeBuilder, TreeBuilder
from graftlib.core.decode import DecodeLoop
from graftlib.core.errors import require
from graftlib.core.paths import results_dir
from graftlib.core.records import append_record
from graftlib.core.timing import SplitLog
from graftlib.methods.saba import SabaController
from graftlib.methods.saba_params import CPU_GRID, SabaParams
from graftlib.methods.tdes import TDESNet, TDESScorer

HOST_STAGES = ("candidates", "saba", "tree", "tdes", "verify_inputs", "walk", "commit", "update")
FORWARD_STAGES = ("draft_forward", "verify_forward")
# the loop's split names -> the table's stages (gate + budget choice are SABA's)
SPLIT_STAGE = {"gate": "saba", "budget": "saba", "tree_build": "tree", **{s: s for s in HOST_STAGES + FORWARD_STAGES}}
METHODS = ("ddtree", "ddtree+tdes", "graft")
BUDGETS = (8, 32, 64, 256)
D2H_CALLS = frozenset({"item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero",
                       "argwhere", "unique", "unique_consecutive", "masked_select", "equal", "allclose"})
UPLOAD_FACTORIES = frozenset({"tensor", "as_tensor"})


# ----------------------------------------------------------------------------- the tiny pair


def random_pair(device: str = "cpu", vocab: int = 1024, seed: int = 0, layers: int = 2):
    """(target, drafter): random Llama (hidden 64, `layers` layers) and DFlash drafter (block 16) over
    `vocab` tokens. More layers show the per-layer host work (the cache commit) of a deep target."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from graftlib.models.drafter import DFlashConfig, DFlashDrafter, init_weights

    shape = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    cfg = LlamaConfig(vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=4096,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None, **shape)
    torch.manual_seed(seed)
    target = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    torch.nn.init.normal_(target.lm_head.weight, std=0.5)  # peaky logits: deep trees, as a trained drafter's
    target.get_input_embeddings().weight.data[:, 0] += 1.0  # a shared residual direction: drafts get accepted
    drafter = DFlashDrafter(DFlashConfig(vocab_size=vocab, num_hidden_layers=1, block_size=16, mask_token_id=vocab - 1,
                                         target_layer_ids=[0, layers - 1], num_target_layers=layers, **shape))
    init_weights(drafter)
    return (target.to(device).eval().requires_grad_(False), drafter.to(device).eval().requires_grad_(False))


def measuring_params(budgets) -> SabaParams:
    """SABA with eq. 16's saturating gain, a flat cost and no AR gates: it always picks the cap."""
    return SabaParams(c=[1.0, 0.0, 0.0], c_ar=None, grid=sorted(set(CPU_GRID) | set(budgets)),
                      meta={"source": "host-overhead: flat cost, no gates"})


# ----------------------------------------------------------------------------- instruments


def _device_arg(args, kwargs) -> torch.device | None:
    """The device a `.to(...)` / factory call names, if any."""
    for a in (kwargs.get("device"), *args):
        if isinstance(a, (str, torch.device)):
            return torch.device(a)
    return None


class SyncCounter(TorchFunctionMode):
    """Counts, into a `SplitLog`, the calls that would make the host wait for `device` (module doc)."""

    def __init__(self, splits: SplitLog, device):
        super().__init__()
        self.splits, self.device = splits, torch.device(device)

    def on_device(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type == self.device.type

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self.kind(getattr(func, "__name__", ""), args, kwargs, sys._getframe(1))
        if kind is not None:
            self.splits.count(kind)
        return func(*args, **kwargs)

    def kind(self, name: str, args: tuple, kwargs: dict, caller) -> str | None:
        """"sync" (a device-to-host read), "upload" (a blocking host-to-device copy) or None;
        `caller`: the frame that made the call."""
        first = args[0] if args else None
        if name in D2H_CALLS and self.on_device(first):
            return "sync"
        if name == "__getitem__" and self.on_device(first) and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in _index_items(args[1])):
            return "sync"  # boolean indexing: the result's shape is the device's answer
        if name == "to" and isinstance(first, torch.Tensor):
            target = _device_arg(args[1:], kwargs)
            if target is None:
                return None
            if target.type == "cpu" and first.device.type != "cpu":
                return "sync"
            if target.type == self.device.type != first.device.type:
                return "upload"
            # a CPU run: graftlib's own .to(device) moves host data; a library's (HF's buffers) is a no-op
            if target.type == "cpu" == self.device.type and caller.f_globals.get("__name__", "").startswith("graftlib"):
                return "upload"
        if name in UPLOAD_FACTORIES and not isinstance(first, torch.Tensor):
            target = _device_arg((), kwargs)
            if target is not None and target.type == self.device.type:
                return "upload"
        return None


def _index_items(index) -> tuple:
    return index if isinstance(index, tuple) else (index,)


# ----------------------------------------------------------------------------- measurement


def _parts(method: str, budget: int, scorer: TDESScorer, budgets) -> tuple[TreeBuilder, BudgetController]:
    if method == "ddtree":
        return HeapTreeBuilder(), FixedBudget(budget)
    if method == "ddtree+tdes":
        return HeapTreeBuilder(scorer, name="tdes"), FixedBudget(budget)
    return HeapTreeBuilder(scorer, name="tdes"), SabaController(measuring_params(budgets), cap=budget)


def round_stages(splits: SplitLog) -> list[dict[str, float]]:
    """The log's splits grouped into rounds (each ends at the loop's `update` split): seconds by table
    stage (tdes stays 0 here: `fused_tdes` splits it off the tree stage)."""
    rounds, cur = [], dict.fromkeys(HOST_STAGES + FORWARD_STAGES, 0.0)
    for name, t in splits.splits:
        if name in SPLIT_STAGE:
            cur[SPLIT_STAGE[name]] += t
        if name == "update":
            rounds.append(cur)
            cur = dict.fromkeys(cur, 0.0)
    return rounds


def events_per_round(splits: SplitLog, rounds: int) -> dict[str, dict[str, float]]:
    """Counted events per round, by kind (`sync`, `upload`) and table stage."""
    out = {kind: dict.fromkeys(HOST_STAGES + FORWARD_STAGES, 0.0) for kind in ("sync", "upload", "timer")}
    for name, counts in splits.events.items():
        if name in SPLIT_STAGE:
            for kind, per_stage in out.items():
                per_stage[SPLIT_STAGE[name]] += counts[kind] / rounds
    return out


def measure(loops: list[DecodeLoop], prompt: list[int], rounds: int, repeats: int) -> list[dict]:
    """One row per loop: per stage the median over the rounds of `repeats` decodes; syncs of one more.
    The timed decodes are interleaved (repeat r decodes every loop once, in an order rotated by r), so
    a drift of the machine's speed is shared by the rows instead of landing on one."""
    clock = time.thread_time if loops[0].device.type == "cpu" else time.perf_counter  # module doc
    timed = []
    for loop in loops:
        loop.decode(prompt, 8, stop_at_eos=False)  # warm-up
        timed.append(([], []))  # (split logs, round records)
    for r in range(repeats):
        for i in (r + j for j in range(len(loops))):
            loop, (logs, records) = loops[i % len(loops)], timed[i % len(loops)]
            logs.append(SplitLog(clock=clock))
            records += loop.decode(prompt, rounds, stop_at_eos=False, splits=logs[-1]).rounds
    return [_row(loop, logs, records, prompt, rounds) for loop, (logs, records) in zip(loops, timed)]


def _row(loop: DecodeLoop, logs: list[SplitLog], records: list, prompt: list[int], rounds: int) -> dict:
    """A loop's row from its timed decodes' logs and records, and one more decode under `SyncCounter`."""
    per_round = [r for log in logs for r in round_stages(log)]
    splits = SplitLog()
    with SyncCounter(splits, loop.device):
        res = loop.decode(prompt, rounds, stop_at_eos=False, splits=splits)
    events = events_per_round(splits, len(res.rounds))
    ms = {s: 1000 * statistics.median(r[s] for r in per_round) for s in HOST_STAGES + FORWARD_STAGES}
    return {"rounds": len(per_round), "nodes": statistics.mean(r.nodes for r in records),
            "accepted": statistics.mean(r.accepted for r in records),
            "host_ms": {s: ms[s] for s in HOST_STAGES}, "host_total_ms": sum(ms[s] for s in HOST_STAGES),
            "forward_ms": {s: ms[s] for s in FORWARD_STAGES},
            "syncs": events["sync"], "syncs_total": sum(events["sync"].values()),
            "uploads": events["upload"], "uploads_total": sum(events["upload"].values()),
            "timer_syncs_total": sum(events["timer"].values())}


@torch.inference_mode()
def host_overhead_table(device: str = "cpu", budgets=BUDGETS, methods=METHODS, rounds: int = 48,
                        repeats: int = 3, vocab: int = 1024, seed: int = 0, layers: int = 2) -> dict:
    """The host-overhead table (module doc): {"setting": {...}, "rows": [one per method and budget]}."""
    require(all(m in METHODS for m in methods), f"methods must be among {', '.join(METHODS)}, got {list(methods)}")
    require(len(budgets) > 0 and all(isinstance(b, int) and 1 <= b < vocab for b in budgets),
            f"budgets must be integers in [1, vocab = {vocab}), got {list(budgets)}")
    require(rounds >= 2 and repeats >= 1, f"rounds must be >= 2 and repeats >= 1, got {rounds}, {repeats}")
    require(layers >= 2, f"layers must be >= 2 (the drafter reads the first and the last), got {layers}")
    target, drafter = random_pair(device, vocab, seed, layers)
    torch.manual_seed(seed)
    net = TDESNet(target.get_input_embeddings().weight.detach(), m=64, depths=drafter.block_size - 1).to(device)
    scorer = TDESScorer.from_net(net, beta=0.2)
    prompt = torch.randint(0, vocab - 1, (32,), generator=torch.Generator().manual_seed(seed)).tolist()
    keys, loops = [], []
    for method in methods:
        for b in budgets:
            builder, controller = _parts(method, b, scorer, budgets)
            loop = DecodeLoop(target, drafter, builder, controller)
            loop.eager_verdicts = True  # the accelerator's path on any device (module doc)
            keys.append({"method": method, "budget": b})
            loops.append(loop)
    rows = [{**key, **row} for key, row in zip(keys, measure(loops, prompt, rounds, repeats))]
    fused_tdes(rows)
    setting = {"device": str(target.device), "threads": torch.get_num_threads(), "torch": torch.__version__,
               "cpu": platform.processor() or platform.machine(), "vocab": vocab, "layers": layers,
               "depth": drafter.block_size - 1,
               "rounds": rounds, "repeats": repeats, "seed": seed}
    if target.device.type == "cuda":
        setting["gpu"] = torch.cuda.get_device_name(target.device)
    return {"setting": setting, "rows": rows}


def fused_tdes(rows: list[dict]) -> None:
    """Split the tree stage of the TDES rows (scored inside the compiled heap) into the heap and TDES,
    in place: tdes = the excess of the row's tree stage over DDTree's at the same budget (the same node
    count), tree = the rest; the unsplit figure stays as `tree_with_tdes_ms`. Rows without a DDTree row
    of their budget stay unsplit."""
    heap = {r["budget"]: r["host_ms"]["tree"] for r in rows if r["method"] == "ddtree"}
    for r in rows:
        ms = r["host_ms"]
        if r["method"] != "ddtree" and r["budget"] in heap:
            r["tree_with_tdes_ms"] = ms["tree"]
            ms["tdes"] = max(ms["tree"] - heap[r["budget"]], 0.0)
            ms["tree"] -= ms["tdes"]


def format_host_table(table: dict) -> str:
    """Per-stage host ms per round, host total, forwards, syncs and uploads per round: one line per row."""
    s = table["setting"]
    clock = "thread CPU time" if s["device"] == "cpu" else "wall time"
    head = (f"host overhead per round on {s['device']} ({s['threads']} threads, {clock}), tiny random pair: vocab"
            f" {s['vocab']}, {s.get('layers', 2)} target layers, D = {s['depth']}, {s['rounds']} new tokens x"
            f" {s['repeats']} decodes (median per stage)")
    cols = [("method", 11), ("B", 4), ("nodes", 6), ("acc", 5)] + [(h, max(len(h), 6)) for h in HOST_STAGES]
    cols += [("host ms", 8), ("fwd ms", 7), ("syncs", 6), ("uploads", 7)]
    lines = [head, " ".join(f"{c:>{w}}" for c, w in cols)]
    for r in table["rows"]:
        vals = [r["method"], r["budget"], f"{r['nodes']:.0f}", f"{r['accepted']:.2f}"]
        vals += [f"{r['host_ms'][h]:.3f}" for h in HOST_STAGES]
        vals += [f"{r['host_total_ms']:.3f}", f"{sum(r['forward_ms'].values()):.2f}",
                 f"{r['syncs_total']:.2f}", f"{r['uploads_total']:.2f}"]
        lines.append(" ".join(f"{v:>{w}}" for v, (_, w) in zip(vals, cols)))
    if any("tree_with_tdes_ms" in r for r in table["rows"]):
        lines.append("tdes: scored inside the compiled heap, so the tree stage's excess over DDTree's at the same B")
    lines.append("syncs per round by stage (d2h: .item/.tolist/.cpu/bool/int/index ...; uploads apart):")
    for r in table["rows"]:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r["syncs"].items() if v)
        ups = ", ".join(f"{k} {v:.2f}" for k, v in r["uploads"].items() if v)
        lines.append(f"  {r['method']}@{r['budget']}: syncs {parts or 'none'}; uploads {ups or 'none'};"
                     f" StageTimer laps {r['timer_syncs_total']:.2f}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("host-overhead", help="host time per speculative round by stage, and device syncs per round")
    p.add_argument("--device", default="cpu")
    p.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--rounds", type=int, default=48, help="new tokens per timed decode")
    p.add_argument("--repeats", type=int, default=3, help="timed decodes per row (the median is reported)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2, help="target layers (per-layer host work: the cache commit)")
    p.add_argument("--out", default=None, help="JSONL file (default results/host-overhead.jsonl)")
    p.set_defaults(func=run)


def run(args) -> int:
    table = host_overhead_table(args.device, args.budgets, args.methods, args.rounds, args.repeats, args.vocab,
                                layers=args.layers)
    print(format_host_table(table))
    out = args.out or results_dir() / "host-overhead.jsonl"
    append_record(out, {**table, "time": time.time()})
    print(f"written to {out}")
    return 0

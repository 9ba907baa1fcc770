"""`graft host-overhead`: the table has every stage, method and budget; the sync counter counts what
would make the host wait for a GPU (injected calls, in the loop and alone). No timing assertions."""

import pytest
import torch

from graftlib.cli import build_parser
from graftlib.core.builders import FixedBudget, HeapTreeBuilder
from graftlib.core.decode import DecodeLoop
from graftlib.core.timing import SplitLog
from graftlib.lab.run.costs.host_overhead import (
    FORWARD_STAGES,
    HOST_STAGES,
    METHODS,
    SyncCounter,
    format_host_table,
    host_overhead_table,
    measure,
    random_pair,
)

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 64


@pytest.fixture(scope="module")
def table():
    return host_overhead_table("cpu", budgets=[4, 16], methods=METHODS, rounds=6, repeats=1, vocab=VOCAB)


def test_table_has_every_method_budget_and_stage(table):
    assert [(r["method"], r["budget"]) for r in table["rows"]] == [(m, b) for m in METHODS for b in (4, 16)]
    for r in table["rows"]:
        assert set(r["host_ms"]) == set(HOST_STAGES) and set(r["forward_ms"]) == set(FORWARD_STAGES)
        assert r["host_total_ms"] == pytest.approx(sum(r["host_ms"].values()))
        assert r["nodes"] == r["budget"]  # SABA's measuring params pick the cap: every method builds B nodes
        assert r["rounds"] >= 1 and r["accepted"] >= 1
        assert set(r["syncs"]) == set(HOST_STAGES + FORWARD_STAGES)
        # the goal: two device syncs a round, the draft's read-back and the verdicts' (eager, as on a GPU)
        assert r["syncs"]["candidates"] == 1 and r["syncs"]["walk"] == 1 and r["syncs_total"] == 2
        assert r["uploads"]["verify_inputs"] == 0  # on the CPU the verify inputs are views of host memory
        if r["method"] == "ddtree":
            assert r["host_ms"]["tdes"] == 0
        else:  # the compiled heap scores inside it: tdes is the excess over DDTree's heap at the same B
            heap = next(d["host_ms"]["tree"] for d in table["rows"] if (d["method"], d["budget"]) == ("ddtree",
                                                                                                      r["budget"]))
            raw = r["tree_with_tdes_ms"]
            assert r["host_ms"]["tdes"] == pytest.approx(max(raw - heap, 0.0))
            assert r["host_ms"]["tree"] + r["host_ms"]["tdes"] == pytest.approx(raw)
    text = format_host_table(table)
    for word in (*HOST_STAGES, *METHODS, "syncs", "uploads", "compiled heap"):
        assert word in text


class SyncingBuilder(HeapTreeBuilder):
    """A heap that reads one device scalar per tree: the counter must charge one sync a round to `tree`."""

    def build(self, root_token, cand, budget):
        torch.zeros(1).item()
        return super().build(root_token, cand, budget)


def test_counter_charges_an_injected_item_to_its_stage():
    target, drafter = random_pair("cpu", VOCAB)
    prompt = list(range(1, 9))
    plain, syncing = measure([DecodeLoop(target, drafter, HeapTreeBuilder(), FixedBudget(4)),
                              DecodeLoop(target, drafter, SyncingBuilder(), FixedBudget(4))],
                             prompt, rounds=5, repeats=2)
    assert plain["syncs"]["tree"] == 0
    assert syncing["syncs"]["tree"] == 1.0
    assert syncing["syncs_total"] == pytest.approx(plain["syncs_total"] + 1)


def test_counter_kinds():
    log = SplitLog()
    with SyncCounter(log, "cpu"):
        t = torch.arange(4)
        t.sum().item()
        t.tolist()
        int(t[0])
        if t[1]:
            pass
        t[t > 1]  # boolean indexing: the result's shape needs the device's answer
        torch.tensor([1, 2], device="cpu")  # an upload
        torch.tensor([1, 2]) + 1  # host data, no device named: neither
    log.charge("x", 0.0)
    assert log.events["x"]["sync"] == 5
    assert log.events["x"]["upload"] == 1


def test_cli_registers_the_command():
    args = build_parser().parse_args(["host-overhead", "--budgets", "8", "64", "--methods", "ddtree"])
    assert args.budgets == [8, 64] and args.methods == ["ddtree"] and callable(args.func)

"""The mixed workload: what a server sees, named categories of prompts decoded one after another.

A user serves math, code, chat and regular text at once, and their best fixed budgets need not be the same: an
adaptive method is worth leaving on when it beats the best single fixed budget for the whole mix
(`graftlib.lab.report.budget_policy.mix_rows`). `CATEGORIES` names the categories, each a task and a user turn:
GSM8K, MATH500, MBPP, HumanEval, Alpaca, SWE-bench, MT-Bench's first and second turns (decoded turn by turn, each
after the run's own first answer: `graftlib.lab.report.multiturn`) and the regular set. Held-out prompts are each
task's first eval prompts; what a method fits on the mix is fitted on `validation_items`: the task's validation
split, or, for a task without one (HumanEval, MT-Bench: every prompt is in eval), its last eval prompts, which a
bench of the first ones never reaches. `categories` splits a bench's records by category.

Invariants: a category's records are one-turn records (`multiturn.turn_records`), their uids the turn's.
"""

from graftlib.core.errors import require
from graftlib.data.prompts import load_items
from graftlib.lab.report.multiturn import turn_records

# category -> (task, user turn, 0-based)
CATEGORIES = {"gsm8k": ("gsm8k", 0), "math500": ("math500", 0), "mbpp": ("mbpp", 0), "humaneval": ("humaneval", 0),
              "alpaca": ("alpaca", 0), "swe-bench": ("swe-bench", 0), "mt-bench turn 1": ("mt-bench", 0),
              "mt-bench turn 2": ("mt-bench", 1), "regular": ("regular", 0)}
TASKS = tuple(dict.fromkeys(task for task, _ in CATEGORIES.values()))


def validation_items(task: str, n: int) -> list:
    """`n` prompts of `task` to fit on (module doc): its validation split, else its last `n` eval prompts."""
    items = load_items(task, "val", n)
    if items:
        return items
    held = load_items(task, "eval")
    require(len(held) >= 2 * n, f"{task} has no validation split and {len(held)} eval prompts: too few to hold out {n}")
    return held[-n:]


def categories(records_by_task: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The mix's records per category, in `CATEGORIES`' order, from bench records per task (module doc); a
    category whose task has no records is left out."""
    out = {}
    for name, (task, turn) in CATEGORIES.items():
        recs = [r for rec in records_by_task.get(task, []) for r in turn_records(rec) if r["turn"] == turn]
        if recs:
            out[name] = recs
    return out

"""The AR-drafted baselines of Tables 1 and 2 (EAGLE-3, OPT-Tree): their runs, or why they are not run.

Both draft with the target's EAGLE-3 drafter (`graftlib.models.pair.Pair.eagle3_drafter`). The
tables run them at their releases' settings (`graftlib.methods.registry.Method.release_budget`
and the policies' defaults: EAGLE-3 depth 7, top-k 10, total tokens 60; OPT-Tree 50 nodes,
threshold 0.5, max depth 10). Where the pair has no EAGLE-3 drafter (the embedded target before
`graft train-eagle3` has written one), the tables show "not run" and the reason instead.
"""

from graftlib.core.errors import GraftError
from graftlib.lab.run.bench import Run
from graftlib.methods.registry import AR_METHODS, REGISTRY


def ar_baseline_runs(pair) -> tuple[list[Run], str | None]:
    """(the runs at the releases' settings, None), or ([], "not run: <why>") without an EAGLE-3 drafter."""
    try:
        pair.eagle3_drafter()
    except GraftError as e:
        return [], f"not run: {e}"
    return [Run(m, REGISTRY[m].release_budget) for m in AR_METHODS], None

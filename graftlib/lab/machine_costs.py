"""The cost profile of the machine a run is on: the shipped one where it was fitted, else measured once.

A modeled figure prices a decode's rounds, and SABA decides its budgets, with a cost profile
(`graftlib.methods.cost_profile`). The shipped CPU profile was fitted for the embedded pair on one
machine (`hardware_id`, e.g. "cpu:2-threads:AMD EPYC"); priced with it, another machine's modeled
figures describe the first machine, not the reader's. `machine_profile` therefore returns:
  1. the profile at an explicit path, when one is given (a user's choice is never overridden);
  2. the shipped profile, when this pair is the one it was fitted for (target and drafter names)
     and this device and dtype are the machine's it was fitted on (the same `hardware_id`);
  3. else this machine's own profile: read from the cache (`GRAFT_HOME/costs/`, keyed by the
     hardware id and the pair's fingerprints) or measured once and cached (`measure_profile`).
`measure_profile` times, after a warm-up, the verify step for 1..B tokens at one prefix of 256
(`costs.verify_cost_curve`), DFlash's draft step (`costs.dflash_draft_cost`: block forward and
top-k), the heap and verify inputs at a middle budget (`costs.tree_build_cost`, the round's host
work) and, where the pair has an EAGLE-3 drafter, its forwards (`costs.ar_draft_cost_curve`); the
profile is `cost_profile.from_curve` of these (one prefix, so no prefix terms; the AR step is the
one-token verify). It takes about a minute on a 2-core CPU. The profile names the machine in its
`hardware` and `fitted_from`, and every figure priced with it names the profile.
"""

import time
from pathlib import Path

import torch

from graftlib.core.errors import GraftError
from graftlib.core.hardware import hardware_id
from graftlib.core.paths import graft_home, portable
from graftlib.lab.costs import (
    ar_draft_cost_curve,
    dflash_draft_cost,
    fit_ar_draft,
    tree_build_cost,
    verify_cost_curve,
)
from graftlib.methods.artifacts import slug
from graftlib.methods.cost_profile import CostProfile, default_profile, from_curve

CPU_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)  # a CPU's budgets (the machine regime's cap is 64)
GPU_SIZES = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512)
PREFIX_LEN = 256
HOST_BUDGET = 16  # the budget whose heap and verify inputs stand for a round's host work


def fitted_here(profile: CostProfile, pair) -> bool:
    """Whether `profile` was fitted for this pair on this machine (module doc, case 2)."""
    made = profile.fitted_from or {}
    return (profile.hardware == hardware_id(pair.device, pair.target.dtype)
            and made.get("target") == pair.target_name and made.get("drafter") == pair.drafter_name)


def cache_path(pair) -> Path:
    """Where this machine's measured profile for `pair` is cached."""
    ids = pair.identity()
    key = f"{slug(hardware_id(pair.device, pair.target.dtype))}--{ids.target_fingerprint}-{ids.drafter_fingerprint}"
    return graft_home() / "costs" / f"{key}.json"


def measure_profile(pair, repeats: int = 5, log=print) -> CostProfile:
    """This machine's cost profile for `pair` (module doc)."""
    hw = hardware_id(pair.device, pair.target.dtype)
    sizes = list(GPU_SIZES if pair.device.type == "cuda" else CPU_SIZES)
    log(f"measuring this machine's cost profile ({pair.describe()['hardware']}, about a minute) ...")
    t0 = time.time()
    verify_s = verify_cost_curve(pair.target, sizes, PREFIX_LEN, repeats)
    c_draft = dflash_draft_cost(pair, prefix_len=PREFIX_LEN, repeats=repeats)
    build = tree_build_cost(pair.target.config.vocab_size, [HOST_BUDGET], pair.drafter.block_size - 1, repeats,
                            str(pair.device))
    c_ar_draft = None
    try:
        drafter = pair.eagle3_drafter()
    except GraftError:  # no EAGLE-3 drafter: the profile cannot price AR-drafted rounds
        drafter = None
    if drafter is not None:
        curve = ar_draft_cost_curve(drafter, [1, 5, 10, 25, 50], [1, 4, 9], PREFIX_LEN, 3, max(3, repeats // 2))
        c_ar_draft = fit_ar_draft(curve)["c_ar_draft"]
    made = {"command": "graft costs --machine", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "target": pair.target_name, "drafter": pair.drafter_name, "machine": pair.describe()["hardware"],
            "threads": torch.get_num_threads(), "prefix_len": PREFIX_LEN, "sizes": sizes, "repeats": repeats,
            "host_budget": HOST_BUDGET, "seconds": round(time.time() - t0, 1)}
    name = f"measured-{slug(hw)}"
    return from_curve(name, hw, verify_s, c_draft, build[HOST_BUDGET]["tree"], made, c_ar_draft)


def machine_profile(pair, path: str | Path | None = None, measure=measure_profile, log=print) -> CostProfile:
    """The cost profile that prices and decides for `pair` on this machine (module doc)."""
    if path:
        return CostProfile.load(path)
    shipped = default_profile()
    if fitted_here(shipped, pair):
        return shipped
    cached = cache_path(pair)
    if cached.is_file():
        return CostProfile.load(cached)
    log(f"the shipped cost profile was fitted on {shipped.hardware} for {shipped.fitted_from.get('target')} + "
        f"{shipped.fitted_from.get('drafter')}; this run is on {hardware_id(pair.device, pair.target.dtype)} "
        f"with {pair.target_name} + {pair.drafter_name}")
    profile = measure(pair, log=log)
    profile.save(cached)
    log(f"cost profile {profile.name} ({profile.id}) cached at {portable(cached)}")
    return profile

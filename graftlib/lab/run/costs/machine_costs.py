"""The cost profile of the machine a run is on: the shipped one where it was fitted, else measured once.

A modeled figure prices a decode's rounds, and SABA decides its budgets, with a cost profile
(`graftlib.inputs.cost_profile`). The shipped CPU profile was fitted for the embedded pair on one
machine (`hardware_id`, e.g. "cpu:2-threads:AMD EPYC"); priced with it, another machine's modeled
figures describe the first machine, not the reader's. `machine_profile` therefore returns:
  1. the profile at an explicit path, when one is given (a user's choice is never overridden);
  2. the shipped profile, when this device and dtype are the machine's it was fitted on (the same
     `hardware_id`; another pair there prices with it too, or with its own `graft prepare` /
     `graft device-check` profile passed explicitly);
  3. else this machine's own profile for the pair: read from the cache (`GRAFT_COSTS`, default `GRAFT_HOME/costs/`,
     keyed by the hardware id and the pair's fingerprints) or measured once and cached (`measure_profile`).
`graft machine-costs` measures (or re-measures, `--force`) and caches it, printing it beside the
shipped one; `graft bench` and the workbook's notebooks call `machine_profile` themselves.
`measure_profile` fits the profile the way the shipped one was fitted, from warm decodes (each
warmed by the bench's policy, `bench.warm_up`) of a few validation prompts (never the eval prompts
a bench reports): DDTree at a few budgets, a decode's seconds = c0 rounds + c1 nodes by least
squares (the whole loop's time, host work between rounds included), the AR step cost = AR seconds
per token, c_draft = the median draft stage of the DDTree rounds, and, where the pair has an
EAGLE-3 drafter, its forwards (`costs.ar_draft_cost_curve`). No prefix terms: the shipped profile
has none either. About a minute on a 2-core CPU. The profile names the machine in its `hardware`
and `fitted_from`, and every figure priced with it names the profile.
"""

import time
from pathlib import Path

import numpy as np
import torch

from graftlib.core.errors import GraftError
from graftlib.core.hardware import hardware_id
from graftlib.core.paths import costs_dir, portable
from graftlib.core.timing import WarmUp, warm_up
from graftlib.inputs.cli_args import add_model_args
from graftlib.inputs.cost_profile import CostProfile, default_profile, with_costs
from graftlib.lab.run.costs.cost_curves import (
    ar_draft_cost_curve,
    fit_ar_draft,
)
from graftlib.methods.fitted import slug
from graftlib.methods.saba_params import SabaParams, default_params

CPU_BUDGETS = (4, 16, 64)  # a CPU's DDTree budgets (the machine regime's cap is 64)
GPU_BUDGETS = (32, 128, 512)
PREFIX_LEN = 256  # the AR drafter's forwards are timed at this prefix
FIT_TASK, FIT_PROMPTS, FIT_TOKENS = "gsm8k", 2, 64


def fitted_here(profile: CostProfile, pair) -> bool:
    """Whether `profile` was fitted on this machine, device and dtype (module doc, case 2)."""
    return profile.hardware == hardware_id(pair.device, pair.target.dtype)


def cache_path(pair) -> Path:
    """Where this machine's measured profile for `pair` is cached."""
    ids = pair.identity()
    key = f"{slug(hardware_id(pair.device, pair.target.dtype))}--{ids.target_fingerprint}-{ids.drafter_fingerprint}"
    return costs_dir() / f"{key}.json"


def measure_profile(pair, log=print, prompts: list[list[int]] | None = None,
                    new_tokens: int = FIT_TOKENS) -> CostProfile:
    """This machine's cost profile for `pair` (module doc); `prompts` (token ids) replace the validation
    prompts, for a pair without a tokenizer."""
    from graftlib.data.prompts import format_prompt, load_items
    from graftlib.methods.decoder import Decoder

    hw = hardware_id(pair.device, pair.target.dtype)
    budgets = GPU_BUDGETS if pair.device.type == "cuda" else CPU_BUDGETS
    log(f"measuring this machine's cost profile ({pair.describe()['hardware']}, about a minute) ...")
    t0 = time.time()
    if prompts is None:
        prompts = [list(format_prompt(it, pair.tokenizer).input_ids) for it in load_items(FIT_TASK, "val", FIT_PROMPTS)]
    runs, drafts = [], []  # (rounds, nodes, seconds) per DDTree decode; draft stage seconds per round
    ar_s, ar_tokens = 0.0, 0
    for method, budget in (("ar", 1), *(("ddtree", b) for b in budgets)):
        dec = Decoder.for_method(pair.target, pair.drafter, method, budget, eos_ids=pair.eos_ids)
        warm_up(lambda dec=dec: _per_token(dec.decode(prompts[0], WarmUp.new_tokens)))
        for ids in prompts:
            res = dec.decode(ids, new_tokens)
            if method == "ar":
                ar_s, ar_tokens = ar_s + res.decode_s, ar_tokens + len(res.tokens) - 1
            else:
                runs.append((len(res.rounds), sum(r.nodes for r in res.rounds), res.decode_s))
                drafts += [r.t_draft for r in res.rounds]
    A = np.array([[n, nodes] for n, nodes, _ in runs], dtype=float)
    (c0, c1), *_ = np.linalg.lstsq(A, np.array([s for *_, s in runs]), rcond=None)
    c_ar_draft = None
    try:
        drafter = pair.eagle3_drafter()
    except GraftError:  # no EAGLE-3 drafter: the profile cannot price AR-drafted rounds
        drafter = None
    if drafter is not None:
        c_ar_draft = fit_ar_draft(ar_draft_cost_curve(drafter, [1, 5, 10, 25, 50], [1, 4, 9], PREFIX_LEN, 3, 3))[
            "c_ar_draft"]
    made = {"command": "graft machine-costs", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "target": pair.target_name, "drafter": pair.drafter_name, "machine": pair.describe()["hardware"],
            "threads": torch.get_num_threads(), "task": FIT_TASK, "split": "val", "prompts": len(prompts),
            "new_tokens": new_tokens, "budgets": list(budgets), "seconds": round(time.time() - t0, 1)}
    return CostProfile(f"measured-{slug(hw)}", hw, [float(c0), max(float(c1), 0.0), 0.0], [ar_s / ar_tokens, 0.0],
                       float(np.median(drafts)), None, fitted_from=made, c_ar_draft=c_ar_draft)


def _per_token(res) -> float:
    return res.decode_s / max(1, len(res.tokens) - 1)


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


def deciding(params: SabaParams | None, profile: CostProfile) -> SabaParams | None:
    """SABA's calibration deciding under `profile`: as given (None: the shipped one) where `profile` is the
    shipped profile, else its gain side with the profile's costs (`cost_profile.with_costs`)."""
    return params if profile.id == default_profile().id else with_costs(params or default_params(), profile)


def add_parser(sub) -> None:
    p = sub.add_parser("machine-costs", help="this machine's cost profile for the pair: measured once and cached")
    add_model_args(p)
    p.add_argument("--force", action="store_true", help="measure again even where one is cached")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the profile here")
    p.set_defaults(func=run)


def run(args) -> int:
    from graftlib.models.pair import load_pair

    pair = load_pair(args.target, args.drafter, args.device, args.device_map, dtype=args.dtype)
    if args.force and cache_path(pair).is_file():
        cache_path(pair).unlink()
    profile = machine_profile(pair)
    shipped = default_profile()
    for p in (profile, shipped):
        print(f"{p.name:<40} {p.id}  c0 {1e3 * p.c[0]:7.2f} ms  c1 {1e3 * p.c[1]:6.3f} ms/node  "
              f"AR step {1e3 * p.c_ar[0]:6.2f} ms  draft {1e3 * p.c_draft:5.2f} ms  ({p.hardware})")
    if args.out:
        print(f"written to {profile.save(args.out)}")
    return 0

"""The paper's cost regime as a cost profile: round costs derived from the GRAFT paper's own numbers only.

The decodes themselves (accepted lengths, trees) do not depend on the machine at T = 0; only the
costs do. This module turns the round latencies the paper implies (Qwen3-8B on one A100, batch 1)
into a `CostProfile`, so rounds decoded anywhere can be priced, and budgets decided, in that regime.

Derivation (`derive`; every number from `graftlib.lab.report.paper`): the AR step from GSM8K's GRAFT TPS and
speedup (t_AR = 19.1 ms); the round line C(B) = c0 + c1 B through Table 2's DDTree and +SABA rows (the TDES
rows are checks); the draft step as the chain's round less one AR step; the AR drafter's forward from the
EAGLE-3 row. No prefix terms, cost table or rows term: the paper gives none.

`graft paper-costs` prints every row beside the profile's value and writes the profile
(graftlib/assets/costs/paper-a100.json is its output; tests/test_paper_costs.py re-derives it).

Details: docs/internals.md, `graftlib.lab.report.paper_costs`.
"""

import numpy as np

from graftlib.core.errors import require
from graftlib.core.paths import portable
from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile
from graftlib.lab.report.paper import TABLE1, TABLE2, TABLE3
from graftlib.methods.eagle_tree import RELEASE_BUDGET as EAGLE3_NODES
from graftlib.methods.eagle_tree import EagleTree

PROFILE_NAME = "paper-a100"  # the derived profile's name (graftlib/assets/costs/paper-a100.json)
MODEL = "Qwen3-8B"
CHAIN_NODES = 15  # DFlash's 16-token block: the root and 15 drafts
COMMAND = "graft paper-costs --out graftlib/assets/costs/paper-a100.json"


def t_ar() -> float:
    """Seconds per AR token: GSM8K GRAFT's TPS at beta = 0.2 (Table 3) over its speedup (Table 1)."""
    return TABLE1[MODEL]["GRAFT"]["gsm8k"][1] / TABLE3[0.2][1]


def table2_rows() -> dict[str, tuple[float, float]]:
    """{Table 2 row: (mean nodes, round seconds = MAT / TPS)}."""
    return {name: (nodes, mat / tps) for name, (nodes, mat, tps, _) in TABLE2.items()}


def table1_rounds(task: str = "gsm8k") -> dict[str, float]:
    """{Table 1 method: round seconds = MAT x t_AR / speedup} on `task`."""
    return {method: rows[task][0] * t_ar() / rows[task][1] for method, rows in TABLE1[MODEL].items()}


def derive() -> CostProfile:
    """The profile of the module doc."""
    rows = table2_rows()
    x = np.array([rows["DDTree"][0], rows["+SABA"][0]])
    y = np.array([rows["DDTree"][1], rows["+SABA"][1]])
    c1, c0 = np.polyfit(x, y, 1)
    require(c1 > 0 and c0 > 0, "paper costs: Table 2's rows give no positive line")
    rounds = table1_rounds()
    c_draft = rounds["DFlash"] - t_ar()
    verify_eagle = c0 - c_draft + c1 * EAGLE3_NODES
    forwards = EagleTree().depth + 1
    e0 = (rounds["EAGLE-3"] - verify_eagle) / forwards
    fitted_from = {"source": "the GRAFT paper's Tables 1-3 (graftlib.lab.report.paper)", "model": MODEL,
                   "hardware": "one A100 80GB, batch 1 (the paper's setup)", "command": COMMAND,
                   "derivation": "graftlib.lab.report.paper_costs"}
    return CostProfile(PROFILE_NAME, "A100 (the paper's numbers)", [float(c0), float(c1), 0.0], [t_ar(), 0.0],
                       float(c_draft), None, fitted_from=fitted_from, c_ar_draft=[float(e0), 0.0])


def residuals(profile: CostProfile) -> list[dict]:
    """Every paper row beside the profile: the fitted rows' residuals, the checks' implied quantities."""
    out = []
    for name, (nodes, sec) in table2_rows().items():
        model = profile.c[0] + profile.c[1] * nodes  # C(B) at a fractional mean B (no prefix terms, no table)
        out.append({"row": f"Table 2 {name}", "nodes": nodes, "paper_ms": 1e3 * sec, "profile_ms": 1e3 * model,
                    "residual_ms": 1e3 * (sec - model), "use": "fit" if "TDES" not in name and name != "GRAFT"
                    else "check (TDES host time)"})
    rounds = table1_rounds()
    chain = profile.drafted_round_s(CHAIN_NODES, 0)
    out.append({"row": "Table 1 GSM8K DFlash chain", "nodes": CHAIN_NODES, "paper_ms": 1e3 * rounds["DFlash"],
                "profile_ms": 1e3 * chain, "residual_ms": 1e3 * (rounds["DFlash"] - chain),
                "use": "check (c_draft assumes a 16-token verify costs t_AR)"})
    for method in ("DDTree", "GRAFT"):
        implied = (rounds[method] - profile.c[0]) / profile.c[1]
        out.append({"row": f"Table 1 GSM8K {method}", "nodes": implied, "paper_ms": 1e3 * rounds[method],
                    "profile_ms": 1e3 * rounds[method], "residual_ms": 0.0, "use": "check: nodes implied"})
    verify = profile.c[0] - profile.c_draft
    e0 = profile.c_ar_draft[0]
    eagle = verify + profile.c[1] * EAGLE3_NODES + e0 * (EagleTree().depth + 1)
    out.append({"row": "Table 1 GSM8K EAGLE-3", "nodes": EAGLE3_NODES, "paper_ms": 1e3 * rounds["EAGLE-3"],
                "profile_ms": 1e3 * eagle, "residual_ms": 1e3 * (rounds["EAGLE-3"] - eagle), "use": "fit (e0)"})
    opt_forwards = (rounds["OPT-Tree"] - verify - profile.c[1] * 50) / e0
    out.append({"row": "Table 1 GSM8K OPT-Tree", "nodes": 50, "paper_ms": 1e3 * rounds["OPT-Tree"],
                "profile_ms": 1e3 * rounds["OPT-Tree"], "residual_ms": 0.0,
                "use": f"check: {opt_forwards:.1f} drafter forwards implied (max_depth 10)"})
    return out


def method_errors(profile: CostProfile) -> dict[str, float]:
    """Each method's modeled-time error under `profile` against the paper's own rows (`residuals`): r = the
    paper's round time / the profile's - 1, by how much a modeled speedup overstates the paper's (the DFlash
    chain's row, Table 2's +TDES and GRAFT rows); methods whose rows the fit meets exactly are left out (0)."""
    rows = {r["row"]: r for r in residuals(profile)}
    named = {"dflash": "Table 1 GSM8K DFlash chain", "ddtree+tdes": "Table 2 +TDES", "graft": "Table 2 GRAFT"}
    return {m: rows[row]["paper_ms"] / rows[row]["profile_ms"] - 1.0 for m, row in named.items()}


def mat_needed(profile: CostProfile, speedup: float, nodes: float, prefix_len: int = 0) -> float:
    """The mean accepted length a method needs for `speedup` over AR under `profile`, verifying `nodes`
    a round: speedup = (MAT / C(nodes)) / (1 / C_AR), so MAT = speedup x C(nodes) / C_AR (at `prefix_len`;
    the paper's profile has no prefix terms). GRAFT's 5.28x on GSM8K at Table 2's 48.9 nodes needs 7.97,
    beside the paper's own 8.06 (Table 1)."""
    require(speedup > 0 and nodes >= 0, f"mat_needed: speedup > 0 and nodes >= 0, got {speedup}, {nodes}")
    return speedup * profile.drafted_round_s(nodes, prefix_len) / profile.ar_step_s(prefix_len)


def add_parser(sub) -> None:
    p = sub.add_parser("paper-costs", help="the paper's cost regime as a cost profile, derived from its tables")
    p.add_argument("--out", default=None, help=f"write the profile here (the shipped one: {portable(PAPER_PROFILE)})")
    p.set_defaults(func=run)


def run(args) -> int:
    profile = derive()
    print(f"{profile.name} ({profile.id}): c0 {1e3 * profile.c[0]:.2f} ms, c1 {1e3 * profile.c[1]:.4f} ms/node "
          f"({100 * profile.c[1] / profile.c_ar[0]:.2f}% of an AR step), t_AR {1e3 * profile.c_ar[0]:.2f} ms, "
          f"c_draft {1e3 * profile.c_draft:.2f} ms, AR drafter {1e3 * profile.c_ar_draft[0]:.2f} ms/forward")
    print(f"{'row':<28}{'nodes':>8}{'paper ms':>10}{'profile ms':>12}{'resid ms':>10}  use")
    for r in residuals(profile):
        print(f"{r['row']:<28}{r['nodes']:>8.1f}{r['paper_ms']:>10.2f}{r['profile_ms']:>12.2f}{r['residual_ms']:>10.2f}"
              f"  {r['use']}")
    if args.out:
        print(f"written: {profile.save(args.out)}")
    return 0

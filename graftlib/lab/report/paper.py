"""Numbers reported in the GRAFT paper, for side-by-side display in the workbook.

Source: the GRAFT paper (Tables 1-3, Figure 6 text). Values are copied as printed;
LCB = LiveCodeBench (not shipped offline here). Keys: model -> method -> task -> (MAT, speedup).
"""

TASKS_TABLE1 = ("gsm8k", "math500", "aime24", "aime25", "humaneval", "mbpp", "livecodebench", "swe-bench", "alpaca")

_T1 = {
    "Qwen3-4B": {
        "EAGLE-3": [2.28, 1.12, 2.21, 1.08, 2.12, 1.18, 2.13, 1.19, 2.21, 1.05,
                    2.26, 1.11, 2.14, 1.01, 2.09, 0.99, 2.17, 1.05],
        "OPT-Tree": [2.38, 1.05, 2.32, 1.03, 2.14, 1.32, 2.16, 1.33, 2.34, 0.95,
                     2.37, 1.06, 2.27, 0.98, 2.19, 0.97, 2.30, 1.03],
        "DFlash": [5.87, 4.11, 7.07, 5.09, 6.08, 4.36, 6.76, 4.91, 6.00, 4.30,
                   5.40, 3.84, 6.13, 4.47, 3.29, 2.30, 2.85, 2.23],
        "DDTree": [8.10, 5.16, 9.37, 5.98, 7.39, 5.26, 7.86, 5.54, 8.54, 5.36,
                   7.82, 5.09, 8.45, 5.16, 5.04, 3.08, 4.45, 2.96],
        "GRAFT": [8.18, 5.58, 9.68, 6.36, 7.99, 5.34, 8.45, 5.72, 8.41, 5.66,
                  7.82, 5.21, 8.46, 5.75, 5.21, 3.41, 4.50, 3.10],
    },
    "Qwen3-8B": {
        "EAGLE-3": [4.07, 1.79, 4.12, 1.79, 3.32, 1.87, 3.30, 1.86, 4.34, 1.77,
                    4.36, 1.92, 3.57, 1.57, 3.22, 1.39, 3.75, 1.71],
        "OPT-Tree": [3.96, 1.46, 3.91, 1.45, 3.23, 1.87, 3.22, 1.85, 4.21, 1.35,
                     4.27, 1.57, 3.45, 1.30, 3.12, 1.21, 3.66, 1.46],
        "DFlash": [5.82, 3.90, 7.02, 4.84, 6.15, 4.18, 6.62, 4.51, 6.43, 4.46,
                   5.49, 3.76, 6.08, 4.30, 3.28, 2.16, 2.83, 2.02],
        "DDTree": [8.18, 4.33, 9.38, 4.93, 7.25, 4.99, 7.80, 5.35, 9.13, 4.57,
                   7.93, 4.26, 8.55, 4.41, 5.04, 2.56, 4.46, 2.38],
        "GRAFT": [8.06, 5.28, 9.36, 6.17, 8.04, 5.45, 8.63, 5.85, 8.96, 5.87,
                  7.83, 5.25, 8.32, 5.33, 5.08, 3.13, 4.26, 2.80],
    },
    "Qwen3-Coder-30B": {
        "EAGLE-3": [2.18, 1.20, 2.25, 1.27, 2.16, 1.23, 2.13, 1.22, 2.48, 1.35,
                    2.52, 1.33, 2.03, 1.12, 2.05, 1.12, 1.90, 1.08],
        "OPT-Tree": [2.23, 1.27, 2.29, 1.35, 2.23, 1.32, 2.18, 1.29, 2.54, 1.43,
                     2.57, 1.41, 2.10, 1.21, 2.12, 1.21, 1.98, 1.17],
        "DFlash": [4.72, 3.16, 4.96, 3.45, 4.50, 3.21, 4.58, 3.17, 7.39, 4.90,
                   7.02, 4.50, 5.41, 3.91, 3.08, 2.07, 2.09, 1.61],
        "DDTree": [6.83, 4.01, 7.18, 4.37, 5.70, 3.82, 6.02, 3.93, 10.06, 5.70,
                   9.38, 5.11, 7.67, 4.53, 4.78, 2.81, 3.22, 2.11],
        "GRAFT": [7.24, 4.28, 7.45, 4.74, 6.61, 4.33, 6.87, 4.42, 10.01, 6.01,
                  9.83, 5.56, 7.93, 4.91, 5.04, 3.03, 2.96, 2.13],
    },
}

TABLE1 = {
    model: {method: {t: (v[2 * i], v[2 * i + 1]) for i, t in enumerate(TASKS_TABLE1)} for method, v in methods.items()}
    for model, methods in _T1.items()
}

# Table 2 (Qwen3-8B, averaged over nine tasks): avg nodes, MAT, TPS, delta TPS vs DDTree (%)
TABLE2 = {
    "DDTree": (110.2, 7.53, 220.6, 0.0),
    "+TDES": (110.2, 8.00, 233.3, 5.7),
    "+SABA": (49.1, 7.18, 248.8, 12.8),
    "GRAFT": (48.9, 7.62, 263.5, 19.4),
}

# Table 3 (GSM8K, Qwen3-8B, SABA on): beta -> (MAT, TPS, mismatch reduction %)
TABLE3 = {0.0: (7.635, 260.19, 0.00), 0.05: (7.850, 262.82, 22.14), 0.1: (7.968, 267.01, 33.21),
          0.2: (8.061, 276.17, 54.71), 0.4: (7.351, 247.60, 79.32)}

# Figure 6: SABA retained oracle throughput (mean) and share of rounds at >= 95%
FIGURE6 = {"mean_retained": 0.941, "share_ge_95": 0.641, "budgets": (32, 48, 64, 80, 96, 128)}

# The DDTree paper's own Qwen3-8B table (github.com/liranringel/ddtree, src/data/results.tex; T = 0, the budget chosen
# per cell from 16..1024): task -> (the DFlash chain's acceptance, DDTree's). The tree over the chain: 1.33-1.64x.
DDTREE_QWEN3_8B = {"gsm8k": (6.57, 9.54), "math500": (7.79, 10.73), "humaneval": (6.61, 9.67), "mbpp": (5.99, 9.07),
                   "alpaca": (3.12, 5.09), "swe-bench": (3.60, 5.91), "mt-bench": (4.28, 6.58)}


def tree_gain(task: str, model: str = "Qwen3-8B") -> float:
    """The GRAFT paper's tree gain over the chain on `task` (Table 1: DDTree's MAT / DFlash's)."""
    return TABLE1[model]["DDTree"][task][0] / TABLE1[model]["DFlash"][task][0]


def ddtree_gain_range() -> tuple[float, float]:
    """The DDTree paper's tree gain over the chain, its lowest and highest task (Qwen3-8B)."""
    gains = [tree / chain for chain, tree in DDTREE_QWEN3_8B.values()]
    return min(gains), max(gains)

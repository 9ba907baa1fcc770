"""Run: what decodes, replays and times, and the commands around it.

`bench` (interleaved, resumable, warmed; `shard` under torchrun; `ar_baselines` the EAGLE-3 / OPT-Tree
runs), `cost_curves` and `machine_costs` (this machine's round costs), `host_overhead`, `explore` (one
decode round by round), `generate`, `device_check`, `strength` (the drafter-strength calibration),
`regimes` (the cost regimes, their runs and sweeps), `edge_scores` (TDES beside DFlash 2's selector),
`strength_axis`, and `modeled_check` (`graft modeled`: a results file's modeled figure and claims).

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`, `training`, `graftlib.lab.report`.
"""

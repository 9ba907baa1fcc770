"""Run: what decodes, replays and times, and the commands around it.

`bench` (interleaved, resumable, warmed; `shard` under torchrun; `ar_baselines` the EAGLE-3 / OPT-Tree
runs), `explore` (one decode round by round), `generate`, `device_check`, `strength` (the drafter-strength
calibration), `regimes` (the cost regimes, their runs and sweeps), `edge_scores` (TDES beside DFlash 2's
selector), `strength_axis`, and the room `costs/` (this machine's costs and the cost model's check).

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`, `training`, `graftlib.lab.report`.
"""

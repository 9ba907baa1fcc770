"""Lab: the experiments and the workbook around the library, in three rooms, each importing only the ones above it:

  report    pure functions of decode records and the paper's numbers: metrics, the modeled figure and its
            ranking rule, the claims and their verdicts, the tables, the findings a notebook closes with,
            the committed-records format. A new claim or table goes here.
  run       what decodes, replays and times, and its commands: the benchmark, its sharding and baselines,
            cost curves and this machine's costs, the regimes and their sweeps, the drafter-strength
            calibration and axis, the device check, `graft generate`. A new measurement or command goes here.
  workbook  the notebooks' support: profiles and the papermill runner, plots, the figures manifest, tree
            views. A new figure's drawing goes here (its data from `report`, its runs from `run`).

The `graft` command itself is `graftlib.cli`.

May import: every other layer (`graftlib.core`, `models`, `data`, `methods`, `inputs`, `training`).
"""

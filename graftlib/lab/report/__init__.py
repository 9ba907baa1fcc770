"""Report: pure functions of decode records, and the paper's own numbers to set beside them.

`paper` (the paper's tables), `paper_costs` (its A100 costs as a cost profile), `metrics` (per-run
aggregates, bootstrap intervals, where a round's time goes), `multiturn` (the record of a multi-turn decode), `modeled`
(the rounds priced by a cost profile, the ranking rule), `claims` (the paper's throughput claims and their
verdicts), `tables` (Tables 1-2 and Figure 1(c)'s frames),
`findings` (what a paper item shows), `budget_policy` (per-round budget policies against the same-prefix
oracle), `archive` (the committed records: `graft records`).

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`, `training`; nothing else of `graftlib.lab`.
"""

"""Costs: what this machine's decode stages cost, and how well the cost model prices a run.

`cost_curves` (a round's seconds against its tree size), `machine_costs` (this machine's cost profile, fitted
once and cached, or the shipped one where it was fitted), `host_overhead` (the host's share of a round), and
`modeled_check` (`graft modeled`: a results file's modeled figure and claims beside its wall clock).

May import: what `graftlib.lab.run` may, and `graftlib.lab.run.shard` (a results file's merged records).
"""

"""Inputs: what a run is given beside the method: the pair on the command line, the fitted artifacts, a machine's costs.

`cli_args` (the options every decoding command shares: the pair, the method's inputs, sampling),
`artifacts` (a pair's `graft prepare` folder and the shipped assets, and which scorer and calibration a
run takes from them), `cost_profile` (a machine's round costs as a file: what prices a decode's rounds
for the modeled figure, eq. 17 and the AR step). Methods decide; these name what they decide with.

May import: `graftlib.core`, `graftlib.models`, `graftlib.data`, `graftlib.methods`.
"""

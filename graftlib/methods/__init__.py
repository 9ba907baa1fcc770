"""Methods: what a decoding method is, by name, and the parts only methods use.

`registry` maps every method name (`registry.METHODS`, each with its label) to its tree builder and budget
controller and names what its results depend on (`MethodInputs.setting`); `decoder` is the decode loop with
`Decoder.for_method`. The inference parts: the TDES edge scorer (`tdes`, eqs. 4-6, 13), the SABA controller with
its state and models (`saba`, eqs. 14-17; `saba_extensions`, `saba_params`), CaDDTree's cost-aware stopping
(`caddtree`), `graft+pred`'s budget predictor (`budget_predictor`), DFlash 2's selector (`selector`) and an EAGLE-3
drafter's tree policies (`eagle_tree`: EAGLE-2's dynamic tree; `opt_tree`: OPT-Tree); `fitted` checks a scorer,
calibration or predictor against the pair and machine it was fitted for. Training and fitting these parts is
`graftlib.training`'s job.

May import: `graftlib.core`, `graftlib.models`, `graftlib.data`.
"""

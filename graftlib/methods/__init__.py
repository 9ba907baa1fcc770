"""Methods: what a decoding method is, by name, and the parts only methods use.

`registry` maps a method name (ar, dflash, ddtree, ddtree+tdes, ddtree+saba, graft, caddtree,
eagle3, opt-tree) to its tree builder and budget controller and names what its results depend on
(`method_setting`); `decoder` is the decode loop with `Decoder.for_method`. The inference parts:
the TDES edge scorer (`tdes`, eqs. 4-6, 13), the SABA controller with its state and models
(`saba`, eqs. 14-17), CaDDTree's cost-aware stopping (`caddtree`) and an EAGLE-3 drafter's tree
policies (`eagle_tree`: EAGLE-2's dynamic tree; `opt_tree`: OPT-Tree); `fitted` checks a scorer or calibration against
the pair and machine it was fitted for. Training and fitting these parts is `graftlib.training`'s job.

May import: `graftlib.core`, `graftlib.models`, `graftlib.data`.
"""

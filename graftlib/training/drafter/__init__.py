"""The drafters' recipe: target data, corpora, the DFlash and EAGLE-3 trainers and their shared machinery.

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`; not `graftlib.training.graft`.
"""

"""The drafters' recipe: the data they train on (`data/`), the DFlash and EAGLE-3 trainers and their shared machinery.

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`; not `graftlib.training.graft`.
"""

"""GRAFT's parts: traces, the TDES scorer's training, same-prefix replay, SABA's fits and calibration.

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`; not `graftlib.training.drafter`.
"""

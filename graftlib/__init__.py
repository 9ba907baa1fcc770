"""graftlib: exact speculative decoding with DFlash drafters and DDTree / GRAFT draft trees.

Modules are small and flat, one concept each (see README "Layout"). Importing the package is
cheap: heavy modules (torch models, data) are imported by the caller, not here.
"""

__version__ = "0.1.0"

"""Training: the pipelines that make the shipped artifacts, in two rooms by artifact:

  drafter  the drafters' recipe: target data and corpora (`target_data`, `store`, `corpus`), the DFlash
           and EAGLE-3 trainers (`dflash_train`, `eagle3_train`) on shared machinery (`samples`,
           `trainer`, `training_run`, `blocks`), their lineage and evaluation anchors, the one-process GPU
           run (`pipeline`).
  graft    GRAFT's parts: DDTree traces (`traces`), TDES training (`tdes_train`, eqs. 7-12), same-prefix
           budget replay (`replay`), SABA's fits and calibration (`saba_fit`, `calibrate`) and its check at
           T > 0 (`temperature_tracking`).
Above both: `prepare` (a pair's scorers and calibration in one command) and `ship` (a trained drafter or a
prepared folder into the shipped assets). The rooms do not import each other.

May import: `graftlib.core`, `graftlib.models`, `graftlib.data`, `graftlib.methods`, `graftlib.inputs`.
"""

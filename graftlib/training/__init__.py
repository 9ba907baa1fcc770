"""Training: the pipelines that produce the shipped artifacts (drafter, TDES scorer, SABA calibration).

Drafter data and the DFlash recipe (`drafter_data`, `drafter_train`), the EAGLE-3 recipe on the same
data (`eagle3_train`), and the machinery both trainers share (`loop_data`: samples and anchors, `train_loop`: the trainer, `loop_run`: the run); DDTree traces and the
mismatch metric (`traces`); TDES training (`tdes_train`, eqs. 7-12); same-prefix budget replay
(`replay`), SABA's least-squares fits (`saba_fit`), the calibration that runs them
(`calibrate`) and its check at T > 0 (`temperature_tracking`: a greedy fit against one refitted
on sampled replay); `prepare` runs traces, TDES training and calibration for a new pair into one
folder. Each pipeline but `temperature_tracking` is also a `graft` subcommand.

May import: `graftlib.core`, `graftlib.models`, `graftlib.data`, `graftlib.methods`.
"""

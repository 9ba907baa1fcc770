"""Workbook: what the notebooks stand on.

`runner` (the profiles and the papermill runner, `graft workbook`), `plots` (every figure's drawing),
`figures_manifest` (what each committed figure was drawn with), `tree_view` (a round's tree as text or
a widget), `drafter_families` (the train_drafter notebook's drafter families table).

May import: `graftlib.core`, `models`, `data`, `methods`, `inputs`, `training`, `graftlib.lab.report`,
`graftlib.lab.run`.
"""

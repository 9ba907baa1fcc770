"""The workbook's figures, one module per concern; the notebooks import from the module that draws theirs.

  - `layout`: one title format (`figure_title`), one save path (`save_figure`) with its checks, legends, bars
  - `trees`: a verified round drawn as a small tree (Figure 1(a)/(b))
  - `training`: the drafter's training and learning curves
  - `tables`: the paper's Tables 1-3 beside ours
  - `figures`: the paper's Figures 1(c), 5 and 6, SABA at T > 0, the regimes and the strength axis
  - `claims`: the claims table by regime

Rules every figure follows: a paper series is drawn on the same axes as ours and named in the legend (never on an
unlabeled second axis); legends sit outside the plot area (`layout.legend_outside` under one panel,
`layout.legend_below` one legend under a figure of panels), never over data, and `layout.save_figure` refuses a
figure whose legend covers an axis label, tick label or title, whose tick labels overlap or lie inside their panel
(from the drawn extents); within a figure a colour has one meaning. seaborn draws the generalization bars; matplotlib
the rest, `layout.grouped_bars` the bars that carry intervals. The `plot_*` functions take the tables the notebooks
also write as CSV under `figures/`, so a committed figure can be redrawn from its CSV without measuring again. A
figure's title is two lines in plain words (`layout.figure_title`): what is compared, then the pair, machine, dtype
and prompt counts. A figure with modeled throughput (the rounds priced by a cost profile,
`graftlib.lab.report.modeled`) draws it beside the wall-clock series, never instead of it, and its legend says which
is which; the profile's id is in figures/manifest.json and the ranking rule in the notes beside the table's CSV;
wall-clock speedups carry their paired bootstrap 95% interval as whiskers. matplotlib and seaborn are imported lazily.
"""

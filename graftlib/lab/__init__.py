"""Lab: the experiments and the workbook around the library.

The interleaved resumable benchmark (`bench`) with its aggregates (`metrics`), its modeled
throughput, ranking rule and validation (`modeled`; `graft modeled`: `modeled_report`) and torchrun
sharding (`shard`); cost curves of the machine at hand (`costs`); host overhead per round
(`host_overhead`); the prepared device check (`device_check`); the paper's numbers (`paper`), its
nine throughput claims checked under both figures (`claims`), the workbook's Table 1 / 2 frames
(`tables`) and figure helpers (`plots`); the papermill runner and its profiles (`workbook`); `graft
generate` (`generate`) and the `graft` command itself (`cli`).

May import: every other layer (`graftlib.core`, `models`, `data`, `methods`, `training`).
"""

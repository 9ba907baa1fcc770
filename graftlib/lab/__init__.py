"""Lab: the experiments and the workbook around the library.

The interleaved resumable benchmark (`bench`) with its aggregates (`metrics`), its modeled
throughput, ranking rule and validation (`modeled`) and torchrun sharding (`shard`); cost curves of the machine at hand (`costs`); the prepared device check (`device_check`); the paper's numbers (`paper`)
and figure helpers (`plots`); the papermill runner and its profiles (`workbook`); `graft
generate` (`generate`) and the `graft` command itself (`cli`).

May import: every other layer (`graftlib.core`, `models`, `data`, `methods`, `training`).
"""

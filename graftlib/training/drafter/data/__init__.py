"""The data a drafter trains on: the target's own responses with its features and top-k log-probs (`target_data`,
decoded by continuous batching in `batched`), their directory on disk (`store`) and the committed token corpora
(`corpus`). May import what `graftlib.training.drafter` may; the trainers beside it import from here, never the
other way."""

"""Data: the offline prompt sets, their held-out splits and training pools (`prompts`).

Prompt sets come from pinned PyPI packages (sha256-checked) and are formatted with the target's
chat template (`graftlib.models.chat`); `graft data` (`command`) lists, fetches and shows them.

May import: `graftlib.core`, `graftlib.models`.
"""

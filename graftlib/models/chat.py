"""The chat template around a user message: how every prompt reaches a target.

`chat_text` wraps one user turn in the tokenizer's own template (generation prompt on, thinking
off). `Pair.prompt_ids` and the prompt sets' `format_prompt` (`graftlib.data.prompts`) both go
through it, so a benchmark prompt and a raw `graft generate --prompt` are formatted alike. It
imports nothing: the prompt sets use it without loading a model.
"""


def chat_text(tokenizer, user_text: str) -> str:
    """The target's chat template around one user turn, generation prompt on, thinking off."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False,
        enable_thinking=False,
    )

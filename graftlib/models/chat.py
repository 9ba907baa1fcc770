"""The chat template around user messages: how every prompt reaches a target.

`chat_text` wraps one user turn in the tokenizer's own template (generation prompt on, thinking
off). `Pair.prompt_ids` and the prompt sets' `format_prompt` (`graftlib.data.prompts`) both go
through it, so a benchmark prompt and a raw `graft generate --prompt` are formatted alike.
`conversation_text` is the same for a conversation (user, assistant, user, ...: a multi-turn
benchmark prompt's later turn, `graftlib.lab.report.multiturn`); one user message gives `chat_text`'s text,
and `conversation_ids` its token ids.
It imports nothing: the prompt sets use it without loading a model.
"""

ROLES = ("user", "assistant")


def conversation_text(tokenizer, messages: list[str]) -> str:
    """The target's chat template around alternating user / assistant messages (the first and the
    last are user turns), generation prompt on, thinking off."""
    return tokenizer.apply_chat_template(
        [{"role": ROLES[k % 2], "content": text} for k, text in enumerate(messages)],
        add_generation_prompt=True, tokenize=False, enable_thinking=False,
    )


def conversation_ids(tokenizer, messages: list[str]) -> list[int]:
    """`conversation_text`'s token ids (the template holds any BOS / special tokens: none are added)."""
    return list(tokenizer.encode(conversation_text(tokenizer, messages), add_special_tokens=False))


def chat_text(tokenizer, user_text: str) -> str:
    """The target's chat template around one user turn, generation prompt on, thinking off."""
    return conversation_text(tokenizer, [user_text])

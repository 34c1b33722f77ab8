"""A small Qwen2.5-like HF tokenizer directory, built locally in seconds (no downloads).

The tokenizer ``bin/eval --rehearse`` uses when ``MODEL_DIR`` has none (and the tests' stand-in
for the policy model's ``MODEL_DIR``, slime's ``--hf-checkpoint``): a byte-level
BPE ``PreTrainedTokenizerFast`` trained on a fixed corpus, with Qwen2.5's special tokens
(``<|endoftext|> <|im_start|> <|im_end|> <tool_call> </tool_call> <tool_response>
</tool_response> <think> </think>``, each a single vocab entry), eos ``<|im_end|>``, a
ChatML chat template in the Qwen2.5 format (default system prompt, ``# Tools`` block in the
system turn, assistant tool calls as Hermes ``<tool_call>`` JSON, consecutive tool results
grouped into one ``user`` turn of ``<tool_response>`` blocks), and a ``config.json`` with
``model_type: qwen2`` so the directory looks like a local HF model directory.

Because the vocabulary also holds ``<tool_response>`` and ``</think>`` as single tokens, the
``renderers`` library's ``Qwen3Renderer`` can be constructed on it too (reference §11).

The same corpus and trainer settings give the same vocabulary every time (deterministic).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# A ChatML template in Qwen2.5-Instruct's format, written for this project.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    "{%- else %}{{- '" + DEFAULT_SYSTEM_PROMPT + "' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- else %}"
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A Qwen3-style template, written for this project: as Qwen3's own chat template does, an
# assistant turn keeps its reasoning (``<think>`` block) only after the last user message; older
# turns are rendered without it (a ``<think>`` block left in their content is cut off). No
# ``enable_thinking`` switch, so family inference keeps the model's chat template (the gateway's
# own bridge) for a ``qwen2`` config.
QWEN3_STYLE_CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for message in messages %}{%- if message.role == 'user' %}"
    "{%- set ns.last_query = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' or message.role == 'user' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content or '' %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last_query and message.reasoning_content %}"
    "{{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{{- content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = (
    "the a an is are was of to in and or for with on at by from what how many much "
    "calculate add sum total answer result number numbers tool tools function functions call "
    "name arguments parameters type object string integer properties required description "
    "user assistant system you your helpful weather city today sunny rain cold hot degrees "
    "please thanks question solve step first then finally so therefore equals plus minus times "
    "Alice Bob apples oranges has have gave bought sold left each per hour day week price dollars "
    "Qwen created Alibaba Cloud may call one more assist query provided signatures within XML tags "
    "return json object function-name args-json-object"
)


def _corpus() -> list[str]:
    """A fixed training corpus: chat scaffolding, JSON, digits and common words."""
    words = _WORDS.split()
    lines = [DEFAULT_SYSTEM_PROMPT, CHAT_TEMPLATE]
    for i in range(400):
        a, b = (i * 7919) % 997, (i * 104729) % 1009
        w = [words[(i * k) % len(words)] for k in (1, 3, 5, 7, 11, 13)]
        lines.append(f"{' '.join(w).capitalize()}? {a} + {b} = {a + b}.")
        lines.append(json.dumps({"name": w[0], "arguments": {"a": a, "b": b, "text": w[1]}}))
        lines.append(f"<|im_start|>user\n{' '.join(w)} {a}<|im_end|>\n<|im_start|>assistant\n")
    return lines


def _qwen2_tokenizer_config(path: Path) -> None:
    """Make ``tokenizer_config.json`` say what Qwen2.5's does: Qwen2Tokenizer, no unk token.

    Without ``unk_token: null`` transformers' Qwen2Tokenizer defaults unk to ``<|endoftext|>``,
    which would make that special look unknown to renderers.
    """
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "Qwen2Tokenizer"
    data["unk_token"] = None
    path.write_text(json.dumps(data, indent=2) + "\n")


def build_toy_tokenizer(directory: Path, chat_template: str = CHAT_TEMPLATE) -> Path:
    """Write the toy tokenizer + ``config.json`` into ``directory`` and return it.

    :param directory: where to write (created if missing). Loading it back with
        ``transformers.AutoTokenizer.from_pretrained(directory)`` works offline.
    :param chat_template: the chat template it carries (:data:`QWEN3_STYLE_CHAT_TEMPLATE`: one
        that drops old reasoning); the vocabulary is the same either way.
    :returns: ``directory``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = chat_template
    fast.save_pretrained(str(directory))
    _qwen2_tokenizer_config(directory / "tokenizer_config.json")
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": len(fast),
        "eos_token_id": fast.convert_tokens_to_ids("<|im_end|>"),
        "bos_token_id": None,
        "max_position_embeddings": 32768,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return directory

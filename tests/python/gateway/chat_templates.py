"""Model directories carrying the published chat templates' rules, built on the toy tokenizer.

Each family is the toy vocabulary (fakes.toy_tokenizer) with the family's own added tokens, each
special or ordinary as in the real tokenizer, and a chat template that carries every rule of the
family's PUBLISHED template that decides how earlier turns render. Templates whose licence lets
them be copied are stored verbatim in tests/fixtures/chat_templates/ (with their provenance in
the header comment of this module, below); the others are transcribed here, rule by rule, each
rule with where it is from. No test fetches anything.

Provenance (read with the session's fetch/read tools on 2026-11-29, never at test time):

- ``qwen3.jinja``: Qwen/Qwen3-0.6B ``tokenizer_config.json`` ``chat_template`` (Apache-2.0), as
  copied by llama.cpp to ``models/templates/Qwen-Qwen3-0.6B.jinja`` (commit b354d7c9 of a mirror;
  the file there has CRLF line ends, stored here with LF: every line starts with ``{%-``/``{{-``,
  which strip the line end, so the render is the same). Rules: reasoning kept only after the
  last user query (``loop.index0 > ns.last_query_index``), the LAST assistant message always
  rendered with a ``<think>`` block, empty or not (``loop.last``), tool results as ``user``
  blocks of ``<tool_response>`` (consecutive ones grouped), a first system message in the
  system block (with the tools), a later system message rendered in place.
  Real tokenizer: ``<|im_start|> <|im_end|> <|endoftext|>`` special; ``<think> </think>
  <tool_call> </tool_call> <tool_response> </tool_response>`` ordinary added tokens.
- ``deepseek_v3_1.jinja``: deepseek-ai/DeepSeek-V3.1 ``tokenizer_config.json`` (MIT), as copied
  by llama.cpp to ``models/templates/deepseek-ai-DeepSeek-V3.1.jinja`` (ggml-org/llama.cpp commit
  0374c5b6). Rules: every system message joined into the prompt's head (wherever it stands), a
  reply after a user turn opens with ``<｜Assistant｜></think>`` (thinking off), ``</think>`` text
  cut from history (``content.split('</think>', 1)[1]``), tool results as
  ``<｜tool▁output▁begin｜>`` blocks, no generation prompt after a tool result (the model goes on
  in the same assistant turn), each reply closed by ``<｜end▁of▁sentence｜>``.
- ``kimi_k2.jinja``: moonshotai/Kimi-K2-Instruct's template (modified MIT), as copied by llama.cpp
  to ``models/templates/moonshotai-Kimi-K2.jinja`` (ggml-org/llama.cpp commit 02f4a631). Rules: a
  default system message when the first is not one, every message closed by ``<|im_end|>``,
  tool results as ``<|im_system|>tool`` messages, later system messages in place.
- GLM-4.5 and GLM-4.7 (:data:`GLM45_TEMPLATE`, :data:`GLM47_TEMPLATE`): transcribed (the copies
  found were edited by their hosts); rules from zai-org's templates as PrimeIntellect's
  ``renderers`` mirrors them (``glm45.py``: "hard-coded Python mirroring the GLM-4.5 Jinja chat
  template"; its GLM-5 renderer for 4.7's compact form) and two verbatim quotes in public code
  (``((clear_thinking is defined and not clear_thinking) or loop.index0 > ns.last_user_index)
  and reasoning_content``): reasoning kept only after the last user turn,
  an empty ``<think></think>`` (4.5) or ``</think>`` (4.7) otherwise; no closing token (the next
  role token ends a reply: the model samples ``<|user|>`` or ``<|observation|>`` as its stop);
  tool results as one ``<|observation|>`` block of ``<tool_response>``s; system messages in place.
- Qwen3.5 / Qwen3.6 (:data:`QWEN35_TEMPLATE`): transcribed; rules from the Qwen3.5 template as
  quoted in public code (``raise_exception('System message must be at the beginning.')``,
  ``loop.previtem``/``loop.nextitem`` tool grouping) and renderers' ``qwen35.py`` (parity with the
  template): a system message anywhere but first is refused, every reply after the last user
  query carries a ``<think>`` block (empty or not), earlier ones none, tool results as ``user``
  blocks, the generation prompt opens ``<think>\\n``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fakes.toy_tokenizer import build_toy_tokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"

# GLM-4.5 (transcribed, see the module): the history-deciding rules, nothing else.
GLM45_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- if tools -%}<|system|>\n# Tools\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>"
    "{%- endif -%}"
    "{%- set ns = namespace(last_user_index=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{% set ns.last_user_index = loop.index0 -%}"
    "{%- endif %}{%- endfor %}"
    "{% for m in messages %}"
    "{%- if m.role == 'user' -%}<|user|>\n{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>"
    "{%- set reasoning_content = '' %}{%- set content = m.content or '' %}"
    "{%- if m.reasoning_content is string %}{%- set reasoning_content = m.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_user_index and reasoning_content -%}"
    "{{ '\\n<think>' + reasoning_content.strip() + '</think>' }}"
    "{%- else -%}{{ '\\n<think></think>' }}{%- endif -%}"
    "{%- if content.strip() -%}{{ '\\n' + content.strip() }}{%- endif -%}"
    "{%- for tc in m.tool_calls or [] -%}{%- set tc = tc.function -%}"
    "{{ '\\n<tool_call>' + tc.name }}{%- for k, v in tc.arguments.items() -%}"
    "{{ '\\n<arg_key>' + k + '</arg_key>\\n<arg_value>' }}{{ v | tojson if v is not string else v }}"
    "{{ '</arg_value>' }}{%- endfor -%}{{ '\\n</tool_call>' }}{%- endfor -%}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|observation|>' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- elif m.role == 'system' -%}<|system|>\n{{ m.content }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)

# GLM-4.7 (transcribed): the 4.5 rules, compact (no newlines around the blocks and tool results),
# ``</think>`` for a turn without kept reasoning, ``clear_thinking=false`` keeps all, the prompt
# opens ``<think>``.
GLM47_TEMPLATE = (
    GLM45_TEMPLATE.replace("<|user|>\n", "<|user|>")
    .replace("<|system|>\n{{ m.content }}", "<|system|>{{ m.content }}")
    .replace(
        "loop.index0 > ns.last_user_index and reasoning_content",
        "((clear_thinking is defined and not clear_thinking) or loop.index0 > ns.last_user_index)"
        " and reasoning_content",
    )
    .replace("'\\n<think>' + reasoning_content", "'<think>' + reasoning_content")
    .replace("{{ '\\n<think></think>' }}", "{{ '</think>' }}")
    .replace("{{ '\\n' + content.strip() }}", "{{ content.strip() }}")
    .replace(
        "'\\n<tool_response>\\n' + m.content + '\\n</tool_response>'",
        "'<tool_response>' + m.content + '</tool_response>'",
    )
    .replace("<|assistant|>{%- endif -%}", "<|assistant|><think>{%- endif -%}")
)

# Qwen3.5 / 3.6 (transcribed, see the module).
QWEN35_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools>' }}"
    "{%- if messages[0].role == 'system' and messages[0].content | trim %}"
    "{{- '\\n\\n' + messages[0].content | trim }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content | trim + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' %}{%- set content = message.content | trim %}"
    "{%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}{%- set content = (message.content or '') | trim %}"
    "{%- if message.role == 'system' %}{%- if not loop.first %}"
    "{{- raise_exception('System message must be at the beginning.') }}{%- endif %}"
    "{%- elif message.role == 'user' %}{{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- set reasoning_content = reasoning_content | trim %}"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls or [] %}{%- set tool_call = tool_call.function %}"
    "{{- ('\\n\\n' if loop.first and content else ('' if loop.first else '\\n')) }}"
    "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
    "{%- for name, value in tool_call.arguments.items() %}"
    "{{- '<parameter=' + name + '>\\n' + (value | string) + '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.previtem and loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)

QWEN_ORDINARY = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


@dataclass(frozen=True)
class Family:
    """A chat-template family: its template, its added tokens, the tokens that end a reply.

    :param name: the family's name in test ids.
    :param template: the chat template.
    :param special: added tokens the real tokenizer marks special (beyond the toy's ChatML ones).
    :param ordinary: added tokens the real tokenizer keeps ordinary (``special: false``).
    :param stops: the tokens a reply ends with (the first is what a scripted reply samples).
    """

    name: str
    template: str
    special: tuple[str, ...] = ()
    ordinary: tuple[str, ...] = QWEN_ORDINARY
    stops: tuple[str, ...] = ("<|im_end|>",)


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


FAMILIES = {
    "qwen3": Family("qwen3", _fixture("qwen3.jinja")),
    "qwen3.5": Family(
        "qwen3.5", QWEN35_TEMPLATE, ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    ),
    "glm-4.5": Family(
        "glm-4.5", GLM45_TEMPLATE, ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                                    "<|observation|>", "<arg_key>", "</arg_key>", "<arg_value>",
                                    "</arg_value>"),
        stops=("<|observation|>", "<|user|>"),
    ),
    "glm-4.7": Family(
        "glm-4.7", GLM47_TEMPLATE, ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                                    "<|observation|>", "<arg_key>", "</arg_key>", "<arg_value>",
                                    "</arg_value>"),
        stops=("<|observation|>", "<|user|>"),
    ),
    "deepseek-v3.1": Family(
        "deepseek-v3.1", _fixture("deepseek_v3_1.jinja"),
        ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
         "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
         "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁outputs▁begin｜>",
         "<｜tool▁outputs▁end｜>"),
        stops=("<｜end▁of▁sentence｜>",),
    ),
    "kimi-k2": Family(
        "kimi-k2", _fixture("kimi_k2.jinja"),
        ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        stops=("<|im_end|>",),
    ),
}


def build_family_dir(directory: Path, family: Family) -> Path:
    """The toy model directory with ``family``'s template and added tokens (see :class:`Family`).

    The toy tokenizer's ChatML specials stay special; the family's ordinary tokens are turned
    ordinary (``special: false`` in ``tokenizer.json`` and ``tokenizer_config.json``, as in the
    real tokenizer), its special ones are added after the toy vocabulary, and
    ``generation_config.json`` lists its stop tokens as ``eos_token_id`` (as the real models'
    do), which the gateway reads.
    """
    build_toy_tokenizer(directory, family.template)
    tok_path, conf_path = directory / "tokenizer.json", directory / "tokenizer_config.json"
    tok, conf = json.loads(tok_path.read_text()), json.loads(conf_path.read_text())
    next_id = max(len(tok["model"]["vocab"]), max(t["id"] for t in tok["added_tokens"]) + 1)
    for content in family.special:
        flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
        tok["added_tokens"].append({"id": next_id, "content": content, **flags, "special": True})
        next_id += 1
    for entry in tok["added_tokens"]:
        entry["special"] = entry["special"] and entry["content"] not in family.ordinary
    listed = [t for t in conf.get("extra_special_tokens", []) if t not in family.ordinary]
    conf["extra_special_tokens"] = listed + list(family.special)
    tok_path.write_text(json.dumps(tok, ensure_ascii=False, indent=2))
    conf_path.write_text(json.dumps(conf, ensure_ascii=False, indent=2))
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    stops = {"eos_token_id": [ids[s] for s in family.stops]}
    (directory / "generation_config.json").write_text(json.dumps(stops))
    config = json.loads((directory / "config.json").read_text())
    config["vocab_size"] = next_id
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory

"""The vLLM server flags the nodeagent's requests rely on, defined once.

The local launcher (nodeagent/vllm_launch.py) starts vLLM with them,
tests/deploy/test_engine_args.py holds every Kubernetes manifest's vLLM container to them, and
the adapter refuses an engine that shows it was started without one (nodeagent/vllm_check.py).
vLLM accepts the requests without these flags and gets them quietly wrong, or refuses them only
when they come:

- `--scheduling-policy priority`: every request carries a priority (Plus 0, Free 10); the
  default fcfs scheduler accepts it and ignores it, so Plus waits behind Free.
- `--enable-prompt-tokens-details`: without it `usage` has no `cached_tokens`, and the token
  bucket charges a conversation's cached history at full price.
- `--enable-prefix-caching`: what makes a conversation's history cached at all.
- `--enable-auto-tool-choice` and `--tool-call-parser`: without them every request with tools
  is answered 400; the parser must read the model family's own tool-call format.

`python -m nodeagent.vllm_flags MODEL` prints them as a manifest's `args` lines.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True, slots=True)
class ModelFamily:
    name: str
    # Searched in the model's Hugging Face name or folder, lower-cased.
    pattern: str
    tool_call_parser: str
    # A template from nodeagent/templates for a model whose own drops a request's tools;
    # empty: the model's own template renders tools in the format the parser reads.
    chat_template: str = ""


# First match wins: Hermes fine-tunes of Llama write Hermes' <tool_call> tags, not Llama's JSON.
FAMILIES = (
    ModelFamily("hermes", r"hermes", "hermes"),
    ModelFamily("qwen", r"qwen(2\.5|3)-(?!coder)", "hermes"),
    ModelFamily("smollm2", r"smollm2", "hermes", "smollm2_tools.jinja"),
    # Llama 3.1 to 3.3 write a call as a JSON object; their own template renders tools.
    ModelFamily("llama-3", r"llama-?3(\.\d+)?-", "llama3_json"),
)


class UnknownModelFamily(ValueError):
    pass


def family_of(model: str) -> ModelFamily:
    """The family of a model given by its Hugging Face name or its folder."""
    name = model.rstrip("/").lower()
    for family in FAMILIES:
        if re.search(family.pattern, name):
            return family
    known = ", ".join(f.name for f in FAMILIES)
    raise UnknownModelFamily(
        f"no tool-call parser is known for model {model!r} (families: {known}); "
        "name the parser and, if the model's own template drops tools, a chat template"
    )


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    # None: a switch.
    value: str | None = None

    def manifest(self) -> str:
        return self.name if self.value is None else f"{self.name}={self.value}"

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


def required_flags(tool_call_parser: str) -> tuple[Flag, ...]:
    """What every vLLM server the nodeagent sends requests to must be started with."""
    return (
        Flag("--scheduling-policy", "priority"),
        Flag("--enable-prompt-tokens-details"),
        Flag("--enable-prefix-caching"),
        Flag("--enable-auto-tool-choice"),
        Flag("--tool-call-parser", tool_call_parser),
    )


def launcher_args(tool_call_parser: str, chat_template: str) -> list[str]:
    """The flags as the local launcher passes them; chat_template empty: the model's own."""
    args = [part for flag in required_flags(tool_call_parser) for part in flag.argv()]
    return [*args, "--chat-template", chat_template] if chat_template else args


def parse_args(args: Sequence[str]) -> dict[str, str | None]:
    """A vLLM command line's options by name (`--a=b`, `--a b`, a switch `--a`); vLLM takes
    `_` and `-` alike in a name."""
    options: dict[str, str | None] = {}
    for index, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, equals, value = arg.partition("=")
        name = "--" + name[2:].replace("_", "-")
        following = args[index + 1] if index + 1 < len(args) else "--"
        if equals:
            options[name] = value
        elif not following.startswith("--"):
            options[name] = following
        else:
            options[name] = None
    return options


def missing_flags(args: Sequence[str]) -> list[str]:
    """The required flags a vLLM command line lacks or sets otherwise, as `--name=value`; its
    model (`--model` or the first word) decides the tool-call parser and the template."""
    options = parse_args(args)
    model = options.get("--model") or next((a for a in args if not a.startswith("-")), "")
    family = family_of(model or "")
    missing = [
        flag.manifest()
        for flag in required_flags(family.tool_call_parser)
        if flag.name not in options or options[flag.name] != flag.value
    ]
    if family.chat_template and not options.get("--chat-template"):
        missing.append(f"--chat-template=(a copy of nodeagent/templates/{family.chat_template})")
    return missing


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m nodeagent.vllm_flags MODEL", file=sys.stderr)
        return 2
    family = family_of(argv[0])
    for flag in required_flags(family.tool_call_parser):
        print(f"- {flag.manifest()}")
    if family.chat_template:
        print(f"- --chat-template=(a copy of nodeagent/templates/{family.chat_template})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The code blocks of the README and the documentation pages, and the commands in their shell blocks.

A Python block runs in the tests unless an HTML comment right above it says why it cannot run here::

    <!-- example: skip (needs a GPU and hours of training) -->

Such a block is only compiled and its imports run. Shell blocks are read for the ``python -m delayzoo...``
and ``delayzoo ...`` commands in them (continuation lines joined, comments dropped, ``for`` loop variables
set to their first value), whose flags the tests parse with the commands' own parsers.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*example:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->")
PYTHON_LANGUAGES = {"python", "py", "pycon"}
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order, with their skip marks."""
    tokens = MarkdownIt("commonmark").parse(page.read_text())
    blocks = []
    for index, token in enumerate(tokens):
        if token.type != "fence" or token.map is None:
            continue
        language = token.info.strip().split(" ")[0].lower()
        previous = tokens[index - 1] if index else None
        mark = SKIP.search(previous.content) if previous is not None and previous.type == "html_block" else None
        blocks.append(Block(page, token.map[0] + 1, language, token.content, mark["reason"] if mark else None))
    return blocks


def python_blocks(page: Path) -> list[Block]:
    return [block for block in code_blocks(page) if block.language in PYTHON_LANGUAGES]


def _loop_values(text: str) -> dict[str, str]:
    """``for NAME in A B C; do`` -> {NAME: A}: a command inside the loop is checked with the first value."""
    return {match[1]: match[2].split()[0] for match in re.finditer(r"\bfor\s+(\w+)\s+in\s+([^;\n]+);\s*do", text)}


def shell_commands(block: Block) -> list[list[str]]:
    """The delayzoo commands of a shell block, each as ``[module, *arguments]``."""
    text = block.code.replace("\\\n", " ")
    variables = _loop_values(text)
    for name, value in variables.items():
        text = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, text)
    text = "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    commands = []
    words: list[str] = []
    for word in [*lexer, ";"]:
        if word and set(word) <= set(";&|\n"):
            command = _delayzoo_command(words)
            if command:
                commands.append(command)
            words = []
        else:
            words.append(word)
    return commands


def _delayzoo_command(words: list[str]) -> list[str] | None:
    while words and (words[0] in ("do", "then", "else") or re.fullmatch(r"\w+=\S*", words[0])):
        words = words[1:]  # shell keywords and VAR=value prefixes
    if len(words) >= 3 and re.fullmatch(r"(\S*/)?python3?", words[0]) and words[1] == "-m":
        return words[2:] if words[2].startswith("delayzoo") else None
    if words and words[0] == "delayzoo" and len(words) >= 2:
        return [f"delayzoo.zoo.{words[1]}", *words[2:]]
    return None

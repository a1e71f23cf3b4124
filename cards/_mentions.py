"""Defusing mentions, broadcasts and disguised links in text shown on a card (A6).

Contract: `defuse(text)` puts a WORD JOINER (U+2060, invisible, zero width) inside every token
that could notify people or hide a link target, and changes nothing else:

- broadcast words after `@` (`@channel`, `@here`, `@all`, `@everyone`, Feishu's `@_all`,
  `@所有人`): `@⁠channel` no longer matches what Slack (`link_names`) or Feishu turn into a ping;
- markup that opens with `<` (Slack `<!channel>`, `<!subteam^…>`, `<@U…>`, `<#C…>`,
  `<https://evil|https://good>`, `<mailto:…>`; Feishu `<at …>`): `<⁠!channel>` is no tag;
- a markdown link `[text](url)`, whose text may disguise its target: `]⁠(` is no link.

This comes on top of each platform's escaping (Slack `&lt;`, Feishu `&#60;`), which already
stops the tags; defusing also covers what is not escaped (plain-text headers) and any client
that parses more than it documents. Like every escape, it never shortens a text, so
`cards._limits.truncate` can apply it to any prefix.
"""

from __future__ import annotations

import re

__all__ = ["JOINER", "defuse"]

JOINER = "\u2060"
"""WORD JOINER: renders as nothing, and breaks a token in two for every parser."""

_TOKENS = re.compile(
    r"(?<=@)(?=channel|here|all|everyone|_all|所有人)"
    r"|(?<=<)(?=[!@#\s]|at\b|https?:|mailto:)"  # `\s`: `< @U1`, `<` + newline + `@` too
    r"|(?<=\])(?=\()",
    re.IGNORECASE,
)


def defuse(text: str) -> str:
    """`text` with a word joiner inside every mention, broadcast or markup-link token."""
    return _TOKENS.sub(JOINER, text)

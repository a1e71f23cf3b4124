"""`bot`'s error tree: every error it raises is a `BotError`, drawn in the tree, naming its turn.

Why this way: callers (the ingress's status mapping, the publisher's retry decision, the
actor's lease handling) catch by class, so an exception class defined outside the tree is one
no caller can catch as "ours". The modules are imported and their classes read, so a new
module's error is checked without a list to keep.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import bot
from bot import errors
from bot.errors import BotError, CardGone, LeaseLost, NotAuthentic, PlatformRateLimited


def _bot_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(bot.__path__, "bot.")]


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _bot_modules():
        module = importlib.import_module(name)
        for cls_name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, BaseException)
                and cls.__module__ == name
                and not cls_name.startswith("_")
            ):
                found[f"{name}.{cls_name}"] = cls
    return list(found.values())


def test_every_public_error_class_of_bot_is_a_bot_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 15, "the walk found bot's error classes"
    outside = [f"{c.__module__}.{c.__name__}" for c in classes if not issubclass(c, BotError)]
    assert outside == []


def test_every_error_is_defined_in_bot_errors_and_drawn_in_its_tree() -> None:
    classes = _exception_classes()
    elsewhere = [f"{c.__module__}.{c.__name__}" for c in classes if c.__module__ != "bot.errors"]
    assert elsewhere == [], "errors live in bot.errors (other modules re-export them)"
    doc = errors.__doc__ or ""
    drawn = set(re.findall(r"^(?:[│ ]*[├└]── )?(\w+) ", doc, re.M))
    undrawn = [c.__name__ for c in classes if c.__name__ not in drawn]
    assert undrawn == []
    assert sorted(errors.__all__) == sorted(c.__name__ for c in classes)


def test_an_error_names_the_session_and_turn_it_concerns() -> None:
    lost = LeaseLost("lease gone", session_id="slack:C1:1.0", turn_id="turn-1")
    assert str(lost) == "lease gone (session slack:C1:1.0, turn turn-1)"
    gone = CardGone("message_not_found").concerning("slack:C1:1.0", "turn-2")
    assert (gone.session_id, gone.turn_id) == ("slack:C1:1.0", "turn-2")
    assert gone.concerning("other", "turn-3").turn_id == "turn-2", "the first values are kept"
    assert str(CardGone("message_not_found")) == "message_not_found"


@pytest.mark.parametrize(
    ("error", "status", "public"),
    [(NotAuthentic("bad signature"), 401, "request verification failed")],
)
def test_a_rejected_request_keeps_its_status_and_generic_reason(
    error: NotAuthentic, status: int, public: str
) -> None:
    assert (error.status, error.public, error.detail) == (status, public, "bad signature")


def test_a_rate_limit_keeps_when_to_retry() -> None:
    limited = PlatformRateLimited(2.5)
    assert limited.retry_after_s == 2.5 and isinstance(limited, BotError)
    assert "retry after 2.5 s" in str(limited)

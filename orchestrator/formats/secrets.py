"""Secrets in free text: find them, name their kind, redact them.

The board refuses untrusted fields that hold a secret (``UNTRUSTED_CONTEXT_BLOCK``) and
redacts secrets everywhere else it writes (``docs/board.md``, "Secrets"). This module is
the pure part: no I/O, standard library only, patterns compiled on first use.

Two families of rules:

* **Known shapes**, recognised anywhere: OpenAI keys (``sk-``, ``sk-proj-``), Anthropic
  keys (``sk-ant-``), AWS access key ids (``AKIA``/``ASIA`` and 16 upper-case letters or
  digits), GitHub tokens (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``,
  ``github_pat_``), Slack tokens (``xoxa-``, ``xoxb-``, ``xoxp-``, ``xoxr-``, ``xoxs-``),
  PEM private key blocks (through the END line, or to the end of the text when the block
  is cut off) and JWTs (three base64url segments whose first decodes to a JSON object
  with ``"alg"``).
* **Values beside key-like words**: after ``password``, ``passwd``, ``secret``,
  ``token``, ``api_key``/``apikey``, ``access_key``, ``private_key``, ``auth`` or
  ``credential`` (any case, as part of a longer name too: ``DB_PASSWORD``,
  ``clientSecret``) and ``=``, ``:`` or a space, a value of at least 20 characters of
  the base64/hex alphabet that looks random (see :func:`_looks_random`). A 40-character
  base64 value beside ``aws`` or ``secret`` is reported as an AWS secret access key.

A random-looking string with no key-like word beside it is *not* reported: ids, hashes
and encoded data are everywhere in logs, and only the context tells a secret apart.

A :class:`Finding` holds the kind and the span, never the secret itself, so it can be
logged or shown safely.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Finding", "find_secrets", "first_secret_kind", "redact"]

#: Minimum Shannon entropy, in bits per character, of a value beside a key-like word.
#: Measured over 20,000 random strings each, the 0.1th percentile is 3.48 for 20
#: characters of base62/base64 and 4.33 for 40; real words and identifiers that pass the
#: character-class test sit near 3.5-3.9, so entropy cannot tell those apart and the
#: class test does that work; the bar removes repetitive placeholders
#: (``hunter2hunter2hunter2`` is 2.81, ``aaaaAAAA1111...`` far less).
ENTROPY_THRESHOLD = 3.0
#: The same bar for values of hexadecimal digits only, whose alphabet carries at most
#: 4 bits per character: random 20-character hex has a 0.1th percentile of 2.71.
HEX_ENTROPY_THRESHOLD = 2.5
#: Shortest value beside a key-like word that can be reported.
MIN_SECRET_LENGTH = 20

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class Finding(NamedTuple):
    """One secret in a text: its kind and its span, ``text[start:end]``."""

    kind: str
    start: int
    end: int


def find_secrets(text: str) -> list[Finding]:
    """Every secret in ``text``, in order, without overlaps.

    Where rules overlap (``api_key = sk-...`` is both an OpenAI key and a value beside
    a key-like word), the overlapping spans merge into one finding covering all of them,
    named by the most specific rule; so redacting the findings leaves no part of any
    matched secret behind.
    """
    candidates: list[tuple[int, int, int, str]] = []
    for rank, detector in enumerate(_detectors()):
        for match in detector.pattern.finditer(text):
            start, end = match.span(detector.group)
            if detector.accept is None or detector.accept(match):
                candidates.append((start, end, rank, detector.kind))
    candidates.sort()
    findings: list[Finding] = []
    best_rank = 0
    for start, end, rank, kind in candidates:
        if findings and start < findings[-1].end:
            last = findings[-1]
            if rank < best_rank:
                best_rank = rank
                last = last._replace(kind=kind)
            findings[-1] = last._replace(end=max(last.end, end))
        else:
            best_rank = rank
            findings.append(Finding(kind, start, end))
    return findings


def redact(text: str) -> str:
    """``text`` with every finding replaced by ``[REDACTED:<kind>]``."""
    pieces: list[str] = []
    position = 0
    for finding in find_secrets(text):
        pieces.append(text[position : finding.start])
        pieces.append(f"[REDACTED:{finding.kind}]")
        position = finding.end
    pieces.append(text[position:])
    return "".join(pieces)


def first_secret_kind(text: str) -> str | None:
    """The kind of the first secret in ``text``, or ``None`` when there is none."""
    findings = find_secrets(text)
    return findings[0].kind if findings else None


# -- the rules -------------------------------------------------------------------------


class _Detector(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    #: the group whose span is the secret
    group: int | str = 0
    #: a check of the match beyond the pattern (None: the pattern is enough)
    accept: Callable[[re.Match[str]], bool] | None = None


def _random_value(match: re.Match[str]) -> bool:
    return _looks_random(match.group("value"))


def _jwt_header(match: re.Match[str]) -> bool:
    """Whether the first segment is base64url of a JSON object with ``"alg"``."""
    import base64
    import json

    segment = match.group("header")
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except ValueError:  # bad base64, bad UTF-8 and bad JSON are all ValueErrors
        return False
    return isinstance(header, dict) and "alg" in header


def _looks_random(value: str) -> bool:
    """Whether a value beside a key-like word looks like a secret rather than a word.

    It must mix at least two of lower case, upper case and digits (so
    ``my_variable_name``, ``DATABASE_URL`` and file paths do not count), must not be a
    UUID (ids, not credentials, in this project), and must reach the entropy bar
    (:data:`ENTROPY_THRESHOLD`, or :data:`HEX_ENTROPY_THRESHOLD` for hex digits only).
    """
    core = value.rstrip("=")
    classes = (
        any(char.islower() for char in core)
        + any(char.isupper() for char in core)
        + any(char.isdigit() for char in core)
    )
    if classes < 2 or _uuid_pattern().fullmatch(core):
        return False
    is_hex = all(char in _HEX_DIGITS for char in core)
    return _entropy(core) >= (HEX_ENTROPY_THRESHOLD if is_hex else ENTROPY_THRESHOLD)


def _entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character."""
    length = len(text)
    return -sum(count / length * math.log2(count / length) for count in Counter(text).values())


@functools.cache
def _uuid_pattern() -> re.Pattern[str]:
    return re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


# A key-like word, then the rest of the name, a closing quote, "=", ":" or a space, an
# optional auth scheme and an opening quote; the value follows.
_KEY_CONTEXT = (
    r"(?i:pass(?:word|wd)|secret|token|api[_.-]?key|access[_.-]?key|private[_.-]?key"
    r"|auth|credential)"
    r"[\w.-]{0,30}[\"']?(?:\s*(?:=>|:=|[:=])\s*|\s+)(?:(?i:bearer|basic|token)\s+)?[\"']?"
)


@functools.cache
def _detectors() -> tuple[_Detector, ...]:
    """The rules, most specific first (the order names merged findings)."""
    return (
        _Detector(
            "private_key",
            re.compile(
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*)",
                re.DOTALL,
            ),
        ),
        _Detector("anthropic_api_key", re.compile(r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}")),
        _Detector(
            "openai_api_key",
            re.compile(
                r"(?<![\w-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?(?P<value>[A-Za-z0-9_-]{20,})"
            ),
            accept=_random_value,
        ),
        _Detector(
            "github_token",
            re.compile(
                r"(?<![A-Za-z0-9_])"
                r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"
                r"(?![A-Za-z0-9_])"
            ),
        ),
        _Detector("slack_token", re.compile(r"(?<![\w-])xox[abprs]-[A-Za-z0-9-]{10,}")),
        _Detector(
            "aws_access_key_id",
            re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ),
        _Detector(
            "jwt",
            re.compile(
                r"(?<![A-Za-z0-9_-])(?P<header>e[wy][A-Za-z0-9_-]{8,})"
                r"\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"
            ),
            accept=_jwt_header,
        ),
        _Detector(
            "aws_secret_access_key",
            re.compile(
                r"(?i:aws|secret)[\w.-]{0,40}[\"']?(?:\s*(?:=>|:=|[:=])\s*|\s+)[\"']?"
                r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
            ),
            group="value",
            accept=_random_value,
        ),
        _Detector(
            "high_entropy_secret",
            re.compile(_KEY_CONTEXT + rf"(?P<value>[A-Za-z0-9+/=_-]{{{MIN_SECRET_LENGTH},}})"),
            group="value",
            accept=_random_value,
        ),
    )

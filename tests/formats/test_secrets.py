"""Secrets (``orchestrator.formats.secrets``): every kind found and redacted, negatives left alone.

The secrets below are built at run time from a seeded generator, so this file holds no
string a secret scanner would flag, and every run uses the same values.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import math
import random
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.formats.secrets import (
    ENTROPY_THRESHOLD,
    HEX_ENTROPY_THRESHOLD,
    Finding,
    find_secrets,
    first_secret_kind,
    redact,
)

_RANDOM = random.Random(20240601)
ALNUM = string.ascii_letters + string.digits
BASE64URL = ALNUM + "_-"
HEX = "0123456789abcdef"


def _random(length: int, alphabet: str = ALNUM) -> str:
    return "".join(_RANDOM.choice(alphabet) for _ in range(length))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(header: object, signature: str | None = None) -> str:
    payload = {"sub": "1234567890", "name": "Ada", "iat": 1516239022}
    parts = [_b64url(json.dumps(header).encode()), _b64url(json.dumps(payload).encode())]
    return ".".join([*parts, _random(43, BASE64URL) if signature is None else signature])


def _pem(label: str, lines: int = 4, *, end: bool = True) -> str:
    body = "\n".join(_random(64, ALNUM + "+/") for _ in range(lines))
    tail = f"\n-----END {label}-----" if end else ""
    return f"-----BEGIN {label}-----\n{body}{tail}"


# (kind, the secret itself, the text around it with {} where the secret goes)
SECRETS = [
    ("openai_api_key", "sk-" + _random(48), "OPENAI key {} in the shell"),
    ("openai_api_key", "sk-proj-" + _random(156, BASE64URL), "use {}."),
    ("openai_api_key", "sk-svcacct-" + _random(64, BASE64URL), "({})"),
    ("anthropic_api_key", "sk-ant-api03-" + _random(93, BASE64URL) + "AA", "x={}"),
    ("anthropic_api_key", "sk-ant-" + _random(40, BASE64URL), "key: '{}'"),
    ("aws_access_key_id", "AKIA" + _random(16, string.ascii_uppercase + string.digits), "{}"),
    ("aws_access_key_id", "ASIA" + _random(16, string.ascii_uppercase + string.digits), "id {},"),
    ("aws_secret_access_key", _random(40, ALNUM + "/+"), "aws_secret_access_key = {}"),
    ("aws_secret_access_key", _random(40, ALNUM + "/+"), 'AWS_SECRET: "{}"'),
    ("github_token", "ghp_" + _random(36), "git clone https://{}@github.com/o/r"),
    ("github_token", "gho_" + _random(36), "{}"),
    ("github_token", "ghu_" + _random(36), "{}"),
    ("github_token", "ghs_" + _random(36), "{} ok"),
    ("github_token", "ghr_" + _random(36), "{}"),
    ("github_token", "github_pat_" + _random(22) + "_" + _random(59), "pat {}"),
    ("slack_token", "xoxb-" + _random(12, string.digits) + "-" + _random(24), "{}"),
    ("slack_token", "xoxp-" + _random(12, string.digits) + "-" + _random(32), "slack {}!"),
    ("slack_token", "xoxa-2-" + _random(30), "{}"),
    ("private_key", _pem("RSA PRIVATE KEY"), "here:\n{}\nand more text after"),
    ("private_key", _pem("PRIVATE KEY"), "{}"),
    ("private_key", _pem("EC PRIVATE KEY"), "{}"),
    ("private_key", _pem("ENCRYPTED PRIVATE KEY"), "{}"),
    ("private_key", _pem("OPENSSH PRIVATE KEY"), "{}"),
    ("private_key", _pem("PGP PRIVATE KEY BLOCK"), "{}"),
    ("private_key", _pem("RSA PRIVATE KEY", end=False), "cut off: {}"),  # to the end
    ("private_key", _pem("RSA PRIVATE KEY").replace("\n", "\\n"), '{{"key": "{}"}}'),
    ("jwt", _jwt({"alg": "HS256", "typ": "JWT"}), "Authorization: Bearer {}"),
    ("jwt", _jwt({"alg": "RS256"}), "cookie={}; Path=/"),
    ("jwt", _jwt({"alg": "none"}, signature=""), "unsigned {}"),
    ("high_entropy_secret", _random(24), "DB_PASSWORD={}"),
    ("high_entropy_secret", _random(32), "passwd: {}"),
    ("high_entropy_secret", _random(40, HEX), '{{"api_key": "{}"}}'),
    ("high_entropy_secret", _random(30, BASE64URL), "client_secret='{}'"),
    ("high_entropy_secret", _random(28), "mytool --token {}"),
    ("high_entropy_secret", _random(22), "apikey {}"),
    ("high_entropy_secret", _random(26), "accessKey => {}"),
    ("high_entropy_secret", _random(64, ALNUM + "+/") + "==", "private_key: {}"),
    ("high_entropy_secret", _random(20), "auth={}"),
    ("high_entropy_secret", _random(36), "CREDENTIALS := {}"),
    ("high_entropy_secret", _random(32), "Authorization: Basic {}"),
    ("high_entropy_secret", _random(32, HEX), "SECRET_TOKEN {}"),
]


def _case_id(case: tuple[str, str, str]) -> str:
    return f"{case[0]}:{case[2][:18]}"


def _fragments(secret: str, size: int = 8) -> list[str]:
    return [secret[i : i + size] for i in range(max(1, len(secret) - size + 1))]


def _leaked(secret: str, redacted: str, context: str = "") -> list[str]:
    """Pieces of ``secret`` still in ``redacted`` (ignoring pieces the context holds too)."""
    return [part for part in _fragments(secret) if part in redacted and part not in context]


@pytest.mark.parametrize(("kind", "secret", "around"), SECRETS, ids=map(_case_id, SECRETS))
def test_each_kind_is_found(kind: str, secret: str, around: str) -> None:
    text = around.format(secret)
    start = text.index(secret)
    assert find_secrets(text) == [Finding(kind, start, start + len(secret))]
    assert first_secret_kind(text) == kind


@pytest.mark.parametrize(("kind", "secret", "around"), SECRETS, ids=map(_case_id, SECRETS))
def test_each_kind_is_redacted_completely(kind: str, secret: str, around: str) -> None:
    text = around.format(secret)
    redacted = redact(text)
    assert redacted == around.format(f"[REDACTED:{kind}]")
    assert _leaked(secret, redacted) == []
    assert find_secrets(redacted) == []


def test_findings_come_in_order_and_redact_all_of_them() -> None:
    cases = SECRETS[::5]
    text = "\n\n".join(around.format(secret) for _, secret, around in cases)
    findings = find_secrets(text)
    assert [finding.kind for finding in findings] == [kind for kind, _, _ in cases]
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    redacted = redact(text)
    for _, secret, _ in cases:
        assert _leaked(secret, redacted) == []


def test_overlapping_rules_merge_into_the_most_specific_kind() -> None:
    key = "sk-" + _random(48)
    text = f"OPENAI_API_KEY={key}"
    assert find_secrets(text) == [Finding("openai_api_key", 15, 15 + len(key))]
    assert redact(text) == "OPENAI_API_KEY=[REDACTED:openai_api_key]"
    # a value beside a key word that runs past the known shape: the union is redacted
    tail = _random(20, BASE64URL.replace("-", "").replace("_", ""))
    longer = f"token={key}+{tail}"
    assert find_secrets(longer) == [Finding("openai_api_key", 6, len(longer))]


def test_a_finding_holds_no_secret() -> None:
    text = "token=" + _random(30)
    (finding,) = find_secrets(text)
    assert repr(finding) == f"Finding(kind='high_entropy_secret', start=6, end={len(text)})"


def test_jwt_needs_a_json_header_with_alg() -> None:
    assert find_secrets(_jwt({"typ": "JWT"})) == []  # no "alg"
    assert find_secrets(_jwt(["alg"])) == []  # not an object
    not_json = _b64url(b"{not json at all}") + "." + _b64url(b"{}") + ".sig"
    assert find_secrets(not_json) == []
    assert find_secrets("ey" + _random(20) + "." + _random(20) + "." + _random(20)) == []
    # a pretty-printed header encodes as "ew..." and is still a JWT
    spaced = _b64url(b'{\n "alg": "HS256"\n}') + "." + _b64url(b'{"a":1}') + "." + _random(10)
    assert spaced.startswith("ew")
    assert first_secret_kind(spaced) == "jwt"


def test_aws_access_key_id_boundaries() -> None:
    body = _random(16, string.ascii_uppercase + string.digits)
    assert first_secret_kind("AKIA" + body) == "aws_access_key_id"
    assert find_secrets("AKIA" + body[:15]) == []  # too short
    assert find_secrets("AKIA" + body + "X") == []  # too long
    assert find_secrets("XAKIA" + body) == []  # inside a longer word
    assert find_secrets("AKIA" + body.lower()) == []  # upper case only
    assert find_secrets("AGIA" + body) == []


def test_public_keys_and_certificates_are_not_private_keys() -> None:
    for label in ("PUBLIC KEY", "CERTIFICATE", "RSA PUBLIC KEY", "CERTIFICATE REQUEST"):
        assert find_secrets(_pem(label)) == []


NOT_SECRETS = [
    # prose, including the key-like words
    "The secret to good tests is small functions and clear names.",
    "The password reset token expires after thirty minutes; auth is handled upstream.",
    "We rotated credentials yesterday. The token refresh runs hourly.",
    "author: Ada Lovelace <ada@example.com>",
    "OAuth authorization code flow with PKCE, see RFC 7636.",
    "token validation_of_incoming_requests_in_middleware",
    "password: internationalization_considerations",
    "SECRET_KEY_SETTING_NAME: DATABASE_CONNECTION_STRING",
    # placeholders and indirections
    "password=changeme",
    "password: ${DB_PASSWORD}",
    "api_key=os.environ['OPENAI_API_KEY']",
    "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "token: <your token here>",
    "password=aaaaAAAA1111aaaaAAAA1111",  # too repetitive
    "secret: hunter2hunter2hunter2hunter2",
    "Authorization: Bearer $TOKEN",
    "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"[:35],
    # file paths, even beside key words
    "see src/orchestrator/_secrets.py and docs/board.md",
    "C:\\Users\\ada\\AppData\\Local\\secrets\\store.json",
    "token_file: config/tokens/service_account.json",
    "password_file=/etc/secrets/db_password.txt",
    "private_key_path: ~/.ssh/id_ed25519",
    # ids
    "run_id 3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4 task T-12",
    "token: 3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4",
    "auth_request_id=72c84e9c-0975-4c1a-b9a5-864c2725dc8a",
    # words that contain a known prefix
    "task-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "risk-assessment-for-the-next-quarter-2024",
    "desk-" + _random(30),
    "The header starts with -----BEGIN CERTIFICATE----- and nothing else.",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_not_secrets(text: str) -> None:
    assert find_secrets(text) == []
    assert redact(text) == text
    assert first_secret_kind(text) is None


@pytest.mark.parametrize("count", [1, 3])
def test_git_shas_standing_alone_are_not_secrets(count: int) -> None:
    shas = [_random(40, HEX) for _ in range(count)]
    text = "commits " + ", ".join(shas) + " were reverted; see " + shas[0][:7]
    assert find_secrets(text) == []


def test_random_strings_without_a_key_word_are_not_reported() -> None:
    # by design: only the context tells a secret from an id, a hash or encoded data
    for value in (_random(32), _random(64, HEX), _random(44, ALNUM + "+/") + "="):
        assert find_secrets(f"checksum {value} recorded") == []


def test_base64_of_ordinary_text_is_not_a_secret() -> None:
    for plain in (
        b"hello world, this is ordinary text and nothing to worry about",
        b'{"name": "Ada", "role": "executor", "files": ["docs/a.md"]}',
        bytes(range(256)),
    ):
        encoded = base64.b64encode(plain).decode()
        assert find_secrets(f"payload {encoded} end") == []
        assert find_secrets(base64.urlsafe_b64encode(plain).decode()) == []


def _entropy(text: str) -> float:
    counts = collections.Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def test_the_entropy_bar() -> None:
    below = "xY1xY1xY1xY1xY1zW2zW2uV3"  # 2.88 bits: mixed classes, not random enough
    above = "xY1xY1xY1zW2zW2zW2uV3uV3"  # 3.15 bits: the same symbols, spread a little more
    assert 2.8 < _entropy(below) < ENTROPY_THRESHOLD < _entropy(above) < 3.2
    assert find_secrets(f"password={below}") == []
    assert first_secret_kind(f"password={above}") == "high_entropy_secret"
    hex_below = "ab12ab12ab12ab12ab12ab12"  # 4 symbols: 2 bits
    hex_above = "ab12cdab12cdab12cdab12cd"  # 6 symbols: 2.58 bits
    assert _entropy(hex_below) < HEX_ENTROPY_THRESHOLD <= _entropy(hex_above) < ENTROPY_THRESHOLD
    assert find_secrets(f"token={hex_below}") == []
    assert first_secret_kind(f"token={hex_above}") == "high_entropy_secret"


def test_values_shorter_than_twenty_characters_are_not_reported() -> None:
    value = _random(20)
    assert first_secret_kind(f"password={value}") == "high_entropy_secret"
    assert find_secrets(f"password={value[:19]}") == []


def test_an_empty_text_has_no_secrets() -> None:
    assert find_secrets("") == []
    assert redact("") == ""
    assert first_secret_kind("") is None


# -- properties ------------------------------------------------------------------------

PROSE = [
    "the", "password", "token", "secret", "auth", "reset", "expires", "is", "a", "key",
    "api_key", "AWS", "credential", "passwd", "=", ":", "src/api.py", "docs/board.md",
    "internationalization", "configuration_management", "run_id", "T-12", "Bearer",
    "3f56dc4d-35cf-4f97-925c-0b04a6fe8bf4", "sk-learn", "ghp", "xoxb", "-----BEGIN",
    "eyJ", ".", ",", "\n", "(x)", "\"", "'",
]  # fmt: skip
prose = st.lists(st.sampled_from(PROSE), max_size=30).map(" ".join)
secret_cases = st.sampled_from(SECRETS)


@given(prose)
def test_prose_has_no_secrets(text: str) -> None:
    assert find_secrets(text) == []


@given(prose, secret_cases, prose)
def test_a_secret_is_found_wherever_it_is_put(
    before: str, case: tuple[str, str, str], after: str
) -> None:
    kind, secret, around = case
    if kind == "private_key" and "-----BEGIN" in after:
        after = after.replace("-----BEGIN", "")
    embedded = around.format(secret)
    text = f"{before} {embedded} {after}"
    start = text.index(secret)
    covering = [f for f in find_secrets(text) if f.start <= start and start + len(secret) <= f.end]
    assert [f.kind for f in covering] == [kind]
    assert _leaked(secret, redact(text), context=f"{before} {after}") == []


@given(st.lists(st.one_of(st.sampled_from(PROSE), secret_cases.map(lambda c: c[2].format(c[1])))))
def test_findings_are_ordered_disjoint_and_redaction_leaves_none(parts: list[str]) -> None:
    text = " ".join(parts)
    findings = find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in findings)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    assert find_secrets(redact(text)) == []
    assert redact(redact(text)) == redact(text)


@given(st.text())
def test_any_text_gives_well_formed_findings(text: str) -> None:
    findings = find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in findings)
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))
    assert first_secret_kind(text) == (findings[0].kind if findings else None)

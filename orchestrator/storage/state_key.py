"""The user's signing key, and the signature over a state's parts made with it.

The work directory is where hosts and agents write, so a state file there cannot be taken
at its word: the engine signs every state it writes (HMAC-SHA256 over the parts that
``orchestrator.formats.state_signature`` names) with a key that lives outside any work
directory, and every command that acts on a state checks the signature before it imports
a workflow or reads an answer from it.

The key is a file of 64 hex digits, readable by its owner alone:
``$ORCHESTRATOR_KEY_FILE`` when that is set (an absolute path), else
``$XDG_CONFIG_HOME/checkpoint-orchestrator/state.key``, else
``~/.config/checkpoint-orchestrator/state.key``. It is made on first use, whole or not
at all, and two processes that make it at once end up with the same one.

``hashlib`` and ``hmac`` load OpenSSL, milliseconds of every ``orchestrate`` start; the
MAC is built by hand (RFC 2104) on the interpreter's built-in SHA-256, as
``orchestrator.storage.durable.sha256_hex`` does, and compared in constant time.
"""

from __future__ import annotations

import errno
import operator
import os
import stat
from pathlib import Path

from .._errors import KeyFileError, StateUntrustedError
from ..formats.convert import unstructure
from ..formats.fastpath import shallow
from ..formats.state_signature import (
    PARTS,
    SIGNATURE_PATH,
    signature_of,
    signed_parts,
    with_signature,
)
from ..formats.strict_json import dumps_canonical
from .durable import fsync_directory, sha256_constructor

# ``typing`` is not needed at run time; keeping it out of the imports keeps start-up cheap.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "KEY_FILE_ENV",
    "Verdict",
    "check_key_outside",
    "check_signature",
    "hmac_sha256_hex",
    "judge_signature",
    "key_file",
    "load_key",
    "sign_state_data",
    "signed_document",
]

KEY_FILE_ENV = "ORCHESTRATOR_KEY_FILE"
KEY_DIRECTORY = "checkpoint-orchestrator"
KEY_NAME = "state.key"
KEY_MIN_BYTES = 32
_KEY_MAX_BYTES = 4096
_MAC_CONTEXT = b"checkpoint-orchestrator state signature 1\n"
_KEY_ID_CONTEXT = b"checkpoint-orchestrator key id\n"
_HINT_DIGITS = 8  # of each part's digest kept beside the MAC, to name what changed
_BLOCK = 64  # SHA-256's block size, in bytes
_IPAD = bytes(byte ^ 0x36 for byte in range(256))
_OPAD = bytes(byte ^ 0x5C for byte in range(256))

_keys: dict[str, bytes] = {}  # key file -> its key, once read in this process
_verified: tuple[str, bytes | None] | None = None  # the last bytes whose signature held


# -- the key ----------------------------------------------------------------------------


def key_file() -> Path:
    """Where the signing key lives (see the module's docstring)."""
    given = os.environ.get(KEY_FILE_ENV)
    if given:
        if not os.path.isabs(given):
            raise KeyFileError(
                f"{KEY_FILE_ENV}={given!r} is not an absolute path; give the key file's "
                "absolute path, outside any work directory",
                path=given,
            )
        return Path(given)
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # unset, or relative: the XDG spec says to ignore it
        home = os.path.expanduser("~")
        if home == "~" or not os.path.isabs(home):
            raise KeyFileError(
                "cannot tell where the signing key lives (no home directory); set "
                f"{KEY_FILE_ENV} to an absolute path outside any work directory",
                path="",
            )
        config = os.path.join(home, ".config")
    return Path(config, KEY_DIRECTORY, KEY_NAME)


def load_key(*, create: bool) -> bytes:
    """The signing key; with ``create``, made first when there is none yet.

    Without ``create`` a missing key raises ``FileNotFoundError``: only a writer makes a
    key, since a key made to check a state could never have signed it.
    """
    path = key_file()
    known = _keys.get(str(path))
    if known is not None:
        return known
    try:
        key = _read_key(path)
    except FileNotFoundError:
        if not create:
            raise
        key = _create_key(path)
    _keys[str(path)] = key
    return key


def check_key_outside(workdir: Path) -> None:
    """Refuse a key file inside ``workdir``: whoever writes there could read it."""
    path = key_file()
    key_dir = os.path.realpath(path.parent)
    work = os.path.realpath(workdir)
    if key_dir == work or key_dir.startswith(work.rstrip(os.sep) + os.sep):
        raise KeyFileError(
            f"{path}: the signing key is inside the work directory {workdir}, where hosts "
            f"and agents write; move it out and set {KEY_FILE_ENV} to where it is now",
            path=str(path),
        )


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        _check_key_file(path, info)
        data = os.read(fd, _KEY_MAX_BYTES + 1)
    finally:
        os.close(fd)
    key = data.strip()
    if len(key) < KEY_MIN_BYTES or len(data) > _KEY_MAX_BYTES:
        raise KeyFileError(
            f"{path}: the signing key holds {len(key)} bytes, not {KEY_MIN_BYTES} to "
            f"{_KEY_MAX_BYTES}; remove the file (a new key is made on next use, and each "
            "state signed with the old one must be trusted again with 'orchestrate trust')",
            path=str(path),
        )
    return key


def _check_key_file(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(
            f"{path}: the signing key is not a regular file; remove it (a new key is made on "
            f"next use), or set {KEY_FILE_ENV} to the key file",
            path=str(path),
        )
    uid = os.geteuid()
    if info.st_uid != uid:
        raise KeyFileError(
            f"{path}: the signing key belongs to uid {info.st_uid}, not to you (uid {uid}); "
            f"use a key of your own: set {KEY_FILE_ENV} to another path, or remove this one",
            path=str(path),
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{path}: the signing key can be read by others (mode {mode:04o}); run 'chmod "
            f"600 {path}' (if someone may have read it, remove it instead: a new key is "
            "made on next use, and each state must then be trusted again)",
            path=str(path),
        )


def _create_key(path: Path) -> bytes:
    """Make the key whole under a temporary name, then link it into place: the first
    link wins, and a process that loses reads the winner's key."""
    directory = path.parent
    os.makedirs(directory, mode=0o700, exist_ok=True)
    material = os.urandom(32).hex().encode("ascii") + b"\n"
    temporary = directory / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process made the key first: that one is the key
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        _create_in_place(path, material)  # a file system without hard links
    finally:
        os.unlink(temporary)
    fsync_directory(directory)
    return _read_key(path)


def _create_in_place(path: Path, material: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    try:
        os.write(fd, material)
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the MAC ----------------------------------------------------------------------------


def hmac_sha256_hex(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 (RFC 2104) of ``message`` under ``key``, in hex."""
    sha256 = sha256_constructor()
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = sha256(key.translate(_IPAD) + message).digest()
    return sha256(key.translate(_OPAD) + inner).hexdigest()  # type: ignore[no-any-return]


def _key_id(key: bytes) -> str:
    return sha256_constructor()(_KEY_ID_CONTEXT + key).hexdigest()[:16]  # type: ignore[no-any-return]


def _digests(data: dict[str, Any], memo: dict[Any, Any] | None = None) -> list[tuple[str, str]]:
    sha256 = sha256_constructor()
    parts = signed_parts(data, memo=memo)
    return [(name, sha256(encoded).hexdigest()) for name, encoded in parts]


def _signature(key: bytes, digests: list[tuple[str, str]]) -> dict[str, Any]:
    message = _MAC_CONTEXT + "".join(f"{name} {digest}\n" for name, digest in digests).encode()
    return {
        "hmac_sha256": hmac_sha256_hex(key, message),
        "key_id": _key_id(key),
        "parts": {name: digest[:_HINT_DIGITS] for name, digest in digests},
    }


def sign_state_data(data: dict[str, Any], memo: dict[Any, Any] | None = None) -> dict[str, Any]:
    """A copy of the top level of a state's ``data`` (JSON data, or the top level of a
    state about to be written) that carries its signature, made with the key (made first
    if there is none yet)."""
    key = load_key(create=True)
    return with_signature(data, _signature(key, _digests(data, memo)))


def signed_document(state: Any, encoded: EncodedItems | None = None) -> bytes:
    """The bytes a state (a ``CheckpointState``) is written as, signed: the canonical
    encoding ``dump_document`` gives it, with the signature in its engine record. Each
    request and output is encoded once, for its part and for the file; with ``encoded``
    (kept by the writer from one save to the next), a recorded request or a completed
    phase that has not changed since the last save is not encoded again."""
    memo: dict[Any, Any] = {}
    try:
        data = shallow(state)
        if encoded is not None:
            encoded.lend(state, memo)
        document = dumps_canonical(sign_state_data(data, memo), default=shallow, memo=memo)
    except TypeError:  # a value only the converter knows how to unstructure
        data = unstructure(state)
        return dumps_canonical(sign_state_data(data, {}), memo={})
    if encoded is not None:
        encoded.keep(state, memo)
    return document


class EncodedItems:
    """The text each item of a state's ``agent_requests`` and ``completed_phases`` had at
    the last save, for the next. An item whose fields are the very objects they were then
    (``is``) encodes as it did: the engine replaces a field's value, never changes one in
    place (a request, once made, is what the host was sent)."""

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        # id -> (the item, its fields' values, its text); the item is held, so its id
        # cannot be another object's while it is here.
        self._texts: dict[int, tuple[Any, tuple[Any, ...], str]] = {}

    def lend(self, state: Any, memo: dict[Any, Any]) -> None:
        """Put the texts still good for ``state``'s items into the encoder's ``memo``."""
        texts = self._texts
        for item in (*state.agent_requests, *state.completed_phases):
            kept = texts.get(id(item))
            if kept is not None and kept[0] is item:
                values = _field_values(item)
                if all(map(operator.is_, values, kept[1])):
                    memo[id(item)] = (item, kept[2])

    def keep(self, state: Any, memo: dict[Any, Any]) -> None:
        """Remember the texts ``memo`` holds for ``state``'s items (and nothing else)."""
        texts = {}
        for item in (*state.agent_requests, *state.completed_phases):
            made = memo.get(id(item))
            if made is not None and made[0] is item:
                texts[id(item)] = (item, _field_values(item), made[1])
        self._texts = texts


_getters: dict[type, Any] = {}  # class -> attrgetter of all its fields (a tuple)


def _field_values(item: Any) -> tuple[Any, ...]:
    getter = _getters.get(type(item))
    if getter is None:
        names = [field.name for field in item.__attrs_attrs__]
        getter = _getters[type(item)] = operator.attrgetter(names[0], *names[1:])
    values = getter(item)
    return values if isinstance(values, tuple) else (values,)


# -- checking ---------------------------------------------------------------------------


class Verdict:
    """What the signature of a state says: ``ok``; else ``rule`` (``signature-missing``,
    ``signature-key``, ``signature-changed``), a sentence saying why (``reason``), and,
    for a change, the parts that changed as (name, JSON path, words)."""

    __slots__ = ("changed", "ok", "reason", "rule")

    def __init__(
        self,
        *,
        ok: bool,
        rule: str = "",
        reason: str = "",
        changed: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.ok = ok
        self.rule = rule
        self.reason = reason
        self.changed = changed


def judge_signature(data: Any) -> Verdict:
    """Whether a state's JSON ``data`` carries a signature made with the user's key over
    exactly these parts. Reads the key, never makes one."""
    signature = signature_of(data)
    if signature is None or not isinstance(data, dict):
        return Verdict(
            ok=False,
            rule="signature-missing",
            reason="the state carries no signature, so orchestrate cannot tell it is as it "
            "wrote it (a run begun before states were signed, or the signature was removed)",
        )
    if not _well_formed(signature):
        return Verdict(
            ok=False,
            rule="signature-changed",
            reason="changed since orchestrate signed it: its signature is not one "
            "orchestrate writes",
        )
    path = key_file()
    try:
        key = load_key(create=False)
    except FileNotFoundError:
        return Verdict(
            ok=False,
            rule="signature-key",
            reason=f"it was signed with a key that is not here: there is no key at {path} "
            "(a state from another user or machine, or the key was removed)",
        )
    if not _compare_digest(signature["key_id"], _key_id(key)):
        return Verdict(
            ok=False,
            rule="signature-key",
            reason=f"it was signed with another key than {path} (key id "
            f"{signature['key_id']}): a state from another user or machine, or the key "
            "was replaced",
        )
    digests = _digests(data)
    expected = _signature(key, digests)
    if _compare_digest(signature["hmac_sha256"], expected["hmac_sha256"]):
        if signature["parts"] == expected["parts"]:
            return Verdict(ok=True)
        changed: tuple[tuple[str, str, str], ...] = ()  # the hints alone were edited
    else:
        hints = signature["parts"]
        changed = tuple(
            (name, where, words)
            for (name, digest), (_, where, words) in zip(digests, PARTS, strict=True)
            if hints.get(name) != digest[:_HINT_DIGITS]
        )
    return Verdict(
        ok=False,
        rule="signature-changed",
        reason="changed since orchestrate signed it",
        changed=changed,
    )


def check_signature(data: Any, *, source: str, raw: bytes | None = None) -> None:
    """Refuse a state whose signature does not hold (see :func:`judge_signature`) with a
    :class:`StateUntrustedError` that names the file, what changed and what to do.

    ``raw``, the bytes ``data`` was parsed from, lets a second check of the same bytes in
    this process (``resume`` checks before the import, then again under the lock) pass
    without encoding the state again.
    """
    global _verified
    checked = (str(key_file()), raw)
    if raw is not None and checked == _verified:
        return
    verdict = judge_signature(data)
    if verdict.ok:
        if raw is not None:
            _verified = checked
        return
    if not verdict.changed:
        raise StateUntrustedError(
            verdict.reason, source=source, json_path=SIGNATURE_PATH, rule=verdict.rule
        )
    (_, first_path, first_words), *others = verdict.changed
    raise StateUntrustedError(
        f"changed since orchestrate signed it: {first_words}",
        source=source,
        json_path=first_path,
        rule=verdict.rule,
        also=tuple((where, verdict.rule, words) for _, where, words in others),
    )


def _well_formed(signature: Any) -> bool:
    if not isinstance(signature, dict):
        return False
    mac, key_id, parts = (signature.get(k) for k in ("hmac_sha256", "key_id", "parts"))
    return (
        isinstance(mac, str)
        and mac.isascii()
        and isinstance(key_id, str)
        and key_id.isascii()
        and isinstance(parts, dict)
    )


def _compare_digest(a: str, b: str) -> bool:
    """Equal, in time that does not depend on where they differ."""
    from _operator import _compare_digest as compare

    return bool(compare(a, b))

"""What keeps the app to the person who started it.

- The access token: random, printed in the URL once (as Jupyter does). The first request
  that carries it gets it back as a cookie (HttpOnly, SameSite=Strict) and is sent on to
  the same page without it; every request needs the cookie or the token, else 403.
- The form token: every state-changing request is a POST carrying ``csrf``, an HMAC of
  the access token, from a page of this origin: a POST whose ``Origin`` is another, or
  that the browser marks cross-site, is refused before it is read.
- The address: a request whose ``Host`` is not this server's own (``127.0.0.1:PORT``,
  ``localhost:PORT``, or the address it was told to listen on) is refused with 421
  before anything else, so a name of another site that resolves here (DNS rebinding)
  reaches nothing.
- Paths: a run is named by its directory's index and its id; a file of its evidence by a
  path under the run's directory, opened with no link followed (``storage.beneath``); a
  file with another name (a hard link) is not served either.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

COOKIE = "orchestrator_ui"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

#: A regression report: its inline styles, its own files, no script at all.
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; sandbox"


#: What the server listens on when it listens on every address of the machine.
ANY_ADDRESS = "0.0.0.0"


class Guard:
    """The access token, the form token and the server's own addresses (``port``: the
    port it listens on; ``address``: the address it was told to listen on)."""

    def __init__(self, *, port: int, address: str = "127.0.0.1", token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()
        self.port = port
        self.address = address
        self.hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", address)}

    def host_ok(self, host: str | None) -> bool:
        """Whether ``host`` (a request's ``Host`` header) names this server. Listening on
        every address, any address of the machine with the port is one (an address, not
        a name: a name is what DNS rebinding brings)."""
        if host is None:
            return False
        host = host.lower()
        if host in self.hosts:
            return True
        if self.address != ANY_ADDRESS:
            return False
        name, _, port = host.rpartition(":")
        return port == str(self.port) and _is_ipv4(name)

    def admits(self, cookie: str | None, query_token: str | None) -> bool:
        return any(
            given is not None and hmac.compare_digest(given.encode(), self.token.encode())
            for given in (cookie, query_token)
        )

    def same_origin_post(self, origin: str | None, fetch_site: str | None, host: str) -> bool:
        """A POST from a page of this server (a browser always sends one of the two)."""
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return False
        if origin is not None and origin not in (f"http://{host}",):
            return False
        return origin is not None or fetch_site is not None

    def form_token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


def _is_ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``--host``) is reached from this machine alone."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address

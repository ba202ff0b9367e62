"""What keeps the app to the person who started it.

- The access token: random, printed in the URL once (as Jupyter does). The first request
  that carries it gets it back as a cookie (HttpOnly, SameSite=Strict) and is sent on to
  the same page without it; every request needs the cookie or the token, else 403.
- The form token: every state-changing request is a POST carrying ``csrf``, an HMAC of
  the access token, from a page of this origin: a POST whose ``Origin`` is another, or
  that the browser marks cross-site, is refused before it is read.
- Paths: a run is named by its directory's index and its id; a file of its evidence by a
  path under the run's directory, opened with no link followed (``storage.beneath``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "orchestrator_ui"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

#: A regression report: its inline styles, its own files, no script at all.
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; sandbox"


class Guard:
    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()

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

"""What the project's HTTP clients share (the HTTP agent, the OTLP export): stdlib only,
imported when a request is about to be made."""

from __future__ import annotations

from typing import Any


def opener_without_redirects() -> Any:
    """A ``urllib`` opener that refuses redirects: a POST redirected would lose its body,
    or carry it (and its headers) somewhere unchecked."""
    import urllib.request

    class RefuseRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(RefuseRedirects)


def endpoint_of(url: str) -> str:
    """``url`` without credentials, query or fragment: what a message may show."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def header_value_ok(value: str) -> bool:
    """Whether ``value`` can go in a header as it is. ``http.client`` refuses others with an
    error that quotes the whole value, which may be a credential: check first."""
    return value.isascii() and value.isprintable()

"""The dashboard's security layer, in front of the server's own `_Guard` (same rules as deploy).

- With an API key (mandatory off loopback, see `serve.server.resolve_api_key`) every route needs
  it. A browser cannot send `Authorization: Bearer`, so it signs in once at /login and gets an
  HttpOnly, SameSite=Strict cookie holding an HMAC of the key (never the key itself); the cookie
  is turned into the bearer header here and checked by `_Guard` with a constant-time compare.
- Bound to loopback, requests whose Host header is not a loopback name are refused, so a web
  page on another site cannot read the dashboard through DNS rebinding.
- Every response gets a Content-Security-Policy that allows only the dashboard's own scripts and
  styles, and forbids framing.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse

COOKIE = "arena_dashboard"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def cookie_token(api_key: str) -> str:
    """What the sign-in cookie holds: an HMAC of the key, so a leaked cookie is not the key."""
    return hmac.new(api_key.encode("utf-8"), b"arena-dashboard", hashlib.sha256).hexdigest()


def _login_page(message: str = "") -> str:
    note = f'<p class="problem">{html.escape(message)}</p>' if message else ""
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Arena dashboard: sign in'
        '</title><link rel="stylesheet" href="/static/dashboard.css"></head><body><main>'
        "<h1>Arena dashboard</h1><p>This dashboard was started with an API key "
        "(--api-key or ARENA_API_KEY). Enter it to continue.</p>"
        f'{note}<form method="post" action="/login"><input type="password" name="key" '
        'autocomplete="current-password" autofocus> <button type="submit">Sign in</button>'
        "</form></main></body></html>"
    )


class BrowserGuard:
    """ASGI middleware outside `serve.app._Guard`: Host check, cookie sign-in, security headers."""

    def __init__(self, app: Any, api_key: str | None, loopback: bool) -> None:
        self.app, self.key, self.loopback = app, api_key, loopback
        self.token = cookie_token(api_key) if api_key else None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_secure(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers") or []) + SECURITY_HEADERS
            await send(message)

        headers = dict(scope.get("headers") or [])
        if self.loopback and not _loopback_host(headers.get(b"host", b"").decode("latin-1")):
            resp = PlainTextResponse(
                "this dashboard only answers requests addressed to 127.0.0.1 or localhost", 403
            )
            return await resp(scope, receive, send_secure)
        path = scope.get("path", "")
        if self.key is None or path in ("/health", "/static/dashboard.css"):
            return await self.app(scope, receive, send_secure)
        if path == "/login":
            return await self._login(scope, receive, send_secure)
        cookie = _cookies(headers.get(b"cookie", b"").decode("latin-1")).get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), (self.token or "").encode()):
            auth = f"Bearer {self.key}".encode()
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
            scope["headers"].append((b"authorization", auth))
        elif b"authorization" not in headers and not path.startswith("/api/"):
            page = HTMLResponse(_login_page(), status_code=401)
            return await page(scope, receive, send_secure)
        return await self.app(scope, receive, send_secure)  # _Guard checks the key

    async def _login(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope.get("method") != "POST":
            return await HTMLResponse(_login_page())(scope, receive, send)
        body = b""
        while len(body) < 4096:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        given = (parse_qs(body.decode("utf-8", "replace")).get("key") or [""])[0]
        if not hmac.compare_digest(given.encode("utf-8"), (self.key or "").encode("utf-8")):
            page = HTMLResponse(_login_page("That is not the key."), status_code=401)
            return await page(scope, receive, send)
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(COOKIE, self.token or "", httponly=True, samesite="strict", path="/")
        return await resp(scope, receive, send)


def _loopback_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if host.startswith("["):
        name = host[: host.find("]") + 1]
    return name.lower() in LOOPBACK_NAMES


def _cookies(header: str) -> dict[str, str]:
    out = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out

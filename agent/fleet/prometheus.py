"""A small client of the Prometheus HTTP API (Prometheus, Thanos Query, Mimir, VictoriaMetrics: anything
that answers ``/api/v1/query``), with the ways in that ``promtool query`` has.

sixdim's fleet view reads the fleet where it already is: no store of its own.  Authentication and TLS
follow Prometheus's HTTP client configuration (the ``--http.config.file`` of ``promtool``), the subset a
query client needs: ``basic_auth`` (``username``, ``password`` or ``password_file``), ``authorization``
(``type``, ``credentials`` or ``credentials_file``), ``bearer_token_file``, and ``tls_config``
(``ca_file``, ``cert_file``, ``key_file``, ``server_name``, ``insecure_skip_verify``).  A key it does not
know is an error, never ignored: an ``oauth2`` block silently dropped would send queries unauthenticated.
Queries are POSTed (a long PromQL expression never meets a URL limit) and answers asked for gzipped.
"""

from __future__ import annotations

import base64
import functools
import gzip
import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sixdim.fleet.errors import FleetError

TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class HttpConfig:
    """How to reach the Prometheus API: credentials and TLS."""

    username: str = ""
    password: str = ""
    authorization: str = ""
    """The whole Authorization header value (``Bearer <token>``), or empty."""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    insecure_skip_verify: bool = False
    sources: tuple[str, ...] = field(default=())
    """Where each setting came from, for messages."""


def _read_secret(path: str, where: str) -> str:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FleetError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    secret = text.strip()
    if not secret:
        raise FleetError(f"{where}: {path} is empty")
    return secret


def _resolve(base: Path, path: Any, where: str) -> str:
    if not isinstance(path, str) or not path:
        raise FleetError(f"{where}: expected a file path, got {path!r}")
    return str(base / path) if not Path(path).is_absolute() else path


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FleetError(f"{where}: expected a mapping, got {value!r}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise FleetError(f"{where}: unknown key {unknown[0]!r} (sixdim fleet reads {', '.join(keys)})")
    return value


def load_http_config(path: str) -> HttpConfig:
    """A Prometheus HTTP client configuration file (as ``promtool --http.config.file`` reads); relative
    file paths are relative to the file, as Prometheus takes them."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise FleetError(f"--http-config-file {path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise FleetError(f"--http-config-file {path}: not YAML: {exc}") from None
    top = _mapping(data, path, ("basic_auth", "authorization", "bearer_token", "bearer_token_file", "tls_config",
                                "follow_redirects", "enable_http2"))
    base = Path(path).resolve().parent
    settings: dict[str, Any] = {}
    if "basic_auth" in top:
        auth = _mapping(top["basic_auth"], f"{path}: basic_auth", ("username", "password", "password_file"))
        settings["username"] = str(auth.get("username") or "")
        if not settings["username"]:
            raise FleetError(f"{path}: basic_auth: username: expected a user name")
        if "password_file" in auth:
            settings["password"] = _read_secret(_resolve(base, auth["password_file"], f"{path}: basic_auth: "
                                                "password_file"), f"{path}: basic_auth: password_file")
        else:
            settings["password"] = str(auth.get("password") or "")
    token_sources = [k for k in ("authorization", "bearer_token", "bearer_token_file") if k in top]
    if len(token_sources) > 1 or (token_sources and "basic_auth" in top):
        raise FleetError(f"{path}: at most one of basic_auth, authorization, bearer_token and bearer_token_file")
    if "authorization" in top:
        auth = _mapping(top["authorization"], f"{path}: authorization", ("type", "credentials", "credentials_file"))
        kind = str(auth.get("type") or "Bearer")
        if "credentials_file" in auth:
            where = f"{path}: authorization: credentials_file"
            credentials = _read_secret(_resolve(base, auth["credentials_file"], where), where)
        else:
            credentials = str(auth.get("credentials") or "")
        if not credentials:
            raise FleetError(f"{path}: authorization: expected credentials or credentials_file")
        settings["authorization"] = f"{kind} {credentials}"
    elif "bearer_token" in top:
        settings["authorization"] = f"Bearer {top['bearer_token']}"
    elif "bearer_token_file" in top:
        where = f"{path}: bearer_token_file"
        settings["authorization"] = f"Bearer {_read_secret(_resolve(base, top['bearer_token_file'], where), where)}"
    if "tls_config" in top:
        tls = _mapping(top["tls_config"], f"{path}: tls_config",
                       ("ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify", "min_version"))
        for key in ("ca_file", "cert_file", "key_file"):
            if key in tls:
                settings[key] = _resolve(base, tls[key], f"{path}: tls_config: {key}")
        settings["server_name"] = str(tls.get("server_name") or "")
        settings["insecure_skip_verify"] = bool(tls.get("insecure_skip_verify", False))
    return HttpConfig(**settings, sources=(path,))


def merged(config: HttpConfig, *, username: str = "", password_file: str = "", bearer_token_file: str = "",
           ca_file: str = "", cert_file: str = "", key_file: str = "", server_name: str = "",
           insecure_skip_verify: bool = False) -> HttpConfig:
    """The file's settings with the command line's flags over them."""
    settings = {name: getattr(config, name) for name in ("username", "password", "authorization", "ca_file",
                                                           "cert_file", "key_file", "server_name",
                                                           "insecure_skip_verify")}
    if username:
        settings["username"] = username
        settings["password"] = _read_secret(password_file, "--password-file") if password_file else ""
        settings["authorization"] = ""
    elif password_file:
        raise FleetError("--password-file: needs --username")
    if bearer_token_file:
        if username:
            raise FleetError("--bearer-token-file: not with --username (one way to authenticate)")
        settings["authorization"] = f"Bearer {_read_secret(bearer_token_file, '--bearer-token-file')}"
        settings["username"] = settings["password"] = ""
    for name, value in (("ca_file", ca_file), ("cert_file", cert_file), ("key_file", key_file),
                        ("server_name", server_name)):
        if value:
            settings[name] = value
    settings["insecure_skip_verify"] = settings["insecure_skip_verify"] or insecure_skip_verify
    if bool(settings["cert_file"]) != bool(settings["key_file"]):
        raise FleetError("a client certificate needs both cert_file and key_file (--cert-file, --key-file)")
    return HttpConfig(**settings, sources=config.sources)


class _NamedTlsConnection(http.client.HTTPSConnection):
    """An HTTPS connection that checks the server's certificate for ``server_name`` (``tls_config``'s
    ``server_name``) instead of the URL's host, as Prometheus's client does."""

    def __init__(self, *args: Any, server_name: str = "", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._server_name = server_name

    def connect(self) -> None:
        # typeshed omits HTTPConnection.source_address, which its __init__ sets
        sock = socket.create_connection((self.host, self.port), self.timeout, self.source_address)  # type: ignore[attr-defined]
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_name or self.host)  # type: ignore[attr-defined]


class _TlsHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, server_name: str):
        super().__init__(context=context)
        self._tls, self._server_name = context, server_name

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_NamedTlsConnection, context=self._tls, server_name=self._server_name)
        return self.do_open(connection, req)  # type: ignore[arg-type]


class Prometheus:
    """Instant queries against one Prometheus-compatible API; counts its requests and their time."""

    def __init__(self, url: str, config: HttpConfig | None = None, timeout: float = TIMEOUT_SECONDS):
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise FleetError(f"--prometheus: expected an http:// or https:// URL such as http://prometheus:9090, "
                             f"got {url!r}")
        self.url = url.rstrip("/")
        self.config = config or HttpConfig()
        self.timeout = timeout
        self.requests = 0
        self.seconds = 0.0
        self._context = self._tls_context() if parsed.scheme == "https" else None
        handlers: list[urllib.request.BaseHandler] = []
        if self._context is not None:
            handlers.append(_TlsHandler(self._context, self.config.server_name))
        self._opener = urllib.request.build_opener(*handlers)

    def _tls_context(self) -> ssl.SSLContext:
        c = self.config
        try:
            context = ssl.create_default_context(cafile=c.ca_file or None)
            if c.cert_file:
                context.load_cert_chain(c.cert_file, c.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise FleetError(f"TLS: cannot load {c.ca_file or c.cert_file}: {exc}") from None
        if c.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def _headers(self) -> dict[str, str]:
        headers = {"Accept-Encoding": "gzip", "Content-Type": "application/x-www-form-urlencoded",
                   "User-Agent": "sixdim-fleet"}
        if self.config.username:
            pair = f"{self.config.username}:{self.config.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif self.config.authorization:
            headers["Authorization"] = self.config.authorization
        return headers

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        form = {"query": promql}
        if at is not None:
            form["time"] = f"{at:.3f}"
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=urllib.parse.urlencode(form).encode(),
                                         headers=self._headers(), method="POST")
        started = time.perf_counter()
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                body = response.read()
                if response.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
        except urllib.error.HTTPError as exc:
            raise FleetError(self._http_error(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FleetError(f"{self.url}: cannot reach the Prometheus API: {reason}") from None
        finally:
            self.requests += 1
            self.seconds += time.perf_counter() - started
        try:
            answer = json.loads(body)
        except ValueError:
            raise FleetError(f"{self.url}: the answer to /api/v1/query is not JSON: is this a Prometheus "
                             "API?") from None
        if answer.get("status") != "success":
            raise FleetError(f"{self.url}: the query failed: {answer.get('errorType')}: {answer.get('error')}")
        data = answer.get("data") or {}
        if data.get("resultType") != "vector":
            raise FleetError(f"{self.url}: expected an instant vector, got {data.get('resultType')!r}")
        return list(data.get("result") or [])

    def _http_error(self, exc: urllib.error.HTTPError) -> str:
        detail = ""
        try:
            body = exc.read()
            if exc.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            answer = json.loads(body)
            detail = f": {answer.get('errorType')}: {answer.get('error')}"
        except (ValueError, OSError):
            pass
        if exc.code in (401, 403):
            how = ("basic auth as " + self.config.username if self.config.username
                   else "a bearer token" if self.config.authorization else "no credentials")
            return (f"{self.url}: HTTP {exc.code} {exc.reason}: the API refused {how} (give --username and "
                    f"--password-file, --bearer-token-file, or --http-config-file){detail}")
        return f"{self.url}: HTTP {exc.code} {exc.reason}{detail}"

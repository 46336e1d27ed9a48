"""TLS and basic authentication of the HTTP endpoint, from a web configuration file in the
Prometheus exporter-toolkit format (``--web.config.file``, ``SIXDIM_WEB_CONFIG_FILE``): the file
node_exporter, blackbox_exporter and Prometheus itself read, checked by ``promtool check
web-config``.  See docs/SECURITY.md.

The file is YAML::

    tls_server_config:                  # absent: plain HTTP
      cert_file: server.crt             # or cert: <PEM text>; relative paths are relative to this file
      key_file: server.key              # or key: <PEM text>
      client_auth_type: RequireAndVerifyClientCert   # mTLS; default NoClientCert
      client_ca_file: clients-ca.crt    # or client_ca: <PEM text>
      client_allowed_sans: [prometheus.example.com]
      min_version: TLS12                # TLS10..TLS13 (default TLS12); max_version likewise (default TLS13)
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go's names, TLS 1.2 and below
      curve_preferences: [X25519]
    http_server_config:
      http2: true                       # accepted; sixdim serves HTTP/1.1
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2b$10$...            # bcrypt hashes

What sixdim cannot do as Go's crypto/tls does is refused by name rather than approximated:
``RequestClientCert`` and ``RequireAnyClientCert`` (they ask for a client certificate but do not
verify it; Python's ssl module verifies every certificate it asks for), several
``curve_preferences`` (one curve, or OpenSSL's default list), and ``rate_limit``.  A verifying
``client_auth_type`` needs ``client_ca_file`` or ``client_ca`` (Go would fall back to the system's
public roots, which is never what a scrape endpoint wants).  Any error is a
:class:`~sixdim.config.ConfigError` naming the file, the key, what was expected and what was found,
in one line whatever the file holds (values are shown cut short, keys with their control characters
escaped); nothing else escapes :func:`load`, whatever the bytes (tests/test_fuzz.py fuzzes it).

YAML that a web configuration never needs and that makes a small file costly is refused: merge keys
(``<<``, whose copies grow exponentially when merged mappings merge others) and keys that are lists
or mappings.  bcrypt hashes must have a cost of at most 12 (:data:`BCRYPT_COSTS`): each step doubles a
check, which at 12 takes about 250 ms, at 17 seconds, and at 31 (and the start, which makes a dummy hash
of the highest cost) days.

**File permissions** (see :func:`sixdim.config.trust.check_permissions`): this file and the client CA file
decide who may scrape sixdim, so when a user other than their owner can change them (mode & 0o022,
or, for a root process, an owner other than root) they are refused, or, with
``--insecure-config-permissions`` or ``SIXDIM_INSECURE_CONFIG_PERMISSIONS=true``, loaded with a
warning.  A private key that its group or others can read (``key_file``, or the file itself when it
holds an inline ``key``) is loaded with a warning: it is a leak to fix (``chmod go-r``), not a way to
take control of sixdim, and Kubernetes mounts secrets 0644 by default.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import re
import reprlib
import shlex
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sixdim.config import ConfigError
from sixdim.config.trust import check_permissions
from sixdim.core.files import READ_ONLY_REGULAR, NotARegularFile, open_regular

log = logging.getLogger("sixdim")

MAX_FILE_BYTES = 1 << 20
"""The largest web configuration file read (1 MiB; a real one is a few hundred bytes)."""

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
"""The ``client_auth_type`` values sixdim serves (see the module docstring for the two it refuses)."""
_UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

GO_CIPHERS = {
    # Go's crypto/tls names (tls.CipherSuites()) of TLS 1.0-1.2 suites -> OpenSSL's names.
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # (not Go's older constant names without _SHA256: tls.CipherSuites() does not list them, and
    # exporter-toolkit, so promtool, refuses them)
}
GO_TLS13_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
"""Accepted and, as in Go, not configurable: TLS 1.3's suites are always on."""

GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

HEADERS = {
    # exporter-toolkit's allowed headers and, where it restricts them, their values.
    "Strict-Transport-Security": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
             "client_allowed_sans", "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
             "curve_preferences"}
_HTTP_KEYS = {"http2", "headers"}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}

BCRYPT_HASH = re.compile(r"^\$2[abxy]?\$(\d\d)\$[./A-Za-z0-9]{53}$")
BCRYPT_COSTS = (4, 12)
"""The bcrypt costs accepted: one more doubles every check.  Measured on the development machine (2
cores): cost 10 takes 66 ms, 11 117 ms, 12 254 ms (the highest accepted: ``bcrypt.gensalt()``'s default),
13 533 ms, 14 966 ms, 17 7.8 s.  Above 12, a single wrong guess would hold a core for half a second
or more; htpasswd accepts up to 17, exporter-toolkit any."""
BCRYPT_CONCURRENT = 1
"""bcrypt checks run at once (one core at most; exporter-toolkit serializes them too)."""
FAIR_WAIT_SECONDS = 5.0
"""How long a request may wait for the bcrypt check's turn (one waiting request per client address; the
address served least recently goes first): a scraper whose credentials are not cached yet (the agent just
started or reloaded) waits behind at most one check of a flooding address, never behind the flood."""
FAIR_WAITERS = 2
"""Requests that may wait for the check at once (each holds a request thread of the server's 8 meanwhile): a
newcomer from an address served less recently than a waiter takes that waiter's place (which gets ``429``),
so a flood from many addresses neither holds the server's threads nor keeps a scraper's first check out."""
VERIFIED_CACHE_SIZE = 256
"""Verified credentials remembered across reloads (by SHA-256 of user, hash and password)."""
FAILED_CHECKS_BURST, FAILED_CHECK_INTERVAL = 5, 1.0
"""Failed bcrypt checks a client address may cause: 5 at once, then one a second (429 meanwhile)."""
FAILED_CACHE_SIZE = 4096
"""Failed credentials (and client addresses with a failure) remembered, by SHA-256; the oldest go first."""
OK, DENIED, BUSY = "ok", "denied", "busy"
"""What :meth:`BasicAuth.verify` answers: the credentials are right; wrong or absent; not checked now."""

WEB_CONFIG_ROLE = "it decides who may scrape sixdim"
CLIENT_CA_ROLE = "it decides which client certificates may scrape sixdim"
_MERGE_TAG = "tag:yaml.org,2002:merge"

REALM = "sixdim"


# --------------------------------------------------------------------------- one-line errors

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 120, 60, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdict = 5


class _Shown(str):
    """A value already written for a message: :class:`ConfigError` shows it as it is."""

    def __repr__(self) -> str:
        return str(self)


def _shown(value: Any) -> Any:
    """``value`` for an error message, read no further than the message shows.  A full ``repr`` (what
    ConfigError would do) of a YAML value is unbounded: ten lines of aliases (``&a [x, x, ...]``,
    ``&b [*a, *a, ...]``, ...) make a list whose ``repr`` is billions of characters."""
    if value is None:
        return None
    try:
        return _Shown(_REPR.repr(value))
    except (ValueError, RecursionError):  # an integer past Python's digit limit
        return _Shown(f"<{type(value).__name__}>")


def _one_line(text: str, limit: int = 200) -> str:
    """``text`` with its control characters (newlines, NUL, lone surrogates) escaped and cut to
    ``limit`` characters: keys, file names and details come from the file and may hold anything."""
    if text.isprintable() and len(text) <= limit:
        return text
    escaped = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text[:limit])
    return escaped + (f"... ({len(text)} characters)" if len(text) > limit else "")


def _error(path: str, key: str, expected: str, got: Any = None, *, detail: str = "") -> ConfigError:
    """The :class:`ConfigError` of this module, one line whatever the file holds."""
    return ConfigError(_one_line(path, 400), _one_line(key), expected, _shown(got), detail=_one_line(detail, 400))


# --------------------------------------------------------------------------- basic auth

class BasicAuth:
    """``basic_auth_users``: user -> bcrypt hash, with the CPU that checks can take bounded.

    bcrypt costs about 250 ms per check at cost 12 (the highest accepted, :data:`BCRYPT_COSTS`), by
    design; Prometheus scrapes every 15 s with the same credentials, and a flood of wrong passwords
    must not take the CPU that scrapes and ``/healthz`` need.  So (the first two as exporter-toolkit does):

    * every result is remembered by the SHA-256 of (user, hash, password): successes (the scraper's
      credentials: the next scrape costs a hash, not a bcrypt) and, apart, the last
      :data:`FAILED_CACHE_SIZE` failures (a wrong password tried again costs a hash too);
    * at most :data:`BCRYPT_CONCURRENT` bcrypt checks run at once, taken in turn by client address
      (:class:`_FairTurn`): at most :data:`FAIR_WAITERS` requests wait, one per address, at most
      :data:`FAIR_WAIT_SECONDS`, the address served least recently first (a newcomer served less recently takes
      a waiter's place), so a flood cannot keep the check from a scraper nor hold the server's threads; a
      request that cannot wait is answered :data:`BUSY` at once (the server: ``429``);
    * verified credentials are remembered across reloads (:data:`_VERIFIED`: the key holds the hash, so a
      changed password or a removed user matches nothing), so a SIGHUP does not put the scraper behind a flood;
    * a client address may cause :data:`FAILED_CHECKS_BURST` failed checks at once, then one every
      :data:`FAILED_CHECK_INTERVAL` (:data:`BUSY` meanwhile), so one host's guesses cannot keep bcrypt
      busy for everyone.

    An unknown user is checked against a dummy hash of the highest configured cost, so its answer
    takes as long as a wrong password's and does not tell which user names exist.
    """


    def __init__(self, users: dict[str, str]):
        import bcrypt  # deferred: only a configured endpoint needs it

        self._bcrypt = bcrypt
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        costs = [int(m.group(1)) for m in map(BCRYPT_HASH.match, users.values()) if m]
        self._dummy = bcrypt.hashpw(b"sixdim-no-such-user", bcrypt.gensalt(max(costs, default=10)))
        self._ok = _VERIFIED
        self._failed: OrderedDict[bytes, None] = OrderedDict()
        # client address -> (failed checks it may still cause, when that was counted): a token bucket
        self._allowance: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._checks = _FairTurn(FAIR_WAIT_SECONDS)

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(self._users)

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s, waiting for a bcrypt slot if need be."""
        return self._verify(user, password, "", wait=True) == OK

    def verify(self, authorization: str | None, client: str = "", *, wait: bool = False) -> str:
        """:data:`OK`, :data:`DENIED` or (without ``wait``) :data:`BUSY` for an ``Authorization``
        header value (None when absent) from the address ``client``."""
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return DENIED
        return self._verify(*credentials, client, wait=wait)

    def _verify(self, user: str, password: str, client: str, *, wait: bool) -> str:
        hashed = self._users.get(user)
        secret = password.encode("utf-8", "surrogateescape")
        key = hashlib.sha256(b"\0".join((user.encode("utf-8", "surrogateescape"), hashed or b"", secret))).digest()
        with self._lock:
            if self._ok.seen(key):
                return OK
            if key in self._failed:
                self._failed.move_to_end(key)
                return DENIED
            if not wait and client and self._allowed(client, time.monotonic()) < 1:
                return BUSY
        if not self._checks.acquire(client, wait=wait):
            return BUSY
        try:
            ok = self._bcrypt.checkpw(secret, hashed if hashed is not None else self._dummy)
        except ValueError:  # a password over bcrypt's 72 bytes: no hash can match it
            ok = False
        finally:
            self._checks.release()
        ok = ok and hashed is not None
        with self._lock:
            if ok:
                self._ok.add(key)
                return OK
            self._failed[key] = None
            if len(self._failed) > FAILED_CACHE_SIZE:
                self._failed.popitem(last=False)
            if client:
                now = time.monotonic()
                self._allowance[client] = (self._allowed(client, now) - 1, now)
                self._allowance.move_to_end(client)
                if len(self._allowance) > FAILED_CACHE_SIZE:
                    self._allowance.popitem(last=False)
        return DENIED

    def _allowed(self, client: str, now: float) -> float:
        """The failed checks ``client`` may cause now (under the lock)."""
        tokens, since = self._allowance.get(client, (FAILED_CHECKS_BURST, now))
        return min(FAILED_CHECKS_BURST, tokens + (now - since) / FAILED_CHECK_INTERVAL)


class _Verified:
    """Keys of verified credentials, the oldest forgotten first, shared by every :class:`BasicAuth` of the
    process (a reload makes a new one)."""

    def __init__(self, size: int) -> None:
        self._keys: OrderedDict[bytes, None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def seen(self, key: bytes) -> bool:
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return True
            return False

    def add(self, key: bytes) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            if len(self._keys) > self._size:
                self._keys.popitem(last=False)


_VERIFIED = _Verified(VERIFIED_CACHE_SIZE)


class _FairTurn:
    """The one bcrypt check, taken in turn by client address: at most :data:`FAIR_WAITERS` requests wait (up to
    ``wait_seconds``), one per address, the address served least recently first; a newcomer served less
    recently than a waiter takes its place.

    Each waiting request holds its own ticket: an address whose waiter was displaced may come back before that
    waiter wakes, and the newcomer must neither take the displacement nor remove the old waiter's place."""

    def __init__(self, wait_seconds: float) -> None:
        self._wait = wait_seconds
        self._turn = threading.Condition()
        self._busy = False
        self._waiting: dict[object, str] = {}  # ticket -> client address, in arrival order
        self._displaced: set[object] = set()
        self._served: OrderedDict[str, float] = OrderedDict()

    def acquire(self, client: str, *, wait: bool = False) -> bool:
        """True once the check is this request's; False when its address already waits, when it cannot wait
        (the waiters are all served less recently), when it is displaced, or when its turn does not come within
        the wait (``wait``: the internal checks, which wait as long as it takes and are never displaced)."""
        with self._turn:
            if not self._busy and not self._waiting:
                return self._take(client)
            if not wait:
                if client in self._waiting.values():
                    return False
                displaceable = [t for t in self._waiting if not isinstance(t, _Patient)]  # displaced ones left it
                if len(self._waiting) >= FAIR_WAITERS:
                    if not displaceable:
                        return False
                    latest = max(displaceable, key=lambda t: self._last(self._waiting[t]))
                    if self._last(client) >= self._last(self._waiting[latest]):
                        return False
                    del self._waiting[latest]
                    self._displaced.add(latest)
                    self._turn.notify_all()  # the displaced waiter answers now, not at its deadline
            ticket: object = _Patient() if wait else object()
            self._waiting[ticket] = client
            deadline = None if wait else time.monotonic() + self._wait
            try:
                while True:
                    if ticket in self._displaced:
                        return False
                    if not self._busy and self._next() is ticket:
                        return self._take(client)
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._turn.wait(left)
            finally:
                self._displaced.discard(ticket)
                self._waiting.pop(ticket, None)
                self._turn.notify_all()

    def release(self) -> None:
        with self._turn:
            self._busy = False
            self._turn.notify_all()

    def _last(self, client: str) -> float:
        return self._served.get(client, float("-inf"))

    def _next(self) -> object:
        """The ticket whose address was served least recently (the earliest arrival among equals)."""
        return min(self._waiting, key=lambda t: self._last(self._waiting[t]))

    def _take(self, client: str) -> bool:
        self._busy = True
        self._served[client] = time.monotonic()
        self._served.move_to_end(client)
        if len(self._served) > FAILED_CACHE_SIZE:
            self._served.popitem(last=False)
        return True


class _Patient:
    """The ticket of an internal check (``wait``): it waits its turn however long, and no newcomer displaces it."""


def _basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) of a ``Basic`` header value; None when there is none, or it is malformed."""
    import base64
    import binascii

    if not authorization:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


# --------------------------------------------------------------------------- the configuration

@dataclass
class WebConfig:
    """A loaded web configuration file."""

    source: str
    ssl_context: ssl.SSLContext | None = None
    client_allowed_sans: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    auth: BasicAuth | None = None
    http2: bool = True
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    def allowed_peer(self, cert: dict | None) -> bool:
        """``client_allowed_sans``: whether a verified client certificate (``getpeercert()``) has a
        subject alternative name (DNS, IP, e-mail or URI) on the list; true when no list is set."""
        if not self.client_allowed_sans:
            return True
        if not cert:
            return False
        allowed = {_normal_san(name) for name in self.client_allowed_sans}
        return any(_normal_san(value) in allowed for _kind, value in cert.get("subjectAltName", ()))


def _normal_san(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))  # Python spells IPv6 SANs in full and upper case
    except ValueError:
        return value


def load(path: str, *, where: str = "", key: str = "agent.web_config_file",
         insecure_permissions: bool = False) -> WebConfig:
    """Read, validate and build a web configuration file.  ``where`` names the setting that gave the
    path (for the error when the file cannot be read).  ``insecure_permissions`` (the configuration's
    ``insecure_config_permissions``) loads a file, or client CA file, that other users can change
    with a warning instead of refusing it."""
    data, status = _read(path, where or path, key, insecure_permissions)
    document = _parse_yaml(data, path)
    if document is None:  # an empty file: nothing configured, as in exporter-toolkit
        return WebConfig(source=path)
    if not isinstance(document, dict):
        raise _error(path, "(document)", "a mapping of " + ", ".join(sorted(_TOP_KEYS)), document)
    for name in document:
        if name == "rate_limit":
            raise _error(path, "rate_limit", "no rate_limit", detail="sixdim does not rate-limit; its bounded "
                         "connection pool limits the load a client can cause")
        if name not in _TOP_KEYS:
            raise _error(path, str(name), "one of " + ", ".join(sorted(_TOP_KEYS)), detail="unknown key")
    base = Path(path).resolve().parent
    config = WebConfig(source=path)
    http_config = _mapping(document, "http_server_config", path, _HTTP_KEYS)
    if "http2" in http_config:
        config.http2 = _bool(http_config["http2"], path, "http_server_config.http2")
    config.headers = _headers(http_config.get("headers"), path)
    if document.get("basic_auth_users") is not None:
        users = _users(document["basic_auth_users"], path)
        config.auth = BasicAuth(users) if users else None
    tls_config = _mapping(document, "tls_server_config", path, _TLS_KEYS)
    if any(tls_config.get(k) for k in ("cert", "key", "cert_file", "key_file", "client_ca", "client_ca_file",
                                       "client_auth_type")):
        _build_tls(config, tls_config, path, base, insecure_permissions)
        if tls_config.get("key"):
            _warn_if_readable(path, status, "the web configuration, with a private key in tls_server_config.key")
    return config


def _read(path: str, where: str, key: str, insecure_permissions: bool) -> tuple[bytes, os.stat_result]:
    """The file's bytes and its ``fstat``: only a regular file is read (a FIFO would make a SIGHUP wait
    for a writer, deaf to SIGTERM), and its permissions are checked on the open file, so the file
    checked is the file read, whatever replaces the name meanwhile."""
    try:
        with open_regular(path) as handle:
            status = os.fstat(handle.fileno())
            check_permissions(path, status, WEB_CONFIG_ROLE, insecure=insecure_permissions)
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise _error(where, key, "an existing web configuration file", path, detail="no such file") from None
    except NotARegularFile as exc:
        raise _error(where, key, "a regular web configuration file", path,
                     detail=f"it is {exc.kind}; {READ_ONLY_REGULAR}") from None
    except OSError as exc:
        raise _error(where, key, "a readable web configuration file", path,
                     detail=exc.strerror or str(exc)) from None
    if len(data) > MAX_FILE_BYTES:
        raise _error(path, "(file)", "a web configuration file of at most 1 MiB", detail="file too large")
    return data, status


def _warn_if_readable(path: str, status: os.stat_result, what: str) -> None:
    """Log a warning when a file holding a private key can be read by its group or others: anyone who
    reads it can pose as this endpoint.  A warning, not a refusal: it does not give control of
    sixdim, and Kubernetes mounts secrets 0644 unless told otherwise."""
    readable = status.st_mode & 0o044
    if readable:
        who = {0o040: "its group", 0o004: "others", 0o044: "its group and others"}[readable]
        log.warning("%s (%s): %s can read it (mode %04o), and whoever reads the key can pose as this endpoint; "
                    "fix: chmod go-r %s", _one_line(path, 400), what, who, status.st_mode & 0o7777,
                    _one_line(shlex.quote(path), 400))


def _parse_yaml(data: bytes, path: str) -> Any:
    """The YAML document, or ConfigError.  Besides bad syntax: bytes that are not UTF-8, nesting too
    deep for PyYAML's recursive composer, values its constructors fail on with exceptions that are
    not YAMLError (``2001-02-30``, a 5,000-digit integer, ``!!float abc``, ``!!bool maybe``), keys
    that are lists or mappings, keys given twice, and merge keys."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        raise _error(path, "(file)", "PyYAML installed to read a web configuration file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(path, "(encoding)", "UTF-8 text", detail=f"byte at offset {exc.start} is not UTF-8") from None
    try:
        return yaml.load(text, Loader=_strict_loader(yaml, path))  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise _error(path, "(syntax)", "valid YAML", detail=" ".join(str(exc).split())) from None
    except RecursionError:
        raise _error(path, "(syntax)", "valid YAML", detail="nested too deeply") from None
    except (ValueError, TypeError, KeyError, OverflowError) as exc:  # a constructor failing outside construct_object
        raise _error(path, "(syntax)", "valid YAML", detail=f"a value YAML cannot read ({exc})") from None


def _strict_loader(yaml: Any, path: str) -> type:
    """A SafeLoader that refuses a key given twice, as Go's yaml.UnmarshalStrict does (the last would
    silently win), merge keys and unhashable keys, and turns a constructor's own exceptions into a
    ConfigError that names the line."""

    class StrictLoader(yaml.SafeLoader):
        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except (ValueError, TypeError, KeyError, OverflowError) as exc:
                raise _error(path, "(syntax)", "valid YAML", detail=f"line {node.start_mark.line + 1}: "
                             f"{node.tag.rpartition(':')[2]} value cannot be read ({exc})") from None

    def mapping(loader: Any, node: Any) -> dict:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                raise _error(path, "(syntax)", "YAML without merge keys (<<)", detail=f"line {line} has one")
            key = loader.construct_object(key_node)
            try:
                hash(key)
            except TypeError:  # a list, set or mapping as a key: no key sixdim knows is one
                raise _error(path, "(syntax)", "keys that are strings",
                             detail=f"line {line} has a {type(key).__name__} as a key") from None
            if key in seen:
                raise _error(path, str(key), "each key once", detail=f"line {line} repeats it")
            seen.add(key)
        return loader.construct_mapping(node)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return StrictLoader


def _mapping(document: dict, name: str, path: str, known: set[str]) -> dict:
    value = document.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(path, name, "a mapping", value)
    for key in value:
        if key not in known:
            raise _error(path, f"{name}.{key}", "one of " + ", ".join(sorted(known)), detail="unknown key")
    return value


def _bool(value: Any, path: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise _error(path, key, "true or false", value)
    return value


def _string(value: Any, path: str, key: str) -> str:
    if not isinstance(value, str):
        raise _error(path, key, "a string", value)
    return value


def _strings(value: Any, path: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _error(path, key, "a list of strings", value)
    return [_string(item, path, key) for item in value]


def _headers(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    key = "http_server_config.headers"
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise _error(path, key, "a mapping of header names to values", value)
    headers = []
    for name, text in value.items():
        if name not in HEADERS:
            raise _error(path, f"{key}.{name}", "one of " + ", ".join(HEADERS),
                         detail="exporter-toolkit allows only these headers")
        text = _string(text, path, f"{key}.{name}")
        if not all(char == "\t" or " " <= char <= "~" for char in text):
            # a line break would split the response; a character outside Latin-1 fails every response
            # (wsgiref encodes headers as ISO-8859-1); control characters have no place in a header
            raise _error(path, f"{key}.{name}", "one line of printable ASCII text", text)
        allowed = HEADERS[name]
        if allowed is not None and text not in allowed:  # blank too, as exporter-toolkit
            raise _error(path, f"{key}.{name}", "one of " + ", ".join(allowed), text)
        if not text:
            continue  # "unset if blank"
        headers.append((name, text))
    return tuple(headers)


def _users(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, dict):  # (its type only: what it holds may be hashes, secrets of sorts)
        raise _error(path, "basic_auth_users", "a mapping of user names to bcrypt hashes",
                     detail=f"got {'a' if value else 'an empty'} {type(value).__name__}")
    users = {}
    for user, hashed in value.items():
        key = f"basic_auth_users.{user}"
        if not isinstance(user, str) or not user or ":" in user:
            raise _error(path, key, "a user name without ':'", user)
        if not isinstance(hashed, str):
            raise _error(path, key, "a bcrypt hash ($2y$10$...)", detail=f"got a {type(hashed).__name__}")
        match = BCRYPT_HASH.match(hashed)
        low, high = BCRYPT_COSTS
        if not match:
            # the hash is a secret of sorts: say what is wrong, not what it is
            raise _error(path, key, "a bcrypt hash ($2y$10$ or $2b$10$ and 53 characters)",
                         detail=f"got {len(hashed)} characters starting {_one_line(hashed[:4])!r}; make one "
                         "with htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        if not low <= int(match.group(1)) <= high:
            raise _error(path, key, f"a bcrypt hash of cost {low} to {high}",
                         detail=f"its cost is {match.group(1)}: each step doubles the time of a check, about "
                         "70 ms at 10, 250 ms at 12; a costlier one would let wrong guesses take the CPU; make "
                         "one with htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        users[user] = hashed
    return users


def _build_tls(config: WebConfig, tls: dict, path: str, base: Path, insecure_permissions: bool = False) -> None:
    section = "tls_server_config"
    for inline, file_key in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if tls.get(inline) and tls.get(file_key):
            raise _error(path, f"{section}.{inline}", f"only one of {inline} or {file_key}")
    if not tls.get("cert") and not tls.get("cert_file"):
        raise _error(path, f"{section}.cert_file", "a certificate file (or cert: inline PEM)",
                     detail="TLS needs a certificate and its key")
    if not tls.get("key") and not tls.get("key_file"):
        raise _error(path, f"{section}.key_file", "a private key file (or key: inline PEM)",
                     detail="TLS needs a certificate and its key")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        text = default if tls.get(name) is None else tls[name]  # blank is no version, as in Go
        if not isinstance(text, str) or text not in TLS_VERSIONS:  # (and a list is no key of a dict)
            raise _error(path, f"{section}.{name}", "one of " + ", ".join(TLS_VERSIONS), text)
        versions[name] = text
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise _error(path, f"{section}.min_version", f"at most max_version ({versions['max_version']})",
                     versions["min_version"])
    context.minimum_version = TLS_VERSIONS[versions["min_version"]]
    context.maximum_version = TLS_VERSIONS[versions["max_version"]]
    if versions["min_version"] in ("TLS10", "TLS11"):
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 refuses TLS 1.0/1.1 at its default level
    config.min_version = versions["min_version"]

    _load_cert(context, tls, path, base)

    auth_type = tls.get("client_auth_type") or "NoClientCert"
    if auth_type in _UNVERIFIED_CLIENT_AUTH:
        raise _error(path, f"{section}.client_auth_type", "one of " + ", ".join(CLIENT_AUTH_TYPES), auth_type,
                     detail="sixdim verifies every client certificate it asks for (Python's ssl cannot ask "
                     "without verifying); use RequireAndVerifyClientCert with client_ca_file for mTLS")
    if auth_type not in CLIENT_AUTH_TYPES:
        raise _error(path, f"{section}.client_auth_type", "one of " + ", ".join(CLIENT_AUTH_TYPES), auth_type)
    config.client_auth_type = auth_type
    has_ca = bool(tls.get("client_ca") or tls.get("client_ca_file"))
    if auth_type == "NoClientCert":
        if has_ca:
            raise _error(path, f"{section}.client_auth_type", "RequireAndVerifyClientCert or "
                         "VerifyClientCertIfGiven when a client CA is configured", auth_type)
        context.verify_mode = ssl.CERT_NONE
    else:
        if not has_ca:
            raise _error(path, f"{section}.client_ca_file", f"the CA that signs client certificates "
                         f"(client_auth_type {auth_type} verifies them)")
        _load_client_ca(context, tls, path, base, insecure_permissions)
        context.verify_mode = ssl.CERT_REQUIRED if auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL

    sans = _strings(tls.get("client_allowed_sans"), path, f"{section}.client_allowed_sans")
    if sans and auth_type != "RequireAndVerifyClientCert":
        raise _error(path, f"{section}.client_allowed_sans", "client_auth_type RequireAndVerifyClientCert "
                     "with client_allowed_sans", auth_type, detail="without a required certificate there is "
                     "no SAN to match")
    config.client_allowed_sans = tuple(sans)

    ciphers = _strings(tls.get("cipher_suites"), path, f"{section}.cipher_suites")
    for name in ciphers:
        if name not in GO_CIPHERS and name not in GO_TLS13_CIPHERS:
            raise _error(path, f"{section}.cipher_suites", "Go cipher suite names: "
                         + ", ".join(list(GO_CIPHERS) + list(GO_TLS13_CIPHERS)), name)
    openssl_names = [GO_CIPHERS[name] for name in ciphers if name in GO_CIPHERS]
    if openssl_names:
        try:
            context.set_ciphers(":".join(dict.fromkeys(openssl_names)))
        except ssl.SSLError as exc:
            raise _error(path, f"{section}.cipher_suites", "suites this OpenSSL supports", ciphers,
                         detail=str(exc)) from None
    prefer = tls.get("prefer_server_cipher_suites", True)
    if _bool(prefer, path, f"{section}.prefer_server_cipher_suites"):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE

    curves = _strings(tls.get("curve_preferences"), path, f"{section}.curve_preferences")
    for name in curves:
        if name not in GO_CURVES:
            raise _error(path, f"{section}.curve_preferences", "one of " + ", ".join(GO_CURVES), name)
    if len(curves) > 1:
        raise _error(path, f"{section}.curve_preferences", "one curve (or none for OpenSSL's default: X25519, "
                     "P-256, P-384, P-521 and more)", curves, detail="Python's ssl sets a single curve")
    if curves:
        context.set_ecdh_curve(GO_CURVES[curves[0]])
    config.ssl_context = context


def _file(tls: dict, key: str, path: str, base: Path) -> str:
    """The file a ``*_file`` key names, relative to the web configuration file's folder."""
    text = _string(tls[key], path, f"tls_server_config.{key}")
    expected = "an existing file (relative paths are relative to the web configuration file)"
    try:
        name = base / os.path.expanduser(text)
        found = name.is_file()
    except (OSError, ValueError) as exc:  # a name too long, with a NUL byte, in a folder that cannot be read
        raise _error(path, f"tls_server_config.{key}", expected, text,
                     detail=getattr(exc, "strerror", None) or str(exc)) from None
    if not found:
        raise _error(path, f"tls_server_config.{key}", expected, text, detail=f"{name} does not exist")
    return str(name)


def _pem(tls: dict, key: str, path: str) -> bytes:
    """An inline PEM value (``cert``, ``key``), as the bytes of the file ssl loads it from."""
    text = _string(tls[key], path, f"tls_server_config.{key}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # "\ud800" in a double-quoted YAML string
        raise _error(path, f"tls_server_config.{key}", "PEM text", detail="it holds a lone surrogate (\\uD800-"
                     "\\uDFFF), which no PEM file has") from None


def _load_cert(context: ssl.SSLContext, tls: dict, path: str, base: Path) -> None:
    key_name = "cert_file" if tls.get("cert_file") else "cert"

    def no_password() -> bytes:  # an encrypted key must not make the daemon prompt on a terminal
        raise _error(path, "tls_server_config.key_file", "an unencrypted private key",
                     detail="the key is encrypted with a passphrase")

    with tempfile.TemporaryDirectory(prefix="sixdim-tls-") as scratch:  # inline PEM: ssl loads files only
        files = {}
        for inline, file_key in (("cert", "cert_file"), ("key", "key_file")):
            if tls.get(file_key):
                files[inline] = _file(tls, file_key, path, base)
            else:
                files[inline] = os.path.join(scratch, inline + ".pem")
                fd = os.open(files[inline], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(_pem(tls, inline, path))
        if tls.get("key_file"):
            try:
                _warn_if_readable(files["key"], os.stat(files["key"]), "tls_server_config.key_file")
            except OSError:
                pass  # load_cert_chain says why it cannot be read
        try:
            context.load_cert_chain(files["cert"], files["key"], password=no_password)
        except ssl.SSLError as exc:
            raise _error(path, f"tls_server_config.{key_name}", "a PEM certificate and the private key that "
                         "matches it (key_file)", detail=f"{exc.reason or exc}") from None
        except OSError as exc:
            raise _error(path, f"tls_server_config.{key_name}", "a readable PEM certificate and key",
                         detail=exc.strerror or str(exc)) from None


def _load_client_ca(context: ssl.SSLContext, tls: dict, path: str, base: Path,
                    insecure_permissions: bool = False) -> None:
    """The CAs that sign client certificates.  A client CA file that other users can change is
    refused as the web configuration file is: whoever adds a CA to it may scrape sixdim."""
    key = "client_ca_file" if tls.get("client_ca_file") else "client_ca"
    try:
        if key == "client_ca_file":
            cafile = _file(tls, key, path, base)
            with open_regular(cafile) as handle:  # checked on the open file: the file checked is the file loaded
                check_permissions(cafile, os.fstat(handle.fileno()), CLIENT_CA_ROLE, insecure=insecure_permissions)
                pem = handle.read(MAX_FILE_BYTES + 1)
            if len(pem) > MAX_FILE_BYTES:
                raise ValueError("file too large (at most 1 MiB)")
            if not pem.isascii():
                raise ValueError("not PEM text (a byte that is not ASCII)")
            context.load_verify_locations(cadata=pem.decode("ascii"))
        else:
            context.load_verify_locations(cadata=_string(tls[key], path, f"tls_server_config.{key}"))
    except (ssl.SSLError, ValueError) as exc:
        raise _error(path, f"tls_server_config.{key}", "PEM CA certificates",
                     detail=f"{getattr(exc, 'reason', None) or exc}") from None
    except OSError as exc:
        raise _error(path, f"tls_server_config.{key}", "a readable PEM file",
                     detail=exc.strerror or str(exc)) from None

"""Secrets out of what sixdim keeps and shows: the tokens, keys and passwords in a command's parameters.

A ``command`` workload's parameters are the user's command line and environment, which is where a
training job's credentials often are (``HF_TOKEN=...``, ``--api-key ...``).  Everything sixdim keeps
about a run goes further than the host: the SQLite history, the board, ``/metrics`` (the ``shape``
label), the logs.  So the executor records :func:`redact_params` of a case's parameters, and
removes the :func:`secret_values` found in them from every other text of the record (shape,
reason, details, environment) with :func:`scrub`.  The worker still runs the real command.

**Which names are secret** (:func:`is_secret_name`), case-insensitive, after stripping leading
``-`` and ``+`` and turning ``-`` and ``.`` into ``_`` (so ``--api-key``, ``wandb.api_key`` and
``WANDB_API_KEY`` are one name): a name ending in ``_TOKEN``, ``_KEY`` or ``_APIKEY``, a name that
is ``TOKEN``, ``KEY`` or ``APIKEY``, or one containing ``PASSWORD``, ``PASSWD``, ``SECRET`` or
``CREDENTIAL`` -- unless it ends in ``_FILE``, ``_PATH`` or ``_DIR``: those name *where* a secret
is (``--password-file``, ``--key-file``, ``AWS_SHARED_CREDENTIALS_FILE``), which is what users are
advised to pass, and the path stays readable.  ``MONKEY``, ``KEYBOARD``, ``TOKENIZER``,
``MAX_TOKENS`` and ``--keep-days`` are not secret; ``--sort-key`` is (a harmless false positive).

**Where values are found**: ``NAME=VALUE`` items (``--api-key=V``, ``HF_TOKEN=V``, Hydra's
``wandb.api_key=V``), a secret flag followed by a separate value that does not start with ``-``
(``--token V``), ``KEY=VALUE`` pairs of ``env``, other string parameters with a secret name, and
the same rules inside a shell command line (``shell = true``, or an argument with white space in
it).  The argument after a shell's ``-c`` (``sh``, ``bash``, ``dash``, ``zsh``, ``ksh``, ``ash``;
``bash -lc``, ``env VAR=... sh -c``, ``sh -e -c``) is always read as a command line, its values one
by one: ``sh -c "HF_TOKEN=V python train.py --api-key=W"`` keeps its command readable and gives ``V``
and ``W`` to :func:`scrub`, not the whole line as one value.  A secret the command prints that is not
in its parameters cannot be recognised.

**Credentials of HTTP clients**, which carry no secret name: an argument that is a header (``Name:
value``, as ``curl -H``, ``wget --header=`` and httpie's ``Name:value`` items give it) whose name is
``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie`` or a secret name (``X-API-Key``,
``X-Auth-Token``, ``Private-Token``) loses its value, an authorization's scheme kept (``Authorization:
Bearer <redacted>``, also ``token`` and ``Basic``, whose decoded password is hunted too); ``curl -u``,
``--user``, ``-U``, ``--proxy-user`` (also ``-sSu``, ``-uNAME:PW``, ``--user=``) and httpie's ``-a`` /
``--auth`` lose the password of ``user:password``, the user kept, and only after the program's name
(``sudo -u bob``, ``docker run -u 1000:1000``, ``python -u`` are not credentials); a name containing
``BEARER`` is secret (``--oauth2-bearer TOKEN``); a URL's ``user:password@`` loses the password
anywhere (``git clone https://bob:PW@...``, ``DATABASE_URL=postgres://u:PW@h/db``).

Standard library only, and nothing else of sixdim: the daemon side (:mod:`sixdim.run.executor`) and the
worker side (:mod:`sixdim.workloads.logs.command`, the one workloads module that imports from ``agent``) both
use it, so it must never import either.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard, TypeVar, cast

REDACTED = "<redacted>"
"""What a secret value is replaced with: visibly not the value, and not a plausible one."""

MIN_SECRET_LENGTH = 4
"""Values shorter than this are redacted where they stand but not scrubbed from free text: replacing
every ``1`` or ``abc`` in a reason or a traceback would hide more than it protects."""

_SECRET_NAMES = frozenset({"TOKEN", "KEY", "APIKEY"})
_SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_APIKEY")
_SECRET_WORDS = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "BEARER")
_LOCATION_SUFFIXES = ("_FILE", "_PATH", "_DIR")

_ASSIGNMENT = re.compile(r"([-+]*[A-Za-z_][\w.-]*)=(.*)", re.S)
"""``NAME=VALUE``: an environment assignment, ``--flag=value`` or a Hydra-style ``a.b=value``."""
_FLAG = re.compile(r"-{1,2}[A-Za-z][\w.-]*")
"""A flag that may take its value as the next argument."""
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
"""Programs whose ``-c`` argument is a command line."""
_COMMAND_OPTION = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
"""A shell's ``-c``, alone or among other one-letter options (``-lc``, ``-ec``, ``-xc``)."""
_OPTION_WITH_ARGUMENT = re.compile(r"[-+][A-Za-z]*[oO]")
"""A shell's ``-o``/``+o``/``-O`` (``-o pipefail``): the next argument is its option's name."""
_SHELL_TOKEN = re.compile(r"""
    (?P<word>(?:[^\s'"\\;&|<>()]           # an unquoted character
               | \\.                       # an escaped one
               | '[^']*(?:'|\Z)           # a single-quoted part (an unterminated one runs to the end)
               | "(?:[^"\\]|\\.)*(?:"|\Z)  # a double-quoted part
              )+)
  | (?P<operator>[;&|<>()]+)
""", re.S | re.X)
"""A shell word (quotes kept, so its span in the line is exact) or a run of operator characters."""

_HEADER = re.compile(r"([A-Za-z][\w-]*)(\s*:\s*)(\S.*)", re.S)
"""An HTTP header as a client takes it: ``Name: value`` (curl, wget) or ``Name:value`` (httpie)."""
_CREDENTIAL_HEADERS = frozenset({"AUTHORIZATION", "PROXY_AUTHORIZATION", "COOKIE", "SET_COOKIE"})
"""Headers that carry credentials without a secret name; ``X-API-Key`` and the like are found by name."""
_AUTH_SCHEME = re.compile(r"([A-Za-z][\w.+-]*)(\s+)(\S.*)", re.S)
"""An authorization's ``scheme credentials`` (``Bearer T``, ``token T``, ``Basic B64``): the scheme stays."""
_AUTH_SCHEMES = frozenset({"Bearer", "bearer", "Basic", "basic", "token", "Token", "Digest", "Negotiate", "NTLM"})
"""A scheme alone (``Authorization: Bearer``, its token still to come) is redacted but not hunted in output."""
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:)([^/?#\s]+)(?=@)")
"""The password of a URL's ``user:password@``; up to the authority's last ``@``, as clients read it."""


class _Client:
    """The options of an HTTP client that take ``user:password``; only read after the client's name."""

    def __init__(self, short: str, long: frozenset[str], whole_without_colon: bool) -> None:
        self.short, self.long = short, long
        self.whole_without_colon = whole_without_colon  # httpie's --auth is a bare token with -A bearer

    def takes_next(self, item: str) -> bool:
        """``--user``, ``-u``, or a cluster of one-letter options that ends with one (``-sSfu``)."""
        return item in self.long or bool(re.fullmatch(r"-[A-Za-z]+", item) and item[-1] in self.short)

    def glued(self, item: str) -> tuple[str, str] | None:
        """``--user=VALUE`` or ``-uVALUE``: the option as written and its value."""
        name, sep, value = item.partition("=")
        if sep and name in self.long:
            return name + "=", value
        if len(item) > 2 and item[0] == "-" and item[1] in self.short:
            return item[:2], item[2:]
        return None


_CLIENTS = {
    "curl": _Client("uU", frozenset({"--user", "--proxy-user"}), whole_without_colon=False),
    "http": _Client("a", frozenset({"--auth"}), whole_without_colon=True),  # httpie
    "https": _Client("a", frozenset({"--auth"}), whole_without_colon=True),
}
"""Programs whose ``-u``-like option is a credential (``-u`` is a user, a uid or a switch elsewhere)."""

T = TypeVar("T")


def is_secret_name(name: str) -> bool:
    """Whether ``name`` (an environment variable, a flag, a parameter) names a secret; see the module."""
    normal = name.lstrip("-+").replace("-", "_").replace(".", "_").upper()
    if normal.endswith(_LOCATION_SUFFIXES):
        return False
    return (normal in _SECRET_NAMES or normal.endswith(_SECRET_SUFFIXES)
            or any(word in normal for word in _SECRET_WORDS))


def is_credential_header(name: str) -> bool:
    """Whether an HTTP header called ``name`` carries a credential (see the module)."""
    normal = name.replace("-", "_").upper()
    return normal in _CREDENTIAL_HEADERS or normal.endswith("_AUTHORIZATION") or is_secret_name(name)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every secret ``NAME=VALUE`` and secret flag replaced by :data:`REDACTED`."""
    return _argv(argv)[0]


def redact_shell(line: str) -> str:
    """A shell command line with the rules of :func:`redact_argv` applied to its words; a redacted
    word loses its quotes (``--password='a b'`` becomes ``--password=<redacted>``)."""
    return _shell(line)[0]


def redact_params(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of a case's parameters fit to keep and show: ``argv`` (a shell line where ``shell`` is
    set), ``env`` and every other string under a secret name redacted.  Any workload's parameters
    may be given; those without secrets come back equal."""
    return _params(params)[0]


def secret_values(params: dict[str, Any]) -> set[str]:
    """The secret values in a case's parameters that :func:`scrub` should hunt for in free text (a
    failure reason quoting the command's output, a traceback), the short ones left out."""
    return {value for value in _params(params)[1] if len(value) >= MIN_SECRET_LENGTH}


def scrub(obj: T, values: Iterable[str]) -> T:
    """``obj`` with every occurrence of each of ``values`` in its strings replaced by :data:`REDACTED`.

    Strings, lists, tuples and dicts (keys too) are walked recursively; other objects are kept.
    With nothing to hunt for, ``obj`` itself comes back, so records of runs without secrets cost
    nothing.  Longer values are replaced first, so a value that contains another goes whole."""
    ordered = sorted({value for value in values if value}, key=len, reverse=True)
    if not ordered:
        return obj
    return cast(T, _scrub(obj, re.compile("|".join(map(re.escape, ordered)))))


def _scrub(obj: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(obj, str):
        return pattern.sub(REDACTED, obj)
    if isinstance(obj, dict):
        return {_scrub(key, pattern): _scrub(value, pattern) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_scrub(item, pattern) for item in obj]
    if type(obj) is tuple:
        return tuple(_scrub(item, pattern) for item in obj)
    return obj


def _params(params: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """:func:`redact_params` and the secret values it took out (one walk serves both)."""
    redacted: dict[str, Any] = dict(params)
    found: set[str] = set()
    argv = params.get("argv")
    if _strings(argv):
        if params.get("shell"):
            lines = [_shell(line) for line in argv]
            redacted["argv"] = [line for line, _ in lines]
            found.update(value for _, values in lines for value in values)
        else:
            redacted["argv"], values = _argv(argv)
            found |= values
    env = params.get("env")
    if _strings(env):
        redacted["env"], values = _env(env)
        found |= values
    for key, value in params.items():
        if key not in ("argv", "env") and isinstance(value, str) and value and is_secret_name(key):
            redacted[key] = REDACTED
            found.add(value)
    return redacted, found


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _argv(argv: Sequence[str]) -> tuple[list[str], set[str]]:
    """The redacted arguments and the values taken out.  A secret flag's value is the next argument
    unless that starts with ``-`` (then it is the next flag, and the secret flag a switch).  The
    argument after a shell's ``-c`` (``sh``, ``/bin/bash``, after ``env A=1`` or not; ``-c`` among the
    shell's options, before its first operand) is a command line: read by :func:`_shell`, whatever it
    starts with."""
    redacted: list[str] = []
    found: set[str] = set()
    value_next = script_next = credential_next = False
    shell_options = option_argument = False  # among a shell's options; the next is the name of its -o
    client: _Client | None = None  # an HTTP client's name was seen: its -u is a credential
    for item in argv:
        if credential_next and not item.startswith("-") and client is not None:
            shown, values = _credential(item, client)
            redacted.append(shown)
            found |= values
            credential_next = False
            continue
        credential_next = False
        if client is not None and (glued := client.glued(item)) is not None:
            shown, values = _credential(glued[1], client)
            redacted.append(glued[0] + shown)
            found |= values
            continue
        if script_next:
            shown, values = _shell(item)
            redacted.append(shown)
            found |= values
            value_next = script_next = False
            continue
        if value_next and not item.startswith("-"):
            redacted.append(REDACTED)
            found.add(item)
            value_next = False
            continue
        shown, values = _item(item)
        redacted.append(shown)
        found |= values
        value_next = bool(_FLAG.fullmatch(item)) and is_secret_name(item)
        credential_next = client is not None and client.takes_next(item)
        program = item.rsplit("/", 1)[-1]
        if ":" not in item:  # a program's path, not a URL ending in /http
            client = _CLIENTS.get(program, client)
        if program in _SHELLS:
            shell_options, option_argument = True, False
        elif shell_options:
            script_next = bool(_COMMAND_OPTION.fullmatch(item))
            shell_options = not script_next and (option_argument or item.startswith(("-", "+")))
            option_argument = bool(_OPTION_WITH_ARGUMENT.fullmatch(item))
    return redacted, found


def _item(item: str) -> tuple[str, set[str]]:
    """One argument: a credential header loses its value (also as ``--header=...`` or ``-H...``); a
    secret ``NAME=VALUE`` loses its whole value; else one with white space in it is read as a command
    line of its own (``sh -c "python train.py --token V"``); a URL's password goes wherever it is."""
    header = _header(item)
    if header is not None:
        return header
    assignment = _ASSIGNMENT.fullmatch(item)
    if assignment and is_secret_name(assignment[1]):
        name, value = assignment[1], assignment[2]
        return (f"{name}={REDACTED}", {value}) if value else (item, set())
    prefix = f"{assignment[1]}=" if assignment else "-H" if item.startswith("-H") else ""
    header = _header(item[len(prefix):]) if prefix else None
    if header is not None:
        return prefix + header[0], header[1]
    if any(character.isspace() for character in item):
        line, values = _shell(item)
        return line, values
    found = {match[2] for match in _URL_PASSWORD.finditer(item)}
    return _URL_PASSWORD.sub(lambda match: match[1] + REDACTED, item), found


def _header(item: str) -> tuple[str, set[str]] | None:
    """A credential header with its value redacted and the values taken out; ``None`` for anything else.
    An authorization keeps its scheme; Basic's decoded password and a cookie's values are hunted too."""
    header = _HEADER.fullmatch(item)
    if header is None or not is_credential_header(header[1]):
        return None
    name, colon, value = header[1], header[2], header[3]
    scheme = _AUTH_SCHEME.fullmatch(value) if name.upper().endswith("AUTHORIZATION") else None
    if scheme is None:
        found = {value} - _AUTH_SCHEMES if name.upper().endswith("AUTHORIZATION") else {value}
        if name.upper() in ("COOKIE", "SET-COOKIE"):
            found |= {part.partition("=")[2].strip() for part in value.split(";")} - {""}
        return f"{name}{colon}{REDACTED}", found
    credentials = scheme[3]
    found = {credentials}
    if scheme[1].lower() == "basic":
        try:
            found.add(base64.b64decode(credentials, validate=True).decode().partition(":")[2])
        except (binascii.Error, UnicodeDecodeError):
            pass  # not base64 after all: the credentials themselves are what is hunted
    return f"{name}{colon}{scheme[1]}{scheme[2]}{REDACTED}", found - {""}


def _credential(value: str, client: _Client) -> tuple[str, set[str]]:
    """An HTTP client's ``user:password`` with the password redacted; without a colon, curl's value is
    a user name (curl asks for the password), httpie's may be a bearer token (redacted whole)."""
    user, colon, password = value.partition(":")
    if colon:
        return (f"{user}:{REDACTED}", {password}) if password else (value, set())
    return (REDACTED, {value}) if client.whole_without_colon and value else (value, set())


def _shell(line: str) -> tuple[str, set[str]]:
    """:func:`redact_shell` and the values taken out.  The line is cut into words and operators
    (``;``, ``&&``, ``|``, ``$(``, ...); each run of words between operators is one argument list,
    read unquoted; a redacted word replaces its span of the line, the rest is kept as written.
    The words unquote to shorter strings, so reading a word's white space as a line ends."""
    edits: list[tuple[int, int, str]] = []
    found: set[str] = set()
    run: list[re.Match[str]] = []
    for token in [*_SHELL_TOKEN.finditer(line), None]:
        if token is not None and token["word"] is not None:
            run.append(token)
            continue
        words = [_unquote(match[0]) for match in run]
        redacted, values = _argv(words)
        found |= values
        edits += [(match.start(), match.end(), _requote(new)) for match, old, new in zip(run, words, redacted)
                  if new != old]
        run = []
    for start, end, new in reversed(edits):
        line = line[:start] + new + line[end:]
    return line, found


def _requote(word: str) -> str:
    """A redacted word as it goes back into the line: quoted again where it is a nested command line
    (``sh -c "..."``), so the line still reads as the same command."""
    return shlex.quote(word) if any(character.isspace() for character in word) else word


def _unquote(word: str) -> str:
    """A shell word as the command receives it; an unterminated quote just loses its quote marks."""
    try:
        parts = shlex.split(word)
    except ValueError:
        return word.replace("'", "").replace('"', "")
    return parts[0] if len(parts) == 1 else "".join(parts)


def _env(pairs: Sequence[str]) -> tuple[list[str], set[str]]:
    """``KEY=VALUE`` items with the value of every secret ``KEY`` replaced by :data:`REDACTED`, and the values
    taken out; an item without ``=`` is kept as it is."""
    redacted: list[str] = []
    found: set[str] = set()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep and value and is_secret_name(key):
            redacted.append(f"{key}={REDACTED}")
            found.add(value)
        else:
            redacted.append(pair)
    return redacted, found

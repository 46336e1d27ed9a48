"""The configuration's loader: the schema's flags on a parser, and :func:`load`, which reads the sources
in order of precedence, lowest first: built-in defaults, the TOML file (``--config`` or ``SIXDIM_CONFIG``;
without one, the embedded ``default.toml``), ``SIXDIM_*`` environment variables, command-line flags.
The file is read only when it is a regular one no other user can change (:mod:`sixdim.config.trust`)."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from sixdim.config.schema import (
    DEFAULT_SOURCE,
    EMBEDDED_SOURCE,
    OPTIONS,
    Config,
    ConfigError,
    parse_bool,
    parse_effects,
)
from sixdim.config.suites import parse_suites
from sixdim.config.trust import CONFIG_FILE_ROLE, check_folders, check_permissions, insecure_permissions_allowed
from sixdim.core.files import READ_ONLY_REGULAR, NotARegularFile, open_regular

_SECTIONS = {"agent", "guard", "regression", "suites"}


def add_option_flags(parser: argparse.ArgumentParser, keys: tuple[str, ...] | None = None) -> None:
    """Add the schema's flags to a parser (all of them, or those whose keys are given)."""
    group = parser.add_argument_group("options (each also a SIXDIM_* variable and a key in the TOML file)")
    for opt in OPTIONS:
        if keys is not None and opt.key not in keys:
            continue
        if opt.parse is parse_bool:
            group.add_argument(opt.flag, dest=opt.dest, action=argparse.BooleanOptionalAction, default=None,
                               help=f"{opt.help} [{opt.env}; {opt.key}]")
        else:
            group.add_argument(opt.flag, dest=opt.dest, default=None, metavar=opt.dest.split("_", 1)[-1].upper(),
                               help=f"{opt.help} [{opt.env}; {opt.key}]")


def load(config_path: str | None = None, *, env: dict[str, str] | None = None,
         flags: argparse.Namespace | None = None) -> Config:
    """Build the configuration from defaults, file, environment and flags (in that order)."""
    env = dict(os.environ) if env is None else env
    insecure = insecure_permissions_allowed(env, flags)
    config_path = config_path or env.get("SIXDIM_CONFIG") or None
    if config_path:
        source = str(config_path)
        document = _read_toml_file(Path(config_path), insecure_permissions=insecure)
    else:
        source = EMBEDDED_SOURCE
        document = tomllib.loads(resources.files("sixdim").joinpath("default.toml").read_text())

    unknown = set(document) - _SECTIONS
    if unknown:
        raise ConfigError(source, sorted(unknown)[0], "one of the sections " + ", ".join(sorted(_SECTIONS)),
                          detail="unknown top-level key")
    for section in ("agent", "guard", "regression"):
        if section in document and not isinstance(document[section], dict):
            raise ConfigError(source, section, "a table", document[section])
        known = {o.key.split(".", 1)[1] for o in OPTIONS if o.key.startswith(section + ".")}
        known |= {"effects"} if section == "regression" else set()
        for key in document.get(section, {}):
            if key not in known:
                raise ConfigError(source, f"{section}.{key}", "one of " + ", ".join(sorted(known)),
                                  detail="unknown key")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        section, name = opt.key.split(".", 1)
        raw, where = None, None
        if name in document.get(section, {}):
            raw, where = document[section][name], source
        if opt.env in env:
            raw, where = env[opt.env], f"environment variable {opt.env}"
        flag_value = getattr(flags, opt.dest, None) if flags is not None else None
        if flag_value is not None:
            raw, where = flag_value, f"command-line flag {opt.flag}"
        if where is None:
            values[opt.field] = opt.default(env)
            sources[opt.key] = DEFAULT_SOURCE
            continue
        sources[opt.key] = where
        try:
            values[opt.field] = opt.parse(raw)
        except (ValueError, TypeError, OverflowError):
            raise ConfigError(where, opt.key, opt.expected, raw) from None

    if values["regression_min_baseline"] > values["regression_window"]:
        where = sources["regression.min_baseline"]
        expected = f"at most regression.window ({values['regression_window']})"
        raise ConfigError(where, "regression.min_baseline", expected, values["regression_min_baseline"])
    values["regression_effects"] = parse_effects(document.get("regression", {}).get("effects", {}), source)
    if "suites" in document:
        suites = parse_suites(document["suites"], source)
    else:
        defaults = tomllib.loads(resources.files("sixdim").joinpath("default.toml").read_text())
        suites = parse_suites(defaults["suites"], EMBEDDED_SOURCE)
    check_folders(values, sources)
    return Config(suites=suites, source=source, sources=sources, insecure_config_permissions=insecure,
                  **values)



MAX_CONFIG_BYTES = 2**20
"""The largest configuration file read (1 MiB): a real one is a few kilobytes.  Checked on the bytes,
before the TOML is parsed."""
def _read_toml_file(path: Path, *, insecure_permissions: bool = False) -> dict[str, Any]:
    """The file's TOML document.  Only a regular file is read (:func:`open_regular`: a FIFO at the path
    would make the daemon wait for a writer, deaf to SIGTERM; a device would be read without end), and
    at most :data:`MAX_CONFIG_BYTES` of it.  Its permissions are checked on the open file (``fstat``),
    so the file checked is the file read, whatever replaces the name meanwhile."""
    try:
        with open_regular(path) as handle:
            check_permissions(str(path), os.fstat(handle.fileno()), CONFIG_FILE_ROLE,
                              insecure=insecure_permissions)
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(str(path), "(file)", "an existing TOML file", detail="no such file") from None
    except NotARegularFile as exc:
        raise ConfigError(str(path), "(file)", "a regular TOML file", detail=f"it is {exc.kind}; {READ_ONLY_REGULAR}") \
            from None
    except OSError as exc:
        raise ConfigError(str(path), "(file)", "a readable TOML file", detail=exc.strerror or str(exc)) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(str(path), "(file)", f"a TOML file of at most {MAX_CONFIG_BYTES // 2**20} MiB",
                          detail="file too large")
    try:
        text = data.decode("utf-8")  # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "(encoding)", "UTF-8 text (TOML files are UTF-8)",
                          detail=f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8") from None
    return parse_toml(text, str(path))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """A TOML document, or ConfigError: bad syntax, nesting too deep for the parser (tomllib recurses
    once per level: ``x = [[[[...]]]]`` 100,000 deep is a RecursionError), or an integer longer than
    Python reads (4,300 digits: a ValueError that is not a TOMLDecodeError)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "(syntax)", "valid TOML", detail=str(exc)) from None
    except RecursionError:
        raise ConfigError(source, "(syntax)", "valid TOML", detail="arrays or tables nested too deeply") from None
    except ValueError:  # int("9" * 5000): past Python's integer digit limit
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise ConfigError(source, "(syntax)", "valid TOML",
                          detail=f"a number of more than {limit} digits") from None

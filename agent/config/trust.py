"""Whether the files and folders sixdim is configured with are safe from other users: the configuration
file (and the web configuration's files) no other user can change, the state and history folders no
other user can write in, and the escape hatch (a flag and a variable, never a key of the file) that
loads an unsafe file with a warning.  A file others can change would let them choose the commands
sixdim runs as whoever runs it: root, for a system daemon."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import stat
from pathlib import Path
from typing import Any

from sixdim.config.schema import DEFAULT_SOURCE, ConfigError, parse_bool

log = logging.getLogger("sixdim")

INSECURE_PERMISSIONS_FLAG = "--insecure-config-permissions"
INSECURE_PERMISSIONS_ENV = "SIXDIM_INSECURE_CONFIG_PERMISSIONS"
"""The escape hatch of :func:`check_permissions`: a flag and a variable, and deliberately no key of the
TOML file, because a file cannot vouch for its own permissions."""

CONFIG_FILE_ROLE = "it defines the commands sixdim runs"
"""Why the ``--config`` file must be safe from other users (the ``command`` workload's argv is in it)."""


def permission_problem(mode: int, owner: int, euid: int) -> tuple[str, str] | None:
    """What makes a file of this ``st_mode`` and ``st_uid`` unsafe to configure a process whose
    effective user is ``euid``, and the command that fixes it (without the file name); None when
    nothing does.

    A file its group or others can write lets them change what sixdim does as whoever runs it: root,
    for a system daemon, which then runs the ``command`` workload's commands.  For a root process, a
    file another user owns is the same, as its owner can rewrite it, or make it writable, at will.
    A pure function of the three numbers, so the root-only rule is tested without being root."""
    writable = mode & 0o022
    if writable:
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}[writable]
        return f"mode {stat.S_IMODE(mode):04o}: {who} can write it", "chmod go-w"
    if euid == 0 and owner != 0:
        return f"owned by {_user_name(owner)}, not root, while sixdim runs as root: that user can rewrite it", \
            "chown root"
    return None


def _user_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a number no account has."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_permissions(path: str, status: os.stat_result, role: str, *, insecure: bool = False,
                      euid: int | None = None) -> None:
    """Refuse (:class:`ConfigError`) a file other users can change, or with ``insecure`` (the escape
    hatch) log the same text as a warning and go on.  ``status`` is the ``fstat`` of the open file,
    so what is checked is what is read; ``role`` says why the file matters; ``euid`` defaults to
    the process's (a parameter so the root-only rule can be tested as any user)."""
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    found = permission_problem(status.st_mode, status.st_uid, euid)
    if found is None:
        return
    problem, fix = found
    error = ConfigError(path, "(permissions)", f"a file no other user can change, as {role}",
                        detail=f"{problem}; fix: {fix} {shlex.quote(path)}, or accept the risk with "
                        f"{INSECURE_PERMISSIONS_FLAG} or {INSECURE_PERMISSIONS_ENV}=true")
    if not insecure:
        raise error
    log.warning("%s; loaded anyway, as %s (or %s) says", error, INSECURE_PERMISSIONS_FLAG, INSECURE_PERMISSIONS_ENV)


FOLDER_ROLES = {
    "agent.state_dir": "it holds the worker records whose processes sixdim kills and whose results it records",
    "agent.history": "it holds the history sixdim writes and exports, and its lock",
}
"""Why the state folder and the history's folder must be safe from other users."""


def folder_problem(folder: str | Path, euid: int) -> tuple[Path, str, str] | None:
    """What makes ``folder`` unsafe to keep the state or the history of a process whose effective user is
    ``euid`` in: the folder found wanting, the problem and the command that fixes it; None when nothing does.

    The folder itself (or, where it does not exist yet, the folder it would be made in) must be one that
    neither its group nor others can write, even with a sticky bit (others could add a forged worker
    record, or a link where a lock or history file goes); each folder above it one that others cannot
    write unless it has the sticky bit (``/tmp``: there others cannot rename or remove what is not
    theirs); and every one of them owned by root or by ``euid`` (its owner can change it at will).  The
    rule for the folder itself is :func:`permission_problem`'s for the configuration file.  Symbolic
    links in the path are resolved, so the folders judged are those used.  A folder that cannot be
    looked at, or a part of the path that is a file, is not judged here: using it says why."""
    path = Path(os.path.realpath(folder))
    first = True
    missing = False
    for part in (path, *path.parents):
        try:
            status = os.stat(part)
        except FileNotFoundError:
            missing = True
            continue  # made later, 0700, in the first folder that exists: judged as the folder itself
        except OSError:
            return None
        if not stat.S_ISDIR(status.st_mode):
            return None
        if status.st_uid not in (0, euid):
            who = "root" if euid == 0 else f"root or {_user_name(euid)}"
            return part, f"owned by {_user_name(status.st_uid)}, not {who}: that user can change it", \
                f"chown {'root' if euid == 0 else euid}"
        writable = status.st_mode & (0o022 if first else 0o002)
        if writable and (first or not status.st_mode & stat.S_ISVTX):
            found = permission_problem(status.st_mode, status.st_uid, euid)
            if found is not None and first and missing:  # /tmp/new: another user could make it first
                return path, (f"it does not exist yet, and {part} ({found[0].split(':')[0]}) lets other users "
                              "make it before sixdim does"), "mkdir -m 0700 -p"
            if found is not None:
                return part, found[0].replace("write it", "write in it"), "chmod go-w" if first else "chmod o-w"
        first = False
    return None


def check_folders(values: dict[str, Any], sources: dict[str, str], euid: int | None = None) -> None:
    """Refuse (:class:`ConfigError`, one line) a state folder or history folder that another user can change
    (:func:`folder_problem`): there, a local user could forge a worker record and make a root daemon kill
    any process at its next start and record a forged result, or plant a link where a lock file goes.
    Checked at every load, before anything is made in them; no escape hatch: choose another folder."""
    if euid is None:
        euid = os.geteuid() if hasattr(os, "geteuid") else -1
    if euid < 0:
        return
    folders = (("agent.state_dir", Path(values["state_dir"])), ("agent.history", Path(values["history"]).parent))
    for key, folder in folders:
        found = folder_problem(folder, euid)
        if found is None:
            continue
        part, problem, fix = found
        named = "" if part == Path(os.path.realpath(folder)) else f" (in {part})"
        raise ConfigError(sources.get(key, DEFAULT_SOURCE), key,
                          f"a folder no other user can change, as {FOLDER_ROLES[key]}",
                          detail=f"{folder}{named}: {problem}; fix: {fix} {shlex.quote(str(part))}, or choose "
                                 f"another folder")


def insecure_permissions_allowed(env: dict[str, str], flags: argparse.Namespace | None = None) -> bool:
    """The escape hatch: ``--insecure-config-permissions`` (``--no-...`` to override a variable), else
    ``SIXDIM_INSECURE_CONFIG_PERMISSIONS`` (true or false, as every boolean variable); off by default."""
    flag = getattr(flags, "insecure_config_permissions", None) if flags is not None else None
    if flag is not None:
        return bool(flag)
    if INSECURE_PERMISSIONS_ENV not in env:
        return False
    try:
        return parse_bool(env[INSECURE_PERMISSIONS_ENV])
    except ValueError:
        raise ConfigError(f"environment variable {INSECURE_PERMISSIONS_ENV}", "insecure_config_permissions",
                          "true or false", env[INSECURE_PERMISSIONS_ENV]) from None


def add_insecure_permissions_flag(parser: argparse.ArgumentParser, dest: str = "insecure_config_permissions") -> None:
    """``--insecure-config-permissions`` (every command that reads a configuration file): not an
    :data:`OPTIONS` entry, as it has no key in the file."""
    parser.add_argument(INSECURE_PERMISSIONS_FLAG, dest=dest,
                        action=argparse.BooleanOptionalAction, default=None,
                        help="load a configuration file (--config; for serve also --web.config.file and its client "
                             "CA file) that "
                             "users other than its owner can change, or that a user other than root owns while "
                             "sixdim runs as root, with a warning instead of refusing it (default: refuse: such "
                             f"a user could make sixdim run their commands) [{INSECURE_PERMISSIONS_ENV}; "
                             "deliberately no key in the file, which cannot vouch for itself]")

"""Certificates made with the real openssl for the TLS tests: a CA, certificates it signs, and
self-signed ones, all P-256 keys valid for two days. One place, so the web-configuration tests and
the web-configuration fuzzing build their folders the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import required_tool

EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def openssl(*args: str, cwd: Path) -> None:
    """Run openssl in ``cwd``; a failure raises with openssl's own message in the exception."""
    subprocess.run([required_tool("openssl", "openssl"), *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder: Path, cn: str = "sixdim test CA") -> None:
    """ca.key and ca.crt in ``folder``: a CA that may sign certificates (and CRLs), nothing else."""
    openssl("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=folder)


def issue(folder: Path, name: str, cn: str, extensions: str) -> None:
    """NAME.key and NAME.crt in ``folder``, signed by its CA (:func:`make_ca` first), with the
    given x509v3 extensions (one per line: subjectAltName, extendedKeyUsage, ...)."""
    openssl("req", "-new", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=folder)
    (folder / f"{name}.ext").write_text(extensions)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)


def self_signed(folder: Path, name: str, cn: str, san: str) -> None:
    """NAME.key and NAME.crt in ``folder``, signed by their own key: what no CA vouches for."""
    openssl("req", "-x509", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
            "-subj", f"/CN={cn}", "-addext", f"subjectAltName={san}", cwd=folder)


def encrypt_key(folder: Path, key: str, out: str, passphrase: str) -> None:
    """``out``: ``key`` encrypted with AES-256 under ``passphrase``."""
    openssl("pkey", "-in", key, "-aes256", "-passout", f"pass:{passphrase}", "-out", out, cwd=folder)

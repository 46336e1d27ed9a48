"""Configuration: one schema, one loader.

Precedence, lowest first: built-in defaults, the TOML file (``--config`` or
``SIXDIM_CONFIG``; without one, the embedded ``default.toml``), ``SIXDIM_*``
environment variables, command-line flags.  Every scalar option exists in all
four places, as dcgm-exporter does; suites are tables and live in the file.

The package's parts, one job each: :mod:`~sixdim.config.schema` (the options, the types and
:class:`ConfigError`), :mod:`~sixdim.config.suites` (the ``[[suites]]`` tables),
:mod:`~sixdim.config.trust` (the files and folders no other user may change) and
:mod:`~sixdim.config.loader` (the sources, in order).  What the commands and the daemon load a
configuration with is named here; everything else is imported from the module that defines it.
"""

from sixdim.config.loader import add_option_flags, load
from sixdim.config.schema import Config, ConfigError, Suite, WorkloadEntry
from sixdim.config.trust import add_insecure_permissions_flag

__all__ = ["Config", "ConfigError", "Suite", "WorkloadEntry", "add_insecure_permissions_flag", "add_option_flags",
           "load"]

"""dcgm-exporter's label names, for the tests of ``--dcgm-label-names``.

``renamed(text)`` renames every label token of the default naming (``hostname``, ``model_name``) in a rule file,
a dashboard's JSON, a promtool unit test or an exposition to the name dcgm-exporter gives it (``Hostname``,
``modelName``: catalog.DCGM_LABEL_NAMES), leaving alone what is not a label: a variable reference
(``$hostname``, ``var-hostname``) and a metric name that ends in one (``sixdim_target:sixdim_build_info:hostname``).
The dcgm variant of every generated file must be exactly its default variant so renamed; and a file written for
the default names (deploy/prometheus/tests/sixdim-rules-test*.yml) renamed is the same test for dcgm mode.

``dcgm_labels(...)`` are the labels of a GPU's series as dcgm-exporter renders them
(internal/pkg/rendermetrics/render_metrics.go, releases up to 4.5.3-4.8.2): its default labels,
``DCGM_FI_DRIVER_VERSION`` included.
"""

from __future__ import annotations

import re

from sixdim.core import catalog

DEFAULT_NAMES = tuple(catalog.DCGM_LABEL_NAMES)


def renamed(text: str) -> str:
    for label, dcgm in catalog.DCGM_LABEL_NAMES.items():
        text = re.sub(rf"(?<![\w:$-]){label}(?!\w)", dcgm, text)
    return text


def default_names_in(text: str) -> list[str]:
    """Each default label token left in ``text``, with some context."""
    return [text[max(0, m.start() - 60):m.end() + 20] for label in DEFAULT_NAMES
            for m in re.finditer(rf"(?<![\w:$-]){label}(?!\w)", text)]


def dcgm_labels(hostname: str, gpu: str, uuid: str, model: str, bus_id: str) -> dict[str, str]:
    """The labels dcgm-exporter gives every series of a GPU (``DCGM_FI_DEV_GPU_UTIL``, ...)."""
    return {"gpu": gpu, "UUID": uuid, "pci_bus_id": bus_id, "device": f"nvidia{gpu}", "modelName": model,
            "Hostname": hostname, "DCGM_FI_DRIVER_VERSION": "550.54.15"}

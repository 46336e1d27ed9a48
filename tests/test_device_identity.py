"""One device identity (sixdim.core.results.DeviceIdentity) for a run, an interrupted suite run and the two history
tables that hold them: the same fields, in the same order and of the same types, and the same labels."""

import sqlite3
from dataclasses import fields

import pytest

from sixdim.core import catalog
from sixdim.core.results import DEVICE_FIELDS, DeviceIdentity, Interruption, RunRecord, device_labels
from sixdim.store import schema
from sixdim.store.history import History
from tests.helpers import make_record


def _run_of(names, wanted):
    """Where ``wanted`` stands, whole and in order, among ``names``: its first index, or None."""
    for start in range(len(names) - len(wanted) + 1):
        if tuple(names[start:start + len(wanted)]) == tuple(wanted):
            return start
    return None


@pytest.mark.parametrize("record", [RunRecord, Interruption])
def test_a_run_and_an_interruption_carry_the_device_fields_in_order_and_of_their_types(record):
    types = {f.name: f.type for f in fields(DeviceIdentity)}
    declared = [f.name for f in fields(record)]
    assert DEVICE_FIELDS == tuple(types) == ("hostname", "device_type", "device", "gpu", "uuid", "model_name",
                                             "pci_bus_id")
    assert _run_of(declared, DEVICE_FIELDS) is not None, declared
    assert {f.name: f.type for f in fields(record) if f.name in types} == types


def test_both_tables_hold_the_device_columns_in_the_fields_order(tmp_path):
    """The ``runs`` and ``interruptions`` tables of a new history, as SQLite made them: the device columns of
    each together, in DeviceIdentity's order; and the run columns the history selects are the table's."""
    History(tmp_path / "h.db").close()
    db = sqlite3.connect(tmp_path / "h.db")
    try:
        for table in ("runs", "interruptions"):
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            assert _run_of(columns, DEVICE_FIELDS) is not None, (table, columns)
            if table == "runs":
                assert tuple(columns) == schema.COLUMNS
    finally:
        db.close()

def test_a_run_and_an_interruption_on_one_device_carry_its_labels_in_the_exposition_order():
    run = make_record()
    stop = Interruption(suite="quick", **{name: getattr(run, name) for name in DEVICE_FIELDS}, reason="interrupted",
                        started_at=1.0, ended_at=2.0, cases_done=1, cases_left=2)
    device = DeviceIdentity(**{name: getattr(run, name) for name in DEVICE_FIELDS})
    assert stop.device_labels() == device_labels(run) == device_labels(device) == {
        catalog.HOSTNAME: "node1", catalog.GPU: "0", catalog.UUID: "GPU-a", catalog.MODEL_NAME: "NVIDIA H100 80GB HBM3",
        catalog.PCI_BUS_ID: "00000000:17:00.0", catalog.DEVICE_TYPE: "cuda"}
    assert list(run.workload_labels()) == [catalog.HOSTNAME, catalog.GPU, catalog.UUID, catalog.MODEL_NAME,
                                           catalog.PCI_BUS_ID, catalog.DEVICE_TYPE, catalog.WORKLOAD,
                                           catalog.PRECISION, catalog.SHAPE, catalog.MODE, catalog.PASS]

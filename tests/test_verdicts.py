"""The daemon's live verdicts: fed by the board, restored from the history, exported within budget."""

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sixdim.config import ConfigError, load
from sixdim.core import catalog
from sixdim.http.board import Board
from sixdim.http.exporter import SixdimCollector
from sixdim.store.history import History
from sixdim.verdicts import detector as regression
from sixdim.verdicts.detector import Settings, settings_from
from sixdim.verdicts.live import Verdicts
from tests import verdict_reference as ref
from tests.helpers import make_record

GEMM = "m=8,n=8,k=8"


def series(values, *, start=1000.0, shape=GEMM, drivers=None, statuses=None, suite="quick"):
    """Records of one series with the given ``seconds`` (flops = 1024 / seconds), one per 60 s."""
    out = []
    for i, seconds in enumerate(values):
        status = statuses[i] if statuses else "ok"
        record = make_record(status, seconds=seconds, ended_at=start + 60 * i, shape=shape,
                             driver=drivers[i] if drivers else "550.54.15")
        record.suite = suite
        out.append(record)
    return out


def noisy(n, level=1.0, seed=0, noise=0.01):
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, noise)) for _ in range(n)]


def scrape(board, shape_suites=None):
    registry = CollectorRegistry()
    registry.register(SixdimCollector(board, [], "node1", part="results", shape_suites=shape_suites))
    return [s for family in text_string_to_metric_families(generate_latest(registry).decode()) for s in family.samples]


def find(samples, name, **labels):
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def test_a_five_percent_slowdown_is_a_regression_within_three_runs_and_is_exported():
    board = Board(Verdicts())
    times = noisy(40) + noisy(3, level=1.05, seed=1)
    for record in series(times):
        board.add(record)
    samples = scrape(board)
    [state] = find(samples, "sixdim_regression_state", figure="flops")
    assert state.value == 3.0
    assert state.labels["driver_version"] == "550.54.15" and state.labels["shape"] == GEMM
    [ratio] = find(samples, "sixdim_regression_ratio", figure="flops")
    assert ratio.value == pytest.approx(1 / 1.05, abs=0.02)
    [baseline] = find(samples, "sixdim_baseline_value", figure="flops")
    assert baseline.value == pytest.approx(1024.0, rel=0.01)
    # seconds restates flops (its reciprocal): one verdict per question, not two
    assert not find(samples, "sixdim_regression_state", figure="seconds")


def test_steady_runs_are_ok_and_a_reverting_spike_changes_nothing():
    times = noisy(45)
    times[30] *= 1.2
    verdicts = ref.feed(Verdicts(), series(times))
    [snap] = verdicts.snapshot()
    assert snap.verdicts["flops"].state == regression.OK
    assert snap.verdicts["flops"].baseline == pytest.approx(1024.0, rel=0.01)


def test_an_incorrect_result_is_a_regression_at_once_and_a_failed_run_changes_nothing():
    records = series(noisy(20))
    failed = series([0.01], start=records[-1].ended_at + 60, statuses=["failed"])
    verdicts = ref.feed(Verdicts(), records + failed)
    assert verdicts.snapshot()[0].verdicts["flops"].state == regression.OK
    incorrect = series([0.01], start=failed[0].ended_at + 60, statuses=["incorrect"])
    verdicts.add(incorrect[0])
    verdict = verdicts.snapshot()[0].verdicts["flops"]
    assert verdict.state == regression.REGRESSION and verdict.reason == "incorrect result"
    # a series whose first run is incorrect has a verdict too
    alone = ref.feed(Verdicts(), series([0.01], shape="m=4,n=4,k=4", statuses=["incorrect"]))
    assert alone.snapshot()[0].verdicts["seconds"].state == regression.REGRESSION


def test_a_driver_change_names_the_versions_and_the_change_ratio():
    before, after = noisy(15), noisy(12, level=1 / 0.93, seed=2)
    drivers = ["550.54.15"] * 15 + ["560.28.03"] * 12
    board = Board(Verdicts())
    for record in series(before + after, drivers=drivers):
        board.add(record)
    [snap] = board.verdicts.snapshot()
    change = snap.changes["flops"]
    assert change.changes == {"driver": ("550.54.15", "560.28.03")}
    assert change.state == regression.REGRESSION and change.ratio == pytest.approx(0.93, abs=0.01)
    percent = f"{(1 - change.ratio) * 100:.1f}"
    assert ref.describe(change).startswith(f"driver 550.54.15 \u2192 560.28.03: bf16 gemm m=8,n=8,k=8 "
                                        f"\u2212{percent}% (p = ")
    [exported] = find(scrape(board), "sixdim_version_change_ratio", figure="flops")
    assert exported.labels["component"] == "driver"
    assert (exported.labels["from"], exported.labels["to"]) == ("550.54.15", "560.28.03")
    assert exported.labels["verdict"] == "regression" and exported.value == pytest.approx(0.93, abs=0.01)
    assert exported.labels["driver_version"] == "560.28.03"
    # the new driver's runs form their own baseline: 12 runs are not yet enough for a verdict
    assert snap.verdicts["flops"].state == regression.INSUFFICIENT_DATA


def test_the_same_change_judged_live_and_over_the_whole_history_agrees():
    """The live watch and agent/verdicts/detector.py's offline functions are one method."""
    before, after = noisy(15), noisy(12, level=1 / 0.93, seed=2)
    records = series(before + after, drivers=["550.54.15"] * 15 + ["560.28.03"] * 12)
    live = ref.feed(Verdicts(), records).snapshot()[0]
    [offline] = ref.version_verdicts(records, "flops")
    assert live.changes["flops"].ratio == offline.ratio and live.changes["flops"].p_value == offline.p_value
    assert live.verdicts["flops"] == ref.evaluate_records(records, "flops")


def test_summary_suites_export_only_the_series_that_need_a_look():
    board = Board(Verdicts())
    for record in series(noisy(30), shape="m=1,n=1,k=1", suite="full"):
        board.add(record)
    for record in series(noisy(40, seed=3) + noisy(3, level=1.05, seed=4), shape="m=2,n=2,k=2", suite="full"):
        board.add(record)
    samples = scrape(board, shape_suites={"quick", ""})
    states = {(s.labels["shape"], s.labels["figure"]): s.value for s in find(samples, "sixdim_regression_state")}
    assert states == {("m=2,n=2,k=2", "flops"): 3.0}
    # exported per shape, every verdict shows
    everything = {s.labels["shape"] for s in find(scrape(board), "sixdim_regression_state")}
    assert everything == {"m=1,n=1,k=1", "m=2,n=2,k=2"}


def test_last_success_time_is_the_newest_ok_run_of_the_workload_on_the_device():
    board = Board()
    board.add(make_record(ended_at=1500.0, shape="a"))
    board.add(make_record(ended_at=1700.0, shape="b"))
    board.add(make_record("failed", ended_at=1900.0, shape="b"))
    [sample] = find(scrape(board), "sixdim_workload_last_success_timestamp_seconds")
    assert sample.value == 1700.0 and sample.labels["workload"] == "gemm" and sample.labels["UUID"] == "GPU-a"


def test_verdicts_restored_from_the_history_equal_those_of_the_agent_that_recorded_them(tmp_path):
    history = History(tmp_path / "h.db")
    live = Verdicts()
    records = (series(noisy(280) + noisy(5, level=1.05, seed=5))
               + series(noisy(20, seed=6), shape="m=3,n=3,k=3", drivers=["550"] * 10 + ["560"] * 10))
    records.sort(key=lambda r: r.ended_at)
    for record in records:
        history.add(record)
        live.add(record)
    restored = Verdicts()
    board = Board.from_history(history, restored)
    assert restored.restored.wait(30)
    def shown(verdicts):  # what is exported and alerted on (run counts and indices count from the restore)
        return {(s.record.key(), figure): (v.state, v.ratio, v.baseline, v.p_value, v.violations)
                for s in verdicts.snapshot() for figure, v in s.verdicts.items()}

    assert shown(restored) == shown(live)
    assert shown(live)[(records[0].key(), "flops")][0] == regression.REGRESSION
    assert ({s.record.key(): s.changes for s in restored.snapshot()}
            == {s.record.key(): s.changes for s in live.snapshot()})
    # only the last runs of each series are read back: a tracker never needs more
    read = list(history.recent_for_verdicts(restored.restore_runs))
    assert len(read) == restored.restore_runs + 20
    assert all(r.details == {} and r.params == {} and r.conditions == {} for r, _ in read)
    # a run recorded after the restore updates the restored verdict
    newer = series([0.0105], start=records[-1].ended_at + 60)[0]
    history.add(newer)
    board.catch_up(history)
    [snap] = [s for s in restored.snapshot() if s.record.shape == GEMM]
    assert snap.record.uid == newer.uid and snap.verdicts["flops"].runs > 0


def test_runs_recorded_while_the_restore_runs_are_fed_after_it_in_order(tmp_path):
    history = History(tmp_path / "h.db")
    records = series(noisy(40) + noisy(3, level=1.05, seed=1))
    for record in records[:-3]:
        history.add(record)
    verdicts = Verdicts()
    verdicts._backlog = []  # what restore_in_background sets before its thread starts
    verdicts.restored.clear()
    for record in records[-3:]:
        verdicts.add(record)  # the board feeds new runs meanwhile: they wait
    assert verdicts.snapshot() == []
    verdicts.restore(history, upto_id=history.last_id())
    assert verdicts.restored.is_set()
    [snap] = verdicts.snapshot()
    assert snap.verdicts["flops"].state == regression.REGRESSION and snap.record.uid == records[-1].uid


@pytest.mark.slow
def test_restoring_a_long_history_reads_each_series_last_runs_only(tmp_path):
    """Its time is measured by tests/bench/measure_daemon.py (docs/BENCHMARKS.md), not bounded here."""
    history = History(tmp_path / "h.db")
    rng = random.Random(7)
    batch = []
    for run in range(300):
        for shape in range(20):
            batch.append(make_record(seconds=0.01 * (1 + rng.gauss(0, 0.01)), ended_at=1000.0 + run * 60,
                                     shape=f"m={shape}"))
    for record in batch:
        history.add(record)
    verdicts = Verdicts()
    assert verdicts.restore(history) == 20 * verdicts.restore_runs
    assert len(verdicts.snapshot()) == 20
    assert all(s.verdicts["flops"].state in (regression.OK, regression.SUSPICIOUS) for s in verdicts.snapshot())


def test_regression_settings_come_from_the_one_config_loader(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[regression]\nwindow = 30\nmin_effect = 0.03\n[regression.effects]\n"gemm/power_watts" = 0.05\n')
    config = load(str(path), env={"SIXDIM_REGRESSION_MIN_BASELINE": "12"})
    settings = settings_from(config)
    assert (settings.window, settings.min_baseline, settings.min_effect) == (30, 12, 0.03)
    assert settings.fast_effect == pytest.approx(0.03 * Settings.fast_effect / Settings.min_effect)
    fast = 0.05 * Settings.fast_effect / Settings.min_effect
    assert settings.effects_for("power_watts", "gemm") == pytest.approx((fast, 0.05))
    path.write_text('[regression]\nwindow = 5\n')
    with pytest.raises(ConfigError, match=r"c.toml: regression.window: expected a whole number from 10 to 1000"):
        load(str(path), env={})
    path.write_text('[regression.effects]\ngemm = 2\n')
    with pytest.raises(ConfigError, match=r"regression.effects.gemm: expected a ratio above 0 and below 1, got 2"):
        load(str(path), env={})
    for typo in ("gemmm", "gemm/flop", "flop", "gemm/power_watts/x"):  # a typo must not pass as a no-op
        path.write_text(f'[regression.effects]\n"{typo}" = 0.05\n')
        with pytest.raises(ConfigError, match=rf"regression.effects.{typo}: expected a workload \(allreduce, .*"
                                              r"a watched figure \(accuracy, .*\), or workload/figure \(unknown key\)"):
            load(str(path), env={})
    path.write_text('[regression]\nwindow = 20\nmin_baseline = 30\n')
    with pytest.raises(ConfigError, match=r"regression.min_baseline: expected at most regression.window \(20\)"):
        load(str(path), env={})
    path.write_text('[regression]\nwindoww = 20\n')
    with pytest.raises(ConfigError, match=r"regression.windoww: expected one of effects, min_baseline"):
        load(str(path), env={})


def test_state_codes_match_the_catalog():
    assert dict(catalog.REGRESSION_STATE_VALUES) == regression.STATE_CODES


def test_watched_figures_drop_what_only_restates_another():
    assert regression.watched_figures({"seconds": 1, "flops": 2, "peak_ratio": 0.5, "power_watts": 300}) == \
        ["flops", "power_watts"]
    assert regression.watched_figures({"seconds": 1, "memory_bytes": 5}) == ["seconds", "memory_bytes"]
    assert regression.watched_figures({"power_capped": 1, "accuracy": True}) == []


def test_a_gpu_slower_than_its_peers_of_the_same_model_on_the_host_shows_in_its_peer_ratio():
    board = Board()
    for gpu, seconds in (("0", 0.010), ("1", 0.010), ("2", 0.0125)):
        board.add(make_record(gpu=gpu, uuid=f"GPU-{gpu}", seconds=seconds))
    board.add(make_record(gpu="3", uuid="GPU-3", seconds=0.02, shape="m=9,n=9,k=9"))  # no peer with this shape
    samples = scrape(board)
    ratios = {s.labels["gpu"]: s.value for s in find(samples, "sixdim_peer_ratio", figure="flops")}
    assert ratios == pytest.approx({"0": 1.0, "1": 1.0, "2": 0.8})
    suite = {s.labels["gpu"]: s.value for s in find(samples, "sixdim_suite_peer_ratio", figure="flops")}
    assert suite["2"] == pytest.approx(0.8) and suite["0"] == pytest.approx(1.0)


def test_a_run_that_never_reported_its_versions_is_not_a_version_change():
    """An interrupted or skipped run has no environment: it must not start a new segment."""
    records = series(noisy(40) + noisy(3, level=1.05, seed=1))
    interrupted = series([0.01], start=records[39].ended_at + 1, statuses=["skipped"])[0]
    interrupted.environment = {}
    records.insert(40, interrupted)
    verdicts = ref.feed(Verdicts(), records)
    [snap] = verdicts.snapshot()
    assert snap.changes == {} and snap.verdicts["flops"].state == regression.REGRESSION
    assert ref.version_breaks(records) == []
    assert ref.evaluate_records(records, "flops").state == regression.REGRESSION

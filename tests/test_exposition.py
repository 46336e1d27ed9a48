"""The /metrics body is rendered in the background, once per change, and a scrape only reads it."""

import gzip

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from sixdim.http.board import Board
from sixdim.http.exposition import Exposition
from sixdim.store.history import History
from tests.helpers import make_record


class Counting:
    """A real prometheus-client collector that counts how often it is rendered."""

    def __init__(self, name: str, value=lambda: 1.0):
        self.name, self.value, self.calls = name, value, 0

    def collect(self):
        self.calls += 1
        family = GaugeMetricFamily(self.name, "test")
        family.add_metric([], self.value())
        yield family


def registry(collector) -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(collector)
    return r


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_results_render_once_per_board_change_and_live_on_its_interval():
    board, clock = Board(), Clock()
    results, live = Counting("results_part", lambda: float(board.version)), Counting("live_part")
    exposition = Exposition(board, registry(results), registry(live), live_seconds=5.0, clock=clock)
    assert (results.calls, live.calls) == (1, 1)
    for _ in range(10):
        exposition.refresh()
        exposition.body()
    assert (results.calls, live.calls) == (1, 1)  # nothing changed: nothing rendered again
    board.add(make_record(seconds=1.0))
    exposition.refresh()
    assert (results.calls, live.calls) == (2, 1)
    assert b"results_part 1.0" in exposition.body()
    clock.now = 5.0
    exposition.refresh()
    assert (results.calls, live.calls) == (2, 2)
    text = exposition.body()
    assert text.index(b"live_part") < text.index(b"results_part")  # one exposition, both parts


def test_a_live_change_is_rendered_at_the_next_refresh_not_at_the_end_of_the_timer():
    """A reload's outcome (sixdim_config_reload_success) is in the live part: shown within a refresh."""
    board, clock, state = Board(), Clock(), {"value": 1.0}
    live = Counting("reload_success", lambda: state["value"])
    exposition = Exposition(board, registry(Counting("results_part")), registry(live), live_seconds=5.0, clock=clock)
    state["value"] = 0.0
    clock.now = 1.0
    exposition.refresh()
    assert b"reload_success 1.0" in exposition.body()  # the timer has 4 s to go
    exposition.live_changed()
    exposition.refresh()
    assert b"reload_success 0.0" in exposition.body() and live.calls == 2
    exposition.refresh()
    assert live.calls == 2  # and then the timer again



def test_a_results_change_without_a_run_is_rendered_at_the_next_refresh():
    """A reload that changes which suites export per shape adds no run: the results part is rendered
    again anyway."""
    board, shown = Board(), {"value": 1.0}
    results = Counting("results_part", lambda: shown["value"])
    exposition = Exposition(board, registry(results), registry(Counting("live_part")), live_seconds=5.0, clock=Clock())
    shown["value"] = 2.0
    exposition.refresh()
    assert b"results_part 1.0" in exposition.body() and results.calls == 1  # no run: not rendered
    exposition.results_changed()
    exposition.refresh()
    assert b"results_part 2.0" in exposition.body() and results.calls == 2


def test_gzip_is_compressed_once_per_body_and_decompresses_to_it():
    board = Board()
    exposition = Exposition(board, registry(Counting("results_part")), registry(Counting("live_part")))
    first = exposition.gzipped()
    assert exposition.gzipped() is first
    assert gzip.decompress(first) == exposition.body()
    board.add(make_record(seconds=1.0))
    exposition.refresh()
    assert exposition.gzipped() is not first


def test_rows_of_another_process_appear_after_a_background_refresh_not_in_a_scrape(tmp_path):
    mine = History(tmp_path / "h.db")
    board = Board.from_history(mine)
    results = Counting("results_part", lambda: float(len(board.latest())))
    exposition = Exposition(board, registry(results), registry(Counting("live_part")), mine)
    History(tmp_path / "h.db").add(make_record(seconds=2.0))  # e.g. a `sixdim run`
    assert b"results_part 0.0" in exposition.body()      # a scrape reads the cache only
    exposition.refresh()                                       # what the background thread does
    assert b"results_part 1.0" in exposition.body()


def test_the_background_thread_refreshes_and_stops(tmp_path):
    board = Board()
    results = Counting("results_part", lambda: float(len(board.latest())))
    exposition = Exposition(board, registry(results), registry(Counting("live_part")), catch_up_seconds=0.05)
    exposition.start()
    try:
        board.add(make_record(seconds=1.0))
        import time
        deadline = time.monotonic() + 10
        while b"results_part 1.0" not in exposition.body() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"results_part 1.0" in exposition.body()
    finally:
        exposition.stop()
    assert not exposition._thread.is_alive()

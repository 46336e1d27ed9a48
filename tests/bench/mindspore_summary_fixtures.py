"""Regenerate tests/fixtures/logs/mindspore_summary/ with MindSpore itself (CPU, seconds).

Installs nothing.  Where MindSpore is installed (``pip install mindspore 'numpy<2'``: its dataset pipeline
needs numpy < 2), ``python -m tests.bench.mindspore_summary_fixtures [folder]`` writes two runs' summary
files: ``record/`` from ``SummaryRecord.add_value`` in a loop (scalars, an image, a histogram, a tensor),
``collector/`` from the ``SummaryCollector`` callback on a 3-epoch training of a tiny network
(``collect_freq=4``).  Without MindSpore it says so and exits 2.  The fixtures' README names the version.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "mindspore_summary"


def write_record(folder: Path) -> None:
    """SummaryRecord.add_value in a loop: a falling loss every step, an evaluation's accuracy and loss
    every 4 steps, a learning rate (neither direction), and one image, histogram and tensor; 0.1 s a step."""
    import numpy as np
    from mindspore import SummaryRecord, Tensor

    with SummaryRecord(str(folder)) as record:
        for step in range(1, 13):
            record.add_value("scalar", "loss", Tensor(np.float32(2.0 / step)))
            record.add_value("scalar", "learning_rate", Tensor(np.float32(0.1)))
            if step % 4 == 0:
                record.add_value("scalar", "eval/accuracy", Tensor(np.float32(0.5 + step / 40)))
                record.add_value("scalar", "eval/loss", Tensor(np.float32(1.5 / step)))
            if step == 12:
                record.add_value("image", "input", Tensor(np.zeros((1, 3, 4, 4), np.float32)))
                record.add_value("histogram", "weights", Tensor(np.linspace(-1, 1, 8, dtype=np.float32)))
                record.add_value("tensor", "bias", Tensor(np.ones((2,), np.float32)))
            record.record(step)
            time.sleep(0.1)  # the wall times apart, for a time to train


def write_collector(folder: Path) -> None:
    """SummaryCollector on a 3-epoch training of a one-layer network on 16 random samples (4 steps an epoch)."""
    import mindspore as ms
    import numpy as np
    from mindspore import SummaryCollector, nn
    from mindspore.dataset import GeneratorDataset

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(1)
    rng = np.random.default_rng(1)
    features = rng.normal(size=(16, 4)).astype(np.float32)
    labels = (features.sum(axis=1) > 0).astype(np.int32)
    data = GeneratorDataset(list(zip(features, labels)), ["x", "y"], shuffle=False).batch(4)
    network = nn.Dense(4, 2)
    model = ms.Model(network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.SGD(network.trainable_params(), 0.1), metrics={"accuracy"})
    collector = SummaryCollector(str(folder), collect_freq=4, keep_default_action=True)
    model.train(3, data, callbacks=[collector], dataset_sink_mode=False)


def main(argv: list[str]) -> int:
    try:
        import mindspore
    except ImportError:
        print("MindSpore is not installed: pip install mindspore 'numpy<2' to regenerate these fixtures")
        return 2
    target = Path(argv[0]) if argv else FIXTURES
    write_record(target / "record")
    write_collector(target / "collector")
    print(f"written with MindSpore {mindspore.__version__} under {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

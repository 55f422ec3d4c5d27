"""Tests on the real GLUE files (see shared/data/glue/PROVENANCE.md).

The expected counts are those of PROVENANCE.md (the official GLUE sizes),
re-verified by parsing the files.  The hub is disabled throughout, so these
tests never touch the network.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headprune_utils.tasks.data import DataUnavailableError, get_task, load_task, task_availability

pytestmark = pytest.mark.data


def _data_root() -> Path:
    env = os.environ.get("HEADPRUNE_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


DATA_ROOT = _data_root()
if not (DATA_ROOT / "glue").is_dir():
    pytest.skip(
        "real GLUE data not found: set HEADPRUNE_DATA_DIR or place shared/data beside the repo",
        allow_module_level=True,
    )

# (task, split) -> number of examples (PROVENANCE.md "Verified example counts")
EXPECTED_ROWS = {
    ("CoLA", "train"): 8551, ("CoLA", "dev"): 1043,
    ("SST-2", "train"): 67349, ("SST-2", "dev"): 872,
    ("MRPC", "train"): 3668, ("MRPC", "dev"): 408,
    ("RTE", "train"): 2490, ("RTE", "dev"): 277,
    ("STS-B", "train"): 5749, ("STS-B", "dev"): 1500,
    ("QNLI", "dev"): 5463,
    ("WNLI", "train"): 635, ("WNLI", "dev"): 71,
}
UNAVAILABLE = [("MNLI", "train"), ("MNLI", "dev"), ("QQP", "train"), ("QQP", "dev"),
               ("QNLI", "train")]
# label id -> count (PROVENANCE.md "Label counts"; RTE/QNLI: entailment=0, not_entailment=1)
EXPECTED_LABEL_COUNTS = {
    ("CoLA", "dev"): {0: 322, 1: 721},
    ("SST-2", "dev"): {0: 428, 1: 444},
    ("MRPC", "train"): {0: 1194, 1: 2474},
    ("MRPC", "dev"): {0: 129, 1: 279},
    ("RTE", "dev"): {0: 146, 1: 131},
    ("QNLI", "dev"): {0: 2702, 1: 2761},
}

_cache: dict[tuple[str, str], object] = {}


def _load(task, split):
    if (task, split) not in _cache:
        _cache[task, split] = load_task(task, split, DATA_ROOT, allow_hub=False)
    return _cache[task, split]


@pytest.mark.parametrize("task, split", sorted(EXPECTED_ROWS))
def test_row_counts_and_labels(task, split):
    d = _load(task, split)
    spec = get_task(task)
    assert len(d) == EXPECTED_ROWS[task, split]
    assert d.n_skipped == 0
    assert d.task == task and d.split == split
    assert d.source == f"local:glue/{task}/{split}.tsv"
    assert (d.text_b is None) == (spec.hub_text_b is None)
    assert all(isinstance(t, str) and t.strip() for t in d.text_a)
    if d.text_b is not None:
        assert len(d.text_b) == len(d) and all(isinstance(t, str) for t in d.text_b)
    if spec.is_regression:
        assert d.labels.dtype == np.float32
        assert d.labels.min() >= 0.0 and d.labels.max() <= 5.0
        assert len(np.unique(d.labels)) > 10
    else:
        assert d.labels.dtype == np.int64
        assert set(np.unique(d.labels).tolist()) == set(range(spec.num_labels))


@pytest.mark.parametrize("task, split", sorted(EXPECTED_LABEL_COUNTS))
def test_label_counts(task, split):
    values, counts = np.unique(_load(task, split).labels, return_counts=True)
    assert dict(zip(values.tolist(), counts.tolist())) == EXPECTED_LABEL_COUNTS[task, split]


def test_availability_report():
    avail = task_availability(data_dir=DATA_ROOT)
    for task, split in EXPECTED_ROWS:
        assert avail[task][split], (task, split)
    for task, split in UNAVAILABLE:
        assert not avail[task][split], (task, split)


@pytest.mark.parametrize("task, split", UNAVAILABLE)
def test_unavailable_raise_clear_error(task, split):
    with pytest.raises(DataUnavailableError) as err:
        load_task(task, split, DATA_ROOT, allow_hub=False)
    msg = str(err.value)
    assert task in msg and split in msg and "nyu-mll/glue" in msg and "HEADPRUNE_DATA_DIR" in msg


def test_sst2_dev_quotes_intact():
    d = _load("SST-2", "dev")
    # row 31 (file line 33): `` and '' quotes, trailing space kept as in the file
    assert d.text_a[31] == (
        "... designed to provide a mix of smiles and tears , `` crossroads '' instead "
        "provokes a handful of unintentional howlers and numerous yawns . "
    )
    assert d.labels[31] == 0
    assert sum("``" in t for t in d.text_a) == 14
    assert sum("'" in t for t in d.text_a) == 340


def test_leading_quote_fields_intact():
    # a quoting-aware CSV reader would eat these leading double quotes
    mrpc = _load("MRPC", "dev")
    assert mrpc.text_b[0] == (
        '" The foodservice pie business does not fit our long-term growth strategy .'
    )
    cola = _load("CoLA", "train")
    assert 'Susan whispered "Shut up".' in cola.text_a

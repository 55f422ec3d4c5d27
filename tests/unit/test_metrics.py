"""Unit tests of headprune_utils.tasks.metrics and the data-free parts of headprune_utils.tasks.data.

Metrics are checked against scikit-learn / scipy as independent references.
No real data files are needed; TSV parsing is tested on temporary files.
"""

from __future__ import annotations

import math
import sys
import types
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from headprune_utils.tasks import data as hd
from headprune_utils.tasks.data import ( # noqa: I001
    MalformedRowsWarning, TASKS, DataUnavailableError, TaskData, get_task, load_task, resolve_data_dir, subset,
    task_availability,
)
from headprune_utils.tasks.metrics import (
    accuracy, compute_metrics, f1_binary, main_score, matthews_corrcoef, pearson, spearman,
)

SEEDS = [0, 1, 2, 3, 4]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)


@pytest.fixture
def online(monkeypatch):
    from headprune_utils.tasks import data

    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "_HUB_REACHABLE", {"huggingface.co": True})  # a reachable hub, without the network


# --------------------------------------------------------------------------- metrics


# Independent numpy computations of the formulas (the package calls scikit-learn and scipy).
def _ref_f1(p, y):
    tp, fp, fn = np.sum((p == 1) & (y == 1)), np.sum((p == 1) & (y != 1)), np.sum((p != 1) & (y == 1))
    return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0


def _ref_mcc(p, y):
    """Matthews' multiclass form from the confusion matrix (Gorodkin 2004)."""
    classes, inv = np.unique(np.concatenate([y, p]), return_inverse=True)
    k, n = len(classes), len(y)
    conf = np.zeros((k, k))
    np.add.at(conf, (inv[:n], inv[n:]), 1.0)
    t, q, c, s = conf.sum(1), conf.sum(0), np.trace(conf), conf.sum()
    denom = (s * s - t @ t) * (s * s - q @ q)
    return (c * s - t @ q) / np.sqrt(denom) if denom else 0.0


def _ref_ranks(x):
    """1-based ranks, ties sharing their average rank."""
    return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])


def _ref_pearson(x, y):
    dx, dy = x - x.mean(), y - y.mean()
    return (dx @ dy) / np.sqrt((dx @ dx) * (dy @ dy))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [7, 100, 1000])
def test_classification_metrics_match_the_formulas(seed, n):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    # correlated predictions so the scores are not all near chance
    preds = np.where(rng.random(n) < 0.7, labels, rng.integers(0, 2, n))
    assert accuracy(preds, labels) == pytest.approx(np.mean(preds == labels), abs=1e-12)
    assert f1_binary(preds, labels) == pytest.approx(_ref_f1(preds, labels), abs=1e-12)
    assert matthews_corrcoef(preds, labels) == pytest.approx(_ref_mcc(preds, labels), abs=1e-12)


def test_metrics_by_hand():
    # 8 examples: tp 3, tn 3, fp 1, fn 1
    labels = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    preds = np.array([1, 0, 0, 1, 0, 1, 1, 0])
    assert accuracy(preds, labels) == 0.75
    assert f1_binary(preds, labels) == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
    assert matthews_corrcoef(preds, labels) == pytest.approx((3 * 3 - 1 * 1) / math.sqrt(4 * 4 * 4 * 4))
    # a perfect and an exactly reversed ranking; Spearman of a monotone, non-linear map is 1
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0) and pearson(x, -x) == pytest.approx(-1.0)
    assert spearman(x, x ** 3) == pytest.approx(1.0) and pearson(x, x ** 3) < 1.0
    # ties: x ranks [1.5, 1.5, 3, 4], y ranks [1, 2, 3, 4]
    assert spearman(np.array([1.0, 1.0, 2.0, 3.0]), x) == pytest.approx(
        _ref_pearson(np.array([1.5, 1.5, 3, 4]), np.array([1.0, 2, 3, 4])))


@pytest.mark.parametrize("seed", SEEDS)
def test_multiclass_accuracy_and_matthews_match_the_formulas(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, 500)
    preds = np.where(rng.random(500) < 0.5, labels, rng.integers(0, 3, 500))
    assert accuracy(preds, labels) == pytest.approx(np.mean(preds == labels), abs=1e-12)
    assert matthews_corrcoef(preds, labels) == pytest.approx(_ref_mcc(preds, labels), abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [5, 200])
def test_correlations_match_the_formulas(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = 0.6 * x + rng.normal(size=n)
    assert pearson(x, y) == pytest.approx(_ref_pearson(x, y), abs=1e-10)
    assert spearman(x, y) == pytest.approx(_ref_pearson(_ref_ranks(x), _ref_ranks(y)), abs=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_spearman_with_ties_matches_the_formula(seed):
    rng = np.random.default_rng(seed)
    # STS-B-like: gold scores on a coarse grid (many ties), rounded predictions
    gold = rng.integers(0, 11, 300) / 2.0
    pred = np.round(gold + rng.normal(scale=1.0, size=300))
    assert len(np.unique(gold)) < 300 and len(np.unique(pred)) < 300
    assert spearman(pred, gold) == pytest.approx(_ref_pearson(_ref_ranks(pred), _ref_ranks(gold)), abs=1e-10)
    assert pearson(pred, gold) == pytest.approx(_ref_pearson(pred, gold), abs=1e-10)


def test_rank_reference_matches_scipy_rankdata():
    x = np.array([3.0, 1.0, 3.0, 2.0, 3.0, 1.0, 5.0])
    np.testing.assert_allclose(_ref_ranks(x), stats.rankdata(x, method="average"))


def test_task_metric_keys_exact():
    expected = {
        "SST-2": ["accuracy"],
        "RTE": ["accuracy"],
        "QNLI": ["accuracy"],
        "MNLI": ["accuracy"],
        "WNLI": ["accuracy"],
        "MRPC": ["f1", "accuracy"],
        "QQP": ["f1", "accuracy"],
        "CoLA": ["matthews"],
        "STS-B": ["pearson", "spearman"],
    }
    assert set(expected) == set(TASKS)
    rng = np.random.default_rng(0)
    for task, keys in expected.items():
        spec = get_task(task)
        assert list(spec.metrics) == keys and spec.main_metric == keys[0]
        if spec.is_regression:
            labels = rng.uniform(0, 5, 50)
            preds = labels + rng.normal(size=50)
        else:
            labels = rng.integers(0, spec.num_labels, 50)
            preds = rng.integers(0, spec.num_labels, 50)
        out = compute_metrics(task, preds, labels)
        assert list(out) == keys
        assert all(type(v) is float for v in out.values())
        assert main_score(task, out) == out[keys[0]]


def test_compute_metrics_units_and_values():
    labels = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    preds = np.array([1, 0, 0, 1, 0, 1, 1, 0])
    out = compute_metrics("mrpc", preds, labels)
    assert out["accuracy"] == pytest.approx(0.75)  # a fraction, not percent
    assert out["f1"] == pytest.approx(skm.f1_score(labels, preds))
    assert compute_metrics("cola", preds, labels)["matthews"] == pytest.approx(
        skm.matthews_corrcoef(labels, preds)
    )


def test_metric_edge_cases():
    labels = np.array([0, 1, 1, 0, 1])
    const = np.zeros(5, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on these ill-defined cases
        assert matthews_corrcoef(const, labels) == 0.0 == skm.matthews_corrcoef(labels, const)
        assert f1_binary(const, labels) == 0.0 == skm.f1_score(labels, const)
    assert compute_metrics("cola", const, labels) == {"matthews": 0.0}
    assert compute_metrics("mrpc", const, labels)["f1"] == 0.0
    # correlations with a constant are undefined -> NaN (as scipy)
    scores = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    flat = np.full(5, 2.5)
    out = compute_metrics("stsb", flat, scores)
    assert math.isnan(out["pearson"]) and math.isnan(out["spearman"])
    assert math.isnan(pearson(scores, flat)) and math.isnan(spearman(scores, flat))
    # perfect agreement
    assert pearson(scores, 2 * scores + 1) == 1.0
    assert compute_metrics("sst2", labels, labels) == {"accuracy": 1.0}


def test_compute_metrics_input_errors():
    with pytest.raises(ValueError, match="length"):
        compute_metrics("sst2", np.array([0, 1]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="argmax"):
        compute_metrics("sst2", np.zeros((3, 2)), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="class ids"):
        compute_metrics("sst2", np.array([0.2, 0.9]), np.array([0, 1]))
    with pytest.raises(ValueError, match="zero examples"):
        compute_metrics("sst2", np.array([], dtype=int), np.array([], dtype=int))
    with pytest.raises(ValueError, match="unknown GLUE task"):
        compute_metrics("nope", np.array([0]), np.array([0]))
    with pytest.raises(KeyError, match="matthews"):
        main_score("cola", {"accuracy": 0.5})


# --------------------------------------------------------------------------- task registry


@pytest.mark.parametrize(
    "alias, name",
    [
        ("sst2", "SST-2"), ("SST-2", "SST-2"), ("sst-2", "SST-2"), ("Sst_2", "SST-2"),
        ("cola", "CoLA"), ("stsb", "STS-B"), ("STS-B", "STS-B"), ("mnli", "MNLI"),
        ("qqp", "QQP"), ("qnli", "QNLI"), ("rte", "RTE"), ("mrpc", "MRPC"), ("wnli", "WNLI"),
    ],
)
def test_get_task_aliases(alias, name):
    assert get_task(alias).name == name


def test_get_task_unknown_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_task("imdb")
    msg = str(err.value)
    assert "imdb" in msg and all(n in msg for n in TASKS)


def test_task_specs():
    assert get_task("stsb").is_regression and get_task("stsb").num_labels == 1
    assert get_task("mnli").num_labels == 3
    assert not get_task("sst2").is_regression
    assert get_task("sst2").hub_text_b is None and get_task("cola").hub_text_b is None
    assert (get_task("mnli").hub_text_a, get_task("mnli").hub_text_b) == ("premise", "hypothesis")
    assert (get_task("qnli").hub_text_a, get_task("qnli").hub_text_b) == ("question", "sentence")
    assert get_task("qqp").hub_text_a == "question1"
    assert {s.hub_config for s in TASKS.values()} == {
        "sst2", "cola", "mrpc", "rte", "stsb", "qnli", "mnli", "qqp", "wnli"
    }


# --------------------------------------------------------------------------- subset


def _toy(n=20, pair=True):
    return TaskData(
        task="RTE",
        split="dev",
        text_a=[f"a{i}" for i in range(n)],
        text_b=[f"b{i}" for i in range(n)] if pair else None,
        labels=np.arange(n, dtype=np.int64) % 2,
        source="local:glue/RTE/dev.tsv",
    )


def test_subset_deterministic_and_ordered():
    d = _toy()
    s1, s2 = subset(d, 8, seed=3), subset(d, 8, seed=3)
    assert len(s1) == 8 and s1.text_a == s2.text_a and s1.text_b == s2.text_b
    idx = [int(t[1:]) for t in s1.text_a]
    assert idx == sorted(idx) and len(set(idx)) == 8  # original order, no repeats
    expected = sorted(np.random.default_rng(3).permutation(20)[:8].tolist())
    assert idx == expected
    # rows stay aligned across text_a / text_b / labels
    assert [int(t[1:]) for t in s1.text_b] == idx
    np.testing.assert_array_equal(s1.labels, np.array(idx) % 2)
    assert s1.labels.dtype == np.int64
    assert s1.task == d.task and s1.split == d.split and s1.source == d.source
    assert subset(d, 8, seed=4).text_a != s1.text_a


def test_subset_all_rows_is_copy():
    d = _toy(pair=False)
    for size in (None, 20, 500):
        s = subset(d, size, seed=0)
        assert s.text_a == d.text_a and s.text_b is None and s is not d
        s.text_a.append("x")
        s.labels[0] = 99
        assert len(d) == 20 and d.labels[0] == 0  # the original is untouched


@pytest.mark.parametrize("size", [0, -1])
def test_subset_size_errors(size):
    with pytest.raises(ValueError):
        subset(_toy(), size, seed=0)


# --------------------------------------------------------------------------- data dir / errors


def test_resolve_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    assert resolve_data_dir() is None
    assert resolve_data_dir(tmp_path) == tmp_path
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert resolve_data_dir(other) == other  # the argument wins over the environment


def test_resolve_data_dir_missing_folder_raises(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    with pytest.raises(DataUnavailableError, match="nope"):
        resolve_data_dir(missing)
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(missing))
    with pytest.raises(DataUnavailableError, match="HEADPRUNE_DATA_DIR"):
        resolve_data_dir()


def test_load_task_offline_empty_dir_raises(tmp_path, offline, monkeypatch):
    called = []
    monkeypatch.setattr(hd, "_load_hub", lambda *a: called.append(a))  # must not be reached
    with pytest.raises(DataUnavailableError) as err:
        load_task("mnli", "dev", tmp_path)
    msg = str(err.value)
    assert "MNLI" in msg and "HEADPRUNE_DATA_DIR" in msg and "nyu-mll/glue" in msg
    assert "offline" in msg and "dev_matched.tsv" in msg
    assert not called


def test_load_task_hub_offline_via_hub_var(tmp_path, online, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match="offline"):
        load_task("sst2", "train", tmp_path)


def test_load_task_no_hub(tmp_path, online):
    with pytest.raises(DataUnavailableError, match="allow_hub=False"):
        load_task("rte", "dev", tmp_path, allow_hub=False)


def test_load_task_bad_split(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_task("rte", "test", tmp_path)


def _fake_datasets(monkeypatch, impl):
    mod = types.ModuleType("datasets")
    mod.load_dataset = impl
    monkeypatch.setitem(sys.modules, "datasets", mod)


def test_hub_error_is_wrapped(tmp_path, online, monkeypatch):
    def boom(*args, **kwargs):
        raise ConnectionError("no route to host (simulated)")

    _fake_datasets(monkeypatch, boom)
    with pytest.raises(DataUnavailableError) as err:
        load_task("qqp", "dev", tmp_path)
    msg = str(err.value)
    assert "no route to host (simulated)" in msg and "QQP" in msg and "nyu-mll/glue" in msg


def test_hub_fallback_used_when_local_missing(tmp_path, online, monkeypatch):
    calls = []

    def fake_load(path, config, split):
        calls.append((path, config, split))
        return {"premise": ["p0", "p1"], "hypothesis": ["h0", "h1"], "label": [2, 0]}

    _fake_datasets(monkeypatch, fake_load)
    d = load_task("MNLI", "dev", tmp_path)
    assert calls == [("nyu-mll/glue", "mnli", "validation_matched")]
    assert d.source == "hub:nyu-mll/glue/mnli/validation_matched"
    assert d.text_a == ["p0", "p1"] and d.text_b == ["h0", "h1"]
    assert d.labels.dtype == np.int64 and d.labels.tolist() == [2, 0]
    assert task_availability(["mnli"], tmp_path, allow_hub=True) == {
        "MNLI": {"train": True, "dev": True}
    }
    assert task_availability(["mnli"], tmp_path) == {"MNLI": {"train": False, "dev": False}}


# --------------------------------------------------------------------------- local TSV parsing


def _write(root, task, fname, text):
    folder = root / "glue" / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / fname).write_text(text, encoding="utf-8")


def test_tsv_stray_quotes_and_malformed_row(tmp_path, offline):
    _write(
        tmp_path, "SST-2", "dev.tsv",
        "sentence\tlabel\n"
        "a \" stray quote \t1\n"
        "\"starts with a quote\t0\n"
        "too\tmany\tcolumns\n"
        "`` the time machine '' is fine . \t0\n",
    )
    with pytest.warns(MalformedRowsWarning, match="1 of 4 rows malformed"):
        d = load_task("sst-2", "dev", tmp_path, max_malformed_share=0.5)
    assert d.text_a == ['a " stray quote ', '"starts with a quote', "`` the time machine '' is fine . "]
    assert d.labels.tolist() == [1, 0, 0] and d.labels.dtype == np.int64
    assert d.n_skipped == 1 and len(d) == 3 and d.text_b is None
    assert d.source == "local:glue/SST-2/dev.tsv"
    assert str(tmp_path) not in d.source


def test_tsv_columns_by_header_name_and_bom(tmp_path, offline):
    # MRPC has a BOM on its header and extra columns between the ones we use
    _write(
        tmp_path, "MRPC", "train.tsv",
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        "1\t11\t12\tHe said \" yes .\t\" Yes , \" he said .\n"
        "0\t13\t14\tshort row\n",
    )
    with pytest.warns(MalformedRowsWarning, match="first bad line 3"):
        d = load_task("mrpc", "train", tmp_path, max_malformed_share=0.5)
    assert d.text_a == ['He said " yes .'] and d.text_b == ['" Yes , " he said .']
    assert d.labels.tolist() == [1] and d.n_skipped == 1


def test_tsv_rte_text_labels(tmp_path, offline):
    _write(
        tmp_path, "RTE", "train.tsv",
        "index\tsentence1\tsentence2\tlabel\n"
        "0\tP0\tH0\tentailment\n"
        "1\tP1\tH1\tnot_entailment\n"
        "2\tP2\tH2\tmaybe\n"  # unknown label: skipped and counted
        "3\tP3\tH3\tnot_entailment\n",
    )
    with pytest.warns(MalformedRowsWarning, match="'maybe' is not a valid RTE label"):
        d = load_task("RTE", "train", tmp_path, max_malformed_share=0.5)
    assert d.labels.tolist() == [0, 1, 1]
    assert d.text_a == ["P0", "P1", "P3"] and d.text_b == ["H0", "H1", "H3"]
    assert d.n_skipped == 1


def test_tsv_mnli_labels_and_dev_file(tmp_path, offline):
    _write(
        tmp_path, "MNLI", "dev_matched.tsv",
        "index\tsentence1\tsentence2\tgold_label\n"
        "0\tp\th\tentailment\n1\tp\th\tneutral\n2\tp\th\tcontradiction\n",
    )
    d = load_task("mnli", "dev", tmp_path)
    assert d.labels.tolist() == [0, 1, 2] and d.source == "local:glue/MNLI/dev_matched.tsv"


def test_tsv_cola_no_header_and_stsb_floats(tmp_path, offline):
    _write(tmp_path, "CoLA", "train.tsv",
           "gj04\t1\t\tSusan whispered \"Shut up\".\ngj04\t0\t*\tBad sentence it.\n")
    d = load_task("cola", "train", tmp_path)
    assert d.text_a == ['Susan whispered "Shut up".', "Bad sentence it."]
    assert d.labels.tolist() == [1, 0] and d.n_skipped == 0
    _write(tmp_path, "STS-B", "dev.tsv",
           "index\tsentence1\tsentence2\tscore\n0\ta\tb\t4.750\n1\tc\td\t0.000\n")
    s = load_task("sts-b", "dev", tmp_path)
    assert s.labels.dtype == np.float32 and s.labels.tolist() == [4.75, 0.0]


def test_task_availability_local(tmp_path, offline):
    _write(tmp_path, "RTE", "dev.tsv", "index\tsentence1\tsentence2\tlabel\n")
    avail = task_availability(data_dir=tmp_path)
    assert set(avail) == set(TASKS)
    assert avail["RTE"] == {"train": False, "dev": True}
    assert avail["QQP"] == {"train": False, "dev": False}
    assert task_availability(["rte"], tmp_path) == {"RTE": {"train": False, "dev": True}}


def test_verdict_scores_decide_mrpc_by_accuracy_with_the_constant_predictors_accuracy_as_chance():
    """MRPC's claims are decided by accuracy: the score becomes the stored accuracy, the chance the accuracy of the
    same constant predictor, derived from its F1 and checked here against sklearn on labels of that share."""
    import pandas as pd
    from sklearn.metrics import accuracy_score, f1_score

    from headprune_utils.tasks import data
    from headprune_utils.tasks.metrics import verdict_scores

    labels = np.array([1] * 279 + [0] * 129)  # MRPC dev's share of paraphrases
    constant = np.ones_like(labels)
    chance_f1, chance_acc = f1_score(labels, constant), accuracy_score(labels, constant)
    table = pd.DataFrame({"task": ["MRPC", "MRPC", "SST-2", "en-de"], "metric": ["f1", "f1", "accuracy", "BLEU"],
                          "score": [0.87, 0.85, 0.9, 30.0], "f1": [0.87, 0.85, None, None],
                          "accuracy": [0.81, 0.79, 0.9, None], "chance": [chance_f1, chance_f1, 0.5, 0.0]})
    out = verdict_scores(table)
    assert out["score"].tolist() == [0.81, 0.79, 0.9, 30.0]
    assert out["metric"].tolist() == ["accuracy", "accuracy", "accuracy", "BLEU"]
    assert out.loc[:1, "chance"].tolist() == pytest.approx([chance_acc] * 2)
    assert out["f1"].tolist()[:2] == [0.87, 0.85] and table["metric"].iloc[0] == "f1"  # F1 kept; input unchanged
    assert verdict_scores(out).equals(out)  # idempotent
    assert data.get_task("MRPC").verdict_metric == "accuracy" and data.get_task("MRPC").main_metric == "f1"
    assert data.get_task("CoLA").verdict_metric == "matthews"
    with pytest.raises(ValueError, match="MRPC.*accuracy"):
        verdict_scores(table.drop(columns="accuracy"))
    with pytest.raises(ValueError, match="chance F1 of 0"):
        verdict_scores(table.assign(chance=0.0))

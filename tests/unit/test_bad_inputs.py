"""A catalogue of bad inputs: each one stops at once, says what is wrong, starts no heavy work, and changes nothing.

The issue "Nothing mixed, nothing lost, nothing silently wrong" and the README promise: every parameter is typed and
checked before any work starts (an unknown key, a wrong type, an unknown task or model, a missing data folder or an
impossible budget stops the run at once with a message that says what is wrong), and results made with other
parameters are never mixed or overwritten.

Each case asserts:

- the exception type (library calls) or the exit status (the runner);
- that the message names the parameter or the file (and, for parameters, where they came from: the profile file and
  the study section);
- for validation-level cases, that no heavy work started: loading a model or tokenizer, fine-tuning, reading task
  data, training a translation model, executing a notebook or computing cells all fail the case if called;
- for runner cases, that nothing under the outputs root changed (a tree of earlier results is snapshotted before
  and after, byte for byte).

Groups: study parameters (``validate`` on every study's Config), profile files and runner flags (``cli.main``), data
files (GLUE TSVs and parallel corpora in a temporary data root), gates and masks, non-finite training, result-store
faults, cache faults. Everything is model-free except the gates (a tiny random BERT in memory) and the training
cases (the session's tiny BERT folder and synthetic SST-2).

Every case passes: none is accepted silently, and each is refused before heavy work where it can be (the 32 cases
that failed when the catalogue was written were fixed in the library, not in the tests).
"""
from __future__ import annotations

import gzip
import json
import math
import os
import warnings
from pathlib import Path

import pytest
import torch

from headprune_utils.tasks import data, translation_data
from headprune_utils.model import masks, models, strategies
from headprune_utils.run import cli, profiles
from headprune_utils.train import training
from headprune_utils.store.caches import CorruptCacheWarning, cached
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import CellsFailed, PlanError, run_study
from headprune_utils.model.gates import head_gates
from headprune_utils.store.paths import StudyPaths
from headprune_utils.model.pruning import prune_heads
from headprune_utils.store.results import CorruptCellWarning, ResultStore, StaleResultsError, StudyBusyError
from headprune_utils.studies import STUDIES
from headprune_utils.studies.base import Cell

from conftest import tiny_inputs, tiny_model
from fake_studies import FakeConfig, FakeStudy

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present: 'cuda' is a valid device here")



# ------------------------------------------------------------------------------------------------ helpers

# What "heavy work" means here: any of these called during a validation-level case fails it.
HEAVY = (
    "headprune_utils.model.models.load_classifier",
    "headprune_utils.model.models.load_tokenizer",
    "headprune_utils.train.training.finetune",
    "headprune_utils.tasks.data.load_task",
    "headprune_utils.train.translation.train_translation",
    "headprune_utils.tasks.translation_data.load_parallel",
    "headprune_utils.run.schedule.execute_study",
    "headprune_utils.run.pipeline.compute_cells",
)


def forbid(monkeypatch, targets=HEAVY) -> list[str]:
    """Replace each target by a function that records the call and raises; returns the record (must stay empty).

    The record is checked explicitly after each case: the runner turns any exception during validation into exit
    status 2, which would otherwise hide a heavy call."""
    calls: list[str] = []

    def refuse(name):
        def heavy(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"heavy work started during a bad-input case: {name}")

        return heavy

    for target in targets:
        monkeypatch.setattr(target, refuse(target))
    return calls


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file (its bytes) and folder under ``root``."""
    root = Path(root)
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else "<folder>")
            for p in sorted(root.rglob("*"))}


def write_tsv(root: Path, task: str, split: str, lines: list[str] | None = None, raw: bytes | None = None) -> Path:
    d = Path(root) / "glue" / task
    d.mkdir(parents=True, exist_ok=True)
    path = d / ("dev.tsv" if split == "dev" else "train.tsv")
    path.write_bytes(raw if raw is not None else ("\n".join(lines) + "\n").encode())
    return path


def sst2_rows(n: int) -> list[str]:
    return [f"a fine sentence number {i}\t{i % 2}" for i in range(n)]


def stsb_rows(n: int) -> list[str]:
    return [f"first sentence {i}\tsecond sentence {i}\t{i % 5}.0" for i in range(n)]


def write_multi30k(root: Path, val_en: bytes | None = None, val_de: bytes | None = None, raw_val_en: bytes | None = None):
    d = Path(root) / "multi30k" / "task1" / "raw"
    d.mkdir(parents=True, exist_ok=True)
    for stem in ("train", "test_2016_flickr"):
        for lang in ("en", "de"):
            (d / f"{stem}.{lang}.gz").write_bytes(gzip.compress(b"a sentence\nanother one\n"))
    if raw_val_en is None:
        raw_val_en = gzip.compress(b"a\nb\n" if val_en is None else val_en)
    (d / "val.en.gz").write_bytes(raw_val_en)
    (d / "val.de.gz").write_bytes(gzip.compress(b"x\ny\n" if val_de is None else val_de))


def fill(value, roots: dict[str, Path]):
    """``"@name@"`` placeholders (anywhere in strings, lists, dicts) replaced by the module's temporary folders."""
    if isinstance(value, str):
        for k, v in roots.items():
            value = value.replace(f"@{k}@", str(v))
        return value
    if isinstance(value, list):
        return [fill(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, roots) for k, v in value.items()}
    return value


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """No data root from the environment, offline, outputs in the test's own folder."""
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    monkeypatch.delenv("HEADPRUNE_STAGED_OUTPUTS", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    """Data roots: ``root`` (SST-2, STS-B, UD English-EWT, Multi30k: every study's defaults validate),
    ``no_ud`` (GLUE and Multi30k, no UD), ``glue_only`` (GLUE only), and ``empty_dir`` (an empty folder)."""
    base = tmp_path_factory.mktemp("bad_inputs_roots")
    out = {name: base / name for name in ("root", "no_ud", "glue_only", "empty_dir")}
    for name in ("root", "no_ud", "glue_only"):
        for split in ("train", "dev"):
            write_tsv(out[name], "SST-2", split, ["sentence\tlabel", *sst2_rows(20)])
            write_tsv(out[name], "STS-B", split, ["sentence1\tsentence2\tscore", *stsb_rows(20)])
    ud = out["root"] / "ud_english_ewt"
    ud.mkdir()
    for split in ("train", "dev", "test"):
        (ud / f"en_ewt-ud-{split}.conllu").write_text("# sent_id = 1\n1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_\n\n")
    write_multi30k(out["root"])
    write_multi30k(out["no_ud"])
    out["empty_dir"].mkdir()
    return out


# ====================================================================================== 1. study parameters

GLUE_BASE = {"data_dir": "@root@", "device": "cpu", "allow_hub": False, "tasks": ["SST-2"]}
NMT_BASE = {"data_dir": "@root@", "device": "cpu"}
WHERE = "params/bad.yaml [{study}]"


def base_params(study: str) -> dict:
    return dict(NMT_BASE if study == "nmt_heads" else GLUE_BASE)


def case(id_: str, study: str, overrides: dict, names: list[str], exc=ParameterError, env: dict | None = None,
         marks=()):
    return pytest.param(study, overrides, exc, names, env or {}, id=id_, marks=marks)


MODEL_ERRORS = (ParameterError, models.ModelUnavailableError)
RP, LS, CO, RD, ZS, SP, NM = ("random_pruning", "layer_strategies", "compensation", "redundancy_patterns",
                              "zero_shot_pruning", "specialized_heads_l0", "nmt_heads")
NAN, INF = float("nan"), float("inf")

STUDY_CASES = [
    # --- unknown keys (with a did-you-mean where one is close)
    case("unknown-key-rp-fractoins", RP, {"fractoins": [0.5]}, ["'fractoins'", "did you mean 'fractions'"]),
    case("unknown-key-ls-strategys", LS, {"strategys": ["top"]}, ["'strategys'", "did you mean 'strategies'"]),
    case("unknown-key-co-budget", CO, {"budget": [0.5]}, ["'budget'", "did you mean 'budgets'"]),
    case("unknown-key-rd-metric", RD, {"metric": "js"}, ["'metric'", "did you mean"]),
    case("unknown-key-zs-regime", ZS, {"regime": ["finetune_then_mask"]}, ["'regime'", "did you mean 'regimes'"]),
    case("unknown-key-sp-lambda", SP, {"lambda": [0.1]}, ["'lambda'", "did you mean 'lambdas'"]),
    case("unknown-key-nm-head", NM, {"head": 4}, ["'head'", "did you mean 'heads'"]),
    case("unknown-key-rp-learning_rate", RP, {"learning_rate": 1e-4}, ["'learning_rate'", "known:"]),
    # --- wrong types: int, float, bool, list, Literal, str, None where not allowed
    case("type-int-given-str", RP, {"epochs": "3"}, ["'epochs'", "must be int"]),
    case("type-int-given-float", RP, {"epochs": 2.5}, ["'epochs'", "must be int"]),
    case("type-int-given-bool", RP, {"epochs": True}, ["'epochs'", "must be int"]),
    case("type-int-given-None", LS, {"batch_size": None}, ["'batch_size'", "must be int"]),
    case("type-float-given-bool", RP, {"lr": True}, ["'lr'", "must be float"]),
    case("type-float-given-None", CO, {"lr": None}, ["'lr'", "must be float"]),
    case("type-bool-given-str", RP, {"freeze_word_embeddings": "yes"}, ["'freeze_word_embeddings'", "must be bool"]),
    case("type-bool-given-int", RP, {"allow_hub": 1}, ["'allow_hub'", "must be bool"]),
    case("type-bool-given-str-ls", LS, {"shared_evaluation": "true"}, ["'shared_evaluation'", "must be bool"]),
    case("type-list-given-int", RP, {"seeds": 0}, ["'seeds'", "list[int]"]),
    case("type-list-item-float", RP, {"seeds": [0, 1.5]}, ["'seeds'", "list[int]"]),
    case("type-list-given-str", RP, {"tasks": "SST-2"}, ["'tasks'", "list[str]"]),
    case("type-list-item-str", RP, {"fractions": [0.5, "0.75"]}, ["'fractions'", "list[float]"]),
    case("type-optional-list-given-float", RP, {"finetune_fractions": 0.5}, ["'finetune_fractions'"]),
    case("type-str-given-None", RP, {"model": None}, ["'model'", "must be str"]),
    case("type-str-given-None-device", ZS, {"device": None}, ["'device'", "must be str"]),
    case("type-literal-ablations", RP, {"ablations": ["random"]}, ["'ablations'", "'zero' | 'uniform' | 'mean'"]),
    case("ablations-repeated", RP, {"finetune_ablations": ["zero", "zero"]}, ["finetune_ablations", "repeat"]),
    case("old-ablation-parameter", RP, {"ablation": "zero"}, ["'ablation'", "did you mean 'ablations'"]),
    case("type-literal-list-regimes", RP, {"regimes": ["prune_whenever"]}, ["'regimes'", "mask_then_finetune"]),
    case("type-literal-zs-probe", ZS, {"probe": "wiki"}, ["'probe'", "'random' | 'generic'"]),
    case("type-literal-zs-linkage", ZS, {"linkage": "ward"}, ["'linkage'"]),
    case("type-literal-sp-ud_split", SP, {"ud_split": "val"}, ["'ud_split'"]),
    case("type-literal-sp-ablation_measure", SP, {"ablation_measure": "accuracy"}, ["'ablation_measure'"]),
    case("type-literal-nm-tokenizer_model", NM, {"tokenizer_model": "wordpiece"}, ["'tokenizer_model'"]),
    case("type-int-given-str-nm", NM, {"heads": "4"}, ["'heads'", "must be int"]),
    case("type-optional-str-given-int-nm", NM, {"direction": 1}, ["'direction'"]),
    # --- numbers YAML 1.1 reads as strings ("1e-4": no dot in the mantissa)
    case("yaml-string-lr", RP, {"lr": "1e-4"}, ["'lr'", "1.0e-4"]),
    case("yaml-string-weight_decay", LS, {"weight_decay": "1e-2"}, ["'weight_decay'", "1.0e-2"]),
    case("yaml-string-nm-retrain_lr", NM, {"retrain_lr": "3e-4"}, ["'retrain_lr'", "3.0e-4"]),
    case("yaml-string-rd-mlm_lr", RD, {"mlm_lr": "1e-4"}, ["'mlm_lr'", "1.0e-4"]),
    case("yaml-string-inside-list", SP, {"lambdas": ["1e-2", 0.03]}, ["'lambdas'", "1.0e-2"]),
    # --- non-finite numbers, also inside lists
    case("nonfinite-lr-nan", RP, {"lr": NAN}, ["'lr'", "finite"]),
    case("nonfinite-lr-inf", RP, {"lr": INF}, ["'lr'", "finite"]),
    case("nonfinite-warmup-neg-inf", RP, {"warmup_ratio": -INF}, ["'warmup_ratio'", "finite"]),
    case("nonfinite-max_grad_norm-inf", CO, {"max_grad_norm": INF}, ["'max_grad_norm'", "finite"]),
    case("nonfinite-nan-in-fractions", RP, {"fractions": [0.5, NAN]}, ["'fractions'", "finite"]),
    case("nonfinite-inf-in-budgets", LS, {"budgets": [0.5, INF]}, ["'budgets'", "finite"]),
    case("nonfinite-nan-in-dropouts", RD, {"dropouts": [0.1, NAN]}, ["'dropouts'", "finite"]),
    case("nonfinite-nan-in-lambdas", SP, {"lambdas": [NAN]}, ["'lambdas'", "finite"]),
    case("nonfinite-sp-temperature", SP, {"temperature": NAN}, ["'temperature'", "finite"]),
    case("nonfinite-nm-dropout", NM, {"dropout": NAN}, ["'dropout'", "finite"]),
    case("nonfinite-nm-inf-in-fractions", NM, {"fractions": [INF]}, ["'fractions'", "finite"]),
    # --- seeds
    case("seeds-negative", RP, {"seeds": [-1]}, ["seeds", ">= 0"]),
    case("seeds-repeated", LS, {"seeds": [0, 0]}, ["seeds", "repeat"]),
    case("seeds-empty", ZS, {"seeds": []}, ["seeds", "empty"]),
    case("subset_seed-negative", CO, {"subset_seed": -1}, ["subset_seed", ">= 0"]),
    case("compensation-one-seed", CO, {"seeds": [0]}, ["seeds", "at least 2"]),
    case("rd-mlm_seeds-repeated", RD, {"mlm_seeds": [0, 0]}, ["mlm_seeds"]),
    case("nm-seeds-repeated", NM, {"seeds": [1, 1]}, ["seeds", "repeats"]),
    case("nm-model_seeds-empty", NM, {"model_seeds": []}, ["model_seeds"]),
    case("nm-seeds-negative", NM, {"seeds": [-1, 0]}, ["seeds", ">= 0"]),
    case("nm-subset_seed-negative", NM, {"subset_seed": -1}, ["subset_seed", ">= 0"]),
    # --- sizes: zero or negative
    case("size-train_size-0", RP, {"train_size": 0}, ["train_size"]),
    case("size-dev_size-negative", RP, {"dev_size": -5}, ["dev_size"]),
    case("size-epochs-0", RP, {"epochs": 0}, ["epochs", ">= 1"]),
    case("size-batch_size-0", LS, {"batch_size": 0}, ["batch_size", ">= 1"]),
    case("size-max_length-0", ZS, {"max_length": 0}, ["max_length", ">= 1"]),
    case("size-ls-importance_size-0", LS, {"importance_size": 0}, ["importance_size"]),
    case("size-co-probe_size-0", CO, {"probe_size": 0}, ["probe_size"]),
    case("size-co-n_resamples-10", CO, {"n_resamples": 10}, ["n_resamples"]),
    case("size-rd-probe_size-3", RD, {"probe_size": 3}, ["probe_size", ">= 4"]),
    case("size-rd-probe_max_length-2", RD, {"probe_max_length": 2}, ["probe_max_length"]),
    case("size-rd-min_cluster_size-0", RD, {"min_cluster_size": 0}, ["min_cluster_size"]),
    case("size-rd-mlm_steps-0", RD, {"mlm_steps": 0}, ["mlm_steps"]),
    case("size-rd-random_probes-negative", RD, {"random_probes": -1}, ["random_probes"]),
    case("size-rd-n_null-5", RD, {"n_null": 5}, ["n_null"]),
    case("size-zs-probe_size-1", ZS, {"probe_size": 1}, ["probe_size", ">= 2"]),
    case("size-sp-score_size-0", SP, {"score_size": 0}, ["score_size"]),
    case("size-sp-l0_batch_size-0", SP, {"l0_batch_size": 0}, ["l0_batch_size"]),
    case("size-sp-n_permutations-0", SP, {"n_permutations": 0}, ["n_permutations"]),
    case("size-nm-vocab_size-4", NM, {"vocab_size": 4}, ["vocab_size"]),
    case("size-nm-heads-not-dividing-d_model", NM, {"heads": 3}, ["heads=3", "d_model"]),
    case("size-nm-max_tokens-below-max_length", NM, {"max_tokens": 64}, ["max_tokens", "max_length"]),
    case("size-nm-test_size-0", NM, {"test_size": 0}, ["test_size"]),
    case("size-nm-eval_every-0", NM, {"eval_every": 0}, ["eval_every"]),
    case("size-nm-train_max_seconds-0", NM, {"train_max_seconds": 0.0}, ["train_max_seconds"]),
    case("size-nm-patience-0", NM, {"patience": 0}, ["patience"]),
    case("size-nm-retrain_warmup-negative", NM, {"retrain_warmup": -1}, ["retrain_warmup"]),
    # --- ranges: rates, ratios, decay, clipping, thresholds
    case("range-lr-0", RP, {"lr": 0.0}, ["lr", "> 0"]),
    case("range-lr-negative", RP, {"lr": -1e-4}, ["lr", "> 0"]),
    case("range-warmup_ratio-above-1", RP, {"warmup_ratio": 1.5}, ["warmup_ratio", "[0, 1]"]),
    case("range-warmup_ratio-negative", CO, {"warmup_ratio": -0.1}, ["warmup_ratio"]),
    case("range-weight_decay-negative", RP, {"weight_decay": -0.01}, ["weight_decay", ">= 0"]),
    case("range-max_grad_norm-0", RP, {"max_grad_norm": 0.0}, ["max_grad_norm", "> 0"]),
    case("range-max_grad_norm-negative", LS, {"max_grad_norm": -1.0}, ["max_grad_norm"]),
    case("range-rd-dropout-1", RD, {"dropouts": [0.0, 1.0]}, ["dropouts", "[0, 1)"]),
    case("range-rd-mlm_lr-0", RD, {"mlm_lr": 0.0}, ["mlm_lr"]),
    case("range-rd-k_min-1", RD, {"k_min": 1}, ["k_min"]),
    case("range-rd-k_min-above-k_max", RD, {"k_min": 8, "k_max": 4}, ["k_min", "k_max"]),
    case("range-rd-k_max-all-heads", RD, {"k_max": 72}, ["k_max", "72"]),
    case("range-sp-stretch_low", SP, {"stretch_low": 0.1}, ["stretch_low"]),
    case("range-sp-positional_threshold", SP, {"positional_threshold": 0.0}, ["positional_threshold"]),
    case("range-sp-rare_share", SP, {"rare_share": 1.0}, ["rare_share"]),
    case("range-sp-negative-lambda", SP, {"lambdas": [-0.1, 0.1]}, ["lambdas", ">= 0"]),
    case("range-sp-l0_lr-0", SP, {"l0_lr": 0.0}, ["l0_lr", "> 0"]),
    case("range-sp-syntactic_margin", SP, {"syntactic_margin": -0.1}, ["syntactic_margin"]),
    case("range-nm-label_smoothing-1", NM, {"label_smoothing": 1.0}, ["label_smoothing"]),
    case("range-nm-stretch_high-1", NM, {"stretch_high": 1.0}, ["stretch_high"]),
    case("range-nm-tolerance-negative", NM, {"tolerance": -1.0}, ["tolerance"]),
    case("range-nm-no-lambdas-with-l0", NM, {"lambdas": []}, ["lambdas", "l0_settings"]),
    # --- budgets and fractions impossible for the model (MiniLM: 72 heads; nmt quick: 3 x 4 heads per type)
    case("budget-150-of-72", RP, {"fractions": [0.0, 150 / 72]}, ["fractions", "150 heads of 72"]),
    case("budget-negative-fraction", RP, {"fractions": [-0.25]}, ["fractions", "-0.25"]),
    case("budget-fractions-empty", RP, {"fractions": []}, ["fractions", "empty"]),
    case("budget-fractions-repeated", RP, {"fractions": [0.5, 0.5]}, ["fractions", "repeat"]),
    case("budget-finetune-fraction-not-in-fractions", RP, {"finetune_fractions": [0.3]},
         ["finetune_fractions", "not in fractions"]),
    case("budget-zs-finetune-fraction-not-in-fractions", ZS, {"finetune_fractions": [0.6]},
         ["finetune_fractions", "not in fractions"]),
    case("budget-ls-zero-budget", LS, {"budgets": [0.0, 0.5]}, ["budgets", "0 is the reference"]),
    case("budget-ls-finetune_budgets-above-1", LS, {"finetune_budgets": [1.5]}, ["finetune_budgets", "108 heads of 72"]),
    case("budget-ls-rounds-to-no-head", LS, {"budgets": [0.005]}, ["budgets", "0.005"]),
    case("budget-co-prune-all", CO, {"budgets": [1.0]}, ["budgets", "(0, 1)"]),
    case("budget-co-rounds-to-all-heads", CO, {"budgets": [0.999]}, ["budgets", "0.999"]),
    case("budget-zs-zero-fraction", ZS, {"fractions": [0.0], "finetune_fractions": None}, ["fractions", "(0, 1)"]),
    case("budget-zs-rounds-to-no-head", ZS, {"fractions": [0.005], "finetune_fractions": None}, ["fractions", "0.005"]),
    case("budget-nm-prunes-no-head", NM, {"fractions": [0.01]}, ["fractions", "prunes no head"]),
    case("budget-nm-two-fractions-one-count", NM, {"fractions": [0.5, 0.52]}, ["fractions", "both prune 6"]),
    case("budget-rp-rounds-to-no-head", RP, {"fractions": [0.0, 0.005]}, ["fractions", "0.005 prunes no head"]),
    case("budget-rp-two-fractions-one-count", RP, {"fractions": [0.0, 0.5, 0.505]},
         ["fractions", "0.5 and 0.505 both prune 36 of 72"]),
    case("budget-ls-two-budgets-one-count", LS, {"budgets": [0.25, 0.255]}, ["budgets", "both prune 18"]),
    case("budget-nm-fraction-above-1", NM, {"fractions": [1.5]}, ["fractions", "outside [0, 1]"]),
    case("budget-nm-strategy_budgets", NM, {"strategy_budgets": [2.0]}, ["strategy_budgets"]),
    case("budget-nm-retrain_fractions-repeated", NM, {"retrain_fractions": [0.5, 0.5]}, ["retrain_fractions"]),
    # --- names that are not known: tasks, regimes, strategies, methods, metrics, corpora, types
    case("unknown-task", RP, {"tasks": ["SST-3"]}, ["tasks", "SST-3"]),
    case("tasks-empty", RP, {"tasks": []}, ["tasks", "empty"]),
    case("tasks-same-task-twice", RP, {"tasks": ["SST-2", "sst2"]}, ["tasks", "twice"]),
    case("regimes-empty", RP, {"regimes": []}, ["regimes", "non-empty"]),
    case("regimes-unknown-ls", LS, {"regimes": ["finetune_then_mask", "sometimes"]}, ["'regimes'", "sometimes"]),
    case("strategies-unknown-ls", LS, {"strategies": ["sideways"]}, ["strategies", "sideways"]),
    case("strategies-repeated-ls", LS, {"strategies": ["top", "top"]}, ["strategies", "repeat"]),
    case("strategies-importance-in-co", CO, {"strategies": ["least_important"]}, ["strategies", "least_important"]),
    case("strategies-empty-co", CO, {"strategies": []}, ["strategies", "non-empty"]),
    case("methods-unknown-zs", ZS, {"methods": ["oracle"]}, ["methods", "oracle"]),
    case("metric-unknown-zs", ZS, {"metric": "euclid"}, ["metric", "euclid"]),
    case("regimes-empty-zs", ZS, {"regimes": []}, ["regimes"]),
    case("metrics-repeated-rd", RD, {"metrics": ["js", "js"]}, ["metrics"]),
    case("metrics-unknown-rd", RD, {"metrics": ["euclid"]}, ["metrics", "euclid"]),
    case("cluster_metric-not-in-metrics", RD, {"metrics": ["js"], "cluster_metric": "cosine"}, ["cluster_metric"]),
    case("probe_tasks-unknown-rd", RD, {"probe_tasks": ["SST-3"]}, ["probe_tasks", "SST-3"]),
    case("relations-empty-sp", SP, {"relations": []}, ["relations"]),
    case("relations-blank-name-sp", SP, {"relations": ["nsubj", ""]}, ["relations"]),
    case("corpus-unknown-nm", NM, {"corpus": "europarl"}, ["corpus", "europarl"]),
    case("direction-unknown-nm", NM, {"direction": "en-fr"}, ["direction", "en-fr"]),
    case("types-unknown-nm", NM, {"types": ["encoder"]}, ["types", "encoder"]),
    case("types-empty-nm", NM, {"types": []}, ["types", "empty"]),
    case("l0_settings-unknown-nm", NM, {"l0_settings": ["enc", "decoder"]}, ["l0_settings", "decoder"]),
    case("strategy_types-all-nm", NM, {"strategy_types": ["all"]}, ["strategy_types"]),
    case("strategies-without-random-nm", NM, {"strategies": ["top"]}, ["strategies", "random"]),
    case("strategies-importance-nm", NM, {"strategies": ["random", "least_important"]},
         ["strategies", "least_important"]),
    case("relations-empty-nm", NM, {"relations": []}, ["relations"]),
    # --- the model
    case("model-folder-missing", RP, {"model": "/nonexistent/model_dir"}, ["/nonexistent/model_dir"], exc=MODEL_ERRORS),
    case("model-hub-id-offline", LS, {"model": "no-such-model-xyz"}, ["no-such-model-xyz", "HF_HUB_OFFLINE"],
         exc=MODEL_ERRORS),
    case("model-folder-without-config", ZS, {"model": "@empty_dir@"}, ["@empty_dir@", "model"], exc=MODEL_ERRORS),
    # --- the device
    case("device-unknown", RP, {"device": "tpu"}, ["device", "tpu"]),
    case("device-unknown-nm", NM, {"device": "gpu"}, ["device", "gpu"]),
    case("device-cuda-without-gpu", RP, {"device": "cuda"}, ["device", "cuda"], marks=NO_GPU),
    case("device-cuda-1-without-gpu-nm", NM, {"device": "cuda:1"}, ["device", "cuda"], marks=NO_GPU),
    case("device-malformed-cuda-index", CO, {"device": "cuda:x"}, ["device", "cuda:x"]),
    # --- data folders and data availability
    case("data_dir-missing", RP, {"data_dir": "/nonexistent/data"}, ["data_dir", "/nonexistent/data"]),
    case("data_dir-missing-nm", NM, {"data_dir": "/nonexistent/data"}, ["data_dir", "/nonexistent/data"]),
    case("data_dir-from-env-missing", CO, {"data_dir": None}, ["HEADPRUNE_DATA_DIR", "/nonexistent/env_data"],
         env={"HEADPRUNE_DATA_DIR": "/nonexistent/env_data"}),
    case("task-without-local-data-no-hub", RP, {"tasks": ["RTE"]}, ["tasks", "RTE", "allow_hub"]),
    case("task-without-local-data-offline", LS, {"tasks": ["RTE"], "allow_hub": True}, ["RTE", "offline"]),
    case("probe_tasks-without-local-data", RD, {"probe_tasks": ["RTE"]}, ["probe_tasks", "RTE"]),
    case("sp-ud-missing", SP, {"data_dir": "@no_ud@"}, ["UD English-EWT", "@no_ud@/ud_english_ewt/en_ewt-ud-"]),
    case("sp-ud-missing-no-root", SP, {"data_dir": None, "allow_hub": True}, ["UD English-EWT", "no data root"]),
    case("nm-local-only-corpus-missing", NM, {"corpus": "newstest-en-ru"}, ["newstest-en-ru", "wmt_newstest_en_ru"]),
    case("nm-no-local-data-no-hub", NM, {"data_dir": "@glue_only@", "allow_hub": False}, ["multi30k", "allow_hub"]),
    case("nm-hub-only-corpus-offline", NM, {"corpus": "wmt14-en-de"}, ["wmt14-en-de", "offline"]),
    case("nm-ud-missing", NM, {"data_dir": "@no_ud@"}, ["UD English-EWT", "syntactic"]),
    case("nm-syntactic-needs-english-source", NM, {"direction": "de-en"}, ["syntactic", "'de'"]),
]


@pytest.mark.parametrize("study, overrides, exc, names, env", STUDY_CASES)
def test_study_parameter_is_refused_before_any_work(study, overrides, exc, names, env, roots, monkeypatch):
    calls = forbid(monkeypatch)
    for k, v in env.items():
        monkeypatch.setenv(k, fill(v, roots))
    params = fill({**base_params(study), **overrides}, roots)
    where = WHERE.format(study=study)
    with pytest.raises(exc) as info:
        validate(STUDIES[study].Config, params, where=where)
    msg = str(info.value)
    if isinstance(info.value, ParameterError):
        assert msg.startswith(where), f"the message does not say where the parameter came from: {msg}"
    for name in fill(names, roots):
        assert name in msg, f"{name!r} is not named in: {msg}"
    assert calls == [], f"heavy work started: {calls}"


def test_a_section_that_is_not_a_mapping_is_refused(monkeypatch):
    calls = forbid(monkeypatch)
    with pytest.raises(ParameterError, match=r"params/bad.yaml \[random_pruning\]: expected a mapping"):
        validate(STUDIES[RP].Config, ["fractions", 0.5], where=WHERE.format(study=RP))
    assert calls == []


@pytest.mark.parametrize("study", list(STUDIES))
def test_control_the_base_parameters_of_every_study_are_valid(study, roots, monkeypatch):
    """Not a bad input: the base each case above changes one value of, so each refusal is due to that value."""
    calls = forbid(monkeypatch)
    validate(STUDIES[study].Config, fill(base_params(study), roots), where=WHERE.format(study=study))
    assert calls == []


# ============================================================================== 2. profile files and runner flags

RUNNER_HEAVY = tuple(t for t in HEAVY if t != "headprune_utils.tasks.data.load_task")  # --check reads the task data


def earlier_results(out: Path) -> None:
    """A tree of earlier results the runner must leave alone: a real (model-free) run, and files of real studies."""
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=out))
    for rel, content in {"random_pruning/t/tables/cells.csv": b"task,score\nSST-2,0.9\n",
                         "random_pruning/t/metrics.json": b'{"score": 0.9}\n',
                         "nmt_heads/t/run_meta.json": b'{"params": {}}\n',
                         "_finetuned/t/finetuned__task=SST-2__seed=0__0123456789abcdef.pt": b"weights"}.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(content)


@pytest.fixture
def runner(tmp_path, roots, monkeypatch, capsys):
    """``runner(profile_text, argv, fake=False) -> (exit status, stderr)``: ``params/t.yaml`` holds ``profile_text``
    (None: no file), the outputs root holds earlier results; asserts afterwards that no heavy work started and that
    nothing under the outputs root changed."""
    params = tmp_path / "params"
    params.mkdir()
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    out = Path(os.environ["HEADPRUNE_OUTPUT_DIR"])
    earlier_results(out)

    def call(profile_text, argv, fake=False, profile_bytes: bytes | None = None):
        if profile_bytes is not None:
            (params / "t.yaml").write_bytes(profile_bytes)
        elif profile_text is not None:
            (params / "t.yaml").write_text(fill(profile_text, roots))
        if fake:
            monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy()})
        calls = forbid(monkeypatch, RUNNER_HEAVY)
        before = snapshot(out)
        capsys.readouterr()
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
        captured = capsys.readouterr()
        assert calls == [], f"heavy work started: {calls}"
        after = snapshot(out)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        assert not changed, f"the run changed the outputs: {changed}"
        return code, captured.err

    return call


BAD_KEY = "random_pruning:\n  fractoins: [0.5]\n"
FAKE_OK = "fake: {}\n"


def rcase(id_, profile, argv, names, code=2, fake=False, profile_bytes=None, marks=()):
    return pytest.param(profile, argv, code, names, fake, profile_bytes, id=id_, marks=marks)


RUNNER_CASES = [
    # --- profile files
    rcase("profile-unknown-study-section", "no_such_study: {}\n", ["--profile", "t"], ["params/t.yaml", "no_such_study"]),
    rcase("profile-unknown-name", None, ["--profile", "nope"], ["unknown profile 'nope'", "nope.yaml"]),
    rcase("profile-empty-name", None, ["--profile", ""], ["unknown profile ''"]),
    # a profile name with path parts reached outside params/ and outputs/ (and the runner's own folder names)
    rcase("profile-name-climbs-out", None, ["--profile", "../params/smoke"], ["'../params/smoke'", "not a profile name"]),
    rcase("profile-name-with-a-slash", None, ["--profile", "a/b"], ["'a/b'", "not a profile name"]),
    rcase("profile-name-absolute", None, ["--profile", "/tmp/x"], ["'/tmp/x'", "not a profile name"]),
    rcase("profile-name-a-staging-folder", None, ["--profile", "smoke.staging"], ["'smoke.staging'", ".staging"]),
    rcase("profile-name-hidden", None, ["--profile", ".hidden"], ["'.hidden'", "not a profile name"]),
    rcase("profile-not-a-mapping", "- random_pruning\n- fractions\n", ["--profile", "t"], ["t.yaml", "sections"]),
    rcase("profile-section-is-a-list", "random_pruning: [1, 2]\n", ["--profile", "t"], ["t.yaml", "sections"]),
    rcase("profile-section-is-a-scalar", "random_pruning: 3\n", ["--profile", "t"], ["t.yaml", "sections"]),
    rcase("profile-malformed-yaml", "random_pruning: {fractions: [0.5\n", ["--profile", "t", "--check"],
          ["params/t.yaml", "line 2", "not valid YAML"]),
    rcase("profile-not-utf8", None, ["--profile", "t", "--check"], ["t.yaml"], profile_bytes=b"\xff\xfe\x00fake: {}\n"),
    # numbers and words YAML 1.1 reads otherwise than they look, and a section left empty (lost indentation)
    rcase("profile-yaml-octal-seeds", "fake:\n  seeds: [010, 011]\n", ["--profile", "t", "--check"],
          ["params/t.yaml line 2", "010 reads as the number 8"], fake=True),
    rcase("profile-yaml-base-60", "fake:\n  n: 1:30\n", ["--profile", "t", "--check"],
          ["params/t.yaml line 2", "1:30 reads as the number 90"], fake=True),
    rcase("profile-yaml-hex", "fake:\n  n: 0x4\n", ["--profile", "t", "--check"], ["0x4 reads as the number 4"],
          fake=True),
    rcase("profile-yaml-no-is-false", "fake:\n  fail: no\n", ["--profile", "t", "--check"],
          ["params/t.yaml line 2", "no reads as the boolean false"], fake=True),
    rcase("profile-yaml-on-is-true", "fake:\n  fail: on\n", ["--profile", "t", "--check"],
          ["on reads as the boolean true"], fake=True),
    rcase("profile-without-a-study-it-would-run", "random_pruning:\n  device: cpu\n", ["--profile", "t", "--check"],
          ["params/t.yaml has no section for layer_strategies", "--only"]),
    rcase("profile-empty-section", "fake:\n", ["--profile", "t", "--check"],
          ["params/t.yaml", "fake", "empty", "'fake: {}'"], fake=True),
    rcase("profile-section-lost-its-indentation", "fake:\nscale: 2.0\n", ["--profile", "t", "--check"],
          ["params/t.yaml"], fake=True),
    rcase("profile-study-section-twice", "fake: {scale: 2.0}\nfake: {scale: 1.0}\n", ["--profile", "t", "--check"],
          ["t.yaml", "fake"], fake=True),
    rcase("profile-parameter-twice", "fake:\n  scale: 2.0\n  scale: 1.0\n", ["--profile", "t", "--check"],
          ["t.yaml", "scale"], fake=True),
    rcase("profile-unknown-key", BAD_KEY, ["--profile", "t"], ["params/t.yaml [random_pruning]", "fractoins"]),
    rcase("profile-yaml-string-number", "random_pruning:\n  lr: 1e-4\n", ["--profile", "t", "--only", RP],
          ["params/t.yaml [random_pruning]", "'lr'", "1.0e-4"]),
    rcase("profile-impossible-budget", "random_pruning:\n  fractions: [0.0, 2.0833333333]\n  device: cpu\n",
          ["--profile", "t", "--only", RP], ["params/t.yaml [random_pruning]", "fractions", "150 heads of 72"]),
    rcase("profile-unknown-task", "layer_strategies:\n  tasks: [SST-3]\n  device: cpu\n", ["--profile", "t"],
          ["params/t.yaml [layer_strategies]", "SST-3"]),
    rcase("profile-missing-data-folder", "compensation:\n  data_dir: /nonexistent/data\n  device: cpu\n",
          ["--profile", "t", "--only", CO], ["params/t.yaml [compensation]", "data_dir", "/nonexistent/data"]),
    rcase("profile-unknown-model-folder",
          "zero_shot_pruning:\n  model: /nonexistent/model_dir\n  data_dir: @root@\n  tasks: [SST-2]\n  device: cpu\n",
          ["--profile", "t", "--only", ZS], ["params/t.yaml [zero_shot_pruning]", "/nonexistent/model_dir"]),
    rcase("profile-unknown-device-nmt", "nmt_heads:\n  device: gpu\n  data_dir: @root@\n", ["--profile", "t", "--only", NM],
          ["params/t.yaml [nmt_heads]", "device", "gpu"]),
    rcase("profile-bad-section-with-check", BAD_KEY, ["--profile", "t", "--check"], ["params/t.yaml", "fractoins"]),
    rcase("profile-bad-section-with-plan", BAD_KEY, ["--profile", "t", "--plan"], ["params/t.yaml", "fractoins"]),
    rcase("profile-bad-section-with-fresh", BAD_KEY, ["--profile", "t", "--fresh"], ["params/t.yaml", "fractoins"]),
    rcase("profile-bad-section-with-fresh-caches", BAD_KEY, ["--profile", "t", "--fresh-caches"],
          ["params/t.yaml", "fractoins"]),
    rcase("profile-bad-section-with-jobs", BAD_KEY, ["--profile", "t", "--jobs", "2"], ["params/t.yaml", "fractoins"]),
    rcase("profile-bad-section-with-ray", BAD_KEY, ["--profile", "t", "--executor", "ray", "--cells-only"],
          ["params/t.yaml", "fractoins"]),
    # --- runner flags
    rcase("flag-only-unknown-study", FAKE_OK, ["--profile", "t", "--only", "nope"], ["--only", "nope"], fake=True),
    rcase("flag-jobs-0", FAKE_OK, ["--profile", "t", "--jobs", "0"], ["--jobs"], fake=True),
    rcase("flag-jobs-negative", FAKE_OK, ["--profile", "t", "--jobs", "-2"], ["--jobs"], fake=True),
    rcase("flag-jobs-not-a-number", FAKE_OK, ["--profile", "t", "--jobs", "two"], ["--jobs"], fake=True),
    rcase("flag-address-without-ray", FAKE_OK, ["--profile", "t", "--address", "auto"], ["--address"], fake=True),
    rcase("flag-executor-unknown", FAKE_OK, ["--profile", "t", "--executor", "spark"], ["--executor", "spark"], fake=True),
    rcase("flag-unknown", FAKE_OK, ["--profile", "t", "--frsh"], ["--frsh"], fake=True),
    rcase("flag-plan-summary-without-plan", FAKE_OK, ["--profile", "t", "--plan-summary"], ["--plan-summary"], fake=True),
    rcase("flag-plan-slices-without-plan", FAKE_OK, ["--profile", "t", "--plan-slices"], ["--plan-slices"], fake=True),
    rcase("flag-gpu-tflops-0", FAKE_OK, ["--profile", "t", "--plan", "--gpu-tflops", "0"], ["--gpu-tflops"], fake=True),
    rcase("flag-cpu-gflops-negative", FAKE_OK, ["--profile", "t", "--plan", "--cpu-gflops", "-58"], ["--cpu-gflops"],
          fake=True),
    # --- --where filters mean what they say: an axis the study's cells lack would filter nothing, a value matching
    # no cell would store nothing and exit 0 (both were accepted)
    rcase("flag-where-unknown-axis", FAKE_OK, ["--profile", "t", "--cells-only", "--where", "nmae=a0"],
          ["--where nmae", "fake", "'nmae'", "its axes: name"], fake=True),
    rcase("flag-where-value-matches-no-cell", FAKE_OK, ["--profile", "t", "--cells-only", "--where", "name=a9"],
          ["--where name=a9", "no planned cell of fake", "name takes a0, a1, a2, a3, b"], fake=True),
    rcase("flag-where-one-axis-known-one-not", FAKE_OK,
          ["--profile", "t", "--cells-only", "--where", "name=a0", "seed=0"], ["--where seed", "'seed'"], fake=True),
    rcase("flag-where-axis-of-another-study",
          "random_pruning:\n  tasks: [SST-2]\n  data_dir: @root@\n  device: cpu\nnmt_heads:\n  data_dir: @root@\n  device: cpu\n",
          ["--profile", "t", "--cells-only", "--only", RP, NM, "--where", "task=SST-2"],
          ["--where task", "nmt_heads", "'task'"]),
    rcase("flag-where-task-typo", "random_pruning:\n  tasks: [SST-2]\n  data_dir: @root@\n  device: cpu\n",
          ["--profile", "t", "--cells-only", "--only", RP, "--where", "task=SST2"],
          ["--where task=SST2", "no planned cell of random_pruning", "task takes"]),
]


@pytest.mark.parametrize("profile, argv, code, names, fake, profile_bytes", RUNNER_CASES)
def test_runner_refuses_at_once_and_changes_nothing(profile, argv, code, names, fake, profile_bytes, runner):
    status, err = runner(profile, argv, fake=fake, profile_bytes=profile_bytes)
    assert status == code, err
    assert "error" in err, err
    for name in names:
        assert name in err, f"{name!r} is not named in: {err}"


def test_runner_stale_results_stop_before_any_notebook_naming_the_changed_parameter(runner):
    """The earlier fake run used scale 1.0: a profile with scale 2.0 must neither mix nor overwrite those cells."""
    status, err = runner("fake: {scale: 2.0}\n", ["--profile", "t"], fake=True)
    assert status == 2, err
    assert "fake" in err and "scale: 1.0 -> 2.0" in err, err


def test_runner_check_reports_stale_results_too(runner):
    status, err = runner("fake: {scale: 2.0}\n", ["--profile", "t", "--check"], fake=True)
    assert status == 2, err
    assert "scale: 1.0 -> 2.0" in err, err


def test_runner_check_names_a_corrupt_task_data_file(runner, tmp_path, roots):
    root = tmp_path / "data"
    write_tsv(root, "SST-2", "train", ["sentence\tlabel", *sst2_rows(50)])
    write_tsv(root, "SST-2", "dev", raw=b"sentence\tlabel\n\xff\xfe broken\t1\n")
    profile = f"random_pruning:\n  tasks: [SST-2]\n  data_dir: {root}\n  allow_hub: false\n  device: cpu\n"
    status, err = runner(profile, ["--profile", "t", "--check", "--only", RP])
    assert status == 2, err
    assert "SST-2/dev" in err and "UTF-8" in err, err


def test_runner_check_leaves_a_corrupt_cell_file_where_it_is(runner):
    out = Path(os.environ["HEADPRUNE_OUTPUT_DIR"])
    (out / "fake" / "t" / "cells" / "name=a1.json").write_text("")  # emptied by a crash, say
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, err = runner(FAKE_OK, ["--profile", "t", "--check"], fake=True)  # asserts nothing changed
    said = err + " ".join(str(w.message) for w in caught)
    assert "name=a1.json" in said


# ======================================================================================== 3. data files

def dcase(id_, task, split, raw: bytes, exc, names, warns=None, marks=()):
    return pytest.param(task, split, raw, exc, names, warns, id=id_, marks=marks)


def tsv(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


DATA_CASES = [
    dcase("tsv-not-utf8", "SST-2", "dev", b"sentence\tlabel\n\xff\xfe\x00\x01garbage\t1\n", data.DataFormatError,
          ["SST-2/dev.tsv", "UTF-8"]),
    dcase("tsv-is-a-gzip-file", "SST-2", "train", gzip.compress(tsv("sentence\tlabel", *sst2_rows(50))),
          data.DataFormatError, ["SST-2/train.tsv", "UTF-8"]),
    dcase("tsv-header-only", "SST-2", "dev", b"sentence\tlabel\n", data.DataFormatError, ["SST-2/dev.tsv", "no rows"]),
    dcase("tsv-zero-bytes", "SST-2", "dev", b"", data.DataFormatError, ["SST-2/dev.tsv"]),
    dcase("tsv-wrong-header", "SST-2", "dev", tsv("text\tgold", *sst2_rows(5)), data.DataFormatError,
          ["SST-2/dev.tsv", "sentence"]),
    dcase("tsv-half-malformed", "SST-2", "train", tsv("sentence\tlabel", *sst2_rows(100), *["one column"] * 100),
          data.DataFormatError, ["SST-2/train.tsv", "100 of 200 rows", "first bad line 102"]),
    dcase("tsv-2-percent-bad-labels", "SST-2", "train",
          tsv("sentence\tlabel", *sst2_rows(196), *["a sentence\tpositive"] * 4), data.DataFormatError,
          ["SST-2/train.tsv", "4 of 200 rows", "'positive' is not a valid SST-2 label"]),
    dcase("tsv-label-out-of-range", "SST-2", "dev", tsv("sentence\tlabel", *["a sentence\t2"] * 10),
          data.DataFormatError, ["SST-2/dev.tsv", "label '2'"]),
    dcase("tsv-unknown-text-label-mnli", "MNLI", "train",
          tsv("sentence1\tsentence2\tgold_label", *["a\tb\tmaybe"] * 10), data.DataFormatError,
          ["MNLI/train.tsv", "'maybe'"]),
    dcase("tsv-few-malformed-warns", "SST-2", "train", tsv("sentence\tlabel", *sst2_rows(299), "only one column"),
          None, ["SST-2/train.tsv", "1 of 300 rows"], warns=data.MalformedRowsWarning),
    dcase("tsv-stsb-nan-score", "STS-B", "train", tsv("sentence1\tsentence2\tscore", *stsb_rows(200), "a\tb\tnan"),
          None, ["STS-B/train.tsv", "nan"], warns=data.MalformedRowsWarning),
    dcase("tsv-stsb-score-out-of-range", "STS-B", "dev", tsv("sentence1\tsentence2\tscore", *stsb_rows(200), "a\tb\t50"),
          None, ["STS-B/dev.tsv", "50"], warns=data.MalformedRowsWarning),
]


@pytest.mark.parametrize("task, split, raw, exc, names, warns", DATA_CASES)
def test_a_bad_data_file_is_named(task, split, raw, exc, names, warns, tmp_path):
    write_tsv(tmp_path, task, split, raw=raw)
    if exc is not None:
        with pytest.raises(exc) as info:
            data.load_task(task, split, tmp_path, allow_hub=False)
        msg = str(info.value)
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = data.load_task(task, split, tmp_path, allow_hub=False)
        said = [str(w.message) for w in caught if issubclass(w.category, warns)]
        assert said, f"no {warns.__name__}"
        msg = said[0]
        assert loaded.n_skipped >= 1
        labels = loaded.labels.astype(float)
        assert all(math.isfinite(v) for v in labels), "a non-finite label was kept"
    for name in names:
        assert name in msg, f"{name!r} is not named in: {msg}"


@pytest.mark.parametrize("call, exc, names", [
    pytest.param(lambda root: data.load_task("SST-3", "dev", root, allow_hub=False), ValueError, ["SST-3", "valid names"],
                 id="unknown-task"),
    pytest.param(lambda root: data.load_task("SST-2", "test", root, allow_hub=False), ValueError, ["split", "'test'"],
                 id="unknown-split"),
    pytest.param(lambda root: data.load_task("CoLA", "dev", root, allow_hub=False), data.DataUnavailableError,
                 ["glue/CoLA/dev.tsv", "allow_hub=False"], id="missing-file-no-hub"),
    pytest.param(lambda root: data.load_task("CoLA", "train", root, allow_hub=True), data.DataUnavailableError,
                 ["glue/CoLA/train.tsv", "offline"], id="missing-file-offline"),
    pytest.param(lambda root: data.load_task("SST-2", "dev", root / "nope", allow_hub=False), data.DataUnavailableError,
                 ["nope", "does not exist"], id="missing-data-folder"),
    pytest.param(lambda root: data.load_task("SST-2", "dev", root / "glue" / "SST-2" / "dev.tsv", allow_hub=False),
                 data.DataUnavailableError, ["dev.tsv", "not a folder"], id="data-root-is-a-file"),
])
def test_a_missing_or_unknown_data_source_is_named(call, exc, names, tmp_path):
    write_tsv(tmp_path, "SST-2", "dev", ["sentence\tlabel", *sst2_rows(5)])
    with pytest.raises(exc) as info:
        call(tmp_path)
    for name in names:
        assert name in str(info.value), f"{name!r} is not named in: {info.value}"


PARALLEL_FORMAT_ERRORS = (data.DataFormatError, data.DataUnavailableError)


@pytest.mark.parametrize("files, names", [
    pytest.param(dict(val_en=b"a\nb\nc\n"), ["val.en.gz", "val.de.gz", "not aligned"], id="parallel-misaligned"),
    pytest.param(dict(raw_val_en=b"plain text, not gzip\n"), ["val.en.gz"], id="parallel-not-gzip"),
    pytest.param(dict(raw_val_en=gzip.compress(b"a line\n" * 200)[:30]), ["val.en.gz"], id="parallel-truncated-gzip"),
    pytest.param(dict(val_en="caf\xe9\n".encode("latin-1"), val_de=b"x\n"), ["val.en.gz", "UTF-8"],
                 id="parallel-not-utf8"),
    pytest.param(dict(val_en=b"", val_de=b""), ["val.en.gz"], id="parallel-empty-split"),
])
def test_a_bad_parallel_corpus_file_is_named(files, names, tmp_path, monkeypatch):
    write_multi30k(tmp_path, **files)
    with pytest.raises(PARALLEL_FORMAT_ERRORS) as info:
        translation_data.load_parallel("multi30k", "dev", tmp_path, allow_hub=False)
    for name in names:
        assert name in str(info.value), f"{name!r} is not named in: {info.value}"


# ======================================================================================== 4. gates and masks

def _nan_at(layer, head, value=float("nan")):
    g = torch.ones(3, 4)
    g[layer, head] = value
    return g


GATE_CASES = [
    pytest.param(dict(gates=_nan_at(1, 2)), ["gates", "finite", "(1, 2)"], id="gate-nan"),
    pytest.param(dict(gates=_nan_at(2, 3, float("inf"))), ["gates", "finite", "(2, 3)"], id="gate-inf"),
    pytest.param(dict(gates=torch.full((3, 4), 1.5)), ["gates", "[0, 1]", "allow_out_of_range"], id="gate-above-1"),
    pytest.param(dict(gates=torch.full((3, 4), -0.1)), ["gates", "[0, 1]"], id="gate-negative"),
    pytest.param(dict(gates=torch.ones(2, 4)), ["gates", "[3, 4]", "[2, 4]"], id="gate-wrong-shape"),
    pytest.param(dict(gates=torch.ones(12)), ["gates", "[3, 4]", "[12]"], id="gate-flat"),
    pytest.param(dict(gates={"enc": torch.ones(3, 4)}), ["gates", "one grid"], id="gate-dict-for-an-encoder"),
    pytest.param(dict(gates=torch.full((3, 4), 0.5), ablation="mean"), ["means="], id="gate-mean-without-means"),
    pytest.param(dict(gates=torch.ones(3, 4), ablation="mean", means=torch.zeros(2, 4, 8)), ["means", "[3, 4, 8]", "[2, 4, 8]"],
                 id="gate-means-wrong-shape"),
    pytest.param(dict(gates=torch.ones(3, 4), ablation="random"), ["ablation", "'random'"], id="gate-unknown-ablation"),
]


@pytest.fixture(scope="module")
def gated_model():
    model = tiny_model("bert")
    batch = tiny_inputs()
    with torch.no_grad():
        reference = model(**batch).logits.clone()
    return model, batch, reference


@pytest.mark.parametrize("kwargs, names", GATE_CASES)
def test_bad_gates_are_refused_and_leave_the_model_untouched(kwargs, names, gated_model):
    model, batch, reference = gated_model
    kwargs = dict(kwargs)
    gates = kwargs.pop("gates")
    with pytest.raises(ValueError) as info:
        with head_gates(model, gates, **kwargs):
            pytest.fail("the block must not run")
    for name in names:
        assert name in str(info.value), f"{name!r} is not named in: {info.value}"
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, reference), "a refused gate left a hook behind"


@pytest.mark.parametrize("mask, names", [
    pytest.param(torch.full((3, 4), 0.5), ["mask", "only 0 (prune) and 1 (keep)"], id="prune-mask-not-binary"),
    pytest.param(_nan_at(0, 1), ["mask", "only 0 (prune) and 1 (keep)"], id="prune-mask-nan"),
    pytest.param(torch.ones(4, 4), ["mask", "[3, 4]", "[4, 4]"], id="prune-mask-wrong-shape"),
])
def test_a_bad_pruning_mask_is_refused_before_anything_changes(mask, names):
    model = tiny_model("bert")
    batch = tiny_inputs()
    with torch.no_grad():
        before = model(**batch).logits.clone()
    n_params = sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError) as info:
        prune_heads(model, mask)
    for name in names:
        assert name in str(info.value)
    assert sum(p.numel() for p in model.parameters()) == n_params
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)


def test_keeping_a_head_pruned_earlier_is_refused_naming_it():
    model = tiny_model("bert")
    first = torch.ones(3, 4)
    first[0, 0] = 0
    prune_heads(model, first)
    with pytest.raises(ValueError, match=r"layer 0: heads \[0\] were already pruned"):
        prune_heads(model, torch.ones(3, 4))


@pytest.mark.parametrize("call, exc, names", [
    pytest.param(lambda: masks.random_mask(3, 4, 13, 0), masks.BudgetError, ["13", "12"], id="mask-13-of-12-heads"),
    pytest.param(lambda: masks.random_mask(3, 4, -1, 0), masks.BudgetError, ["-1"], id="mask-negative-count"),
    pytest.param(lambda: masks.random_mask(3, 4, 2.5, 0), masks.BudgetError, ["integer", "2.5"], id="mask-float-count"),
    pytest.param(lambda: masks.random_mask(3, 4, True, 0), masks.BudgetError, ["integer", "True"], id="mask-bool-count"),
    pytest.param(lambda: masks.random_masks({"enc": (3, 4)}, 13, 0), masks.BudgetError, ["13", "12"],
                 id="masks-union-too-many"),
    pytest.param(lambda: masks.n_pruned_for_fraction(1.5, 6, 12), masks.BudgetError, ["1.5", "108 heads of 72"],
                 id="fraction-above-1"),
    pytest.param(lambda: masks.n_pruned_for_fraction("0.5", 6, 12), masks.BudgetError, ["number", "'0.5'"],
                 id="fraction-a-string"),
    pytest.param(lambda: masks.n_pruned_for_fraction(float("nan"), 6, 12), masks.BudgetError, ["nan"],
                 id="fraction-nan"),
    pytest.param(lambda: masks.n_pruned_for_fraction(float("inf"), 6, 12), masks.BudgetError, ["inf"],
                 id="fraction-inf"),
    pytest.param(lambda: masks.mask_from_pruned(3, 4, [(3, 0)]), ValueError, ["(3, 0)", "3 x 4"],
                 id="mask-head-outside-grid"),
    pytest.param(lambda: strategies.strategy_mask("sideways", 3, 4, 2, 0), ValueError, ["sideways"],
                 id="strategy-unknown"),
    pytest.param(lambda: strategies.strategy_mask("top", 3, 4, 20, 0), masks.BudgetError, ["20", "12"],
                 id="strategy-budget-too-large"),
    pytest.param(lambda: masks.random_mask(3, 4, 2, -1), ValueError, ["seed"], id="mask-negative-seed"),
])
def test_an_impossible_mask_or_budget_is_refused(call, exc, names):
    with pytest.raises(exc) as info:
        call()
    for name in names:
        assert name in str(info.value), f"{name!r} is not named in: {info.value}"


# ==================================================================================== 5. non-finite training

@pytest.fixture(scope="module")
def tiny_task(tiny_model_dir, tiny_glue_root):
    from headprune_utils.tasks import batching

    tokenizer = models.load_tokenizer(str(tiny_model_dir))
    train = batching.encode(tokenizer, data.subset(data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False),
                                                   16, 0), 32)
    dev = batching.encode(tokenizer, data.load_task("SST-2", "dev", tiny_glue_root, allow_hub=False), 32)
    return lambda: models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0), train, dev


@pytest.mark.parametrize("lr", [pytest.param(float("inf"), id="lr-inf"), pytest.param(1e30, id="lr-1e30-diverges")])
def test_a_non_finite_training_loss_stops_before_any_score(lr, tiny_task, monkeypatch):
    make, train, dev = tiny_task
    scored = []
    monkeypatch.setattr(training, "evaluate", lambda *a, **k: scored.append(1) or {})
    cfg = training.TrainConfig(epochs=2, batch_size=8, lr=lr, warmup_ratio=0.0, max_grad_norm=None)
    with pytest.raises(training.NonFiniteError) as info:
        training.finetune(make(), train, "SST-2", cfg, seed=0, dev=dev, progress=False, desc="SST-2 s0")
    msg = str(info.value)
    assert "SST-2 s0" in msg and "training loss" in msg and f"lr={lr:g}" in msg, msg
    assert scored == [], "a model was scored after its loss became non-finite"


@pytest.mark.parametrize("value", [pytest.param(float("nan"), id="weight-nan"), pytest.param(float("inf"), id="weight-inf")])
def test_a_model_with_non_finite_weights_is_never_scored(value, tiny_task, monkeypatch):
    make, _, dev = tiny_task
    model = make()
    name, param = next((n, p) for n, p in model.named_parameters() if "attention.self.query.weight" in n)
    with torch.no_grad():
        param[0, 0] = value
    monkeypatch.setattr(training, "predict", lambda *a, **k: pytest.fail("a model with non-finite weights ran"))
    with pytest.raises(training.NonFiniteError) as info:
        training.evaluate(model, dev, "SST-2")
    assert name in str(info.value)


def test_a_diverging_cell_fails_by_name_and_stores_nothing(tiny_model_dir, tiny_glue_root, tmp_path):
    """A finite but absurd learning rate passes validation; the cell then fails with NonFiniteError, named, and
    neither a result cell nor a fine-tuned checkpoint is stored."""
    from headprune_utils.studies import random_pruning as study

    cfg = validate(study.RandomPruningConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], fractions=[0.0], finetune_fractions=None, seeds=[0],
        regimes=["mask_then_finetune"], train_size=16, dev_size=8, epochs=2, batch_size=8, lr=1e30, warmup_ratio=0.0,
        max_grad_norm=None, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False, progress=False))
    paths = StudyPaths(study.NAME, "t", root=tmp_path / "out")
    with pytest.raises(CellsFailed) as info:
        run_study(study.STUDY, cfg, "t", paths)
    msg = str(info.value)
    assert "task=SST-2" in msg and "NonFiniteError" in msg and "training loss" in msg, msg
    assert list(paths.cells.glob("*.json")) == [], "a diverged cell was stored"
    assert list(paths.finetuned_cache.rglob("*.pt")) == [], "a diverged model was cached"


# =================================================================================== 6. result store faults

def store_with_cell(tmp_path, text: str | bytes):
    store = ResultStore(tmp_path / "cells", "a" * 16)
    path = store.path({"name": "x"})
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return store, path


@pytest.mark.parametrize("content", [
    pytest.param("", id="cell-empty"),
    pytest.param('{"cell": {"name": "x"}, "fingerprint": "aaaa', id="cell-truncated"),
    pytest.param("{}", id="cell-empty-object"),
    pytest.param("[]", id="cell-a-list"),
    pytest.param('{"cell": {"name": "x"}, "fingerprint": "' + "a" * 16 + '"}', id="cell-without-result"),
    pytest.param(b"\xff\xfe\x00 not text", id="cell-not-utf8"),
])
def test_a_corrupt_cell_file_is_quarantined_named_and_kept(content, tmp_path):
    store, path = store_with_cell(tmp_path, content)
    original = path.read_bytes()
    with pytest.warns(CorruptCellWarning, match=path.name):
        assert not store.has({"name": "x"})
    assert not path.exists()
    kept = list(store.quarantine_dir.iterdir())
    assert len(kept) == 1 and kept[0].name.startswith(path.name) and kept[0].read_bytes() == original


def other_fingerprint_record(tmp_path):
    store, path = store_with_cell(tmp_path, json.dumps({"cell": {"name": "x"}, "fingerprint": "b" * 16,
                                                        "result": {"value": 1.0}}))
    return store, path, path.read_bytes()


@pytest.mark.parametrize("action", [
    pytest.param(lambda s: s.put({"name": "x"}, {"value": 2.0}), id="store-put-over-other-fingerprint"),
    pytest.param(lambda s: s.has({"name": "x"}), id="store-has-other-fingerprint"),
    pytest.param(lambda s: s.get({"name": "x"}), id="store-get-other-fingerprint"),
    pytest.param(lambda s: s.check_compatible(), id="store-resume-over-other-fingerprint"),
])
def test_a_record_of_other_parameters_is_never_overwritten_or_mixed(action, tmp_path):
    store, path, before = other_fingerprint_record(tmp_path)
    with pytest.raises(StaleResultsError) as info:
        action(store)
    msg = str(info.value)
    assert path.name in msg and "b" * 16 in msg and "other parameters" in msg, msg
    assert path.read_bytes() == before


def test_a_held_study_lock_stops_a_second_holder_naming_the_first(tmp_path):
    store = ResultStore(tmp_path / "cells", "a" * 16)
    with store.lock(owner="the first runner"):
        with pytest.raises(StudyBusyError) as info:
            with ResultStore(tmp_path / "cells", "a" * 16).lock(owner="the second"):
                pytest.fail("two holders of one study lock")
    assert f"pid {os.getpid()}" in str(info.value) and "the first runner" in str(info.value)


def fake_paths(tmp_path):
    return StudyPaths("fake", "t", root=tmp_path / "out")


class RepeatedKeyStudy(FakeStudy):
    def plan(self, cfg):
        return super().plan(cfg) + [Cell({"name": "a0"})]


class MissingRequirementStudy(FakeStudy):
    def plan(self, cfg):
        return super().plan(cfg) + [Cell({"name": "c"}, requires=("name=zz",))]


class CycleStudy(FakeStudy):
    def plan(self, cfg):
        return super().plan(cfg) + [Cell({"name": "c"}, requires=("name=d",)), Cell({"name": "d"}, requires=("name=c",))]


@pytest.mark.parametrize("study, cfg, exc, names", [
    pytest.param(FakeStudy(), FakeConfig(scale=2.0), StaleResultsError, ["fake", "other parameters", "scale: 1.0 -> 2.0"],
                 id="run-with-other-parameters"),
    pytest.param(RepeatedKeyStudy(), FakeConfig(), PlanError, ["name=a0", "planned twice"], id="plan-repeated-key"),
    pytest.param(MissingRequirementStudy(), FakeConfig(), PlanError, ["name=c", "name=zz"], id="plan-missing-requirement"),
    pytest.param(CycleStudy(), FakeConfig(), PlanError, ["cycle", "name=c", "name=d"], id="plan-cycle"),
])
def test_run_study_refuses_before_computing_and_changes_nothing(study, cfg, exc, names, tmp_path, monkeypatch):
    run_study(FakeStudy(), FakeConfig(), "t", fake_paths(tmp_path))  # the earlier run
    before = snapshot(tmp_path / "out")
    monkeypatch.setattr(FakeStudy, "run", lambda *a, **k: pytest.fail("a cell was computed"))
    with pytest.raises(exc) as info:
        run_study(study, cfg, "t", fake_paths(tmp_path))
    for name in names:
        assert name in str(info.value), f"{name!r} is not named in: {info.value}"
    assert snapshot(tmp_path / "out") == before


def test_run_study_while_another_runner_holds_the_study(tmp_path, monkeypatch):
    run_study(FakeStudy(), FakeConfig(), "t", fake_paths(tmp_path))
    store = ResultStore(fake_paths(tmp_path).cells, "x")
    with store.lock(owner="the first runner"):
        before = snapshot(tmp_path / "out")
        monkeypatch.setattr(FakeStudy, "run", lambda *a, **k: pytest.fail("a cell was computed"))
        with pytest.raises(StudyBusyError, match="the first runner"):
            run_study(FakeStudy(), FakeConfig(), "t", fake_paths(tmp_path))
        assert snapshot(tmp_path / "out") == before


def test_a_failing_cell_is_named_its_dependants_skipped_the_rest_stored(tmp_path):
    with pytest.raises(CellsFailed) as info:
        run_study(FakeStudy(), FakeConfig(fail=["a1"]), "t", fake_paths(tmp_path))
    msg = str(info.value)
    assert "failed: name=a1" in msg and "broken on purpose" in msg and "not run: name=b (requires name=a1" in msg
    assert sorted(p.stem for p in fake_paths(tmp_path).cells.glob("*.json")) == ["name=a0", "name=a2", "name=a3"]


def test_a_corrupt_cell_in_a_run_is_kept_aside_and_recomputed(tmp_path):
    paths = fake_paths(tmp_path)
    run_study(FakeStudy(), FakeConfig(), "t", paths)
    cell = paths.cells / "name=a3.json"
    cell.write_text('{"cell": {"name": "a3"}, "fingerp')  # truncated by a crash
    with pytest.warns(CorruptCellWarning, match="name=a3.json"):
        table = run_study(FakeStudy(), FakeConfig(), "t", paths)
    assert dict(zip(table["name"], table["value"]))["a3"] == 16.0
    kept = list((paths.dir / "quarantine").iterdir())
    assert [p.read_text() for p in kept] == ['{"cell": {"name": "a3"}, "fingerp']


# ========================================================================================= 7. cache faults

@pytest.mark.parametrize("entry, corrupt, build, load", [
    pytest.param("scores.json", b'{"metrics": {"accuracy": 0.', lambda tmp: tmp.write_text('{"v": 2}'),
                 lambda p: json.loads(p.read_text()), id="cache-truncated-json"),
    pytest.param("model.pt", None, lambda tmp: torch.save({"w": torch.ones(2)}, tmp),
                 lambda p: torch.load(p, weights_only=True), id="cache-truncated-checkpoint"),
    pytest.param("model.pt", b"", lambda tmp: torch.save({"w": torch.ones(2)}, tmp),
                 lambda p: torch.load(p, weights_only=True), id="cache-empty-checkpoint"),
])
def test_a_corrupt_cache_entry_is_quarantined_named_and_rebuilt(entry, corrupt, build, load, tmp_path):
    path = tmp_path / "cache" / entry
    path.parent.mkdir()
    if corrupt is None:  # a checkpoint cut short
        torch.save({"w": torch.arange(1000.0)}, path)
        corrupt = path.read_bytes()[: len(path.read_bytes()) // 2]
    path.write_bytes(corrupt)
    built = []
    with pytest.warns(CorruptCacheWarning, match=entry):
        value = cached(path, lambda tmp: built.append(1) or build(tmp), load)
    assert built == [1] and value is not None
    kept = list((path.parent / "quarantine").iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == corrupt, "the corrupt entry must be kept for inspection"


def test_a_cache_build_that_writes_nothing_is_named_and_leaves_nothing(tmp_path):
    path = tmp_path / "cache" / "model.pt"
    with pytest.raises(RuntimeError, match="model.pt wrote nothing"):
        cached(path, lambda tmp: None, lambda p: p.read_bytes())
    assert not path.exists()


def test_repeated_only_and_where_flags_add_up_instead_of_the_last_one_winning(monkeypatch, tmp_path):
    """`--only a --only b` ran only b and `--where task=X --where seed=0` only the seed filter (argparse keeps the
    last of a repeated nargs flag): both now extend, as a user reading them expects; a study named twice runs once."""
    from headprune_utils.run import cli as run_cli
    from headprune_utils.run import profiles as run_profiles
    from headprune_utils.run.profiles import parse_where, validate_profile

    args = run_cli.build_parser().parse_args(["--profile", "smoke", "--only", RP, "--only", CO, "--cells-only",
                                              "--where", "task=SST-2", "--where", "seed=0", "seed=1"])
    assert args.only == [RP, CO]
    assert parse_where(args.where) == {"task": {"SST-2"}, "seed": {"0", "1"}}
    (tmp_path / "t.yaml").write_text("a: {}\nb: {}\n")
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: tmp_path)
    monkeypatch.setattr(run_profiles, "STUDIES", {"a": FakeStudy(), "b": FakeStudy()})
    assert list(validate_profile("t", ["b", "a", "b"])) == ["b", "a"]


@pytest.mark.parametrize("name", ["../../escape", "a/b", "/abs", "..", ".", "", "x.bak-1", "ok\n", None, 3])
def test_a_profile_name_with_path_parts_never_becomes_a_folder(name):
    """The notebooks take ``profile`` as a papermill parameter (`-p profile ../../escape`): the paths of a study run
    refuse any name that is not a plain one, before anything is created."""
    from headprune_utils.store.paths import StudyPaths

    with pytest.raises(ValueError, match="not a profile name"):
        StudyPaths("random_pruning", name)
    for ok in ("smoke", "standard-next", "custom-1a2b3c4d", "v1.2"):
        assert StudyPaths("random_pruning", ok).profile == ok


def test_check_says_a_corrupt_cell_will_be_quarantined_instead_of_refusing_the_run(runner):
    """A truncated cell made every plain run exit 2 ("a run would quarantine it"), so only --fresh got past; a run
    does what the README says: the check names the file and says the run moves it aside and recomputes it."""
    out = Path(os.environ["HEADPRUNE_OUTPUT_DIR"])
    (out / "fake" / "t" / "cells" / "name=a1.json").write_text('{"cell": {"name": "a1"}, "fingerp')  # truncated
    status, err = runner(FAKE_OK, ["--profile", "t", "--check"], fake=True)
    assert status == 0, err
    assert "name=a1.json" in err and "quarantine" in err and "recomputes" in err, err


def test_a_run_quarantines_a_corrupt_cell_recomputes_it_and_ignores_files_that_are_not_cells(tmp_path, monkeypatch,
                                                                                               capsys):
    from headprune_utils.run import cli as run_cli
    from headprune_utils.run import profiles as run_profiles

    out = Path(os.environ["HEADPRUNE_OUTPUT_DIR"])
    params = tmp_path / "params"
    params.mkdir()
    (params / "t.yaml").write_text(FAKE_OK)
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setattr(run_profiles, "STUDIES", {"fake": FakeStudy()})
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=out))
    cells = out / "fake" / "t" / "cells"
    (cells / "name=a1.json").write_text("")  # emptied by a crash
    junk = {"._name=a0.json": b"\x00\x05\x16\x07", ".DS_Store": b"x", "notes.txt": b"mine"}  # not cells by name
    for name, raw in junk.items():
        (cells / name).write_bytes(raw)
    for i in range(300):  # many junk files of macOS copies
        (cells / f"._copy{i}.json").write_bytes(b"\x00\x05")
    with pytest.warns(Warning, match="name=a1.json"):
        assert run_cli.main(["--profile", "t", "--cells-only"]) == 0
    assert json.loads((cells / "name=a1.json").read_text())["cell"] == {"name": "a1"}, "recomputed"
    assert [p.name.split(".json")[0] for p in (out / "fake" / "t" / "quarantine").iterdir()] == ["name=a1"]
    assert all((cells / n).read_bytes() == raw for n, raw in junk.items()), "files that are not cells are left alone"
    assert len(list(cells.glob("._copy*.json"))) == 300


def test_relative_path_variables_are_made_absolute_once_at_start(tmp_path, monkeypatch, capsys):
    """A relative HEADPRUNE_OUTPUT_DIR failed after the whole render (the kernels run elsewhere): the command line
    resolves both path variables against its own working directory before anything starts, and says so."""
    from headprune_utils.run import cli as run_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", "out")
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", "../data")
    run_cli.resolve_env_paths()
    assert os.environ["HEADPRUNE_OUTPUT_DIR"] == str(tmp_path / "out")
    assert os.environ["HEADPRUNE_DATA_DIR"] == os.path.abspath(tmp_path / ".." / "data")
    assert "HEADPRUNE_OUTPUT_DIR=out is relative" in capsys.readouterr().err
    run_cli.resolve_env_paths()  # absolute already: left as it is, nothing said
    assert os.environ["HEADPRUNE_OUTPUT_DIR"] == str(tmp_path / "out") and capsys.readouterr().err == ""

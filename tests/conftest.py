"""Shared fixtures. Tiers (markers): unit (default, tiny random models), model (real MiniLM),
data (real GLUE/UD files under HEADPRUNE_DATA_DIR or ../shared/data), smoke (every notebook via papermill)."""
from __future__ import annotations

import os
from pathlib import Path

# No test may reach the network: the hub fails at once instead of retrying for ~25 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    env = os.environ.get("HEADPRUNE_DATA_DIR")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "glue").is_dir():
            return c
    return None


@pytest.fixture(autouse=True)
def _no_default_data_dir(request, monkeypatch):
    """Tests decide where data comes from: the package's default (../shared/data beside the checkout) is off
    unless a test is marked ``uses_default_data_dir``; the hub probe never touches the network (a test that
    simulates a reachable hub patches ``data.hub_blocked``)."""
    from headprune_utils.tasks import data

    if "uses_default_data_dir" not in request.keywords:
        monkeypatch.setattr(data, "default_data_dir", lambda: None)
    monkeypatch.setattr(data, "_HUB_REACHABLE", {"huggingface.co": False})


@pytest.fixture(autouse=True)
def _thread_env_restored():
    """The runner sets OMP_NUM_THREADS / MKL_NUM_THREADS in its own process (each kernel's torch threads); a test
    that calls it in-process must not leave them to later tests (a Ray instance started later hands them to its
    workers, and the thread count changes trained weights)."""
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {k: os.environ.get(k) for k in names}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not found: set HEADPRUNE_DATA_DIR or place shared/data beside the repo")
    return root


def tiny_config(kind: str = "bert", **overrides):
    from transformers import BertConfig, DistilBertConfig, ElectraConfig, RobertaConfig

    common = dict(vocab_size=120, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, num_labels=3)
    if kind == "bert":
        cfg = BertConfig(**common)
    elif kind == "roberta":
        cfg = RobertaConfig(**{**common, "pad_token_id": 1})
    elif kind == "electra":
        cfg = ElectraConfig(**{**common, "embedding_size": 32})
    elif kind == "distilbert":
        cfg = DistilBertConfig(vocab_size=120, dim=32, n_layers=3, n_heads=4, hidden_dim=37,
                               max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, num_labels=3)
    else:
        raise ValueError(kind)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def tiny_model(kind: str = "bert", seed: int = 0, dtype=torch.float32, attn: str = "sdpa", **overrides):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    cfg = tiny_config(kind, **overrides)
    cfg._attn_implementation = attn
    model = AutoModelForSequenceClassification.from_config(cfg, attn_implementation=attn)
    return model.to(dtype).eval()


def tiny_inputs(batch: int = 3, seq: int = 9, vocab: int = 120, seed: int = 1, pad: bool = True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    att = torch.ones(batch, seq, dtype=torch.long)
    if pad:  # ragged lengths, as in real batches
        for b in range(batch):
            n = seq - (b * 2) % (seq - 2)
            att[b, n:] = 0
            ids[b, n:] = 0
    return {"input_ids": ids, "attention_mask": att}


@pytest.fixture
def bert():
    return tiny_model("bert")


@pytest.fixture
def inputs():
    return tiny_inputs()


WORDS = ("the a film movie good bad great awful plot acting boring fun was is not very and but "
         "story long short love hate best worst dull fresh").split()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random BERT with a real (small) WordPiece tokenizer, saved as a local model folder."""
    from transformers import BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny_bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers v5: `vocab=` (a path or a dict); the v4 keyword `vocab_file` is ignored, leaving 5 tokens
    tok = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    assert len(tok) == len(vocab)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    # dropout on: the same-seed and resume tests must exercise the seeding of dropout too
    cfg = tiny_config("bert", vocab_size=len(vocab), hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    BertModel(cfg).save_pretrained(folder)  # an encoder without a task head, like the real checkpoints
    return folder


@pytest.fixture(scope="session")
def tiny_glue_root(tmp_path_factory) -> Path:
    """A GLUE-layout data root with a small synthetic SST-2 (sentiment from the words used)."""
    import numpy as np

    root = tmp_path_factory.mktemp("glue_root")
    rng = np.random.default_rng(0)
    pos, neg = ["good", "great", "fun", "love", "best", "fresh"], ["bad", "awful", "boring", "hate", "worst", "dull"]
    for split, n in (("train", 48), ("dev", 24)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = int(rng.integers(2))
            words = list(rng.choice(WORDS[:9], size=int(rng.integers(2, 8)))) + [str(rng.choice(pos if label else neg))]
            rng.shuffle(words)
            lines.append(" ".join(words) + "\t" + str(label))
        d = root / "glue" / "SST-2"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root

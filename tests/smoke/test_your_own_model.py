"""The "your own model" notebook (not a study) executed headlessly through papermill, as a user runs it: a tiny
Llama-family model trained on the local text, its heads scored, pruned, compared with the gated model and with
the zero-shot mask, generating with its KV cache."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from headprune_utils.run import notebooks

pytestmark = pytest.mark.smoke
REPO = Path(__file__).resolve().parents[2]


def test_your_own_model_notebook_runs(tmp_path, data_root, monkeypatch):
    import papermill as pm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "your_own_model.ipynb"
    pm.execute_notebook(str(REPO / "notebooks" / "your_own_model.ipynb"), str(out),
                        parameters={"n_train": 400, "n_eval": 100, "train_steps": 60, "data_dir": str(data_root)},
                        kernel_name=notebooks.kernel_name(), cwd=str(REPO), progress_bar=False, log_output=False,
                        kernel_manager_class=notebooks.ipc_kernel_manager())
    text = "\n".join(o.get("text", "") for c in nbformat.read(out, 4).cells for o in c.get("outputs", []))
    assert "family llama, 4 layers x 8 query heads, 2 key/value heads per layer" in text
    assert "the same tokens as the gated model without a cache: True" in text
    assert "pruned 16 of 32 query heads" in text
    images = [o for c in nbformat.read(out, 4).cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the importance map and the redundancy matrix

"""Where data comes from without make: ../shared/data beside the checkout by default; a machine without network
fails at once (no 30-45 s of hub retries) with the clear message."""
from __future__ import annotations

import time

import pytest

from headprune_utils.tasks import data
from headprune_utils.model import models
from headprune_utils.store import paths


@pytest.mark.uses_default_data_dir
def test_default_data_root_is_shared_data_beside_the_checkout(tmp_path, monkeypatch):
    checkout = tmp_path / "repo"
    (checkout / "headprune_utils").mkdir(parents=True)
    (checkout / "notebooks").mkdir()
    (checkout / "pyproject.toml").write_text("")
    monkeypatch.setattr(paths, "PACKAGE_DIR", checkout / "headprune_utils")
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    assert data.default_data_dir() is None and data.resolve_data_dir() is None  # no shared/data/glue yet
    (tmp_path / "shared" / "data" / "glue").mkdir(parents=True)
    assert data.resolve_data_dir() == tmp_path / "shared" / "data"
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(tmp_path))  # the user's setting wins
    assert data.resolve_data_dir() == tmp_path
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", "none")  # explicitly: no local data, the hub only
    assert data.resolve_data_dir() is None
    (checkout / "notebooks").rmdir()  # not a checkout (an installed package): no guess
    monkeypatch.delenv("HEADPRUNE_DATA_DIR")
    assert data.default_data_dir() is None


def test_an_unreachable_hub_fails_at_once_with_the_reason(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise OSError("no route to host")

    import socket

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(data, "_HUB_REACHABLE", {})
    t0 = time.perf_counter()
    why = data.hub_blocked()
    assert why is not None and "cannot be reached" in why and "huggingface.co" in why
    data.hub_blocked()
    assert len(calls) == 1, "probed once per process"
    with pytest.raises(data.DataUnavailableError, match="cannot be reached"):
        data.load_task("SST-2", "train", None)
    with pytest.raises(models.ModelUnavailableError, match="cannot be reached"):
        models.load_config("some-org/not-cached-model")
    assert time.perf_counter() - t0 < 10
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert data.hub_blocked() == "offline mode is on (HF_HUB_OFFLINE is set)"


def test_a_reachable_hub_is_tried(monkeypatch):
    import socket

    class Conn:
        def close(self):
            pass

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Conn())
    monkeypatch.setattr(data, "_HUB_REACHABLE", {})
    assert data.hub_blocked() is None

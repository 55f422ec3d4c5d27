"""A tiny study on the protocol, for the executor tests (no model, no data): importable by the workers of a process
pool or Ray."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from headprune_utils.studies.config import as_dict
from headprune_utils.store.results import fingerprint
from headprune_utils.analysis.claims import Superiority
from headprune_utils.studies.base import Cell, Claim, Cost, Study


@dataclass(frozen=True)
class FakeConfig:
    n: int = 4                                             # cells a0 .. a{n-1}; then b = a1 + a2
    scale: float = 1.0                                     # a result parameter (in the fingerprint)
    fail: list[str] = field(default_factory=list)          # names of cells whose computation raises
    delay: float = 0.0                                     # seconds each cell takes (not a result parameter)
    seeds: list[int] = field(default_factory=lambda: [0])
    device: str = "cpu"
    progress: bool = False


class FakeStudy(Study):
    name = "fake"
    notebook = "00_fake.ipynb"
    Config = FakeConfig
    claims = (Claim("fake.sum", "nobody", "b is the sum of a1 and a2.", Superiority(), figure="none"),)

    def plan(self, cfg: FakeConfig) -> list[Cell]:
        cells = [Cell({"name": f"a{i}"}, group="even" if i % 2 == 0 else None, cost=Cost(1e9 * (i + 1)))
                 for i in range(cfg.n)]
        b = Cell({"name": "b"}, requires=(cells[1].key, cells[2].key), cost=Cost(1e9))
        return cells + [b]

    def fingerprint(self, cfg: FakeConfig, device) -> str:
        d = as_dict(cfg)
        for k in ("n", "fail", "progress", "device", "delay"):
            d.pop(k)
        return fingerprint(d)

    def context(self, cfg: FakeConfig, device, paths):
        return {"cfg": cfg, "batches": [], "pid": os.getpid()}

    def run(self, ctx, cells, inputs):
        ctx["batches"].append([c["name"] for c in cells])
        cfg = ctx["cfg"]
        for c in cells:
            if c["name"] in cfg.fail:
                raise RuntimeError(f"cell {c['name']} broken on purpose")
            t0 = time.perf_counter()
            time.sleep(cfg.delay)
            if c["name"] == "b":
                value = sum(inputs[k]["value"] for k in c.requires)
            else:
                value = cfg.scale * (int(c["name"][1:]) + 1) ** 2
            yield c, {"value": value, "batch": len(ctx["batches"]), "seconds": time.perf_counter() - t0}


class ThreadsStudy(FakeStudy):
    """The fake study whose cells also record the torch threads they were computed with: an executor's workers must
    compute with one, whatever ``OMP_NUM_THREADS`` they inherited (the trained weights depend on it)."""

    def run(self, ctx, cells, inputs):
        for cell, result in super().run(ctx, cells, inputs):
            yield cell, {**result, "threads": torch.get_num_threads()}


def fake_profile(tmp_path, monkeypatch, studies: dict, text: str | None = None):
    """The batch runner pointed at ``studies`` (name -> study) under profile ``t``: ``params/t.yaml`` in
    ``tmp_path/params`` (``text``; default: every study with no overrides), outputs under ``tmp_path/out``.
    Returns the params folder."""
    from headprune_utils.run import profiles

    params = tmp_path / "params"
    params.mkdir()
    (params / "t.yaml").write_text(text if text is not None else "".join(f"{n}: {{}}\n" for n in studies))
    monkeypatch.setattr(profiles, "STUDIES", studies)
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    return params

"""The runner's Ray executor on the smoke profile of two studies (a local Ray instance, 2 CPUs): the cells it
stores equal the in-process executor's. Skipped only where Ray is not installed (make test installs it)."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

ray = pytest.importorskip("ray")

from headprune_utils.run import cli, profiles  # noqa: E402
from headprune_utils.studies.config import validate  # noqa: E402
from headprune_utils.run.execution import run_study  # noqa: E402
from headprune_utils.store.paths import StudyPaths  # noqa: E402
from headprune_utils.store.results import ResultStore  # noqa: E402
from headprune_utils.studies import STUDIES  # noqa: E402

pytestmark = pytest.mark.smoke
STUDIES_ON_RAY = ["random_pruning", "compensation"]


def stored(name: str, root) -> pd.DataFrame:
    study = STUDIES[name]
    cfg = validate(study.Config, profiles.validate_profile("smoke", [name])[name], where=name)
    paths = StudyPaths(name, "smoke", root=root, staged=False)
    store = ResultStore(paths.cells, study.fingerprint(cfg, torch.device("cpu")))
    t = store.table([dict(c.axes) for c in study.plan(cfg)])
    drop = [c for c in t.columns if c == "history" or c.startswith("seconds") or c.endswith("_seconds")]
    return t.drop(columns=drop)


def test_smoke_cells_on_ray_equal_the_local_ones(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "ray"))
    try:
        code = cli.main(["--profile", "smoke", "--only", *STUDIES_ON_RAY, "--executor", "ray", "--cells-only",
                         "--no-progress"])
    finally:
        ray.shutdown()
    assert code == 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a Ray worker (one CPU each): the same kernels, the same rounding
    try:
        for name in STUDIES_ON_RAY:
            study = STUDIES[name]
            cfg = validate(study.Config, {**profiles.validate_profile("smoke", [name])[name], "progress": False}, where=name)
            run_study(study, cfg, "smoke", StudyPaths(name, "smoke", root=tmp_path / "local", staged=False))
    finally:
        torch.set_num_threads(threads)
    for name in STUDIES_ON_RAY:
        pd.testing.assert_frame_equal(stored(name, tmp_path / "ray"), stored(name, tmp_path / "local"),
                                      check_exact=False, rtol=1e-6, atol=1e-9)

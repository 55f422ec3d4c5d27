"""The committed cells are the ones their manifests record, and they pass their study's checks: what makes the
committed results citable (an edited, swapped or replaced committed cell fails here and in every render)."""
from __future__ import annotations

import json

from headprune_utils.store.paths import project_root

OUTPUTS = project_root() / "outputs"


def _check(study: str):
    from headprune_utils.studies import STUDIES

    return STUDIES[study].check_record


def test_committed_cells_satisfy_their_study_checks_and_their_manifests():
    """Every committed cells folder has a manifest its cells match (sha256), every cell listed and every line a
    cell, and a sample of every folder's cells passes its study's check (the whole set, 6,734 cells, was checked
    when the manifests were recorded). Cells committed later (computed by older code, which writes no manifest)
    are recorded with ``python -m headprune_utils.store.manifest outputs/<study>/<profile>/cells`` after checking
    them."""
    from headprune_utils.store.manifest import verify

    folders = sorted(OUTPUTS.glob("*/*/cells"))
    assert folders, "no committed cells"
    for folder in folders:
        found = verify(folder)
        assert not any(found.values()), (f"{folder.relative_to(project_root())}: "
                                         + "; ".join(f"{k}: {v[:3]}" for k, v in found.items() if v))
        study = folder.parent.parent.name
        check = _check(study)
        for p in sorted(folder.glob("*.json"))[:40]:
            rec = json.loads(p.read_text())
            assert check(rec["cell"], rec["result"]) is None, p


def test_committed_held_out_curves_follow_the_stopping_rule_their_profile_states():
    """Every committed fine-tuning's held-out curve (a cell's ``history`` of ``val_score`` per epoch) is what the
    profile's stated rule produces, checked from the stored numbers and the YAML alone (not the training code):
    epochs numbered 1..L, the kept epoch (``selected``) the first best score, and, with ``patience`` P and the cap
    ``epochs`` E, training stopped P epochs after the best (L = best + P) or at the cap (L = E). (On the committed
    standard-next cells, 2026-12-04: 152 curves; 10 stopped at the cap with the best in epoch 9 or 10, which the
    convergence gate reports as not having reached the plateau.)"""
    import yaml

    checked = 0
    for folder in sorted(OUTPUTS.glob("*/*/cells")):
        study, profile = folder.parent.parent.name, folder.parent.name
        params = project_root() / "params" / f"{profile}.yaml"
        if not params.exists():
            continue
        section = (yaml.safe_load(params.read_text()) or {}).get(study) or {}
        cap, patience = section.get("epochs"), section.get("patience")
        for p in sorted(folder.glob("*.json")):
            history = json.loads(p.read_text())["result"].get("history")
            if not (isinstance(history, list) and history and isinstance(history[0], dict)
                    and "val_score" in history[0]):
                continue
            where = f"{folder.relative_to(project_root())}/{p.name}"
            scores = [e["val_score"] for e in history]
            best = scores.index(max(scores))  # the first best epoch (0-based): a later tie is no improvement
            assert [e["epoch"] for e in history] == list(range(1, len(history) + 1)), where
            assert [i for i, e in enumerate(history) if e.get("selected")] == [best], where
            if cap is not None:
                assert len(history) <= cap, where
            if patience is not None:
                assert len(history) in (best + 1 + patience, cap), (where, len(history), best + 1)
            checked += 1
    assert checked, "no committed held-out curve found"


def _dev_loss_rule(losses: list[float], patience: int, min_delta: float) -> tuple[int, bool]:
    """The stated rule, written out here (not ``preconditions.last_improvement``): an evaluation improves when its
    dev loss beats the last improving one by more than ``min_delta`` nats (the first is the reference); training
    stops ``patience`` evaluations after the last improvement. Returns (the evaluation the rule would stop at,
    0-based, or the last one; whether the rule stopped it there)."""
    ref = 0
    for i, loss in enumerate(losses):
        if i and loss < losses[ref] - min_delta:
            ref = i
        if i - ref >= patience:
            return i, True
    return len(losses) - 1, False


def test_committed_dev_loss_curves_follow_the_stopping_rule_their_profile_states():
    """Every committed translation training with a dev-loss curve (a model cell's ``history``, a plateau
    retraining's ``retrain_curve``) is what its stated rule produces, checked from the stored numbers and the
    profile's YAML (the full models: ``patience``, ``min_delta``, ``max_steps``) or the settings the retraining cell
    records (``retrain_patience``, ``retrain_min_delta``, ``retrain_max_steps``): it ends where ``patience``
    evaluations followed the last improvement by more than ``min_delta``, or at the step cap before that; the kept
    weights are the lowest dev loss's (its first occurrence); a retraining's ``reached_plateau`` is whether the rule
    ended it."""
    import yaml

    checked = 0
    for folder in sorted(OUTPUTS.glob("nmt_heads/*/cells")):
        params = project_root() / "params" / f"{folder.parent.name}.yaml"
        if not params.exists():
            continue
        section = (yaml.safe_load(params.read_text()) or {}).get("nmt_heads") or {}
        for p in sorted(folder.glob("*.json")):
            stored = json.loads(p.read_text())
            r, kind = stored["result"], stored["cell"].get("kind")
            where = f"{folder.relative_to(project_root())}/{p.name}"
            if kind == "model" and section.get("patience"):
                curve, patience, min_delta, cap = (r["history"], int(section["patience"]),
                                                   float(section.get("min_delta") or 0), int(section["max_steps"]))
                best_step, stopped, reached = r["best_step"], r["stopped"], None
            elif kind in ("retrain", "retrain_strategy") and r.get("retrain_regime") == "plateau":
                curve, patience, min_delta, cap = (r["retrain_curve"], int(r["retrain_patience"]),
                                                   float(r.get("retrain_min_delta") or 0), int(r["retrain_max_steps"]))
                best_step, stopped, reached = r["retrain_best_step"], r["retrain_stopped"], r["reached_plateau"]
            else:
                continue
            evals = [h for h in curve if h.get("dev_loss") is not None]
            losses = [float(h["dev_loss"]) for h in evals]
            end, by_rule = _dev_loss_rule(losses, patience, min_delta)
            assert end == len(losses) - 1, (where, "the rule would have stopped it at evaluation", end + 1)
            assert stopped == ("patience" if by_rule else "max_steps"), (where, stopped)
            if not by_rule:
                assert int(curve[-1]["step"]) == cap, (where, "stopped before its cap without the rule")
            assert best_step == evals[losses.index(min(losses))]["step"], where
            if reached is not None:
                assert reached == by_rule, where
            checked += 1
    assert checked, "no committed dev-loss curve found"

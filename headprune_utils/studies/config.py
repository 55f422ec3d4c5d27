"""Strict parameters: profiles in ``params/<profile>.yaml`` override a study's typed defaults.

Each study declares its parameters as a frozen dataclass (the defaults are the quick CPU profile and
equal the notebook's ``parameters`` cell). :func:`validate` REJECTS unknown keys and wrong types with a
message naming the key, the expected type and the allowed values, before any heavy work starts.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from headprune_utils.model.models import ModelUnavailableError
from headprune_utils.store.paths import params_dir, profile_name_problem
from headprune_utils.store.results import fingerprint
from headprune_utils.tasks.data import DataFormatError, DataUnavailableError

PROFILES = ("smoke", "quick", "standard", "paper")


class ParameterError(ValueError):
    pass


def _type_name(tp) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"list[{_type_name(get_args(tp)[0])}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _check(value: Any, tp) -> Any:
    """``value`` converted to ``tp`` (int -> float only), or raise TypeError."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in get_args(tp):
            raise TypeError
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in get_args(tp):
            try:
                return _check(value, arg)
            except TypeError:
                continue
        raise TypeError
    if tp is type(None):
        if value is not None:
            raise TypeError
        return None
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        (inner,) = get_args(tp)[:1]
        return [_check(v, inner) for v in value]
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise TypeError
        return value
    if isinstance(value, tp):
        return value
    raise TypeError


def validate(cls, params: dict[str, Any], where: str = "parameters", lines: dict[str, int] | None = None):
    """An instance of the dataclass ``cls`` from ``params`` (missing keys take the defaults).

    ``where`` starts every message (e.g. the profile file and the study); ``lines`` maps a parameter to its line
    in that file, added to the message of the parameter at fault."""
    lines = lines or {}

    def at(name: str) -> str:
        return f"{where} (line {lines[name]})" if name in lines else where

    if not isinstance(params, dict):
        raise ParameterError(f"{where}: expected a mapping of parameter names to values, got {type(params).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - fields)
    if unknown:
        hints_txt = []
        for k in unknown:
            close = difflib.get_close_matches(k, sorted(fields), n=1)
            hints_txt.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ParameterError(f"{at(unknown[0])}: unknown parameter(s) {', '.join(hints_txt)}; known: {', '.join(sorted(fields))}")
    values = {}
    for name, value in params.items():
        try:
            values[name] = _check(value, hints[name])
        except TypeError:
            raise ParameterError(
                f"{at(name)}: parameter {name!r} must be {_type_name(hints[name])}, got {value!r} "
                f"({type(value).__name__}){_yaml_hint(value, hints[name])}"
            ) from None
        bad = _non_finite(values[name])
        if bad is not None:
            raise ParameterError(f"{at(name)}: parameter {name!r} must be finite, got {bad!r}")
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if callable(check):
        try:
            check()  # cross-field and model-dependent checks, e.g. budgets
            available = getattr(obj, "check_available", None)
            if callable(available):
                available()  # last: whether the data can be had (after every check of the values themselves)
        except ParameterError as exc:
            first = str(exc).split()[0].rstrip(":") if str(exc).split() else ""
            raise ParameterError(f"{at(first)}: {exc}") from None
        except ModelUnavailableError as exc:
            raise ParameterError(f"{at('model')}: model: {exc}") from None
        except (DataUnavailableError, DataFormatError) as exc:
            raise ParameterError(f"{where}: {exc}") from None
    return obj


def _non_finite(value: Any):
    """The first NaN or infinite float in ``value`` (a number or a list of them), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)):
        for v in value:
            bad = _non_finite(v)
            if bad is not None:
                return bad
    return None


def check_fields(obj) -> None:
    """The type and finiteness checks of :func:`validate`, on a config built directly (``Config(**kw).check()``):
    a ParameterError naming the first field whose value is not of its declared type, or not finite."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        try:
            _check(value, hints[f.name])
        except TypeError:
            raise ParameterError(f"{f.name} must be {_type_name(hints[f.name])}, got {value!r} "
                                 f"({type(value).__name__})") from None
        bad = _non_finite(value)
        if bad is not None:
            raise ParameterError(f"{f.name} must be finite, got {bad!r}")


def _yaml_hint(value: Any, tp) -> str:
    """Why a number may have arrived as a string: YAML 1.1 reads ``1e-4`` (no dot in the mantissa) as text."""
    if isinstance(value, (list, tuple)):
        return next((h for h in (_yaml_hint(v, tp) for v in value) if h), "")
    if isinstance(value, str) and "float" in _type_name(tp):
        try:
            float(value)
        except ValueError:
            return ""
        mantissa, _, exponent = value.lower().partition("e")
        if exponent and "." not in mantissa:
            return f"; YAML reads {value} as text (a number in exponent form needs a dot): write {mantissa}.0e{exponent}"
        return "; a number in quotes is text: write it without quotes"
    return ""


_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_PLAIN_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.?[0-9_]*([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML keeps the last one silently), and
    every scalar YAML 1.1 reads otherwise than it looks: integers with a leading zero (``010`` is octal 8), in base
    2/8/16 or base 60 (``1:30`` is 90), and booleans spelled yes/no/on/off/y/n (``no`` is False)."""

    def construct_yaml_int(self, node):
        if not _PLAIN_INT.fullmatch(node.value.replace("_", "")) or node.value.lstrip("+-").startswith("0_"):
            value = super().construct_yaml_int(node)
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} reads as the number {value} in YAML (a leading zero is octal, a colon "
                f"base 60, 0x/0o/0b another base): write {value} if you mean it, or quote it as text", node.start_mark)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        if not _PLAIN_FLOAT.fullmatch(node.value):
            value = super().construct_yaml_float(node)
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} reads as the number {value} in YAML (a colon is base 60): write {value} if "
                "you mean it", node.start_mark)
        return super().construct_yaml_float(node)

    def construct_yaml_bool(self, node):
        if node.value.lower() not in ("true", "false"):
            value = super().construct_yaml_bool(node)
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} reads as the boolean {str(value).lower()} in YAML: write "
                f"{str(value).lower()} if you mean it, or quote it as text", node.start_mark)
        return super().construct_yaml_bool(node)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _UniqueKeyLoader.construct_yaml_float)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:bool", _UniqueKeyLoader.construct_yaml_bool)


def profile_path(profile: str) -> Path:
    """``params/<profile>.yaml``; a name that is not a plain profile name is an error (it could reach outside
    ``params/`` and ``outputs/``)."""
    problem = profile_name_problem(profile)
    if problem:
        raise ParameterError(f"unknown profile {profile!r}: {problem}")
    return params_dir() / f"{profile}.yaml"


def load_profile(profile: str) -> dict[str, dict[str, Any]]:
    """``{study: overrides}`` from ``params/<profile>.yaml``."""
    path = profile_path(profile)
    if not path.exists():
        known = sorted(p.stem for p in params_dir().glob("*.yaml"))
        raise ParameterError(f"unknown profile {profile!r}: {path.name} not found in params/ (known: {', '.join(known)})")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except UnicodeDecodeError as exc:
        raise ParameterError(f"params/{path.name} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ParameterError(f"params/{path.name}{at}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) or v is None for v in data.values()):
        odd = [k for k, v in data.items() if not (isinstance(v, dict) or v is None)] if isinstance(data, dict) else []
        which = f"; not a section: {', '.join(map(str, odd))} (a parameter that lost its indentation?)" if odd else ""
        raise ParameterError(f"params/{path.name}: expected 'study_name: {{parameter: value, ...}}' sections{which}")
    empty = [k for k, v in data.items() if v is None]
    if empty:  # `study:` with nothing under it (often lost indentation): the defaults only when written so
        raise ParameterError(f"params/{path.name}: the section(s) {', '.join(empty)} are empty: write "
                             f"'{empty[0]}: {{}}' for the study's defaults (the quick profile's), or indent its "
                             "parameters under it")
    return dict(data)


def profile_lines(profile: str) -> dict[tuple[str, str], int]:
    """``{(study, parameter): line number}`` of every parameter in ``params/<profile>.yaml`` (for messages)."""
    try:
        root = yaml.compose(profile_path(profile).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    out = {}
    if isinstance(root, yaml.MappingNode):
        for study_key, section in root.value:
            if isinstance(section, yaml.MappingNode):
                for key, _ in section.value:
                    out[(str(study_key.value), str(key.value))] = key.start_mark.line + 1
    return out


def as_dict(obj) -> dict[str, Any]:
    return dataclasses.asdict(obj)


# The first line of the cell papermill injects after the notebook's ``parameters`` cell (its default comment).
_INJECTED_COMMENT = "# Parameters"
# Where a study parameter's value came from, as the notebook prints it (:func:`notebook_config`).
SOURCES = {
    "explicit": "explicit (papermill -p / -y, a top-level key of a -f file, or the batch runner)",
    "section": "the file's section for this study (papermill -f params/<profile>.yaml)",
    "default": "the notebook's parameters cell (the defaults)",
}


def _executed_cells(namespace: dict[str, Any]) -> dict[int, str]:
    """``{execution number: source}`` of the cells this kernel ran (IPython's ``_i<N>`` variables; none outside
    IPython)."""
    return {int(k[2:]): v for k, v in namespace.items() if re.fullmatch(r"_i[0-9]+", k) and isinstance(v, str)}


def _assigned_names(source: str) -> list[str] | None:
    """The names a cell of assignments only (``name = value`` / ``name: type = value``) assigns, in order; None for
    any other cell (imports, calls: not a parameters cell)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython syntax (magics): not a parameters cell
        return None
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names += [t.id for t in node.targets]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return None
    return names


def _is_injected(source: str) -> bool:
    lines = source.strip().splitlines()
    return bool(lines) and lines[0].strip() == _INJECTED_COMMENT


def _parameter_origins(namespace: dict[str, Any], before: set[str]) -> tuple[dict[str, str], bool] | None:
    """``({name: "explicit" | "default"}, True)`` for every name the cells after the notebook's first cell assigned:
    "default" when only the first of them (the ``parameters`` cell) assigned it, "explicit" when a later one did
    (papermill's injected cell, or a cell of the user's own). None when the kernel keeps no input history.

    Raises ParameterError when a cell papermill injected ran BEFORE the cell that overwrites its values: the
    notebook's ``parameters`` tag is lost (papermill then injects at the very top) or on the wrong cell."""
    cells = _executed_cells(namespace)
    first = max((n for n in cells if f"_i{n}" in before), default=None)
    if first is None:
        return None
    current = max(cells)
    window = [n for n in sorted(cells) if first < n < current]
    origins: dict[str, str] = {}
    injected_by: dict[str, int] = {}
    seen_own = False
    for n in ([first - 1] if first - 1 in cells else []) + window:
        names = _assigned_names(cells[n])
        if names is None:
            continue
        injected = _is_injected(cells[n])
        for name in names:
            if not injected and name in injected_by:
                raise ParameterError(
                    f"notebook parameters: papermill injected {name!r} (and the other parameters) BEFORE the "
                    f"notebook's parameters cell, which then set it back to its default: the parameters cell has "
                    f"lost its 'parameters' tag (papermill warned \"Input notebook does not contain a cell with tag "
                    f"'parameters'\") or the tag is on another cell. Tag the cell of 'name: type = value' lines "
                    f"(and only it) 'parameters' again (JupyterLab: the property inspector, cell tags); nothing was "
                    f"computed")
            if injected:
                injected_by[name] = n
        if n == first - 1:
            continue  # looked at only for a misplaced injection
        for name in names:
            origins[name] = "explicit" if (injected or seen_own) else "default"
        seen_own = seen_own or not injected
    return origins, True


def parameter_sources(namespace: dict[str, Any], before: set[str],
                      skip: tuple[str, ...] = ("profile", "executor", "ray_address"),
                      study: str | None = None) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """``(parameters, sources, section)``: the study parameters a notebook received, where each came from
    (a key of :data:`SOURCES`; a parameter not in ``parameters`` is the study's default), and the file section
    that was applied (``{}`` when none).

    ``before``: the notebook's globals before its parameters cell (its first cell's). ``skip``: where outputs go and
    how cells are executed, which change no result (not study parameters). Keys that papermill injected but the
    notebook does not declare (papermill only warns) are kept: :func:`validate` rejects them, naming them.

    ``study``: the notebook's study. A profile file given to papermill as it is
    (``papermill notebooks/01_random_pruning.ipynb out.ipynb -f params/smoke.yaml -p profile smoke``) injects one
    dict per study: the notebook's own study's section is applied over the parameters cell, the others are
    dropped. Explicit values win over the section, as papermill users expect: ``-p train_size 48`` (or ``-y``, or a
    top-level key of a ``-f`` file) beats the section's ``train_size``. Which values are explicit is read from the
    kernel's input history (the cells run after the parameters cell); without one (outside IPython), a top-level
    value that differs from the study's default counts as explicit."""
    found = _parameter_origins(namespace, before)
    if found is None:  # no input history: every name defined since the first cell
        names = set(namespace) - set(before)
        origins = None
    else:
        origins, _ = found
        names = set(origins)
    names -= set(skip)
    params = {k: namespace[k] for k in sorted(names) if k in namespace and not k.startswith("_")
              and _is_plain_data(namespace[k])}
    section: dict[str, Any] = {}
    if study is not None:
        from headprune_utils.studies import NAMES, get_study

        sections = {k: params.pop(k) for k in list(params) if k in NAMES and isinstance(params[k], dict)}
        section = dict(sections.get(study, {}))
        if origins is None:  # no history: what differs from the study's default was set on purpose
            defaults = _defaults(get_study(study).Config)
            origins = {k: "explicit" if k not in defaults or params[k] != defaults[k] else "default" for k in params}
        explicit = {k for k in params if origins.get(k) == "explicit"}
        params.update({k: v for k, v in section.items() if k not in explicit})
    elif origins is None:
        origins = {k: "explicit" for k in params}
    sources = {k: ("section" if k in section and origins.get(k) != "explicit" else origins.get(k, "default"))
               for k in params}
    return params, sources, section


def notebook_parameters(namespace: dict[str, Any], before: set[str],
                        skip: tuple[str, ...] = ("profile", "executor", "ray_address"),
                        study: str | None = None) -> dict[str, Any]:
    """The parameters a notebook received (see :func:`parameter_sources`): its parameters cell, overlaid with the
    file's section for ``study``, overlaid with the explicit values."""
    return parameter_sources(namespace, before, skip, study)[0]


def _defaults(cls) -> dict[str, Any]:
    return {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
            for f in dataclasses.fields(cls)}


def describe_sources(cfg, sources: dict[str, str], section: dict[str, Any], study: str,
                     ignored: list[str] | tuple[str, ...] = ()) -> str:
    """Which value came from where, in a few lines: the explicit ones and the section's by name and value (an
    explicit value that replaced the section's says so), the defaults counted."""
    values = as_dict(cfg)
    by: dict[str, list[str]] = {k: [] for k in SOURCES}
    for name in values:
        by[sources.get(name, "default")].append(name)
    lines = [f"parameters of {study}:"]
    for kind in ("explicit", "section"):
        if by[kind]:
            shown = []
            for k in by[kind]:
                over = f" (over the section's {section[k]!r})" if kind == "explicit" and k in section \
                    and section[k] != values[k] else ""
                shown.append(f"{k}={values[k]!r}{over}")
            lines.append(f"  {SOURCES[kind]}: {', '.join(shown)}")
    if by["default"]:
        lines.append(f"  {SOURCES['default']}: {len(by['default'])} others")
    if ignored:
        lines.append(f"  the file's sections for other studies, ignored: {', '.join(ignored)}")
    return "\n".join(lines)


def quiet_loading_bars() -> None:
    """No "Loading weights" / download bars in a notebook's outputs (they freeze at 0% there): the model loading
    bars of transformers and the hub are off unless ``HF_HUB_DISABLE_PROGRESS_BARS`` says otherwise; worker
    processes (the process pool, Ray) inherit the variable."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"].strip().lower() in ("0", "false", "no", "off", ""):
        return
    import huggingface_hub.utils
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()


def notebook_config(study, namespace: dict[str, Any], before: set[str], where: str = "notebook parameters"):
    """A study notebook's validated parameters (``study``: its :class:`~headprune_utils.studies.base.Study`):
    :func:`parameter_sources` then :func:`validate`; prints once where each value came from (the file's section,
    an explicit parameter, the default), and turns off the loading bars (:func:`quiet_loading_bars`)."""
    params, sources, section = parameter_sources(namespace, before, study=study.name)
    cfg = validate(study.Config, params, where=where)
    from headprune_utils.studies import NAMES

    ignored = [k for k in NAMES if k != study.name and isinstance(namespace.get(k), dict) and k not in before]
    print(describe_sources(cfg, sources, section, study.name, ignored))
    quiet_loading_bars()
    return cfg


def _is_plain_data(value: Any) -> bool:
    """Parameters are plain data; imports, functions and the notebook's own objects (re-run in one kernel) are not."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain_data(v) for k, v in value.items())
    return False


# Parameters that change nothing a run writes (display only): two runs differing only here share a folder.
_DISPLAY_ONLY = ("progress",)


def output_profile(study, cfg, profile: str) -> str:
    """The outputs folder name (``outputs/<study>/<name>/``) for a run of ``study`` with ``cfg`` under ``profile``:
    ``profile`` itself when ``params/<profile>.yaml`` exists and ``cfg`` IS that profile's configuration of the
    study (the batch runner's case), or when no such profile file exists (a name the caller chose; ``run_study``
    refuses such a name for the project's own studies writing into the outputs root, before any work);
    otherwise ``custom-<hash of the parameters>``, so a notebook run with changed parameters never overwrites a
    profile's (committed) results. The choice is printed."""
    if not profile_path(profile).exists():
        return profile
    # the profile's configuration: the defaults overlaid with its overrides (not validated again: a hub model of
    # the paper profile need not be reachable to tell that these parameters are not its)
    theirs = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
              for f in dataclasses.fields(study.Config)}
    theirs.update(load_profile(profile).get(study.name, {}))
    mine = as_dict(cfg)
    for k in _DISPLAY_ONLY:
        mine.pop(k, None)
        theirs.pop(k, None)
    if mine == theirs:
        return profile
    changed = sorted(k for k in mine if mine[k] != theirs.get(k))
    name = f"custom-{fingerprint(mine)[:8]}"
    print(f"These parameters are not profile {profile!r}'s (changed: {', '.join(changed)}): the outputs go to "
          f"outputs/{study.name}/{name}/, and outputs/{study.name}/{profile}/ is left untouched.")
    return name

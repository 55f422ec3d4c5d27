"""Parallel corpora for the machine-translation track: lists of (source, target) sentences.

Corpora (:data:`CORPORA`), each with three splits, ``"train"`` (training), ``"dev"`` (model selection:
early stopping, tuning) and ``"test"`` (reported BLEU):

``multi30k``  Multi30k task 1, English-German image descriptions (Elliott et al. 2016); 29,000 / 1,014 / 1,000.
              train = ``train``, dev = ``val``, test = ``test_2016_flickr`` (the standard Multi30k test set).
              Local: ``<root>/multi30k/task1/raw/{train,val,test_2016_flickr}.{en,de}.gz``;
              hub: ``bentrevett/multi30k`` (the same three splits).
``newstest-en-ru``  English-Russian from WMT news test sets and Tatoeba, local only (``<root>/wmt_newstest_en_ru``,
              ``<root>/tatoeba_en_ru``): the CPU-scale stand-in for Voita et al.'s WMT en-ru.
              train = newstest2012-2018 (20,823 pairs) + Tatoeba test v2021-08-07 (19,425 short pairs) = 40,248;
              dev = newstest2019 (1,997); test = newstest2020 (2,002). The dev and test sets are the two most recent
              news sets, so nothing of them is seen in training, and they are in-domain for news; Tatoeba only
              adds short everyday sentences to the small training set.
``wmt14-en-de``, ``wmt14-en-ru``  The paper profile (Budhraja et al.: WMT'14 EN-DE and EN-RU, BLEU on newstest2014),
              hub only: ``wmt/wmt14`` configs ``de-en`` / ``ru-en``; train = its train split (4.5M / 1.5M pairs),
              dev = newstest2013 (``validation``), test = newstest2014 (``test``).

Local data come from ``data_dir`` or ``$HEADPRUNE_DATA_DIR`` (as for GLUE, ``data.resolve_data_dir``); the hub
is used when the local files are absent, unless offline (``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE``), and
:class:`~headprune_utils.tasks.data.DataUnavailableError` says what was tried. Texts are returned as they are in
the files (untokenised, stripped of the line break): BLEU is computed on such text.

The direction is English to the other language by default (``direction="en-de"``); ``"de-en"`` swaps sides.
"""
from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from headprune_utils.store.results import fingerprint
from headprune_utils.tasks.data import (
    ENV_DATA_DIR,
    DataFormatError,
    DataUnavailableError,
    file_fingerprint,
    hub_blocked,
    resolve_data_dir,
    subset_indices,
)

__all__ = ["CORPORA", "SPLITS", "CorpusSpec", "ParallelData", "load_parallel", "subset_pairs", "local_available"]

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class CorpusSpec:
    """Where one corpus's splits live.

    ``local``: split -> list of ``(folder, file stem, language suffixes)`` read and concatenated in order; a
    file named ``<stem>.<suffix>`` (or ``.gz``) under ``<root>/<folder>``. Empty: no local copy.
    ``hub``: ``(dataset id, config or None, {split: hub split}, layout)``; layout ``"columns"`` (one column per
    language) or ``"translation"`` (one dict column ``translation``). ``None``: no hub copy.
    """

    name: str
    langs: tuple[str, str]  # (English, the other language): the default direction
    local: dict[str, list[tuple[str, str, tuple[str, str]]]] = field(default_factory=dict)
    hub: tuple[str, str | None, dict[str, str], str] | None = None
    note: str = ""


_NEWSTEST = "wmt_newstest_en_ru"
_TATOEBA = "tatoeba_en_ru"
_M30K = "multi30k/task1/raw"

CORPORA: dict[str, CorpusSpec] = {
    "multi30k": CorpusSpec(
        "multi30k", ("en", "de"),
        local={"train": [(_M30K, "train", ("en", "de"))], "dev": [(_M30K, "val", ("en", "de"))],
               "test": [(_M30K, "test_2016_flickr", ("en", "de"))]},
        hub=("bentrevett/multi30k", None, {"train": "train", "dev": "validation", "test": "test"}, "columns"),
    ),
    "newstest-en-ru": CorpusSpec(
        "newstest-en-ru", ("en", "ru"),
        local={"train": [(_NEWSTEST, f"newstest{y}", ("en", "ru")) for y in range(2012, 2019)]
                        + [(_TATOEBA, "tatoeba-test-v2021-08-07", ("eng", "rus"))],
               "dev": [(_NEWSTEST, "newstest2019", ("en", "ru"))],
               "test": [(_NEWSTEST, "newstest2020", ("en", "ru"))]},
        note="local only (shared/data); for WMT'14 en-ru from the hub use 'wmt14-en-ru'",
    ),
    "wmt14-en-de": CorpusSpec(
        "wmt14-en-de", ("en", "de"),
        hub=("wmt/wmt14", "de-en", {"train": "train", "dev": "validation", "test": "test"}, "translation"),
        note="hub only (4.5M training pairs: a GPU-scale corpus)",
    ),
    "wmt14-en-ru": CorpusSpec(
        "wmt14-en-ru", ("en", "ru"),
        hub=("wmt/wmt14", "ru-en", {"train": "train", "dev": "validation", "test": "test"}, "translation"),
        note="hub only (1.5M training pairs: a GPU-scale corpus)",
    ),
}


@dataclass
class ParallelData:
    """One split of a parallel corpus in one direction: ``src[i]`` translates to ``tgt[i]``.

    ``source``: provenance without absolute paths, e.g. ``"local:multi30k/task1/raw/val.{en,de}.gz"``.
    """

    corpus: str
    split: str
    src_lang: str
    tgt_lang: str
    src: list[str]
    tgt: list[str]
    source: str

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise ValueError(f"{self.corpus}/{self.split}: {len(self.src)} source but {len(self.tgt)} target sentences")

    def __len__(self) -> int:
        return len(self.src)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.src, self.tgt))


def get_corpus(name: str) -> CorpusSpec:
    if name not in CORPORA:
        raise ValueError(f"unknown parallel corpus {name!r}; choose one of {sorted(CORPORA)}")
    return CORPORA[name]


def _direction(spec: CorpusSpec, direction: str | None) -> tuple[str, str]:
    if direction is None:
        return spec.langs
    allowed = {f"{a}-{b}": (a, b) for a, b in (spec.langs, spec.langs[::-1])}
    if direction not in allowed:
        raise ValueError(f"{spec.name}: direction must be one of {sorted(allowed)}, got {direction!r}")
    return allowed[direction]


def _file(root: Path, folder: str, stem: str, suffix: str) -> Path:
    plain = root / folder / f"{stem}.{suffix}"
    return plain if plain.is_file() else root / folder / f"{stem}.{suffix}.gz"


def _read_lines(path: Path) -> list[str]:
    """The file's lines (gzip when it ends in .gz); a file that is not UTF-8 text, or a broken gzip, is a
    DataFormatError naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="\n") as f:
            return [line.rstrip("\r\n") for line in f]
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataFormatError(f"{path} is not a complete gzip file ({type(exc).__name__}: {exc})") from None



def _local_files(spec: CorpusSpec, split: str, root: Path) -> list[tuple[Path, Path]]:
    return [(_file(root, folder, stem, a), _file(root, folder, stem, b))
            for folder, stem, (a, b) in spec.local.get(split, [])]


def local_available(name: str, split: str, data_dir: str | os.PathLike | None = None) -> bool:
    """Whether every local file of ``name``/``split`` exists (no reading, no network)."""
    spec = get_corpus(name)
    root = resolve_data_dir(data_dir)
    files = _local_files(spec, split, root) if root is not None else []
    return bool(files) and all(a.is_file() and b.is_file() for a, b in files)


def corpus_fingerprint(name: str, data_dir: str | os.PathLike | None = None) -> str:
    """One content hash over every local file of every split of ``name`` (``data.file_fingerprint`` each)."""
    spec = get_corpus(name)
    root = resolve_data_dir(data_dir)
    files = {} if root is None else {f"{split}:{p.name}": file_fingerprint(p) for split in ("train", "dev", "test")
                                      for pair in _local_files(spec, split, root) for p in pair if p.is_file()}
    return fingerprint(files)


def _load_local(spec: CorpusSpec, split: str, root: Path) -> tuple[list[str], list[str], str]:
    """English side first, the other language second."""
    en: list[str] = []
    other: list[str] = []
    names = []
    for path_a, path_b in _local_files(spec, split, root):
        a, b = _read_lines(path_a), _read_lines(path_b)
        if len(a) != len(b):
            raise DataUnavailableError(f"{path_a.name} has {len(a)} lines but {path_b.name} has {len(b)}: not aligned")
        if not a:
            raise DataFormatError(f"{path_a} and {path_b} hold no sentence pairs")
        en += a
        other += b
        names.append(path_a.relative_to(root).as_posix())
    return en, other, "local:" + "+".join(names)


def _load_hub(spec: CorpusSpec, split: str) -> tuple[list[str], list[str], str]:
    """From the hub; every exception propagates (the caller wraps it)."""
    from datasets import load_dataset  # lazily: slow, and only needed here

    dataset, config, splits, layout = spec.hub
    ds = load_dataset(dataset, config, split=splits[split])
    en_lang, other_lang = spec.langs
    if layout == "columns":
        en, other = list(ds[en_lang]), list(ds[other_lang])
    else:
        rows = list(ds["translation"])
        en, other = [r[en_lang] for r in rows], [r[other_lang] for r in rows]
    return en, other, f"hub:{dataset}/{config or 'default'}/{splits[split]}"


def load_parallel(
    name: str,
    split: str,
    data_dir: str | os.PathLike | None = None,
    *,
    direction: str | None = None,
    allow_hub: bool = True,
) -> ParallelData:
    """One split of a parallel corpus (see the module docstring for the splits): local files first, then the hub.

    Args:
        name: a key of :data:`CORPORA`.
        split: ``"train"``, ``"dev"`` or ``"test"``.
        data_dir: local data root; default ``$HEADPRUNE_DATA_DIR``.
        direction: ``"en-de"``-style; default English to the other language.
        allow_hub: whether to fall back to the hub (never tried while offline mode is on).

    Raises:
        ValueError: unknown corpus, split or direction.
        DataUnavailableError: neither source has the data; the message says what was tried and how to fix it.
    """
    spec = get_corpus(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    src_lang, tgt_lang = _direction(spec, direction)

    root = resolve_data_dir(data_dir)
    loaded = None
    if not spec.local:
        local_note = "no local copy of this corpus"
    elif root is None:
        local_note = f"no local data folder given (data_dir=None and {ENV_DATA_DIR} unset)"
    else:
        missing = [p for pair in _local_files(spec, split, root) for p in pair if not p.is_file()]
        if missing:
            local_note = "local file(s) not found: " + ", ".join(repr(str(p)) for p in missing[:3])
        else:
            loaded = _load_local(spec, split, root)

    if loaded is None:
        blocked = hub_blocked() if spec.hub is not None and allow_hub else None
        if spec.hub is None:
            hub_note = "no hub copy of this corpus"
        elif not allow_hub:
            hub_note = f"hub dataset {spec.hub[0]} not tried (allow_hub=False)"
        elif blocked is not None:
            hub_note = f"hub dataset {spec.hub[0]} not tried: {blocked}"
        else:
            try:
                loaded = _load_hub(spec, split)
            except Exception as exc:  # any hub failure is reported the same way
                hub_note = f"hub dataset {spec.hub[0]} failed: {type(exc).__name__}: {exc}"
    if loaded is None:
        wanted = ", ".join(f"{folder}/{stem}.{{{a},{b}}}[.gz]" for folder, stem, (a, b) in spec.local.get(split, []))
        fixes = []
        if spec.local:
            fixes.append(f"set {ENV_DATA_DIR} or pass data_dir= to a folder holding {wanted}")
        if spec.hub is not None:
            fixes.append("go online (unset HF_DATASETS_OFFLINE/HF_HUB_OFFLINE, allow_hub=True) to download "
                         f"{spec.hub[0]} from the hub")
        raise DataUnavailableError(
            f"parallel corpus {name!r} split {split!r} is unavailable: {local_note}; {hub_note}. "
            f"To fix: {' or '.join(fixes)}." + (f" ({spec.note})" if spec.note else "")
        )
    en, other, source = loaded
    src, tgt = (en, other) if src_lang == spec.langs[0] else (other, en)
    return ParallelData(name, split, src_lang, tgt_lang, src, tgt, source)


def subset_pairs(data: ParallelData, size: int | None, seed: int) -> ParallelData:
    """Deterministic random subset of ``size`` pairs, in the original order (the rows ``data.subset`` takes for
    GLUE: ``data.subset_indices``). ``size`` None or >= ``len(data)`` returns a copy of all pairs."""
    idx = subset_indices(len(data), size, seed)
    return ParallelData(data.corpus, data.split, data.src_lang, data.tgt_lang,
                        [data.src[i] for i in idx], [data.tgt[i] for i in idx], data.source)

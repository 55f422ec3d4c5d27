"""Bad data files are caught at load, named, with the first bad line; content hashes key the results."""
from __future__ import annotations

import pytest

from headprune_utils.tasks import data


def write(root, task, split, lines, raw: bytes | None = None):
    d = root / "glue" / task
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{split}.tsv"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("\n".join(lines) + "\n")
    return path


def good_rows(n):
    return [f"a fine sentence number {i}\t{i % 2}" for i in range(n)]


def test_many_malformed_rows_stop_the_load_naming_file_and_first_bad_line(tmp_path):
    rows = good_rows(200)
    rows[7] = "a sentence with a bad label\tpositive"
    for i in range(10, 30):
        rows[i] = "no label at all"
    write(tmp_path, "SST-2", "dev", ["sentence\tlabel", *rows])
    with pytest.raises(data.DataFormatError) as info:
        data.load_task("SST-2", "dev", tmp_path, allow_hub=False)
    msg = str(info.value)
    assert "glue/SST-2/dev.tsv" in msg and "21 of 200 rows (10.5%)" in msg
    assert "first bad line 9" in msg and "'positive' is not a valid SST-2 label" in msg


def test_a_few_malformed_rows_are_skipped_counted_and_reported(tmp_path):
    rows = good_rows(300)
    rows[5] = "only one column"
    write(tmp_path, "SST-2", "train", ["sentence\tlabel", *rows])
    with pytest.warns(data.MalformedRowsWarning, match=r"1 of 300 rows malformed and skipped; first bad line 7"):
        d = data.load_task("SST-2", "train", tmp_path, allow_hub=False)
    assert len(d) == 299 and d.n_skipped == 1


@pytest.mark.parametrize("raw, match", [(b"sentence\tlabel\n\xff\xfe\x00\x01garbage\t1\n", "is not UTF-8 text"),
                                        (b"sentence\tlabel\n", "has no rows"),
                                        (b"sentence\tlabel\nx\ty\nz\tw\n", r"2 of 2 rows \(100.0%\)")])
def test_binary_empty_and_all_bad_files_are_named(tmp_path, raw, match):
    path = write(tmp_path, "SST-2", "dev", [], raw=raw)
    with pytest.raises(data.DataFormatError, match=match) as info:
        data.load_task("SST-2", "dev", tmp_path, allow_hub=False)
    assert "SST-2" in str(info.value) and ("dev.tsv" in str(info.value) or str(path) in str(info.value))


def test_content_fingerprint_follows_the_bytes(tmp_path):
    import os

    path = write(tmp_path, "SST-2", "dev", ["sentence\tlabel", *good_rows(5)])
    a = data.split_fingerprint("SST-2", "dev", tmp_path)
    assert a == data.split_fingerprint("SST-2", "dev", tmp_path) and len(a) == 16
    path.write_text(path.read_text().replace("\t1", "\t0"))
    os.utime(path, ns=(1, 1))  # a different modification time too
    assert data.split_fingerprint("SST-2", "dev", tmp_path) != a
    assert data.split_fingerprint("CoLA", "dev", tmp_path) == "hub", "no local file: the hub's copy"

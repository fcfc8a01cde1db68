import base64
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rlcs.data import DatasetError, Item, Trajectory, load_items, write_jsonl


def png_bytes(color="red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), color).save(buf, format="PNG")
    return buf.getvalue()


def write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def dataset_dir(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(png_bytes())
    return tmp_path


def test_jsonl_with_relative_and_base64_images(dataset_dir):
    b64 = base64.b64encode(png_bytes("blue")).decode()
    p = write_lines(
        dataset_dir / "train.jsonl",
        [
            {
                "id": "m1",
                "domain": "math",
                "prompt": "2+2?",
                "images": ["img/a.png"],
                "answer": "4",
            },
            {"id": 7, "domain": "ocr", "prompt": "read", "images": [b64], "answer": "AB"},
            {
                "id": "g1",
                "domain": "grounding",
                "prompt": "box",
                "images": [f"data:image/png;base64,{b64}"],
                "answer": [[1, 2, 30, 40]],
                "difficulty": 0.25,
                "meta": {"src": "x"},
            },
        ],
    )
    items = load_items(p)
    assert [i.id for i in items] == ["m1", "7", "g1"]
    assert items[2].answer == [[1, 2, 30, 40]] and items[2].difficulty == 0.25


def test_parquet_round_trip(dataset_dir):
    rows = [{"id": f"q{i}", "domain": "vqa", "prompt": f"p{i}", "answer": str(i)} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), dataset_dir / "d.parquet")
    items = load_items(dataset_dir / "d.parquet")
    assert [i.answer for i in items] == ["0", "1", "2"]


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"domain": "math", "prompt": "x"}, "missing 'id'"),
        ({"id": "", "domain": "math", "prompt": "x"}, "missing 'id'"),
        (
            {"id": " \t", "domain": "math", "prompt": "x"},
            "id: only whitespace (' \\t'); give each item a unique id that is not blank",
        ),
        ({"id": "\n", "domain": "math", "prompt": "x"}, "id: only whitespace ('\\n')"),
        (
            {"id": "a\u0000", "domain": "math", "prompt": "x"},
            "id: holds a NUL character ('a\\x00'); give each item an id without one",
        ),
        ({"id": "a", "domain": "poetry", "prompt": "x"}, "unknown domain 'poetry'"),
        ({"id": "a", "domain": "math"}, "prompt: Field required"),
        ({"id": "a", "domain": "math", "prompt": "x", "colour": 1}, "colour: unknown field"),
        (
            {"id": "a", "domain": "math", "prompt": "x", "images": ["img/missing.png"]},
            "image not found",
        ),
        (
            {"id": "a", "domain": "math", "prompt": "x", "images": ["data:image/png;base64,!!!"]},
            "invalid base64",
        ),
        ("{not json", "invalid JSON"),
        ("[1, 2]", "a row must be a JSON object"),
    ],
)
def test_bad_line_names_file_line_and_reason(dataset_dir, row, reason):
    good = {"id": "ok", "domain": "math", "prompt": "1+1", "answer": "2"}
    p = write_lines(dataset_dir / "bad.jsonl", [good, row])
    with pytest.raises(DatasetError) as e:
        load_items(p)
    assert str(e.value).startswith(f"{p}:2: ")
    assert reason in str(e.value)
    assert e.value.line == 2


def test_unreadable_image_file(dataset_dir):
    (dataset_dir / "img" / "broken.png").write_bytes(b"not an image at all")
    p = write_lines(
        dataset_dir / "d.jsonl",
        [{"id": "a", "domain": "ocr", "prompt": "x", "images": ["img/broken.png"]}],
    )
    with pytest.raises(DatasetError, match=r"d\.jsonl:1: image 'img/broken.png': unreadable image"):
        load_items(p)


def test_duplicate_ids_across_files(dataset_dir):
    a = write_lines(dataset_dir / "a.jsonl", [{"id": "x", "domain": "math", "prompt": "1"}])
    b = write_lines(
        dataset_dir / "b.jsonl",
        [{"id": "y", "domain": "math", "prompt": "2"}, {"id": "x", "domain": "vqa", "prompt": "3"}],
    )
    with pytest.raises(DatasetError) as e:
        load_items([a, b])
    assert f"{b}:2: duplicate id 'x' (first at {a}:1)" == str(e.value)


def test_registered_domains_extend_the_known_set(dataset_dir):
    p = write_lines(dataset_dir / "d.jsonl", [{"id": "a", "domain": "code", "prompt": "x"}])
    assert load_items(p, domains={"code"})[0].domain == "code"


def test_missing_file_and_unsupported_type(tmp_path):
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_items(tmp_path / "none.jsonl")
    (tmp_path / "d.csv").write_text("id\n1\n")
    with pytest.raises(DatasetError, match="unsupported file type '.csv'"):
        load_items(tmp_path / "d.csv")


def test_write_jsonl_round_trip(tmp_path):
    items = [
        Item(id="a", domain="gui", prompt="click ok", answer={"action": "click", "point": [1, 2]})
    ]
    assert load_items(write_jsonl(items, tmp_path / "o.jsonl")) == items


def test_trajectory_serialises():
    t = Trajectory(
        item_id="a",
        response="<think></think>",
        token_ids=[1, 2],
        logprobs=[-0.1, -0.2],
        finish_reason="stop",
        forced_answer=True,
    )
    assert t.to_dict()["forced_answer"] is True and t.to_dict()["reward"] is None


def test_a_line_that_is_not_utf8_names_file_and_line(dataset_dir):
    from rlcs.data import read_rows

    p = dataset_dir / "bin.jsonl"
    p.write_bytes(b'{"id": "ok", "domain": "math", "prompt": "x"}\n\xff\xfe\n')
    with pytest.raises(DatasetError, match=rf"^{p}:2: not UTF-8 text"):
        load_items(p)
    # supervised rows are read the same way: a row that is not an object is named too
    q = dataset_dir / "sft.jsonl"
    q.write_text('{"prompt": "a", "response": "b"}\n[1, 2]\n')
    with pytest.raises(DatasetError, match=rf"^{q}:2: a row must be a JSON object"):
        list(read_rows(q))


def test_an_output_file_is_checked_before_the_work(tmp_path):
    from rlcs.data import check_output_file

    assert check_output_file(tmp_path / "new" / "out.jsonl").parent.is_dir()
    with pytest.raises(ValueError, match="is a directory; give a file name"):
        check_output_file(tmp_path)
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="afile is a file, not a folder"):
        check_output_file(tmp_path / "afile" / "out.jsonl")
    assert check_output_file(tmp_path / "afile") == tmp_path / "afile"  # replaced by default
    with pytest.raises(ValueError, match=r"--out .*afile exists; give another file, or --ov"):
        check_output_file(tmp_path / "afile", overwrite=False)


def test_inline_images_carries_the_files_bytes(tmp_path, shapes_image):
    import numpy as np

    from rlcs.images import decode_image, inline_images

    shapes_image.save(tmp_path / "a.png")
    shapes_image.save(tmp_path / "b.jpg", quality=90)
    b64 = "data:image/png;base64," + base64.b64encode((tmp_path / "a.png").read_bytes()).decode()
    item = Item(id="x", domain="grounding", prompt="?",
                images=[str(tmp_path / "a.png"), "b.jpg", b64])  # fmt: skip
    out = inline_images(item, base_dir=tmp_path)
    assert out.images[0] == b64  # an absolute path; the bytes as they are
    assert out.images[1].startswith("data:image/jpeg;base64,")  # relative to base_dir
    assert out.images[2] is b64  # already inline
    for ref, before in zip(out.images, item.images, strict=True):
        got = np.asarray(decode_image(ref, Path("/")))
        assert (got == np.asarray(decode_image(before, tmp_path))).all()
    assert item.images[0] == str(tmp_path / "a.png")  # the item itself is unchanged
    # a path that is no file is left for the worker, whose decode_image names it
    missing = Item(id="y", domain="ocr", prompt="?", images=[str(tmp_path / "gone.png")])
    assert inline_images(missing).images == missing.images
    assert inline_images(Item(id="z", domain="ocr", prompt="?")).images == []


@pytest.mark.parametrize(
    "row, reason",
    [
        ('{"id": "a", "domain": "math", "id": "b", "prompt": "x"}', "key 'id' given twice"),
        ('{"id": "a", "domain": "math", "prompt": "x", "meta": {"k": 1, "k": 2}}',
         "key 'k' given twice in one object"),
        ({"id": "a", "domain": "math", "prompt": "x", "difficulty": 1.5},
         "difficulty: a pass rate must be in [0, 1], got 1.5"),
        ('{"id": "a", "domain": "math", "prompt": "x", "difficulty": NaN}',
         "difficulty: a pass rate must be in [0, 1], got nan"),
        ({"id": "a", "domain": "math", "prompt": "x", "difficulty": True},
         "difficulty: must be a pass rate in [0, 1] or a tier name, got True"),
        ({"id": "a", "domain": "math", "prompt": " "},
         "prompt: empty, and the item has no images: nothing to answer"),
        ({"id": "a", "domain": "ocr", "prompt": "x", "image": ["img/a.png"]},
         "image: unknown field (did you mean 'images'?)"),
        ({"id": "a", "domain": "ocr", "prompt": "x", "images": ["https://example.com/a.png"]},
         "a URL; give a path relative to the dataset file, or base64"),
        ({"id": "a", "domain": "ocr", "prompt": "x", "images": [""]},
         "image '': an empty image reference"),
        ({"id": "a", "domain": "ocr", "prompt": "x", "images": ["img"]},
         "image 'img': a directory, not an image"),
    ],
)  # fmt: skip
def test_rows_that_would_lose_or_bend_data_are_named(dataset_dir, row, reason):
    """A repeated key (json keeps the last), a difficulty the sampler would refuse only once
    Ray is up, an empty prompt, a misspelt field and image references that are no file."""
    good = {"id": "ok", "domain": "math", "prompt": "1+1", "answer": "2"}
    p = write_lines(dataset_dir / "bad.jsonl", [good, row])
    with pytest.raises(DatasetError) as e:
        load_items(p)
    assert str(e.value).startswith(f"{p}:2: ") and reason in str(e.value)


def test_bom_wrapped_base64_and_image_only_prompts_load(dataset_dir):
    wrapped = base64.encodebytes(png_bytes("green")).decode()  # 76 columns, as `base64` writes
    assert "\n" in wrapped
    rows = [{"id": "a", "domain": "ocr", "prompt": "", "images": [wrapped]},
            {"id": "b", "domain": "ocr", "prompt": "x", "images": ["data:image/png;base64," + wrapped]}]  # fmt: skip
    p = dataset_dir / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    items = load_items(p)
    assert [i.id for i in items] == ["a", "b"] and items[0].images == [wrapped]


def noisy_png() -> bytes:
    """A PNG whose base64 has '+' and '/' (so its URL-safe form has '-' and '_'), and whose
    length is not a multiple of 3 (so the base64 is padded)."""
    import random

    rng = random.Random(0)
    for size in range(8, 64):
        img = Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        text = base64.b64encode(buf.getvalue()).decode()
        if "+" in text and "/" in text and text.endswith("="):
            return buf.getvalue()
    raise AssertionError("no such PNG")


def test_url_safe_base64_images_load_with_or_without_padding(dataset_dir):
    from rlcs.images import decode_image

    raw = noisy_png()
    standard = base64.b64encode(raw).decode()
    url_safe = base64.urlsafe_b64encode(raw).decode()
    unpadded = url_safe.rstrip("=")
    want = Image.open(io.BytesIO(raw)).convert("RGB").tobytes()
    for ref in (standard, url_safe, unpadded, standard.rstrip("=")):
        for form in (ref, "data:image/png;base64," + ref):
            assert decode_image(form, dataset_dir).tobytes() == want, form[:40]
    rows = [{"id": "a", "domain": "ocr", "prompt": "x", "images": [unpadded]},
            {"id": "b", "domain": "ocr", "prompt": "x", "images": ["data:image/png;base64," + url_safe]}]  # fmt: skip
    assert [i.id for i in load_items(write_lines(dataset_dir / "u.jsonl", rows))] == ["a", "b"]
    mixed = "data:image/png;base64," + standard.replace("/", "_", 1)
    with pytest.raises(ValueError, match="invalid base64 image: it mixes the standard alphabet"):
        decode_image(mixed, dataset_dir)


def test_a_json_document_is_told_apart_from_json_lines(dataset_dir):
    p = dataset_dir / "d.json"
    p.write_text(json.dumps([{"id": "a", "domain": "math", "prompt": "x"}]))
    with pytest.raises(DatasetError, match=r"d\.json:1: a row must be a JSON object \(a \.json "
                       r"file is read as JSON Lines: one object per line\)"):  # fmt: skip
        load_items(p)


def test_difficulty_tiers_are_checked_where_the_curriculums_are_given(dataset_dir):
    rows = [{"id": "a", "domain": "math", "prompt": "x", "difficulty": "hard"},
            {"id": "b", "domain": "math", "prompt": "x", "difficulty": 0.0},
            {"id": "c", "domain": "math", "prompt": "x", "difficulty": "Hard"}]  # fmt: skip
    p = write_lines(dataset_dir / "d.jsonl", rows)
    assert [i.difficulty for i in load_items(p)] == ["hard", 0.0, "Hard"]  # no tiers: any name
    with pytest.raises(DatasetError) as e:
        load_items(p, tiers=("very_hard", "hard", "medium"))
    assert str(e.value) == (f"{p}:3: difficulty: unknown tier 'Hard': give a pass rate in "
                            "[0, 1], or one of very_hard, hard, medium")  # fmt: skip


def test_parquet_rows_come_back_as_written(dataset_dir):
    """A struct column gives each row every field any row has, as nulls; a map column comes
    as pairs; image bytes are no text; pandas may add its index as a column."""
    answers = [{"action": "click", "point": [1, 2]}, {"action": "type", "text": "hi"}]
    table = pa.table({
        "id": ["a", "b"], "domain": ["gui", "gui"], "prompt": ["p", "q"], "answer": answers,
        "images": [[png_bytes()], []],
        "meta": pa.array([[("src", "x")], []], pa.map_(pa.string(), pa.string())),
        "__index_level_0__": [3, 7],
    })  # fmt: skip
    pq.write_table(table, dataset_dir / "d.parquet")
    items = load_items(dataset_dir / "d.parquet")
    assert [i.answer for i in items] == answers
    assert items[0].meta == {"src": "x"} and items[1].meta == {}
    assert items[0].images[0].startswith("data:") and items[1].images == []
    from rlcs.images import decode_image

    assert decode_image(items[0].images[0], dataset_dir).size == (16, 12)


def test_a_file_that_is_not_parquet_is_a_dataset_error(dataset_dir):
    (dataset_dir / "d.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DatasetError, match=r"d\.parquet: not a readable Parquet file"):
        load_items(dataset_dir / "d.parquet")


def truncated_png() -> bytes:
    """A PNG cut in its pixel data: its header (format, size) reads, its pixels do not."""
    import random

    buf = io.BytesIO()
    noise = random.Random(1).randbytes(64 * 64 * 3)
    Image.frombytes("RGB", (64, 64), noise).save(buf, format="PNG")
    return buf.getvalue()[: len(buf.getvalue()) // 2]


@pytest.mark.parametrize(
    "image, decode, header",
    [
        ("img/cut.png", "unreadable image", None),  # the pixels are checked only by decode
        ("img/gone.png", "image not found", "image not found"),
        ("img/text.png", "unreadable image (not an image format", "unreadable image (not an"),
        ("data:image/png;base64,!!!", "invalid base64", "invalid base64"),
    ],
)
def test_image_checks_decode_or_read_the_header_or_are_off(dataset_dir, image, decode, header):
    """A million images fully decoded at load cost an hour before the run starts: ``header``
    opens each one's header (format and size) only, ``off`` checks nothing."""
    (dataset_dir / "img" / "cut.png").write_bytes(truncated_png())
    (dataset_dir / "img" / "text.png").write_text("not an image")
    good = {"id": "ok", "domain": "ocr", "prompt": "read", "images": ["img/a.png"], "answer": "A"}
    p = write_lines(dataset_dir / "d.jsonl", [good, {**good, "id": "b", "images": [image]}])
    for how, reason in (("decode", decode), (True, decode), ("header", header)):
        if reason is None:
            assert [i.id for i in load_items(p, check_images=how)] == ["ok", "b"]
            continue
        with pytest.raises(DatasetError) as e:
            load_items(p, check_images=how)
        assert str(e.value).startswith(f"{p}:2: image {image!r}: {reason}"), str(e.value)
    for how in ("off", False):
        assert [i.id for i in load_items(p, check_images=how)] == ["ok", "b"]
    with pytest.raises(ValueError, match="check_images must be decode, header or off, got 'x'"):
        load_items(p, check_images="x")


def test_many_rows_images_are_checked_under_a_progress_bar(dataset_dir, capfd):
    rows = [{"id": f"i{k}", "domain": "ocr", "prompt": "read", "images": ["img/a.png"]}
            for k in range(1001)]  # fmt: skip
    assert (
        len(load_items(write_lines(dataset_dir / "many.jsonl", rows), check_images="header"))
        == 1001
    )
    bar = capfd.readouterr().err
    assert "checking images (header)" in bar and "1001/1001" in bar
    load_items(write_lines(dataset_dir / "few.jsonl", rows[:1000]), check_images="header")
    assert capfd.readouterr().err == ""


def test_an_image_too_large_for_pil_is_named_not_raised(dataset_dir):
    """PIL refuses an image of over 179 million pixels (a decompression bomb) with an error of
    its own, which escaped the load as a traceback."""
    import struct
    import zlib

    png = bytearray(png_bytes())
    ihdr = struct.pack(">II", 20000, 20000) + bytes(png[24:29])  # 400 million pixels
    png[16:29], png[29:33] = ihdr, struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    (dataset_dir / "img" / "huge.png").write_bytes(bytes(png))
    row = {"id": "a", "domain": "ocr", "prompt": "read", "images": ["img/huge.png"]}
    p = write_lines(dataset_dir / "huge.jsonl", [row])
    for how in ("decode", "header"):
        with pytest.raises(DatasetError) as e:
            load_items(p, check_images=how)
        assert str(e.value).startswith(
            f"{p}:1: image 'img/huge.png': unreadable image (DecompressionBombError: Image size "
            "(400000000 pixels) exceeds limit"
        )

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

    from rlcs.data import decode_image, inline_images

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

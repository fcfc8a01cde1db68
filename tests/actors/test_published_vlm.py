"""A GLM-4.1V-architecture checkpoint laid out as published (Hugging Face's processor files, no
``rlcs_processor.json``): the learner and the HF rollout engine read its image processor and
train and sample on images exactly as they do on this project's own layout of the same model.

The published checkpoint's processor class, ``Glm4vProcessor``, needs torchvision for its video
half, which has no CPU build; the checkpoint here is the tiny VLM rewritten into the published
file layout, so the two layouts hold the same weights and each test compares them.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from actors.learner import Learner
from tests.actors.learner_helpers import _config, _image, rl_batch

#: The keys of GLM-4.1V-9B-Thinking's preprocessor_config.json (sizes are the tiny model's).
PUBLISHED_KEYS = ("size", "do_rescale", "patch_size", "temporal_patch_size", "merge_size",
                  "image_mean", "image_std", "image_processor_type")  # fmt: skip


@pytest.fixture(scope="module")
def published_vlm(tiny_vlm, tmp_path_factory):
    path = tmp_path_factory.mktemp("published") / "glm-4.1v"
    shutil.copytree(tiny_vlm, path)
    (path / "rlcs_processor.json").unlink()
    pre = json.loads((path / "preprocessor_config.json").read_text())
    published = {k: pre[k] for k in PUBLISHED_KEYS} | {"processor_class": "Glm4vProcessor"}
    (path / "preprocessor_config.json").write_text(json.dumps(published, indent=2))
    (path / "processor_config.json").write_text(json.dumps({"processor_class": "Glm4vProcessor"}))
    return path


def _prompt(tok) -> str:
    content = [{"type": "image"}, {"type": "text", "text": "What colour is the box?"}]
    return tok.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )


def test_the_published_layout_gives_the_same_tokens_and_pixels(tiny_vlm, published_vlm):
    from actors.learner_model import load_processors

    tok, ours = load_processors(tiny_vlm)
    tok_pub, pub = load_processors(published_vlm)
    assert pub is not None and not (published_vlm / "rlcs_processor.json").exists()
    img = _image("red", 150, 100)
    a, b = ours(_prompt(tok), [img]), pub(_prompt(tok_pub), [img])
    for key in ("input_ids", "pixel_values", "image_grid_thw", "mm_token_type_ids"):
        assert torch.equal(a[key], b[key]), key
    # Glm4vProcessor's rule: one <|image|> per merge_size x merge_size patches of the grid
    grid = b["image_grid_thw"][0]
    assert int(b["mm_token_type_ids"].sum()) == int(grid.prod()) // 4 > 1


def test_the_learner_trains_a_published_checkpoint_on_images(tiny_vlm, published_vlm, tmp_path):
    """The same RL batch with an image gives the same loss on both layouts; the exported model
    keeps the published layout and loads again."""
    from rlcs.vlm_processor import load_vlm_processor

    stats = {}
    for name, path in (("ours", tiny_vlm), ("published", published_vlm)):
        learner = Learner.local(_config(path, lr=1e-4), path)
        batch = rl_batch(learner)
        assert any(t["images"] for t in batch)
        stats[name] = learner.train_step("rl", batch)
        if name == "published":
            out = learner.export_hf(tmp_path / "hf")
    assert stats["published"]["loss"] == pytest.approx(stats["ours"]["loss"], rel=1e-6, abs=1e-9)
    assert stats["published"]["grad_norm"] == pytest.approx(stats["ours"]["grad_norm"], rel=1e-5)
    assert stats["published"]["grad_norm"] > 0
    assert not (tmp_path / "hf" / "rlcs_processor.json").exists()
    assert json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())["merge_size"] == 2
    assert load_vlm_processor(out) is not None


def test_the_hf_engine_samples_a_published_checkpoint_like_our_layout(tiny_vlm, published_vlm):
    from actors.rollout.engine import GenRequest
    from actors.rollout.hf_engine import HFEngine
    from rlcs.tokenizer import build_tokenizer

    stop = build_tokenizer().convert_tokens_to_ids("<|endoftext|>")
    results = []
    for path in (tiny_vlm, published_vlm):
        engine = HFEngine(str(path), stop_ids=[stop], device="cpu")
        text = _prompt(engine.tokenizer)
        ids, mm = engine.encode(text, [_image("blue")])
        req = GenRequest(ids, max_tokens=6, seed=3, prompt_text=text, images=[_image("blue")],
                         mm_inputs=mm, temperature=0.0)  # fmt: skip
        results.append(engine.generate([req])[0])
    assert results[0].prompt_ids == results[1].prompt_ids
    assert results[0].token_ids == results[1].token_ids and len(results[0].token_ids) > 0
    assert results[0].logprobs == pytest.approx(results[1].logprobs, abs=1e-6)


def test_a_vision_model_without_its_image_processor_config_is_named(published_vlm, tmp_path):
    from cluster.stage_data import model_dir_problem
    from rlcs.vlm_processor import load_vlm_processor

    bare = tmp_path / "bare"
    shutil.copytree(published_vlm, bare)
    (bare / "preprocessor_config.json").unlink()
    assert "no preprocessor_config.json" in model_dir_problem(bare)
    with pytest.raises(FileNotFoundError, match="no preprocessor_config.json"):
        load_vlm_processor(bare)
    (bare / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "CLIPImageProcessor"})
    )
    with pytest.raises(ValueError, match="not a GLM-4.1V image processor"):
        load_vlm_processor(bare)

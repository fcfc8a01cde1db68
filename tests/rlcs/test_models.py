import json

import pytest
import torch

from rlcs.tokenizer import CONTROL_TOKENS, FORMAT_TOKENS, build_tokenizer, learn_merges


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_markers_are_single_tokens_and_survive_decoding(tok):
    for t in FORMAT_TOKENS + CONTROL_TOKENS:
        assert len(tok.encode(t, add_special_tokens=False)) == 1, t
    text = "<think>½ + ⅓ = 5/6 ✓</think><answer><|begin_of_box|>5/6<|end_of_box|></answer>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_chat_template_thinking_and_nothink(tok):
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "2+2?"}]}]
    think = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert (
        think
        == "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>2+2?<|assistant|>\n"
    )
    nothink = tok.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert nothink.endswith("2+2?/nothink<|assistant|>\n<think></think>")


CORPUS = [
    "<|begin_of_image|><|image|><|end_of_image|>A page with 2 elements: Save button at 757,571.",
    "Find the green square. Answer with its box [x1,y1,x2,y2] in 0-999 coordinates.",
    '<think>Save button at 757,571</think><answer><|begin_of_box|>{"action":"click",'
    '"point":[757,571]}<|end_of_box|></answer>',
] * 3


def test_learnt_merges_shorten_the_corpus_and_keep_digits_and_special_ids(tok):
    merges = learn_merges(CORPUS, 64)
    assert 0 < len(merges) <= 64
    assert not any("<" in a + b and "|" in a + b for a, b in merges)  # no merge spans a marker
    bpe = build_tokenizer(merges)
    assert len(bpe) == len(tok) + len(merges)
    for t in FORMAT_TOKENS + CONTROL_TOKENS:  # the recipe's tokens keep their ids
        assert bpe.convert_tokens_to_ids(t) == tok.convert_tokens_to_ids(t), t
    for text in CORPUS[:3]:
        ids = bpe.encode(text, add_special_tokens=False)
        assert len(ids) < 0.7 * len(tok.encode(text, add_special_tokens=False))
        assert bpe.decode(ids) == text
    pieces = bpe.convert_ids_to_tokens(bpe.encode("at 757,571", add_special_tokens=False))
    assert [p for p in pieces if any(c.isdigit() for c in p)] == list("757571")
    # the text after a marker is learnt as the tokenizer reads it: no space before "Save"
    after = bpe.convert_ids_to_tokens(bpe.encode("<think>Save button", add_special_tokens=False))
    assert after == ["<think>", "Save", "Ġbutton"]
    # text the corpus never had still round-trips, byte by byte where no merge applies
    odd = "<think>½ + ⅓ = 5/6 ✓ Ünïcode\ttabs</think>"
    assert bpe.decode(bpe.encode(odd, add_special_tokens=False)) == odd
    assert learn_merges(CORPUS, 64) == merges  # the same corpus, the same merges
    assert learn_merges(CORPUS, 0) == []


def test_a_merge_of_unknown_parts_is_refused():
    with pytest.raises(ValueError, match="neither a byte nor an earlier merge"):
        build_tokenizer([("ab", "c")])


def test_tiny_text_model_directory_loads(tiny_text_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in tiny_text_model.iterdir()
    }
    model = AutoModelForCausalLM.from_pretrained(tiny_text_model)
    tok = AutoTokenizer.from_pretrained(tiny_text_model)
    assert model.config.vocab_size >= len(tok)
    out = model.generate(
        **tok("[gMASK]<sop>", return_tensors="pt"), max_new_tokens=5, do_sample=False
    )
    assert 2 < out.shape[1] <= 2 + 5  # prompt is 2 tokens; generation may stop at a stop token


def test_tiny_vlm_forward_and_generate_on_a_real_image(tiny_vlm, shapes_image):
    from transformers import Glm4vForConditionalGeneration

    from rlcs.vlm_processor import Glm4vImageTextProcessor

    config = json.loads((tiny_vlm / "config.json").read_text())
    assert config["architectures"] == ["Glm4vForConditionalGeneration"]
    proc = Glm4vImageTextProcessor.from_pretrained(tiny_vlm)
    model = Glm4vForConditionalGeneration.from_pretrained(tiny_vlm).eval()
    msgs = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What shapes?"}]}
    ]
    enc = proc(proc.apply_chat_template(msgs, add_generation_prompt=True), [shapes_image])
    # 112x84 with 14px patches -> 8x6 patches, merged 2x2 -> 12 image tokens
    assert enc["image_grid_thw"].tolist() == [[1, 6, 8]]
    assert int(enc["mm_token_type_ids"].sum()) == 12
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape[:2] == enc["input_ids"].shape and torch.isfinite(logits).all()
    out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    assert out.shape[1] == enc["input_ids"].shape[1] + 6
    # the image changes what the model computes
    blank = proc(
        proc.apply_chat_template(msgs, add_generation_prompt=True), [shapes_image.transpose(0)]
    )
    with torch.no_grad():
        assert not torch.allclose(model(**blank).logits[0, -1], logits[0, -1])


def test_sincos_2d_codes_every_row_and_column_apart():
    from rlcs.models import sincos_2d

    t = sincos_2d(8, 128)
    assert t.shape == (64, 128)
    assert torch.allclose(t.mean(0), torch.zeros(128), atol=1e-5)
    assert abs(float(t.pow(2).mean().sqrt()) - 1.0) < 1e-4
    # the row half moves with the row only, the column half with the column only
    grid = t.view(8, 8, 128)
    assert not torch.allclose(grid[0, :, :64], grid[5, :, :64])
    assert torch.allclose(grid[:, 0, :64], grid[:, 7, :64])
    assert torch.allclose(grid[0, :, 64:], grid[7, :, 64:])
    # every patch has its own code, and neighbours are nearer than far patches
    dist = torch.cdist(t, t)
    assert float(dist[~torch.eye(64, dtype=torch.bool)].min()) > 0.1
    assert float(dist[0, 1]) < float(dist[0, 7]) and float(dist[0, 8]) < float(dist[0, 56])
    with pytest.raises(ValueError, match="divisible by 4"):
        sincos_2d(8, 30)


def test_tiny_vlm_vision_tower_tells_patch_positions_apart(tiny_vlm, tmp_path):
    """Blank patches differ only by their position: with the sin-cos table the tower's outputs
    for a white image differ from token to token; with HF's random init they barely do."""
    from PIL import Image
    from transformers import Glm4vForConditionalGeneration

    from rlcs.models import build_tiny_vlm, sincos_2d
    from rlcs.vlm_processor import Glm4vImageTextProcessor

    def spread(path):
        model = Glm4vForConditionalGeneration.from_pretrained(path).eval()
        proc = Glm4vImageTextProcessor.from_pretrained(path)
        enc = proc("<|image|>", [Image.new("RGB", (112, 112), "white")])
        with torch.no_grad():
            out = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
        f = out.pooler_output
        return float((f - f.mean(0)).norm(dim=-1).mean() / f.norm(dim=-1).mean()), model

    sincos, model = spread(tiny_vlm)
    table = model.model.visual.embeddings.position_embedding.weight.detach()
    assert torch.allclose(table, sincos_2d(8, table.shape[1]), atol=1e-6)
    random, _ = spread(build_tiny_vlm(tmp_path / "random", vision_pos_embed="random"))
    assert sincos > 0.4 and random < 0.1 and sincos > 5 * random, (sincos, random)
    with pytest.raises(ValueError, match="vision_pos_embed"):
        build_tiny_vlm(tmp_path / "bad", vision_pos_embed="learned")


def test_processor_refuses_double_expansion(tiny_vlm, shapes_image):
    from rlcs.vlm_processor import Glm4vImageTextProcessor

    proc = Glm4vImageTextProcessor.from_pretrained(tiny_vlm)
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}]}], add_generation_prompt=True
    )
    once = proc.expand_image_tokens(text, [12])
    assert once.count("<|image|>") == 12
    with pytest.raises(
        ValueError, match=r"12 <\|image\|> placeholders for 1 images \(was it expanded already\?\)"
    ):
        proc(once, [shapes_image])


def test_processor_batches_prompts_with_and_without_images(tiny_vlm, shapes_image):
    from rlcs.vlm_processor import Glm4vImageTextProcessor

    proc = Glm4vImageTextProcessor.from_pretrained(tiny_vlm)
    with_img = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}]}], add_generation_prompt=True
    )
    text_only = proc.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    enc = proc([with_img, text_only], [[shapes_image], []])
    assert enc["input_ids"].shape[0] == 2
    assert enc["mm_token_type_ids"][0].sum() == 12 and enc["mm_token_type_ids"][1].sum() == 0
    assert enc["attention_mask"][1, 0] == 0  # left padding

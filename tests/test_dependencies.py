"""Each heavy dependency, proven on this machine: DeepSpeed ZeRO-2 with gloo, and Playwright
driving Debian's Chromium. vLLM's CPU build generating inside a Ray actor is
tests/actors/test_rollout_vllm.py (one engine start serves the whole suite's need); `ray job
submit` to a token-authenticated head, refused without the token, is
tests/cluster/test_train.py::test_ray_job_submit_runs_tiny_text (one head serves both); the tiny
VLM generating from an image is in tests/rlcs/test_models.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcs.tasks.gui import CHROMIUM, CHROMIUM_ARGS

DS_SCRIPT = """
import json, os, sys
from actors.network import use_own_extension_dir
use_own_extension_dir()  # the CPU collective op where the learner ranks build and load it
import torch, deepspeed
from transformers import AutoModelForCausalLM
deepspeed.init_distributed(dist_backend="gloo")
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
cfg = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
       "zero_optimization": {"stage": 2}, "gradient_clipping": 1.0, "steps_per_print": 10**6}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
before = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
torch.manual_seed(0)
x = torch.randint(0, 250, (4, 32))
losses = []
for _ in range(4):
    loss = engine(input_ids=x, labels=x).loss
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
changed = sum(not torch.equal(before[n], p) for n, p in engine.module.named_parameters())
print("RESULT", json.dumps({"losses": losses, "zero_stage": engine.zero_optimization_stage(),
      "backend": torch.distributed.get_backend(), "changed": changed, "total": len(before)}))
"""


@pytest.mark.slow
def test_deepspeed_zero2_step_on_cpu_with_gloo(tiny_text_model, tmp_path):
    from actors.network import free_port

    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))  # fmt: skip
    script = tmp_path / "ds_step.py"
    script.write_text(DS_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(tiny_text_model)], env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(line[len("RESULT ") :])
    assert res["zero_stage"] == 2 and res["backend"] == "gloo"
    assert res["changed"] == res["total"]
    assert res["losses"][-1] < res["losses"][0]


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian chromium is installed by `make install`"
)
def test_playwright_drives_debian_chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "index.html"
    page_file.write_text(
        "<html><body><h1 id=t>rlcs</h1><button onclick=\"document.getElementById('t').textContent='clicked'\">"
        "go</button></body></html>"
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 400, "height": 200})
            page.goto(page_file.as_uri())
            assert page.text_content("#t") == "rlcs"
            page.click("button")
            assert page.text_content("#t") == "clicked"
            page.screenshot(path=str(tmp_path / "shot.png"))
        finally:
            browser.close()
    assert (tmp_path / "shot.png").stat().st_size > 1000

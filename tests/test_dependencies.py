"""Each heavy dependency, proven on this machine: DeepSpeed ZeRO-2 with gloo, `ray job submit`
with token auth, and Playwright driving Debian's Chromium. vLLM's CPU build generating inside a
Ray actor is tests/actors/test_rollout_vllm.py (one engine start serves the whole suite's need);
the tiny VLM generating from an image is in tests/rlcs/test_models.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcs.tasks.gui import CHROMIUM, CHROMIUM_ARGS

DS_SCRIPT = """
import json, os, sys
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


@pytest.mark.slow
def test_ray_job_submit_with_token_auth(tmp_path):
    from cluster.local_head import local_ray_head, ray_cli

    with local_ray_head(num_cpus=1) as head:
        no_token = dict(head.env, RAY_AUTH_TOKEN_PATH=str(tmp_path / "none"))
        no_token.pop("RAY_AUTH_TOKEN")
        denied = subprocess.run(
            [ray_cli(), "job", "submit", "--address", head.dashboard_url, "--", "echo", "x"],
            env=no_token, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        ok = head.submit("python", "-c", "print('rlcs-job', 6 * 7)", timeout=300)
    assert denied.returncode != 0 and "auth" in (denied.stdout + denied.stderr).lower()
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "rlcs-job 42" in ok.stdout and "succeeded" in ok.stdout


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

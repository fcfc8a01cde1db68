"""End-to-end runs of the driver on the tiny models: the run directory, resume after kill -9,
`ray job submit` against a token-authenticated head, roles killed mid-run, and a run whose
roles sit on two Ray nodes."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from rlcs.config import load_config
from rlcs.runlog import read_metrics

ROOT = Path(__file__).resolve().parents[2]
RLCS = str(Path(sys.executable).with_name("rlcs"))
FAST = [
    "data.synthetic.sizes={rl_train: 6, heldout: 2, sft: 2, pretrain: 2}",
    "rollout.n=2",
    "rollout.max_think_tokens=12",
    "rollout.max_answer_tokens=6",
    "run.prompts_per_iteration=3",
]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [RLCS, "train", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def curriculum_state(run_dir: Path) -> dict:
    from rlcs.curriculum.persistence import load_curriculum

    cur = load_curriculum(run_dir, attach=False)
    state = {
        k: np.array(getattr(cur, k)) for k in ("attempts", "successes", "ema", "last_seen", "tier")
    }
    return {**state, "iteration": cur.iteration, "expansion_ema": cur.expansion_ema}


def test_a_run_stopped_by_stuck_learner_ranks_says_why_and_how_to_go_on(tmp_path):
    """Learner ranks that could not finish a call (one failed, the others waited for it in a
    collective until the group gave up on them) stop the run as a dead actor does: with what
    happened and the step --resume takes, not a traceback alone."""
    from actors.learner_group import RanksStuck
    from cluster.train import stopped_by

    stuck = RanksStuck("learner rank 1 failed in save_checkpoint (OSError: disk full), ...")
    message = stopped_by(stuck, 4, tmp_path / "checkpoints")
    assert message.startswith("learner rank 1 failed in save_checkpoint (OSError: disk full)")
    assert message.endswith(
        f"up to step 4 are intact in {tmp_path / 'checkpoints'}: continue with --resume"
    )


def test_bad_config_fails_before_anything_starts(tmp_path):
    r = run_cli(
        "configs/tiny-text.yaml", "--set", "rollout.n=zero", "--set", f"run.root={tmp_path}"
    )
    assert r.returncode == 2
    assert "--set: rollout.n: Input should be a valid integer" in r.stderr
    assert not any(tmp_path.iterdir())


# One HF-engine run serves both the run-directory checks and, as the uninterrupted reference,
# the resume test: each driver start costs ~30 s of Ray and actor start-up on two cores.
STRAIGHT = [*FAST, "rollout.engine=hf", "run.iterations=4", "run.save_every=2",
            "run.eval_every=2", "run.eval_samples=3", "run.eval_before_train=true",
            "run.export_hf_checkpoints=true"]  # fmt: skip


def set_args(sets: list[str], root: Path) -> list[str]:
    return [a for s in [*sets, f"run.root={root}"] for a in ("--set", s)]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("straight")
    r = run_cli("configs/tiny-text.yaml", *set_args(STRAIGHT, root))
    assert r.returncode == 0, r.stderr[-4000:]
    # the quick exit of the rlcs script (cli.entry) leaves no teardown report behind
    assert "leaked" not in r.stderr, r.stderr[-2000:]
    return root


@pytest.mark.slow
def test_rl_run_writes_the_run_directory(straight_run):
    run = straight_run / "tiny-text"
    for name in ("config.yaml", "metrics.jsonl", "report.md", "curriculum/LATEST", "hf/config.json",
                 "samples/step_000004.jsonl", "checkpoints/step_00000002",
                 "checkpoints/step_00000004"):  # fmt: skip
        assert (run / name).exists(), name
    assert any((run / "tensorboard").iterdir())
    # each checkpoint holds its model in HF format; the last one is the run's final model
    step2, step4 = (run / "checkpoints" / f"step_0000000{k}" / "hf" for k in (2, 4))
    assert (step2 / "config.json").is_file()
    final = (run / "hf" / "model.safetensors").read_bytes()
    assert (step4 / "model.safetensors").read_bytes() == final
    baseline, *recs = read_metrics(run)
    assert [r["step"] for r in recs] == [1, 2, 3, 4]
    # run.eval_before_train: the starting model's held-out figures as step 0, and nothing else
    assert baseline["step"] == 0 and "eval/pass_rate/all" in baseline
    assert not any(k.startswith(("reward/", "curriculum/", "time/")) for k in baseline)
    assert {
        "reward/mean",
        "curriculum/expansion_ratio",
        "time/generate",
        "time/overhead_share",
    } <= set(recs[0])
    # the held-out evaluation (run.eval_every) lands in its iteration's record, every domain
    assert not any(k.startswith("eval/") for k in recs[0])
    held = [k for k in recs[1] if k.startswith("eval/pass_rate/")]
    assert "eval/pass_rate/all" in held and len(held) >= 2
    assert all(0.0 <= recs[1][k] <= 1.0 for k in held)
    # and, with run.eval_samples, the sampled pass rate and pass@k of 3 answers an item
    for domain in [k.removeprefix("eval/pass_rate/") for k in held]:
        sampled, best = (
            recs[1][f"eval/sampled_pass_rate/{domain}"],
            recs[1][f"eval/pass_at_k/{domain}"],
        )
        assert 0.0 <= sampled <= best <= 1.0
    assert (run / "report" / "rl-held-out_samples.png").is_file()
    assert (
        "4 steps, and the held-out evaluation before the first (step 0)."
        in (run / "report.md").read_text()
    )
    assert 0.0 <= recs[1]["logprob_mismatch"] < 0.05  # learner and engine see the same thing
    assert load_config(run / "config.yaml").run.iterations == 4
    again = run_cli("configs/tiny-text.yaml", *set_args(STRAIGHT, straight_run))
    assert again.returncode == 2 and "pass --resume to continue it" in again.stderr


@pytest.mark.slow
def test_resume_after_kill_equals_an_uninterrupted_run(straight_run, tmp_path):
    root = tmp_path / "b"
    proc = subprocess.Popen([RLCS, "train", "configs/tiny-text.yaml", *set_args(STRAIGHT, root)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    latest = root / "tiny-text" / "curriculum" / "LATEST"
    deadline = time.monotonic() + 600
    while not latest.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and every process it started
    proc.wait()
    assert latest.exists(), "the run never reached its first checkpoint"
    assert not (root / "tiny-text" / "report.md").exists(), "killed too late to test resume"

    resumed = run_cli("configs/tiny-text.yaml", "--resume", *set_args(STRAIGHT, root))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    a, b = curriculum_state(straight_run / "tiny-text"), curriculum_state(root / "tiny-text")
    assert a["iteration"] == b["iteration"] == 4
    for key in ("attempts", "successes", "ema", "last_seen", "tier"):
        assert np.array_equal(a[key], b[key]), key
    assert a["expansion_ema"] == b["expansion_ema"]
    # step 0, the evaluation before the first iteration, is kept and not run again
    steps = [r["step"] for r in read_metrics(root / "tiny-text")]
    assert steps == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_ray_job_submit_runs_tiny_text(tmp_path):
    from cluster.local_head import local_ray_head, ray_cli

    with local_ray_head(num_cpus=2) as head:
        # the head takes jobs with its token only
        no_token = dict(head.env, RAY_AUTH_TOKEN_PATH=str(tmp_path / "none"))
        no_token.pop("RAY_AUTH_TOKEN")
        denied = subprocess.run(
            [ray_cli(), "job", "submit", "--address", head.dashboard_url, "--", "echo", "x"],
            env=no_token, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        # the README's command, as is
        r = head.submit("rlcs", "train", "configs/tiny-text.yaml", "--set", f"run.root={tmp_path}",
                        working_dir=str(ROOT), timeout=900)  # fmt: skip
    assert denied.returncode != 0 and "auth" in (denied.stdout + denied.stderr).lower()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "succeeded" in r.stdout
    run = tmp_path / "tiny-text"
    assert (run / "report.md").is_file()
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4]
    first = json.loads((run / "samples" / "step_000004.jsonl").read_text().splitlines()[0])
    assert first["response"] and first["reward"] is not None
    # the full loop on vLLM (tiny-text's engine): the engine's logprobs of the sampled tokens
    # are the learner's, also after weight pushes
    mismatch = [m["logprob_mismatch"] for m in read_metrics(run) if "logprob_mismatch" in m]
    assert mismatch and all(0.0 <= x < 0.05 for x in mismatch), mismatch


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until ``path`` exists, ``proc`` has ended, or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)


def role_processes(driver: int, role: str) -> list[psutil.Process]:
    """The driver's descendant processes that run the Ray actor class ``role``."""
    procs = []
    for p in psutil.Process(driver).children(recursive=True):
        try:
            if f"ray::{role}" in " ".join(p.cmdline()):
                procs.append(p)
        except psutil.NoSuchProcess:
            continue
    return procs


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_supervised_stages_run_through_the_same_driver(tmp_path, stage):
    sets = [*FAST, f"stage={stage}", "learner.steps=3", "learner.global_batch=4", "learner.micro_batch=4",
            "learner.lr=1.0e-3", "run.save_every=2", f"run.root={tmp_path}", f"run.name={stage}"]  # fmt: skip
    r = run_cli("configs/tiny-text.yaml", *[a for s in sets for a in ("--set", s)])
    assert r.returncode == 0, r.stderr[-4000:]
    run = tmp_path / stage
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1, 2, 3] and all(m["stage"] == stage for m in recs)
    assert recs[-1]["loss"] < recs[0]["loss"] and recs[0]["tokens_per_s"] > 0
    assert (run / "checkpoints" / "step_00000003").is_dir() and (
        run / "hf" / "config.json"
    ).is_file()


@pytest.mark.slow
def test_a_run_goes_on_after_its_time_limit_dead_workers_and_a_dead_learner(tmp_path):
    """One run through each way a launch ends early or loses an actor, each launch taking over
    from the one before (one driver start serves several of the cases)."""
    n = 2
    sets = [*FAST, f"rollout.n={n}", "rollout.engine=hf", "run.iterations=6", "run.eval_every=2"]
    run = tmp_path / "tiny-text"
    ckpt = run / "checkpoints"

    # 1. a 1 s limit is spent before the first iteration ends: the run stops after it,
    # evaluates and checkpoints it although neither is on schedule, and exports its model
    r = run_cli("configs/tiny-text.yaml",
                *set_args([*sets, "run.save_every=0", "run.max_wall_s=1"], tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    assert "run.max_wall_s=1: stopped after iteration 1 of 6" in r.stderr
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1] and "eval/pass_rate/all" in recs[0]
    assert (ckpt / "step_00000001").is_dir()
    assert (run / "hf" / "config.json").is_file() and (run / "report.md").is_file()

    # 2. --resume without the limit goes on from that checkpoint; a killed rollout worker and
    # reward actor are restarted and the run goes on; a killed learner stops it, exit 1, with
    # its checkpoints intact
    sets = [*sets, "run.save_every=1", "run.max_wall_s=null"]
    proc = subprocess.Popen([RLCS, "train", "configs/tiny-text.yaml", "--resume", *set_args(sets, tmp_path)],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    wait_for(ckpt / "step_00000002", proc)
    killed = [role_processes(proc.pid, role) for role in ("RolloutWorker", "RewardActor")]
    assert all(killed), f"role processes not found: {killed}"
    for procs in killed:
        procs[0].kill()
    wait_for(ckpt / "step_00000004", proc)
    learners = role_processes(proc.pid, "Learner")
    assert learners, "no learner process found under the driver"
    learners[0].kill()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert "restarted" in err
    assert "a Learner actor died" in err and "continue with --resume" in err
    assert max(r.get("errors/rollout_restarts", 0) for r in read_metrics(run)) >= 1

    # 3. --resume again: the run ends where it would have without any of it
    r = run_cli("configs/tiny-text.yaml", "--resume", *set_args(sets, tmp_path))
    assert r.returncode == 0, r.stderr[-4000:]
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1, 2, 3, 4, 5, 6]
    assert [m["step"] for m in recs if "eval/pass_rate/all" in m] == [1, 2, 4, 6]
    assert (ckpt / "step_00000006").is_dir()
    # every rollout of the steps kept was reported to the curriculum exactly once, across the
    # restarts and the resumes: attempts = groups x n
    from rlcs.curriculum.persistence import load_curriculum

    cur = load_curriculum(run, attach=False)
    assert int(cur.attempts.sum()) == n * int(sum(r["curriculum/groups"] for r in recs))


def test_eval_metrics_name_every_figure_of_the_held_out_evaluation():
    from cluster.train import eval_metrics

    greedy = {"math": {"pass_rate": 0.5, "reward": 0.6}, "all": {"pass_rate": 0.5, "reward": 0.6}}
    assert eval_metrics(greedy) == {
        "eval/pass_rate/math": 0.5, "eval/reward/math": 0.6,
        "eval/pass_rate/all": 0.5, "eval/reward/all": 0.6,
    }  # fmt: skip
    sampled = {"math": {"pass_rate": 0.5, "reward": 0.6, "sampled_pass_rate": 0.25,
                        "pass_at_k": 0.75}}  # fmt: skip
    assert eval_metrics(sampled) == {
        "eval/pass_rate/math": 0.5, "eval/reward/math": 0.6,
        "eval/sampled_pass_rate/math": 0.25, "eval/pass_at_k/math": 0.75,
    }  # fmt: skip


# An RL run across two Ray nodes: the learner on one, the rollout engine and the reward actors on
# the other, so that weights, trajectories and rewards cross between the nodes' object stores.
# Two raylets on this machine stand in for two hosts (``ray.cluster_utils.Cluster``).


@pytest.fixture(scope="module")
def two_nodes():
    """A head node for training (resource ``trainer``) and a node for rollouts (``roller``)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer": 4}}
    )
    cluster.add_node(num_cpus=2, resources={"roller": 4})
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


#: each role's resource exists on one node only, so the placement has to split them
SPLIT = {"learner": {"trainer": 1}, "rollout": {"roller": 1}, "reward": {"roller": 1}}


@pytest.mark.slow
def test_an_rl_run_spans_two_ray_nodes(two_nodes, tmp_path):
    import ray

    # an entropy bonus makes the learner move the weights even where every reward is equal
    sets = [*FAST, "rollout.engine=hf", "run.iterations=2", "reward.num_actors=1",
            "learner.grpo.entropy_coef=0.01", "learner.lr=1.0e-3",
            f"cluster.address={two_nodes.address}", f"cluster.role_resources={json.dumps(SPLIT)}"]  # fmt: skip
    r = run_cli("configs/tiny-text.yaml", *set_args(sets, tmp_path))
    assert r.returncode == 0, r.stderr[-4000:]
    # the driver says where each actor landed; the sampler sits on the driver's (head) node
    layout = next(s for s in r.stdout.splitlines() if s.startswith("roles across Ray nodes: "))
    assert re.fullmatch(
        r"roles across Ray nodes: node \w{8} \([\d.]+\): learner 0, sampler; "
        r"node \w{8} \([\d.]+\): rollout 0, reward 0",
        layout,
    ), layout
    # the run left the cluster as it found it: both nodes alive, every bundle given back
    ray.init(address=two_nodes.address, log_to_driver=False)
    try:
        assert sum(n["Alive"] for n in ray.nodes()) == 2
        assert ray.available_resources().get("trainer") == 4
        assert ray.available_resources().get("roller") == 4
    finally:
        ray.shutdown()
    run = tmp_path / "tiny-text"
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1, 2]
    assert all(m["curriculum/groups"] > 0 and "reward/mean" in m for m in recs)
    assert recs[0]["grad_norm"] > 0
    assert (run / "hf" / "model.safetensors").read_bytes() != (
        run / "model" / "model.safetensors"
    ).read_bytes()
    # iteration 2 sampled with the weights the learner pushed to the other node after step 1:
    # the engine's logprobs of its own tokens are the learner's
    assert 0.0 <= recs[1]["logprob_mismatch"] < 0.05


@pytest.mark.slow
def test_same_node_weight_sync_refuses_engines_on_another_node(two_nodes, tmp_path):
    sets = [*FAST, "rollout.engine=hf", "reward.num_actors=1", "cluster.weight_sync=shm",
            f"cluster.address={two_nodes.address}", f"cluster.role_resources={json.dumps(SPLIT)}"]  # fmt: skip
    r = run_cli("configs/tiny-text.yaml", *set_args(sets, tmp_path))
    assert r.returncode == 1, r.stderr[-4000:]
    assert "cluster.weight_sync: shm passes the weights within one node" in r.stderr
    assert "Traceback" not in r.stderr


PARITY = """
from rewards import Verdict, Verifier


class Parity(Verifier):
    \"\"\"1 for an answer of even length, 0.25 for odd: an untrained model's groups then hold
    both rewards, and a reward of 0.25 can only come from this verifier.\"\"\"

    def verify(self, extracted, answer, options):
        return Verdict(1.0 if len(extracted or "") % 2 == 0 else 0.25)
"""


@pytest.mark.slow
def test_an_overlapped_run_trains_one_update_behind_and_resumes(tmp_path):
    # A domain of the user's own (reward.custom_domains), its verifier loaded by module path in
    # the reward actors. run.overlap_rollout with checkpoints at 3 and the last step:
    # iterations 1 and 2 gather the next one's rollouts during their update, 3 does not (a
    # checkpoint follows); resumed to 5, iteration 4 gathers 5's. A batch gathered ahead comes
    # from the weights one update behind.
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "parity_verifier.py").write_text(PARITY)
    data = tmp_path / "rl.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "domain": "parity", "prompt": f"say {i}",
                                        "answer": "x"}) + "\n" for i in range(16)))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), str(ROOT)])}
    sets = [*FAST[1:], "data.synthetic=null", f"data.train={json.dumps([str(data)])}",
            'reward.custom_domains={"parity": "parity_verifier:Parity"}', "reward.format=bare",
            "rollout.engine=hf", "rollout.n=4", "run.overlap_rollout=true", "run.save_every=3",
            "run.eval_every=0"]  # fmt: skip

    def train(iterations: str, *flags: str) -> None:
        args = [*flags, *set_args([*sets, iterations], tmp_path / "runs")]
        r = subprocess.run([RLCS, "train", "configs/tiny-text.yaml", *args], capture_output=True,
                           text=True, timeout=600, cwd=ROOT, env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr[-4000:]

    train("run.iterations=3")
    run = tmp_path / "runs" / "tiny-text"
    assert curriculum_state(run)["iteration"] == 3  # nothing gathered past the checkpoint
    train("run.iterations=5", "--resume")
    recs = read_metrics(run)
    assert [m["step"] for m in recs] == [1, 2, 3, 4, 5]
    assert all("time/learn_wait" in m for m in recs)
    mismatch = {m["step"]: m["logprob_mismatch"] for m in recs}
    moved = {m["step"]: m["grad_norm"] > 0 for m in recs}  # a step whose groups all tie does not
    print("logprob mismatch by step:", mismatch, "update moved the weights:", moved)
    # learner and engine agree to float noise on rollouts of the learner's own weights, and
    # differ on those gathered ahead, where the update before moved the weights
    assert max(mismatch[1], mismatch[4]) < 1e-4
    behind = [mismatch[s] for s in (2, 3, 5) if moved[s - 1]]
    assert behind and min(behind) > 1e-4
    assert (run / "checkpoints" / "step_00000005").is_dir() and (run / "report.md").is_file()
    # the reward actors scored every rollout with the custom domain's verifier
    rewards = [json.loads(line)["reward"] for s in range(1, 6)
               for line in (run / "samples" / f"step_{s:06d}.jsonl").read_text().splitlines()]  # fmt: skip
    assert len(rewards) >= 5 * 3 * 4 and set(rewards) == {0.25, 1.0}
    assert all(m["errors/reward"] == 0 and 0.25 <= m["reward/parity"] <= 1 for m in recs)

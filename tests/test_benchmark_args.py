"""The benchmark scripts' arguments and closing lines: a bad argument or a missing input is a
one-line error before any model loads, and each script ends with one RESULT line."""

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def load():
    """Imports a benchmark script as a module, with benchmarks/ on the path as when it runs."""
    sys.path.insert(0, str(BENCH))
    loaded = []

    def load_script(name: str):
        full = f"rlcs_benchmark_{name}"
        spec = importlib.util.spec_from_file_location(full, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        loaded.append(full)
        return module

    yield load_script
    sys.path.remove(str(BENCH))
    for full in loaded:
        sys.modules.pop(full, None)


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_hf_generate_names_a_missing_model_or_item_file(load, tmp_path):
    hf = load("hf_generate")
    items = tmp_path / "rl_train.jsonl"
    with pytest.raises(SystemExit, match="--model .*no config.json there"):
        hf.check_inputs(tmp_path / "no-model", items)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="--items .*rl_train.jsonl: no such file"):
        hf.check_inputs(tmp_path / "model", items)
    items.write_text("")
    hf.check_inputs(tmp_path / "model", items)  # both there: no error


def test_hf_generate_missing_model_is_one_line_not_a_traceback(tmp_path):
    out = run_script("hf_generate", "--model", str(tmp_path / "m"), "--items", str(tmp_path))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"--model {tmp_path / 'm'}: no config.json there; give an exported HF model directory, "
        "e.g. runs/demo/sft/hf"
    ]


def test_checksum_devices_refuse_unknown_names_and_a_missing_gpu(load):
    cs = load("checksum_speed")
    assert cs.devices_present("cpu,cuda", cuda=False) == ["cpu"]
    assert cs.devices_present("cpu,cuda", cuda=True) == ["cpu", "cuda"]
    with pytest.raises(argparse.ArgumentTypeError, match="no CUDA GPU is visible"):
        cs.devices_present("cuda", cuda=False)
    for bad in ("gpu", "", "cpu,tpu"):
        with pytest.raises(argparse.ArgumentTypeError, match="give cpu, cuda or cpu,cuda"):
            cs.devices_present(bad, cuda=True)


def test_packing_row_lengths_are_whole_distinct_and_positive(load):
    pk = load("packing_row_length")
    assert pk.row_lengths("2048, 512,256") == [2048, 512, 256]
    for bad, message in (("2048,abc", "not an integer: 'abc'"), ("512,0", "must be at least 1, got 0"),
                         ("512,512", "names a row length twice")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            pk.row_lengths(bad)


def test_learner_step_ends_with_one_result_line_for_all_stages(load):
    ls = load("learner_step")
    line = ls.result_line([(26, 6.0, 5.0, 0), (26, 3.0, 4.0, 1), (26, 2.0, 2.0, 2)])
    assert line == (
        "RESULT params=26 ours_step_s=6.0000,3.0000,2.0000 bare_step_s=5.0000,4.0000,2.0000 "
        "ratio=1.200,0.750,1.000 zero_stage=0,1,2"
    )
    # one stage: the line the script printed before, unchanged
    assert ls.result_line([(26, 1.5, 1.0, 2)]) == (
        "RESULT params=26 ours_step_s=1.5000 bare_step_s=1.0000 ratio=1.500 zero_stage=2"
    )
    assert ls.zero_stages("2,3") == [2, 3]
    for bad in ("0,5", "a"):
        with pytest.raises(argparse.ArgumentTypeError):
            ls.zero_stages(bad)


def test_reward_server_load_helpers(load):
    rs = load("reward_server_load")
    assert rs.pct([4.0], 99) == 4.0  # one request: its own latency, not an error
    assert rs.pct([float(x) for x in range(1, 101)], 50) == pytest.approx(50.5)
    assert rs.share("0.05") == 0.05
    for bad in ("1", "-0.1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            rs.share(bad)
    metrics = (
        "# HELP rlcs_reward_cache_hits_total Items answered from the cache\n"
        'rlcs_reward_cache_hits_total{domain="math"} 219.0\n'
        'rlcs_reward_cache_hits_created{domain="math"} 1.7e9\n'
        'rlcs_reward_cache_hits_total{domain="chart"} 3.0\n'
    )
    assert rs.counter_totals(metrics, "rlcs_reward_cache_hits_total") == {
        "math": 219.0,
        "chart": 3.0,
    }


def test_a_phase_over_its_time_cap_stops_with_one_line(load):
    rs = load("reward_server_load")
    with pytest.raises(SystemExit, match="the clean phase did not finish within --cap-s 0.01 s"):
        asyncio.run(rs.capped(asyncio.sleep(5), 0.01, "clean"))
    assert asyncio.run(rs.capped(asyncio.sleep(0, result=7), 5, "batch")) == 7


def test_curriculum_vs_uniform_refuses_a_base_that_is_not_a_finished_demo(load, tmp_path):
    cvu = load("curriculum_vs_uniform")
    base = tmp_path / "demo"
    (base / "data").mkdir(parents=True)
    for split in ("rl_train", "heldout", "sft", "pretrain"):
        (base / "data" / f"{split}.jsonl").write_text("")
    # a demo still in its SFT stage: no exported checkpoint yet
    assert cvu.missing_from_base(base) == base / "sft" / "hf" / "config.json"
    (base / "sft" / "hf").mkdir(parents=True)
    (base / "sft" / "hf" / "config.json").write_text("{}")
    assert cvu.missing_from_base(base) is None

    root = tmp_path / "root"
    out = run_script("curriculum_vs_uniform", "--base", str(tmp_path / "x"), "--root", str(root))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "is not a finished demo run directory" in out.stderr
    assert not root.exists() and not (tmp_path / "x").exists()  # nothing built or trained
    out = run_script("curriculum_vs_uniform", "--iterations", "4", "--eval-every", "6")
    assert out.returncode == 2 and "no RL iteration would be evaluated" in out.stderr


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("curriculum_scale", ["--seeds", "0"], "--seeds: must be at least 1, got 0"),
        ("curriculum_scale", ["--rounds", "0"], "--rounds: must be at least 1, got 0"),
        ("reward_server_load", ["--clients", "0"], "--clients: must be at least 1, got 0"),
        ("reward_server_load", ["--pathological-share", "1"], "is not in [0, 1)"),
        ("weight_sync", ["--repeats", "0"], "--repeats: must be at least 1, got 0"),
        ("learner_step", ["--stages", "0,4"], "a ZeRO stage is 0, 1, 2 or 3"),
        ("packing_row_length", ["--seq-lens", "2048,x"], "not an integer: 'x'"),
        ("rewards_throughput", ["--workers", "0"], "--workers: must be at least 1, got 0"),
        (
            "induction_probe",
            ["write", "x.jsonl", "--lists", "0"],
            "--lists: must be at least 1, got 0",
        ),
        ("induction_probe", ["probe", "x", "--lists", "0"], "--lists: must be at least 1, got 0"),
    ],
)
def test_a_bad_count_is_a_usage_error(script, args, message):
    out = run_script(script, *args)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert message in out.stderr.splitlines()[-1]


def test_induction_probe_writes_lists_whose_lookups_repeat_the_listed_numbers(load, tmp_path):
    probe = load("induction_probe")
    out = tmp_path / "lists.jsonl"
    probe.write_lists(out, 50, seed=7)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 50 and [r["id"] for r in rows[:2]] == ["lookup-00000", "lookup-00001"]
    for row in rows:
        listed, *lookups = row["text"].split("; ")
        numbers = dict(pair.split(" ") for pair in listed.split(", "))
        assert 2 <= len(numbers) <= 5 and 1 <= len(lookups) <= 3
        for lookup in lookups:
            label, number = lookup.split(" ")
            assert numbers[label] == number and len(number) == 3
    probe.write_lists(tmp_path / "again.jsonl", 50, seed=7)  # the same seed, the same lists
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()
    with pytest.raises(SystemExit, match="no config.json there"):
        probe.probe(tmp_path / "no-model", 3)


def test_induction_probe_scores_a_model_and_ends_with_its_result_line(tiny_text_model):
    done = run_script("induction_probe", "probe", str(tiny_text_model), "--lists", "4")
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.removeprefix("RESULT ").split())
    assert last.startswith("RESULT ") and fields["lists"] == "4"
    copied, first = float(fields["copied"]), float(fields["first_digit"])
    # four lists: quarters; an exact copy has its first digit right
    assert copied * 4 == round(copied * 4) and first * 4 == round(first * 4)
    assert 0.0 <= copied <= first <= 1.0

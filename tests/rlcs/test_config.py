from pathlib import Path

import pytest
import yaml

from rlcs.config import Config, ConfigError, load_config
from rlcs.runlog import write_resolved

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_defaults_follow_the_recipe(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  tiny: text\n"))
    assert cfg.stage == "rl"
    assert cfg.rollout.top_p == 1.0
    assert (cfg.learner.grpo.eps_low, cfg.learner.grpo.eps_high) == (0.2, 0.28)
    assert cfg.learner.grpo.kl_coef == 0.0 and cfg.learner.grpo.entropy_coef == 0.0
    assert cfg.learner.grpo.loss_agg == "sample"


def test_unknown_key_names_key_and_file(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nrollout:\n  nn: 8\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert f"{p}: rollout.nn: unknown key" in str(e.value)


def test_unknown_section_is_an_error(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nrolout:\n  n: 8\n")
    with pytest.raises(ConfigError, match=r"rolout: unknown key"):
        load_config(p)


def test_wrong_type_names_key_file_and_value(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nrollout:\n  n: eight\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert f"{p}: rollout.n:" in msg and "valid integer" in msg and "'eight'" in msg


def test_bad_value_names_key(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nlearner:\n  zero_stage: 4\n")
    with pytest.raises(
        ConfigError, match=r"learner\.zero_stage: Input should be less than or equal to 3"
    ):
        load_config(p)


def test_bad_choice_names_allowed_values(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nstage: finetune\n")
    with pytest.raises(ConfigError, match=r"stage: Input should be 'pretrain', 'sft' or 'rl'"):
        load_config(p)


def test_overrides_are_typed_and_applied(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\n")
    cfg = load_config(p, ["rollout.n=4", "rollout.temperature=0.7", "run.name=abc", "stage=sft"])
    assert cfg.rollout.n == 4 and cfg.rollout.temperature == 0.7
    assert cfg.run.name == "abc" and cfg.stage == "sft"


def test_bad_override_is_attributed_to_set(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\n")
    with pytest.raises(
        ConfigError, match=r"--set: rollout\.top_p: Input should be less than or equal to 1"
    ):
        load_config(p, ["rollout.top_p=1.5"])
    with pytest.raises(ConfigError, match=r"--set: rollout\.bogus: unknown key"):
        load_config(p, ["rollout.bogus=1"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(p, ["rollout.n"])


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_model_source_required(tmp_path):
    with pytest.raises(ConfigError, match="set either model.path"):
        load_config(write(tmp_path, "model: {}\n"))


def test_resolved_config_written_and_reloadable(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  tiny: vlm\n"), ["rollout.n=3"])
    out = write_resolved(cfg, tmp_path / "runs" / "x")
    assert out.name == "config.yaml"
    again = load_config(out)
    assert again == cfg


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    assert isinstance(load_config(path), Config)


def test_synthetic_difficulty_ranges(tmp_path):
    p = write(tmp_path, "model:\n  tiny: vlm\ndata:\n  synthetic:\n    difficulty: [0.0, 0.3]\n")
    syn = load_config(p, ["data.synthetic.domain_difficulty={ocr: [0.4, 0.6]}"]).data.synthetic
    assert syn.difficulty_of("ocr") == (0.4, 0.6)
    assert syn.difficulty_of("math") == (0.0, 0.3)
    bad = {
        "data.synthetic.domain_difficulty={ocr: [0.6, 0.4]}": r"--set: data\.synthetic\."
        r"domain_difficulty\.ocr: a difficulty range must satisfy 0 <= lo <= hi <= 1",
        "data.synthetic.difficulty=[0.0, 1.5]": r"--set: data\.synthetic\.difficulty: "
        r"a difficulty range must satisfy",
        # a key inside a mapping given with --set is still blamed on --set
        "data.synthetic.domain_difficulty={chart: [0.1, 0.2]}": r"--set: data\.synthetic\."
        r"domain_difficulty\.chart\.\[key\]: Input should be 'math', 'ocr', 'grounding' or 'gui'",
    }
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(p, [override])
    p = write(tmp_path, "model:\n  tiny: vlm\ndata:\n  synthetic:\n    difficulty: [0.5, 0.3]\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    # the exact text: no "Value error, " before the check's own message, and the value it
    # already shows is not shown a second time
    assert str(e.value) == (
        f"invalid config:\n  {p}: data.synthetic.difficulty: a difficulty range must satisfy "
        "0 <= lo <= hi <= 1, got [0.5, 0.3]"
    )
    # a built-in check's message, which does not show the value, still gets it appended
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "model:\n  tiny: vlm\n"), ["rollout.n=abc"])
    assert str(e.value) == (
        "invalid config:\n  --set: rollout.n: Input should be a valid integer, unable to parse "
        "string as an integer (got 'abc')"
    )


def test_evaluation_options_without_eval_every_are_an_error(tmp_path):
    p = write(tmp_path, "model:\n  tiny: vlm\n")
    for overrides, named in (
        (["run.eval_samples=4"], r"run\.eval_samples=4 qualify"),
        (["run.eval_before_train=true"], r"run\.eval_before_train=true qualify"),
        (
            ["run.eval_before_train=true", "run.eval_samples=2"],
            r"run\.eval_before_train=true and run\.eval_samples=2 qualify",
        ),
    ):
        with pytest.raises(ConfigError, match=rf"--set: run: {named}.*set "
                           r"run\.eval_every to N"):  # fmt: skip
            load_config(p, overrides)
    run = load_config(
        p, ["run.eval_every=3", "run.eval_samples=4", "run.eval_before_train=true"]
    ).run
    assert (run.eval_every, run.eval_samples, run.eval_before_train) == (3, 4, True)


def test_config_files_that_cannot_be_read_as_a_config(tmp_path):
    dup = write(tmp_path, "model:\n  tiny: text\nrun:\n  name: first\nrun:\n  iterations: 3\n")
    with pytest.raises(ConfigError, match=r"key 'run' given twice \(first on line 3\)"):
        load_config(dup)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe model")
    with pytest.raises(ConfigError, match=r"bin\.yaml: not UTF-8 text"):
        load_config(binary)
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        load_config(tmp_path)


def test_a_yaml_syntax_error_names_the_config_file_in_its_detail(tmp_path):
    """The detail named the text "<unicode string>" where the first line named the file."""
    p = write(tmp_path, "model:\n  tiny: text\nrun: [1, 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == (
        f"{p}: not valid YAML: while parsing a flow sequence\n"
        f'  in "{p}", line 3, column 6:\n'
        "    run: [1, 2\n"
        "         ^\n"
        "expected ',' or ']', but got '<stream end>'\n"
        f'  in "{p}", line 4, column 1:\n'
        "    \n"
        "    ^"
    )
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "model:\n  tiny: text\n"), ["rollout.n=[1"])
    assert "<unicode string>" not in str(e.value)
    assert str(e.value).startswith(
        "--set 'rollout.n=[1': value is not valid YAML: while parsing a flow sequence\n"
        '  in "--set rollout.n", line 1, column 1:'
    )


def test_set_is_blamed_for_the_sections_it_names(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\n")
    with pytest.raises(ConfigError, match=r"--set: foo: unknown key"):
        load_config(p, ["foo.bar=1"])
    for bad in ("rollout..n=3", ".=3"):
        with pytest.raises(ConfigError, match="has an empty part"):
            load_config(p, [bad])


def test_rl_lr_horizon_is_the_runs_optimizer_steps_unless_set(tmp_path):
    """A decaying schedule in RL reaches 0 at the last iteration, not at the default 100."""
    from actors.deepspeed_config import lr_factor

    base = ["model.tiny=vlm", "run.iterations=6", "learner.grpo.mini_batches=2"]
    rl = load_config(None, [*base, "learner.lr_schedule=linear"])
    assert rl.learner.steps == 12
    f = lr_factor(rl.learner, rl.learner.steps)
    assert f(0) == 1.0 and f(11) == pytest.approx(1 / 12) and f(12) == 0.0
    assert load_config(None, [*base, "learner.steps=40"]).learner.steps == 40
    assert load_config(None, [*base, "stage=sft"]).learner.steps == 100
    again = load_config(write_resolved(rl, tmp_path / "run"))
    assert again.learner.steps == 12
    # the run's config.yaml leaves the derived horizon out: resumed from it with more
    # iterations, the decay ends with the longer run (a set horizon is kept as set)
    saved = tmp_path / "run" / "config.yaml"
    assert "steps" not in yaml.safe_load(saved.read_text())["learner"]
    assert load_config(saved, ["run.iterations=10"]).learner.steps == 20
    fixed = write_resolved(load_config(None, [*base, "learner.steps=40"]), tmp_path / "fixed")
    assert yaml.safe_load(fixed.read_text())["learner"]["steps"] == 40
    assert load_config(fixed, ["run.iterations=10"]).learner.steps == 40
    # PPO epochs pass over each iteration's batch again: more optimizer steps in the horizon
    assert load_config(None, [*base, "learner.grpo.epochs=3"]).learner.steps == 36


def test_an_unknown_key_names_the_nearest_known_one(tmp_path):
    p = write(tmp_path, "model:\n  tiny: text\nrolout:\n  n: 8\nlearner:\n  grpo:\n    eps_hi: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, ["data.synthetic.domainz=[math]", "run.xyzzy=1"])
    lines = str(e.value).splitlines()[1:]
    assert sorted(line.strip() for line in lines) == [
        "--set: data.synthetic.domainz: unknown key (did you mean data.synthetic.domains?)",
        "--set: run.xyzzy: unknown key",  # nothing near it
        f"{p}: learner.grpo.eps_hi: unknown key (did you mean learner.grpo.eps_high?)",
        f"{p}: rolout: unknown key (did you mean rollout?)",
    ]


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.domain_weights={math: .nan}", "domain_weights.math must be a finite number >= 0"),
        ("data.domain_weights={math: .inf}", "domain_weights.math must be a finite number >= 0"),
        # every iteration would draw no prompt at all, silently
        ("data.domain_weights={math: 0, ocr: 0}", "domain_weights are all 0"),
        ("data.synthetic={sizes: {rl_train: -1}}",
         r"data\.synthetic\.sizes\.rl_train: Input should be greater than or equal to 0"),
    ],
)  # fmt: skip
def test_data_settings_that_would_draw_nothing_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["model.tiny=text", override])
    assert load_config(None, ["model.tiny=text", "data.domain_weights={math: 0, ocr: 1}"])


def test_files_beside_a_synthetic_section_are_refused_not_left_unread():
    """A stage with data.synthetic reads the split it builds; files given beside it would be
    ignored without a word."""
    syn = "data.synthetic={domains: [math], sizes: {rl_train: 4}}"
    for given, names in (
        (["data.train=[mine.jsonl]"], "data.train"),
        (["data.train=[a.jsonl]", "data.eval=[b.jsonl]"], "data.train and data.eval"),
    ):
        with pytest.raises(ConfigError, match=rf"--set: data: .*{names} and data\.synthetic are "
                           r"both set.*also set data\.synthetic=null"):  # fmt: skip
            load_config(None, ["model.tiny=text", syn, *given])
    ok = load_config(None, ["model.tiny=text", syn, "data.synthetic=null", "data.eval=[b.jsonl]"])
    assert ok.data.synthetic is None and ok.data.eval == ["b.jsonl"]


@pytest.mark.parametrize("name", [".", ".."])
def test_a_run_name_of_dots_is_refused(name):
    """run.name is a folder under run.root: "." would make the root itself the run directory
    and ".." its parent."""
    with pytest.raises(
        ConfigError, match=r"--set: run\.name: .*no folder of its own under run\.root"
    ):
        load_config(None, ["model.tiny=text", f"run.name={name}"])
    ok = load_config(None, ["model.tiny=text", "run.name=.hidden..run"])
    assert ok.run.name == ".hidden..run"


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.temperature=.inf", r"--set: rollout\.temperature: .*must be a finite number of "
         r"at least 0: 0 samples greedily, 1 from the model's own distribution \(got inf\)"),
        ("rollout.temperature=.nan", r"rollout\.temperature: .*must be a finite number .*\(got nan\)"),
        ("rollout.temperature=-0.5", r"rollout\.temperature: .*must be a finite number .*\(got -0\.5\)"),
        ("curriculum.success_threshold=0", r"--set: curriculum\.success_threshold: .*must be above "
         r"0: every reward is at least 0, so every rollout would count as a success; give a "
         r"reward in \(0, 1\], e\.g\. 0\.5 \(got 0\)"),
        ("reward.timeout_s=.inf", r"--set: reward\.timeout_s: .*must be a finite number of "
         r"seconds above 0: 0 would time out every item, and inf let a hung verifier hold its "
         r"batch for ever \(got inf\)"),
        ("curriculum.success_threshold=-0.1", r"curriculum\.success_threshold: .*must be above 0"),
        ("curriculum.success_threshold=.nan", r"curriculum\.success_threshold: .*must be above 0"),
        ("curriculum.success_threshold=1.5", r"curriculum\.success_threshold: .*must be at most "
         r"1: no reward is above 1, so no rollout would count as a success"),
        ("rollout.n=1", r"rollout\.n is 1, but stage rl trains on GRPO groups: a group of one "
         r"rollout is its own mean, so its advantage is always 0 and nothing is learnt; give "
         r"rollout\.n of at least 2 \(8 by default\)"),
        ("rollout.temperature=0", r"rollout\.temperature is 0, but stage rl trains on GRPO "
         r"groups: greedy rollouts of a prompt are all one answer, so every advantage is 0"),
    ],
)  # fmt: skip
def test_sampling_settings_that_would_learn_nothing_are_refused(override, message):
    """An infinite temperature samples uniform noise (NaN logits on the learner), a success
    threshold of 0 counts every rollout as a success, a GRPO group of one has no advantage,
    and an infinite reward timeout waits for ever on a hung verifier: each ran without a
    word."""
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["model.tiny=text", override])


def test_more_tiers_than_a_byte_holds_are_refused():
    """Items keep their tier in one byte: 255 cut points would make tier 256 wrap to 0."""
    cuts = [round((k + 1) / 256, 6) for k in range(255)]
    with pytest.raises(ConfigError, match="at most 254 cut points .* got 255"):
        load_config(None, ["model.tiny=text", f"curriculum.tier_boundaries={cuts}"])
    ok = load_config(None, ["model.tiny=text", f"curriculum.tier_boundaries={cuts[:254]}"])
    assert len(ok.curriculum.tier_boundaries) == 254


def test_one_rollout_a_prompt_is_fine_where_no_group_is_trained():
    for stage in ("sft", "pretrain"):
        assert (
            load_config(None, ["model.tiny=text", f"stage={stage}", "rollout.n=1"]).rollout.n == 1
        )
    ok = load_config(None, ["model.tiny=text", "rollout.temperature=0", "rollout.n=2",
                            "curriculum.success_threshold=1", "stage=sft"])  # fmt: skip
    assert (ok.rollout.temperature, ok.rollout.n, ok.curriculum.success_threshold) == (0, 2, 1)


def test_image_check_off_is_read_as_written(tmp_path):
    """YAML reads a bare ``off`` as false; data.image_check takes it as the mode it names."""
    cfg = load_config(write(tmp_path, "model:\n  tiny: text\ndata:\n  image_check: off\n"))
    assert cfg.data.image_check == "off"
    assert load_config(write_resolved(cfg, tmp_path / "run")).data.image_check == "off"
    assert load_config(None, ["model.tiny=text"]).data.image_check == "decode"


TINY = CONFIGS / "tiny-vlm.yaml"


def test_position_shaping_is_training_only_and_below_the_success_threshold():
    from actors.reward import options_from_config, training_options

    cfg = load_config(TINY, ["reward.position_shaping=0.4"])
    assert training_options(cfg.reward) == {"position_shaping": 0.4}  # the rollouts'
    assert "position_shaping" not in options_from_config(cfg.reward)  # the pool's, eval, grading
    assert training_options(load_config(TINY).reward) == {}
    with pytest.raises(ConfigError, match=r"position_shaping=0\.5 reaches curriculum\.success"):
        load_config(TINY, ["reward.position_shaping=0.5"])
    assert load_config(TINY, ["reward.position_shaping=0.5", "curriculum.success_threshold=0.6"])
    with pytest.raises(ConfigError, match="position_shaping and reward.gui_partial_credit"):
        load_config(TINY, ["reward.position_shaping=0.2", "reward.gui_partial_credit=true"])
    with pytest.raises(ConfigError, match=r"reward\.position_shaping: Input should be less than 1"):
        load_config(TINY, ["reward.position_shaping=1"])


def test_rollout_logprobs_as_old_logprobs_must_be_the_policys():
    """learner.grpo.old_logprobs=rollout puts the engines' logprobs in the clipped ratio: they
    must be of the distribution the learner's policy is, tempered exactly when it tempers."""
    base = ["model.tiny=text", "rollout.temperature=0.7", "learner.grpo.epochs=2",
            "learner.grpo.old_logprobs=rollout"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"the policy is the logits over rollout\.temperature"
                       r"=0\.7, but the engines report rollout\.logprobs=raw: set "
                       r"rollout\.logprobs=tempered"):  # fmt: skip
        load_config(None, base)
    ok = load_config(None, [*base, "rollout.logprobs=tempered"])
    assert (ok.rollout.logprobs, ok.learner.grpo.old_logprobs) == ("tempered", "rollout")
    with pytest.raises(ConfigError, match=r"tempered_logprobs is false\), but the engines "
                       r"report rollout\.logprobs=tempered: set rollout\.logprobs=raw"):  # fmt: skip
        load_config(None, [*base, "rollout.logprobs=tempered",
                           "learner.grpo.tempered_logprobs=false"])  # fmt: skip
    # at temperature 1 raw and tempered logprobs are one thing
    assert load_config(None, [*base, "rollout.temperature=1"]).rollout.logprobs == "raw"
    with pytest.raises(ConfigError, match=r"rollout\.logprobs=tempered with rollout\.top_p=0\.9"):
        load_config(None, ["model.tiny=text", "rollout.logprobs=tempered", "rollout.top_p=0.9"])
    assert load_config(None, ["model.tiny=text"]).learner.grpo.old_logprobs == "recompute"


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.synthetic.domains=[math, grounding, gui]",
         "text_only writes each task into its prompt, which only math and ocr can do, not "
         "grounding, gui: leave grounding, gui out of domains, or set text_only false"),
        ("data.synthetic.domains=[]", "domains is empty: name at least one of math, ocr"),
        ("data.synthetic.domains=[math, ocr, math]", "domains names math more than once"),
    ],
)  # fmt: skip
def test_synthetic_domains_the_generators_cannot_build_are_refused_by_the_config(override, message):
    """These stopped the run only once the build began, leaving its directory behind with a
    half-made data/ folder; the config refuses them before anything is written."""
    with pytest.raises(ConfigError) as e:
        load_config(CONFIGS / "tiny-text.yaml", [override])
    assert f"--set: data.synthetic: {message}" in str(e.value)


def test_text_task_domains_match_the_generators():
    from rlcs.config import TEXT_TASK_DOMAINS
    from rlcs.tasks import TEXT_DOMAINS

    assert TEXT_TASK_DOMAINS == TEXT_DOMAINS


def test_a_leading_tilde_in_a_path_is_the_home_folder(tmp_path, monkeypatch):
    """`run.root: ~/runs` made a folder named `~` in the working directory (and the run went
    there); the config's paths expand `~` as a shell would."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home = tmp_path / "home"
    p = write(tmp_path, "model:\n  path: ~/models/m\nrun:\n  root: ~/runs\n  name: r\n"
                        "data:\n  train: [~/data/a.jsonl, data/b.jsonl]\n")  # fmt: skip
    cfg = load_config(p, ["data.eval=[~/data/held.jsonl]", "model.tokenizer_corpus=[~/t.jsonl]"])
    assert cfg.run_dir == home / "runs" / "r"
    assert cfg.model.path == str(home / "models" / "m")
    assert cfg.data.train == [str(home / "data" / "a.jsonl"), "data/b.jsonl"]
    assert cfg.data.eval == [str(home / "data" / "held.jsonl")]
    assert cfg.model.tokenizer_corpus == [str(home / "t.jsonl")]
    assert load_config(p, ["run.root=runs~"]).run.root == "runs~"  # only a leading one

"""What `rlcs demo` says and writes when it ends: the table of per-domain held-out pass rates
after SFT and after RL (the change in points, and RL's mean training reward), the stages' wall
times, the ``RESULT`` line, ``demo.json``, and ``report.md`` with its plots in ``report/``.

``cluster/demo.py`` runs the stages and gathers the summary these read (RL's mean reward per
domain from ``domain_rewards`` here); this module only formats and writes it. The ``RESULT``
line is a contract: its keys and their format, ``RESULT sft_pass_rate=… rl_pass_rate=…
gain_points=… min_domain_rl_reward=… wall_s=…``, are what scripts read. Files are written whole or not at all (``write_atomically``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole, or what it held before: never a part of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _domains(before: dict) -> list[str]:
    return [*sorted(k for k in before if k != "all"), "all"]


def result_table(summary: dict):
    """The table the demo ends with: each domain's held-out pass rate after SFT and after RL,
    the change in points, and its mean training reward in RL (none for "all", nor for a domain
    RL drew no items of)."""
    from rich.table import Table

    before, after, rewards = summary["before"], summary["after"], summary["rl_reward"]
    table = Table(title=f"held-out pass rate, {summary['heldout_items']} items (greedy)")
    for col in ("domain", "after SFT", "after RL", "change (points)", "mean RL reward"):
        table.add_column(col, justify="right" if col != "domain" else "left")
    for d in _domains(before):
        a, b = before[d]["pass_rate"], after[d]["pass_rate"]
        table.add_row(d, f"{a:.1%}", f"{b:.1%}", f"{100 * (b - a):+.1f}",
                      f"{rewards[d]:.3f}" if d in rewards else "")  # fmt: skip
    return table


def wall_line(summary: dict) -> str:
    """``wall time 797s: data 38s, ..., (52 RL iterations)``: this attempt's, its stages', and
    the stages it kept from an earlier one."""
    kept = summary.get("kept_stages", {})
    stages = ", ".join(f"{k} kept" if k in kept else f"{k} {v:.0f}s"
                       for k, v in summary["stage_wall_s"].items())  # fmt: skip
    return (
        f"wall time {summary['wall_s']:.0f}s: {stages} "
        f"({summary.get('rl_iterations', 0)} RL iterations)"
    )


def demo_plots(root: Path, summary: dict) -> list[str]:
    """Draw the report's plots into ``root/report/``: the held-out pass rate from the SFT
    checkpoint (iteration 0) through RL's live evaluations, and the reward per domain. The
    report's lines that show them."""
    from rlcs.report import line_plot
    from rlcs.runlog import read_metrics

    before = summary["before"]
    records = read_metrics(root / "rl")
    plot_dir = root / "report"
    plot_dir.mkdir(exist_ok=True)
    domains = _domains(before)
    lines: list[str] = []
    # iteration 0 is the SFT checkpoint; then RL's live evaluations (run.eval_every)
    # (RL's metrics hold the same figures as step 0, logged from that evaluation for the
    # dashboard, or with run.eval_before_train from one of RL's own)
    evals = [r for r in records if "eval/pass_rate/all" in r and r["step"] > 0]
    heldout = {}
    for d in domains:
        pts = [(0, before[d]["pass_rate"])]
        pts += [(r["step"], r[f"eval/pass_rate/{d}"]) for r in evals if f"eval/pass_rate/{d}" in r]
        heldout[d] = ([x for x, _ in pts], [y for _, y in pts])
    line_plot(plot_dir / "held-out_pass_rate.png", "Held-out pass rate (greedy)", heldout,
              xlabel="RL iteration (0: the SFT checkpoint)")  # fmt: skip
    lines += ["![held-out pass rate](report/held-out_pass_rate.png)", "",
              "Iteration 0 is the SFT checkpoint; the later points are RL's live evaluations, "
              "every `run.eval_every` iterations. The table's *after RL* evaluates the exported "
              "checkpoint again.", ""]  # fmt: skip
    reward = {}
    for d in domains[:-1]:
        pts = [(r["step"], r[f"reward/{d}"]) for r in records if f"reward/{d}" in r]
        if pts:
            reward[d] = ([x for x, _ in pts], [y for _, y in pts])
    if reward:
        line_plot(plot_dir / "reward.png", "RL reward per domain (sampled rollouts)", reward,
                  xlabel="RL iteration")  # fmt: skip
        lines += ["![reward per domain](report/reward.png)", ""]
    return lines


def write_demo_report(root: Path, summary: dict, plots: list[str] | None = None) -> Path:
    """``root/report.md``: the result table, the stages' wall times, the held-out pass rate from
    the SFT checkpoint (iteration 0) through RL's live evaluations, and the reward per domain,
    with links to each stage's own report. ``plots``: ``demo_plots``'s lines, when drawn
    already. Written whole or not at all."""
    if plots is None:
        plots = demo_plots(root, summary)
    before, after, rewards = summary["before"], summary["after"], summary["rl_reward"]
    lines = [
        "# rlcs demo",
        "",
        "```",
        result_line(summary),
        "```",
        "",
        f"Held-out pass rate on {summary['heldout_items']} items (greedy):",
        "",
        "| domain | after SFT | after RL | change (points) | mean RL reward |",
        "|---|---|---|---|---|",
    ]
    for d in _domains(before):
        a, b = before[d]["pass_rate"], after[d]["pass_rate"]
        r = f"{rewards[d]:.3f}" if d in rewards else ""
        lines.append(f"| {d} | {a:.1%} | {b:.1%} | {100 * (b - a):+.1f} | {r} |")
    lines += ["", "| stage | wall time (s) |", "|---|---|"]
    kept = summary.get("kept_stages", {})
    lines += [f"| {k} | kept from an earlier attempt ({kept[k]:.0f} then) |" if k in kept
              else f"| {k} | {v:.0f} |" for k, v in summary["stage_wall_s"].items()]  # fmt: skip
    lines += [f"| total | {summary['wall_s']:.0f} |", ""]
    if "rl_iterations" in summary:
        lines += [f"RL ran {summary['rl_iterations']} iterations.", ""]
    lines += plots
    lines += ["Each stage's own report: " + ", ".join(
        f"[{s}]({s}/report.md)" for s in ("pretrain", "sft", "rl") if (root / s / "report.md").exists()
    ), ""]  # fmt: skip
    out = root / "report.md"
    write_atomically(out, "\n".join(lines))
    return out


def result_line(summary: dict) -> str:
    return (
        f"RESULT sft_pass_rate={summary['sft_pass_rate']:.4f} "
        f"rl_pass_rate={summary['rl_pass_rate']:.4f} gain_points={summary['gain_points']:.2f} "
        f"min_domain_rl_reward={summary['min_domain_rl_reward']:.4f} wall_s={summary['wall_s']:.1f}"
    )


def domain_rewards(metrics: list[dict]) -> dict[str, float]:
    """Mean reward per domain over the whole RL stage (its ``metrics.jsonl`` records)."""
    sums: dict[str, list[float]] = {}
    for rec in metrics:
        for k, v in rec.items():
            # a domain has both reward/D and pass_rate/D; reward/mean does not
            domain = k.split("/", 1)[1] if k.startswith("reward/") else None
            if domain and f"pass_rate/{domain}" in rec:
                sums.setdefault(domain, []).append(v)
    return {d: sum(v) / len(v) for d, v in sums.items()}


def report_results(
    root: Path,
    summary: dict,
    plots: list[str],
    rl_planned: int,
    console: Console,
    say: Callable[[str], None],
) -> Path:
    """What the demo ends with, in this order: the result table and the wall-time line on the
    console, ``root/demo.json`` and ``root/report.md``, where the report is and how to score a
    checkpoint again, the command that carries RL on when the budget stopped it before its
    ``rl_planned`` iterations, and last the ``RESULT`` line. ``plots``: ``demo_plots``'s lines;
    ``say`` prints a line as it is. The report's path."""
    console.print(result_table(summary))
    say(wall_line(summary))
    write_atomically(root / "demo.json", json.dumps(summary, indent=2))
    report = write_demo_report(root, summary, plots)
    say(f"report: {report}")
    say(f"score a checkpoint again, or its samples: rlcs eval {root / 'rl'} --samples 4")
    if summary.get("rl_continue"):
        say(
            f"RL stopped after {summary['rl_iterations']} of its {rl_planned} iterations for the "
            f"time budget; to carry it on from there without a limit: {summary['rl_continue']} "
            f"(then rlcs eval {root / 'rl'})"
        )
    print(result_line(summary), flush=True)
    return report

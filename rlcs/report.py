"""``report.md`` at the end of a run: the main curves as PNG plots, and the last values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcs.runlog import read_metrics

#: Plots of the report: title -> metric-name prefixes drawn on it.
PANELS: dict[str, tuple[str, ...]] = {
    "Reward": ("reward/mean", "reward/"),
    "Pass rate by tier": ("pass_rate/tier/",),
    "Held-out pass rate (greedy)": ("eval/pass_rate/",),
    "Held-out samples (run.eval_samples: sampled pass rate, pass@k)": (
        "eval/sampled_pass_rate/",
        "eval/pass_at_k/",
    ),
    "Logprob mismatch (learner vs engine)": ("logprob_mismatch",),
    "Dynamic expansion": ("curriculum/expansion_ratio", "curriculum/valid_fraction"),
    "Groups a step (rolled out, trained, filtered out)": (
        "curriculum/groups",
        "curriculum/selected",
        "curriculum/filtered",
    ),
    "Response length": ("response/length", "response/forced_answer_rate"),
    "Loss": ("loss",),
    "Time per phase (s)": ("time/",),
    "Errors and restarts (counts)": ("errors/",),
}


def _series(
    records: list[dict[str, Any]], prefixes: tuple[str, ...]
) -> dict[str, tuple[list, list]]:
    names = sorted({k for r in records for k in r if any(k.startswith(p) for p in prefixes)})
    out = {}
    for name in names:
        pts = [(r["step"], r[name]) for r in records if isinstance(r.get(name), (int, float))]
        if pts:
            out[name] = ([p[0] for p in pts], [p[1] for p in pts])
    return out


def line_plot(
    path: Path, title: str, series: dict[str, tuple[list, list]], xlabel: str = "step"
) -> None:
    """One PNG panel: a line (with markers when short) per named series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, label=name, marker="." if len(xs) < 30 else None)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(run_dir: str | Path, title: str | None = None) -> Path:
    """Plot the run's metrics into ``RUN_DIR/report/`` and write ``RUN_DIR/report.md``
    (atomically)."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    plot_dir = run_dir / "report"
    plot_dir.mkdir(exist_ok=True)
    lines = [f"# {title or run_dir.name}", ""]
    if not records:
        lines.append("No metrics were recorded.")
    stages = sorted({r.get("stage", "rl") for r in records})
    for stage in stages:
        rows = [r for r in records if r.get("stage", "rl") == stage]
        steps = sum(1 for r in rows if r.get("step", 0) > 0)
        before = any(r.get("step") == 0 for r in rows)  # run.eval_before_train
        lines += [f"## {stage}", "", f"{steps} steps" + (", and the held-out evaluation before the "
                  "first (step 0)." if before else "."), ""]  # fmt: skip
        for panel, prefixes in PANELS.items():
            series = _series(rows, prefixes)
            if not series:
                continue
            fname = f"{stage}-{panel.split(' (')[0].lower().replace(' ', '_')}.png"
            line_plot(plot_dir / fname, panel, series)
            lines += [f"![{panel}](report/{fname})", ""]
        last = rows[-1]
        lines += ["| metric | last value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in sorted(last.items()) if isinstance(v, float)]
        lines.append("")
    out = run_dir / "report.md"
    # whole or not at all: a run stopped while it writes keeps the report it had
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(out)
    return out

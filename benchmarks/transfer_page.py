"""The transfer figure (issue 35, point 4), from a `table2` results file with several learned rows.

    .venv/bin/python -m benchmarks.transfer_page --results benchmarks/results/table2_halfcheetah_transfer.json \
        --workload HalfCheetah-v5-locomotion --out docs/transfer_halfcheetah.md \
        --figure benchmarks/results/transfer_halfcheetah.png

Each learned row (`--systems learned learned:<ref> ...` in one table run) is a scheduler evaluated
on the same held-out seeds in the same run; its checkpoint's provenance says what its training
cost on the target workload and before it. The page tabulates both, states for each fine-tuned
row how much training from scratch it took to match its held-out time, bracketed by the
from-scratch snapshots (models/report/transfer_table.py), and plots
held-out time to J against the training spent on the target, with the table's best fixed count
and Fixed(8) as lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from models.report.table2_cells import file_digest, workload_parts  # noqa: E402
from models.report.transfer_table import (  # noqa: E402
    MATCH_TOLERANCE,
    TransferRow,
    comparable,
    learned_row_refs,
    transfer_rows,
    verdicts,
)
from models.scheduling.learned import load_scheduler, resolve_checkpoint  # noqa: E402


def figure(rows: list[TransferRow], table: list[dict], workload: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(rows):
        kind = "from scratch" if r.from_scratch else "fine-tuned from " + " -> ".join(r.sources)
        ax.errorbar([r.on_target.wall_s / 60], [r.time_s], yerr=[r.time_s_std], fmt="os"[r.from_scratch],
                    color=f"C{i}", capsize=3, label=f"{r.ref}: {kind}, {r.on_target.episodes} episodes")
    for j, fixed in enumerate(t for t in table if str(t["scheduler"]).startswith(("best fixed", "fixed:8"))):
        ax.axhline(float(fixed["time_s_mean"]), ls=("--", ":")[j % 2], color="grey", lw=1, label=str(fixed["scheduler"]))
    scratch = sorted((r for r in rows if r.from_scratch), key=lambda r: r.on_target.wall_s)
    ax.plot([r.on_target.wall_s / 60 for r in scratch], [r.time_s for r in scratch], color="grey", lw=0.8, zorder=0)
    ax.set(xscale="log", xlabel=f"scheduler training on {workload} (wall minutes, log)",
           ylabel="held-out time to J, cloud clock (s)", title=f"{workload}: transfer against from scratch")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def render(results: dict, workload: str, figure_path: Path | None, page: Path) -> str:
    table = results["tables"][workload]
    refs = {label: ref for label, ref in learned_row_refs(table)}
    unchecked = checked_checkpoints(results, workload, refs)
    provenance = {ref: load_scheduler(resolve_checkpoint(ref)).meta for ref in refs.values()}
    rows = transfer_rows(table, provenance, workload_parts(workload))
    lines = [f"Held-out seeds {' '.join(map(str, results['seeds'][workload]))}, every row from one `table2` run "
             "(its page has the command, dates, commit and machine). Training: the checkpoint's provenance "
             "(wall time on the machine that trained it; the episodes' trainings as billed)"
             + (f"; the table did not record which checkpoint bytes {', '.join(unchecked)} ran (its results file "
                "predates that record): their provenance is the packaged checkpoint's now" if unchecked else "")
             + ".", "",
             "| scheduler | trained before | its training there: episodes, wall, billed | on the target: episodes | "
             "wall (min) | billed (USD) | held-out: reached J | time to J, cloud clock (s) | cost (USD) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        before = ("nothing (from scratch)" if r.from_scratch else " -> ".join(r.sources))
        spent = ("-" if r.from_scratch else
                 f"{r.before.episodes}, {r.before.wall_s / 60:.0f} min, ${r.before.billed_usd:.3f}")
        lines.append(f"| `{r.ref}` | {before} | {spent} | {r.on_target.episodes} | {r.on_target.wall_s / 60:.1f} | "
                     f"{r.on_target.billed_usd:.3f} | {r.reached}/{r.runs} | {r.time_s:.1f} +- {r.time_s_std:.1f} | "
                     f"{r.cost_usd:.5f} |")
    lines.append("")
    lines += [f"- {label}: zero-shot (its scheduler never trained on {workload}), not a transfer."
              for label in refs if label not in {r.row for r in rows}]
    lines += [f"- {r.row}: not compared (reached J on {r.reached} of {r.runs} seeds: its time is not a time to J)."
              for r in rows if not comparable(r)]
    by_row = {r.row: r for r in rows}
    for v in verdicts(rows):
        against = f"first matched by {v.matched_by}" if v.matched_by else "matched by no from-scratch row"
        total = dataclasses.replace(v, wall_s=v.wall_s + by_row[v.fine_tuned].before.wall_s)
        lines.append(f"- {v.fine_tuned} ({v.wall_s / 60:.1f} min of training on the target; {against} within "
                     f"{MATCH_TOLERANCE:.0%} of its held-out time): training saved {v.saving()}; counting its "
                     f"sources' training too ({total.wall_s / 60:.0f} min in all, on the machines that ran each), "
                     f"{total.saving()}.")
    if figure_path is not None:
        figure(rows, table, workload, figure_path)
        lines += ["", f"![transfer]({os.path.relpath(figure_path, page.parent)})"]
    return "\n".join(lines + [""])


def checked_checkpoints(results: dict, workload: str, refs: dict[str, str]) -> list[str]:
    """Refuse (SystemExit) a row whose packaged checkpoint's bytes differ from those its cells ran
    (retrained since: its provenance would not be the one the row measured); the refs whose cells
    recorded no bytes (tables before the record), to say so."""
    unchecked = []
    for label, ref in refs.items():
        ran = {c.get("scheduler_sha256") for c in results.get("cells", [])
               if c["workload"] == workload and c.get("row") == label}
        if not ran or ran == {None}:
            unchecked.append(f"`{ref}`")
        elif ran != {file_digest(resolve_checkpoint(ref))}:
            raise SystemExit(f"{ref}: the checkpoint here is not the one row {label!r} ran (retrained since?): "
                             "re-run the table's row, or check out the commit whose checkpoint it ran")
    return unchecked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="a table2 results file (table2_page.py --json)")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--out", required=True, help="the markdown to write")
    parser.add_argument("--figure", help="also plot it here (a .png)")
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text())
    out = Path(args.out)
    out.write_text(f"# Transfer on {args.workload}\n\n"
                   + render(results, args.workload, Path(args.figure) if args.figure else None, out))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

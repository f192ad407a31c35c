"""Your own mixer against the committed baselines, start to finish, in four steps:

    python examples/walkthrough.py                  # against leaderboards/quickstart.yaml
    python examples/walkthrough.py --against leaderboards/mixers.yaml --executor processes

1. write:   `examples/custom_mixer.py` holds `CausalConvMixer`, an nn.Module whose keyword
            fields become `arch.*` fields;
2. check:   `describe` builds it on the leaderboard's task, proves it causal (and the rest of the
            mixer contract) and counts its parameters beside the baselines';
3. compare: `compare` trains only its runs (same tasks, seeds, budget, criterion and learning-rate
            protocol as the committed spec) next to a copy of the committed rows;
4. read:    the merged table (`compare.md`, Kaplan-Meier medians and exact tests) and the runs
            themselves as a pandas DataFrame (`load_results`).

Run from the repository root (`examples` must be importable). On 2 CPU cores the quickstart
comparison trains 12 runs (4 learning-rate tuning runs, 8 reported seeds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.api import compare, describe, load_results

MIXER = "examples.custom_mixer:CausalConvMixer"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="leaderboards/quickstart.yaml")
    parser.add_argument("--out", default=None, help="[runs/compare/<spec>-<hash>]")
    parser.add_argument("--kernel-size", type=int, default=4)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    # 2. check: on the committed leaderboard's task and backbone size, before anything trains
    baselines = load_results(Path(args.against).with_suffix(""))
    first = baselines.iloc[0]  # the committed task (a grid's first cell)
    task = {k.removeprefix("task."): v for k, v in first.items()
            if k.startswith("task.") and v == v}  # NaN: another task's field
    backbone = {k: int(first[f"arch.{k}"]) for k in ("d_model", "n_layers")}  # matched size
    fields = {"kernel_size": args.kernel_size, **backbone}
    arch = [f"arch.name={MIXER}", *(f"arch.{k}={v}" for k, v in fields.items())]
    mine = describe({"task": task, "arch": {"name": MIXER, **fields}})
    print(f"check: {mine['arch']} passed the mixer contract; {mine['parameters']:,} parameters, "
          f"kernel path {mine['kernel_path']}")
    for name, n in baselines.groupby("arch")["n_params"].median().items():
        print(f"       baseline {name}: {int(n):,} parameters")

    # 3. compare: only the new row trains
    done = compare(args.against, arch, args.out, args.executor, args.workers)

    # 4. read: the merged table (a size more than 20% off the baselines' is noted above it),
    # then the runs as a DataFrame
    print(done["table"].read_text())
    runs = load_results(done["out"])
    reported = runs[~runs.tuning]
    summary = reported.groupby("arch").agg(
        seeds=("seed", "count"),
        solved=("status", lambda s: int((s == "emerged").sum())),
        heldout_acc=("heldout_token_acc", "median"),
        train_acc=("train_token_acc", "median"))
    print(summary.to_string())


if __name__ == "__main__":
    main()

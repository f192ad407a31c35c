"""`bench`: each subcommand is one function; its signature is its schema.

Bad input exits with code 2 and one line on stderr naming the field and what is allowed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from .core.errors import ConfigError, Interrupted

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="emergence-bench: when do token mixers learn sparse mixing patterns?")

Overrides = Annotated[list[str] | None, typer.Argument(help="config overrides, key=value")]


@app.command()
def run(
    overrides: Overrides = None,
    out: Annotated[Path | None, typer.Option(help="run directory [runs/<job id>]")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print result.json to stdout")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    config: Annotated[Path | None, typer.Option(
        help="YAML file of config sections; key=value overrides win over it")] = None,
    print_config: Annotated[bool, typer.Option(
        "--print-config", help="print the resolved config (every field) as YAML and exit")]
    = False,
) -> None:
    """Train one job, e.g. `bench run task.state_size=8 arch.name=transformer seed=3`."""
    from .training.config import load_run_config

    if print_config:
        from omegaconf import OmegaConf

        cfg = load_run_config(overrides or [], config)
        print(f"# job {cfg.job_id()}\n" + OmegaConf.to_yaml(cfg.to_dict()), end="")
        return
    from .api import train

    result = train(overrides or [], out, config, progress=progress and not json_)
    if result is None:  # a rank other than 0 of a multi-device run: rank 0 reports
        return
    if json_:
        print(json.dumps(result, indent=2, default=str))
    else:
        step = result["steps_to_emergence"]
        print(f"{result['status']}" + (f" at step {step}" if step is not None else "")
              + f" ({result['steps']} steps, {result['wall_time_s']:.1f}s); "
              + f"results in {out or Path('runs') / result['job_id']}/result.json")


@app.command()
def sweep(
    spec: Annotated[Path, typer.Argument(help="sweep spec (YAML)")],
    out: Annotated[Path | None, typer.Option(help="output directory [next to SPEC, no .yaml]")]
    = None,
    executor: Annotated[str, typer.Option(help="local, processes, slurm or ray")] = "local",
    workers: Annotated[int | None, typer.Option(
        help="concurrent jobs [processes: #GPUs, else #cores; slurm/ray: 4]")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-O", help="executor option key=value, e.g. -O slurm_partition=gpu")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="spec field key=value, e.g. --set runtime.accelerator=gpu (hardware "
                      "keys leave job ids unchanged)")] = None,
    progress: Annotated[bool, typer.Option(help="show the sweep's progress bar")] = True,
    row: Annotated[list[str] | None, typer.Option(
        help="only this row (config hash or a prefix of it, as `bench status` and the table "
             "show), with its tuning runs; repeatable")] = None,
    reuse: Annotated[list[Path] | None, typer.Option(
        help="a sweep directory whose finished runs of the same job ids are copied in instead "
             "of trained (the table says so); repeatable")] = None,
    reuse_tuning: Annotated[list[Path] | None, typer.Option(
        help="a sweep directory whose finished tuning runs of the same job ids are copied in: "
             "their rates stand and the reported runs train again (a rerun under a changed "
             "measurement); repeatable")] = None,
    tune_only: Annotated[bool, typer.Option(
        "--tune-only", help="run the tuning runs only (`bench status` then shows each rate's "
                            "runs); a later run without it trains the reported seeds")] = False,
    estimate: Annotated[bool, typer.Option(
        "--estimate", help="print the cost plan (jobs, calibrated steps/s, best and worst "
                           "hours) and stop: nothing written")] = False,
    max_hours: Annotated[float | None, typer.Option(
        help="refuse a plan whose worst case (every run to its budget) is above this")] = None,
) -> None:
    """Run every job of SPEC not yet finished (a rerun resumes), then write the leaderboard.
    The cost plan is printed first (--estimate: only the plan)."""
    from .api import sweep as run

    done = run(spec, out, executor, workers, _options(option or []), set_ or [], progress,
               row or [], reuse or [], reuse_tuning or [], tune_only, estimate, max_hours)
    out, counts = done["out"], done["counts"]
    if counts is None:
        return
    if done["leaderboard"]:
        print(done["leaderboard"].read_text())
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"sweep {done['name']}: {summary}; results in {out}/results.sqlite")
    if tune_only and not counts["failed"]:
        print(f"tuning runs only: `bench status {out}` shows each rate's runs; `bench sweep "
              f"{spec}` without --tune-only trains the reported seeds at the rates they chose")
    if counts["failed"]:
        print(f"error: {counts['failed']} job(s) failed; `bench status {out}` lists them, "
              "a rerun retries them", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
def reproduce(
    spec: Annotated[Path, typer.Argument(help="a committed leaderboard spec, e.g. "
                                              "leaderboards/heads.yaml")],
    out: Annotated[Path | None, typer.Option(help="fresh directory [runs/reproduce/<name>]")]
    = None,
    seeds: Annotated[int | None, typer.Option(help="seeds per row [the spec's]")] = None,
    seed_start: Annotated[int, typer.Option(help="first seed (fresh seeds: an independent "
                                                 "replication)")] = 0,
    row: Annotated[list[str] | None, typer.Option(
        help="only this row (config hash or a prefix of it), repeatable")] = None,
    alpha: Annotated[float, typer.Option(help="significance level of a difference")] = 0.05,
    executor: Annotated[str, typer.Option(help="local, processes, slurm or ray")] = "local",
    workers: Annotated[int | None, typer.Option(help="concurrent jobs")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-O",
                                                     help="executor option key=value")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="spec field key=value, e.g. --set runtime.accelerator=gpu")] = None,
    progress: Annotated[bool, typer.Option(help="show the sweep's progress bar")] = True,
) -> None:
    """Rerun a committed leaderboard and test, row by row, whether it agrees (exit 0) or not."""
    from .api import reproduce as run_reproduce

    done = run_reproduce(spec, out, seeds, seed_start, row or [], alpha, executor, workers,
                         _options(option or []), progress, set_ or [])
    print(done["table"].read_text())
    if not done["agrees"]:
        raise typer.Exit(1)


@app.command()
def compare(
    against: Annotated[Path, typer.Option(help="a committed leaderboard spec, e.g. "
                                                "leaderboards/quickstart.yaml")],
    overrides: Overrides = None,
    out: Annotated[Path | None, typer.Option(
        help="fresh directory [runs/compare/<spec name>-<hash of the new arch>]")] = None,
    executor: Annotated[str, typer.Option(help="local, processes, slurm or ray")] = "local",
    workers: Annotated[int | None, typer.Option(help="concurrent jobs")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-O",
                                                     help="executor option key=value")] = None,
    progress: Annotated[bool, typer.Option(help="show the sweep's progress bar")] = True,
    estimate: Annotated[bool, typer.Option(
        "--estimate", help="print the cost plan of the new runs and stop: nothing written")]
    = False,
    max_hours: Annotated[float | None, typer.Option(
        help="refuse a plan whose worst case (every run to its budget) is above this")] = None,
) -> None:
    """Your mixer as a new row of a committed leaderboard: trains only its runs (same tasks,
    seeds, budget, criterion and learning-rate protocol), reuses the committed rows, prints the
    merged table: `bench compare arch.name=pkg.mod:MyMixer --against SPEC.yaml`. The cost plan
    is printed first (--estimate: only the plan)."""
    from .api import compare as run_compare

    done = run_compare(against, overrides or [], out, executor, workers, _options(option or []),
                       progress, estimate, max_hours)
    if done["table"] is not None:
        print(done["table"].read_text())


@app.command()
def suite(
    overrides: Annotated[list[str] | None, typer.Argument(
        help="the mixer: arch.name=... arch.FIELD=... plugins=[...] (none: the suite's own rows)")]
    = None,
    tier: Annotated[str, typer.Option(help="smoke (minutes; no verdict) or standard")] = "smoke",
    suite_file: Annotated[Path, typer.Option("--suite", help="the suite file")]
    = Path("leaderboards/suite.yaml"),
    out: Annotated[Path | None, typer.Option(
        help="fresh directory, one subdirectory per cell [runs/suite/<suite>-<tier>-<hash>]")]
    = None,
    executor: Annotated[str, typer.Option(help="local, processes, slurm or ray")] = "local",
    workers: Annotated[int | None, typer.Option(help="concurrent jobs")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-O",
                                                     help="executor option key=value")] = None,
    progress: Annotated[bool, typer.Option(help="show each cell's progress bar")] = True,
    estimate: Annotated[bool, typer.Option(
        "--estimate", help="print the cost plan of every cell's runs and stop: nothing written")]
    = False,
    max_hours: Annotated[float | None, typer.Option(
        help="refuse a plan whose worst case (every run to its budget) is above this")] = None,
) -> None:
    """Your mixer against the standard suite in one command: every cell is a `bench compare`
    against its committed rows, one cost plan first, the report last (smoke.md, or the
    scorecard); rerun the same command to resume: `bench suite arch.name=pkg.mod:MyMixer`."""
    from .api import suite as run_suite

    done = run_suite(suite_file, tier, overrides or [], out, executor, workers,
                     _options(option or []), progress, estimate, max_hours)
    if done["report"] is not None:
        print(done["report"].read_text())


def _options(items: list[str]) -> dict:
    from omegaconf import OmegaConf

    for item in items:
        if "=" not in item:
            raise ConfigError(f"-O {item}: expected key=value")
    return OmegaConf.to_container(OmegaConf.from_dotlist(items))


@app.command()
def leaderboard(directory: Annotated[Path, typer.Argument(help="a sweep's output directory")]):
    """Re-render leaderboard.md, leaderboard.csv and emergence.png from the results database."""
    from .api import leaderboard as render

    print(render(directory).read_text())


@app.command()
def status(
    directory: Annotated[Path, typer.Argument(help="a sweep's output directory")],
    json_: Annotated[bool, typer.Option("--json", help="one JSON object instead")] = False,
) -> None:
    """Where a sweep stands: jobs per status, per configuration, failures, live or not, ETA."""
    from .api import status as sweep_status

    report = sweep_status(directory)
    print(json.dumps(report, indent=2) if json_ else report["text"])


@app.command()
def patch(
    run_dir: Annotated[Path, typer.Argument(help="a run directory with analysis checkpoints")],
    pre: Annotated[int | None, typer.Option(
        help="step of the pre-emergence checkpoint [the last on the plateau]")] = None,
    post: Annotated[int | None, typer.Option(
        help="step of the post-emergence checkpoint [the first at or after emergence]")] = None,
    curve: Annotated[bool, typer.Option(
        help="patch from every kept checkpoint between the plateau's end and --post instead "
             "(RUN_DIR/patch/curve.*)")] = False,
) -> None:
    """Attention patching: the pre model with heads' attention taken from the post model (one
    at a time, greedy sets, the ground truth); writes RUN_DIR/patch/."""
    from .api import patch as run_patch
    from .measures.patching import curve_markdown, to_markdown

    report = run_patch(run_dir, pre, post, curve)
    print(curve_markdown(report) if curve else to_markdown(report))


@app.command()
def circuits(
    run_dir: Annotated[Path, typer.Argument(
        help="a run on the induction task with analysis checkpoints")],
    threshold: Annotated[list[str] | None, typer.Option(
        help="CLASS=RATIO, a class's selectivity threshold (> 1; repeatable) [induction=50, "
             "duplicate=30, previous=30, first=30, self=30, local=10]")] = None,
    sequences: Annotated[int, typer.Option(
        min=1, max=100_000, help="screen batch: induction sequences")] = 2000,
) -> None:
    """Head screen over the run's checkpoints: every head's class (induction, duplicate,
    previous, first/sink, self, local) and participation ratio, formation steps, early
    identification, group ablation; writes RUN_DIR/circuits/."""
    from .api import circuits as screen
    from .measures.circuits import to_markdown

    print(to_markdown(screen(run_dir, threshold or [], sequences)))


@app.command()
def site(
    out: Annotated[Path, typer.Option(help="where the HTML pages go")] = Path("site"),
    root: Annotated[Path, typer.Option(
        help="the repository: README.md and leaderboards/NAME.yaml with NAME/leaderboard.md")]
    = Path("."),
    directory: Annotated[list[Path] | None, typer.Option(
        "--dir", help="also a page for this compare or suite output directory; repeatable")]
    = None,
) -> None:
    """Render every committed leaderboard and suite report as a static HTML site (index.html:
    the verdicts), and your compare or suite directories with --dir."""
    from .api import site as build_site

    pages = build_site(root, out, directory or [])
    print(f"{len(pages)} pages in {out}/ (open {out / 'index.html'}; figures are linked relative "
          "to it, so serve the repository root)")


@app.command(name="ls")
def ls(
    what: Annotated[str, typer.Argument(help="tasks or archs")],
    name: Annotated[str | None, typer.Argument(help="only this one")] = None,
    json_: Annotated[bool, typer.Option("--json", help="one JSON object instead")] = False,
) -> None:
    """List the tasks or architectures with every field, its default and what it means
    (`bench ls archs transformer`, or a plug-in: `bench ls archs my_pkg.mixers:MyMixer`). Loads
    no torch but for a plug-in: task configs are torch-free and the built-in architectures'
    configs are read from their source."""
    from .core.schema import describe, describe_registry, to_text

    if what == "tasks":
        from datamodules import TASKS

        registry = {k: describe(v) for k, v in TASKS.items()}
    elif what == "archs" and name is not None and ":" in name:  # a plug-in: imported here
        from architectures import ContractError, resolve

        try:
            registry = {name: describe(resolve(name))}
        except ContractError as e:
            raise ConfigError(f"ls archs: {e}") from None
    elif what == "archs":
        registry = describe_registry("architectures", "ARCHITECTURES")
    else:
        raise ConfigError(f"ls: unknown '{what}'; allowed: tasks, archs")
    if name is not None and name not in registry:
        raise ConfigError(f"ls {what}: unknown '{name}'; allowed: {', '.join(registry)}")
    chosen = {k: v for k, v in registry.items() if name in (None, k)}
    if json_:
        print(json.dumps({k: [f._asdict() for f in v] for k, v in chosen.items()},
                         indent=2, default=str))
    else:
        print("\n\n".join(to_text(k, v) for k, v in chosen.items()))


@app.command()
def describe(
    overrides: Overrides = None,
    config: Annotated[Path | None, typer.Option(help="a YAML run config; overrides win")] = None,
    json_: Annotated[bool, typer.Option("--json", help="one JSON object instead")] = False,
    against: Annotated[Path | None, typer.Option(
        help="a committed leaderboard spec: its baselines' sizes beside this config's, and the "
             "d_model that matches them")] = None,
) -> None:
    """What a run config builds, without training: parameters per layer, state per layer, the
    kernel path on this machine and the memory estimate (`bench describe arch.name=mamba`);
    with --against SPEC, the board's baselines' sizes and a matching d_model."""
    from .api import describe as describe_config
    from .tools.describe import sizes_against, sizes_text, to_text

    report = describe_config(overrides or [], config)
    if against is not None:
        from .training.config import load_run_config

        report["against"] = sizes_against(load_run_config(overrides or [], config), against)
    text = to_text(report) + ("\n" + sizes_text(report["against"]) if against else "")
    print(json.dumps(report, indent=2, default=str) if json_ else text)


@app.command()
def perf(
    arch: Annotated[list[str] | None, typer.Option(
        help="a mixer in bench run's syntax, e.g. 'arch.name=mamba arch.expand=1' or a plug-in "
             "'arch.name=pkg.mod:Class arch.k=8'; a bare NAME works too; repeatable "
             "[the five of leaderboards/mixers.yaml]")]
    = None,
    sizes: Annotated[str, typer.Option(help="quickstart and/or lengths in tokens")]
    = "quickstart,64,256,1024",
    repeats: Annotated[int, typer.Option(help="timed stretches per path and size")] = 3,
    batch: Annotated[int, typer.Option(help="sequences per step at the lengths")] = 8,
    seconds: Annotated[float, typer.Option(help="target length of one timed stretch")] = 1.5,
    warmup: Annotated[int, typer.Option(help="untimed steps first")] = 5,
    compile_: Annotated[bool, typer.Option(
        "--compile", help="also measure runtime.compile=true (first size only)")] = False,
    accelerator: Annotated[str, typer.Option(help="cpu or gpu")] = "cpu",
    out: Annotated[Path, typer.Option(help="where perf.md, perf.json, perf.png go")]
    = Path("runs/perf"),
    seeds_per_hour: Annotated[int, typer.Option(
        "--seeds-per-hour", min=0, max=100_000,
        help="also measure quickstart seeds per hour per executor setting, training this "
             "many steps per worker (0 = off)")] = 0,
) -> None:
    """Time the suite's Lightning step against a bare PyTorch loop, per mixer and length."""
    from .sweeps.results import check_out_dir
    from .tools.perf import DEFAULT_ARCHS, run_perf

    check_out_dir(out)
    run_perf(arch or DEFAULT_ARCHS, sizes.split(","), repeats, batch, seconds, warmup, compile_,
             accelerator, out, seeds_per_hour)
    print((out / "perf.md").read_text())


@app.command()
def task(
    name: Annotated[str, typer.Argument(help="task name (`bench ls tasks` lists them)")],
    overrides: Overrides = None,
    samples: Annotated[int, typer.Option(min=1, max=1000, help="sequences to draw")] = 2,
    seed: Annotated[int, typer.Option(help="run seed: draws the sequences and, with "
                                            "task_seed=per_seed, the task instance")] = 0,
    json_: Annotated[bool, typer.Option("--json", help="one JSON object instead")] = False,
) -> None:
    """Show N sequences of a task and its hidden rule, e.g. `bench task linear_map sparsity=3`
    (`task.sparsity=3` as in `bench run` works too)."""
    from .training.sections import load_task_config

    # `task.`-prefixed keys too: what a user copies from a `bench run` line
    items = [item.removeprefix("task.") for item in overrides or []]
    config = load_task_config([f"name={name}", *items])  # before torch loads
    if config.name != name:  # an override's name= would silently win over the argument
        raise ConfigError(f"name: the command names task '{name}' and an override names "
                          f"'{config.name}'; give the task once")

    import torch

    from datamodules import build_task
    from datamodules.base import make_generator
    try:
        t = build_task(config, seed=seed)
        split, references = t.split_sizes(), t.references()
    except ValueError as e:
        raise ConfigError(f"task.{e}") from None
    tokens, hidden = t.inspect(samples, make_generator(seed, 2, 0, torch.device("cpu")))
    if json_:
        print(json.dumps({
            "task": name, "config": vars(config), "instance_seed": t.instance_seed,
            "split": split, "references": references, "flags": t.flags(),
            "tokens": tokens.tolist(), "loss_mask": t.loss_mask().long().tolist(),
            "attention_target": t.attention_target().tolist(), **hidden,
        }))
        return
    print(f"{name}: {t.summary()}; instance {t.instance_seed}")
    print(f"split: {t.split_text(split)}")
    print("held-out token accuracy of: chance {chance:.3f}, no context {no:.3f}, Bayes-optimal "
          "{top:.3f}".format(chance=references["chance"]["token_acc"],
                             no=references["no_context"]["token_acc"],
                             top=references["ceiling"]["token_acc"]))
    for flag in t.flags():
        print(f"flagged: {flag}")
    for i, seq in enumerate(tokens):
        print(f"\nsample {i}{t.sample_note(hidden, i)}")
        for row in t.sample_rows(seq):
            print(row)
    print()
    for line in t.rule_text(hidden):
        print(line)


def main() -> None:
    """The `bench` command: bad input of any kind is one `error:` line and exit 2."""
    try:  # typer >= 0.25 vendors click
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
    except ImportError:
        from click.exceptions import ClickException, NoArgsIsHelpError
    try:
        code = app(prog_name="bench", standalone_mode=False)
    except NoArgsIsHelpError as e:  # a bare `bench` or `bench sweep`: the help, not an error
        print(e.ctx.get_help() if e.ctx else e.format_message(), file=sys.stderr)
        sys.exit(2)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as e:  # Ctrl-C during a sweep: its one line, the shell's 128 + SIGINT
        print(str(e), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # the database is closed and the lock released by now; exit without waiting on the
        # process pool's management thread, which can block on the workers just terminated
        os._exit(130)
    except ClickException as e:  # usage: an unknown option, a value of the wrong type, ...
        where = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) else ""
        print(f"error: {where}{e.format_message()}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

"""Where a sweep's jobs run: one `execute` function, four ways to call it.

`execute(config, out)` runs one job in whatever process it lands in: it claims the job's row in
the results database, trains into `out/runs/<job id>/`, and records the outcome, or the error if
the job raised. Executors only decide where that call happens, and yield each job's summary as it
completes:

- `local`: in this process, one job after another (the default; no server, no subprocess).
- `processes`: N spawned worker processes; on CUDA machines worker k sees GPU k mod #GPUs, so
  several runs share a device when N exceeds the device count. On CPU each worker gets
  #cores / N threads.
- `slurm`: a submitit job array on a Slurm cluster (`cluster=local` runs the array as local
  processes, for testing, each with #cores / N threads as above); the sweep directory must be
  on a filesystem the nodes share.
- `ray`: Ray tasks on the cluster at `address` (or `RAY_ADDRESS`), else on a local Ray instance.

Options reach an executor as `-O key=value` on the command line.
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, install_hint
from ..core.rows import job_id as config_job_id
from .results import ResultsDB

Summary = dict[str, Any]  # {"id", "status", "error"?}


def execute(config: dict[str, Any], out: str) -> Summary:
    """Run one job here and record it in `out`'s results database."""
    from ..measures.run import train
    from ..training.checkpoint import resume_path
    from ..training.config import load_run_config
    from ..training.run import versions

    job_id = config_job_id(config)  # known before the config is resolved (plug-ins imported)
    db = ResultsDB(Path(out) / ResultsDB.FILENAME)
    try:
        db.claim(job_id)
        run_dir = Path(out) / "runs" / job_id
        if not resume_path(run_dir).is_file():  # an interrupted attempt resumes from it
            shutil.rmtree(run_dir, ignore_errors=True)  # else: start clean
        try:  # a plug-in module that fails to import here fails this job, not the sweep
            result = train(load_run_config(config), run_dir, progress=False)
        except Exception as e:  # the job failed; the sweep goes on
            db.fail(job_id, traceback.format_exc(), versions())
            return {"id": job_id, "status": "failed", "error": _last_line(e)}
        db.finish(job_id, result)
        return {"id": job_id, "status": result["status"]}
    finally:
        db.close()


def _last_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"


# --- the executors -------------------------------------------------------------------------
Executor = Callable[[list[dict[str, Any]], Path, int, dict[str, Any]], Iterator[Summary]]


def run_local(configs, out, workers, options) -> Iterator[Summary]:
    for config in configs:
        yield execute(config, str(out))


def run_processes(configs, out, workers, options) -> Iterator[Summary]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("spawn")  # fork would copy this process's threads and CUDA state
    slot = ctx.Value("i", 0)
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(slot, workers, _visible_gpus()))
    interrupted = False
    try:
        futures = [pool.submit(execute, config, str(out)) for config in configs]
        for future in as_completed(futures):
            try:
                yield future.result()
            except BrokenProcessPool:
                raise RuntimeError("a worker process died (killed or out of memory); "
                                   "rerun the sweep to resume") from None
    except KeyboardInterrupt:  # Ctrl-C: the workers ignore it; stop them here, now
        interrupted = True
        stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)


def stop_workers(pool, grace: float = 5.0) -> None:
    """Terminate a process pool's workers (SIGTERM, then SIGKILL after `grace` seconds): their
    jobs stay `running` in the database, with their resume checkpoints, for the sweep to
    requeue."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _visible_gpus() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    return ids[: torch.cuda.device_count()]


def _init_worker(slot, workers: int, gpus: list[str]) -> None:
    with slot.get_lock():
        index = slot.value
        slot.value += 1
    gpu, threads = placement(index, workers, gpus, os.cpu_count() or 1)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    import signal

    import torch

    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group:
    _die_with_parent()  # the parent alone decides, and stops the workers (stop_workers)


def placement(index: int, workers: int, gpus: list[str], cpus: int) -> tuple[str | None, int]:
    """Worker `index` of `workers`: the GPU it sees (round robin, so several workers may share
    one) and its CPU threads (an equal share of the cores)."""
    return (gpus[index % len(gpus)] if gpus else None), max(1, cpus // workers)


def _die_with_parent() -> None:
    """Linux: a worker is killed when the sweep process dies, so no orphan finishes a job late."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_slurm(configs, out, workers, options) -> Iterator[Summary]:
    executor = _slurm_executor(out / "slurm", workers, options)
    # a local array shares this machine's cores as the processes executor's workers do (on a
    # cluster each task has its own allocation, whose cores torch sees)
    threads = (placement(0, workers, [], os.cpu_count() or 1)[1]
               if options.get("cluster") == "local" else 0)
    jobs = executor.map_array(_execute_with_threads, configs, [str(out)] * len(configs),
                              [threads] * len(configs))
    pending = dict(zip(jobs, configs))
    while pending:
        for job in [j for j in pending if j.done()]:
            config = pending.pop(job)
            try:
                yield job.result()
            except Exception as e:  # the array task itself died: timeout, preemption, node loss
                yield _record_lost(config, out, f"slurm job {job.job_id}: {_last_line(e)}")
        if pending:
            time.sleep(0.5)


def _execute_with_threads(config: dict[str, Any], out: str, threads: int) -> Summary:
    """`execute` on `threads` CPU threads (0: torch's default for this process)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    return execute(config, out)


def _slurm_executor(folder: Path, workers: int, options: dict[str, Any]):
    import submitit

    options = dict(options)
    cluster = options.pop("cluster", "slurm")
    if cluster not in ("slurm", "local"):
        raise ConfigError(f"-O cluster: must be slurm or local, got '{cluster}'")
    try:
        executor = submitit.AutoExecutor(folder=folder / "%j", cluster=cluster)
    except RuntimeError as e:  # no srun here
        raise ConfigError(f"--executor: slurm: {str(e).splitlines()[0]} "
                          "(-O cluster=local runs the array on this machine)") from None
    try:
        executor.update_parameters(**{"timeout_min": 60, "slurm_array_parallelism": workers,
                                      "name": "emergence-bench", **options})
    except (NameError, AssertionError, TypeError, ValueError) as e:
        raise ConfigError(f"-O: {str(e).splitlines()[0]}") from None
    return executor


def run_ray(configs, out, workers, options) -> Iterator[Summary]:
    import ray

    options = dict(options)
    resources = {"num_cpus": options.pop("cpus_per_job", 1),
                 "num_gpus": options.pop("gpus_per_job", 0)}
    if not ray.is_initialized():
        address = options.pop("address", None) or os.environ.get("RAY_ADDRESS")
        local = {} if address else {"num_cpus": workers * resources["num_cpus"]}
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **local, **options)
    remote = ray.remote(**resources)(execute)
    queue, running = list(configs), {}
    while queue or running:
        while queue and len(running) < workers:
            config = queue.pop(0)
            running[remote.remote(config, str(out))] = config
        done, _ = ray.wait(list(running), num_returns=1)
        config = running.pop(done[0])
        try:
            yield ray.get(done[0])
        except Exception as e:  # the worker process died under Ray
            yield _record_lost(config, out, f"ray task: {_last_line(e)}")


def _record_lost(config: dict[str, Any], out: Path, error: str) -> Summary:
    """A job whose process died before it could record itself: recorded failed from here."""
    from ..training.run import versions

    job_id = config_job_id(config)
    db = ResultsDB(out / ResultsDB.FILENAME)
    try:
        db.fail(job_id, error, versions())
    finally:
        db.close()
    return {"id": job_id, "status": "failed", "error": error}


EXECUTORS: dict[str, tuple[Executor, str | None]] = {
    # name: (runner, the module it needs and the extra that installs it)
    "local": (run_local, None),
    "processes": (run_processes, None),
    "slurm": (run_slurm, "submitit"),
    "ray": (run_ray, "ray"),
}
EXTRAS = {"submitit": "slurm", "ray": "ray"}


def resolve_executor(name: str, workers: int, options: dict[str, Any]) -> Executor:
    """The executor called `name`, checked before anything is written."""
    if name not in EXECUTORS:
        raise ConfigError(f"--executor: unknown '{name}'; allowed: {', '.join(EXECUTORS)}")
    runner, module = EXECUTORS[name]
    if module:
        import importlib.util

        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"--executor: '{name}' needs {module}; "
                              f"{install_hint(EXTRAS[module])}")
    if workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    allowed = {"local": set(), "processes": set(), "ray": {"address", "cpus_per_job",
                                                            "gpus_per_job", "namespace"}}
    if name in allowed and set(options) - allowed[name]:
        bad = sorted(set(options) - allowed[name])[0]
        hint = ", ".join(sorted(allowed[name])) or "none"
        raise ConfigError(f"-O {bad}: not an option of the {name} executor; allowed: {hint}")
    if name == "slurm":  # validate the options on a throwaway folder: nothing lands in `out`
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:  # option names first, then the cluster
            _slurm_executor(Path(scratch), workers, {**options, "cluster": "local"})
            _slurm_executor(Path(scratch), workers, options)
    return runner

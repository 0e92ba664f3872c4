"""Running the plan: pretraining as bertjax-train processes, then in this process the held-out
scores, the downstream runs and the polysemy view. Every step is skipped when its files say it
finished, so re-running the study resumes it; each step's wall time goes into its record.

bertjax-train gets the experiment's gin file, the model's bindings, its budget
(`NUM_STEPS`), its seed (`SEED`: initialisation, dropout and data order) and the study's
corpus (`CORPUS`); the study's experiment files bind those macros.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

from families_study import interrupts
from families_study.config import REPO, Study
from families_study.data import StudyData
from families_study.downstream import DONE, run_downstream
from families_study.plan import Plan, Pretraining

Log = Callable[[str], None]


def train_command(run: Pretraining, root: pathlib.Path, data: StudyData) -> list[str]:
    """The bertjax-train command line of one pretraining run."""
    return [sys.executable, "-m", "bertjax.cli.train", f"--workdir={root / run.workdir}",
            f"--gin_file={run.experiment}", f"--gin.NUM_STEPS={run.steps}",
            f"--gin.SEED={run.seed}", f"--gin.CORPUS='{data.pretrain}'",
            *(f"--gin.{b.replace(' ', '')}" for b in run.bindings), "--noprogress"]


def compile_command(run: Pretraining, study: Study) -> list[str]:
    """The bertjax-compile command line of one pretraining run on the study's compile target."""
    if not study.compile_mesh:
        raise ValueError("the study names no compile target: set families_study.compile_mesh "
                         "to a configs/meshes/tpu_*.gin file")
    return [sys.executable, "-m", "bertjax.cli.compile", f"--gin_file={run.experiment}",
            f"--gin_file={study.compile_mesh}", f"--gin.NUM_STEPS={run.steps}",
            *(f"--gin.{b.replace(' ', '')}" for b in run.bindings)]


def compile_plan(plan: Plan, study: Study, log: Log) -> bool:
    """bertjax-compile for each pretraining model of the study (its first seed): prints each
    report; True when every model's step fits its target."""
    fits = True
    for run in plan.pretraining:
        if run.seed != 0:
            continue
        command = compile_command(run, study)
        log(f"compile {run.model}: {' '.join(command[1:])}")
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        print(result.stdout, end="", flush=True)
        if result.returncode != 0:
            fits = False
            print((result.stderr.strip().splitlines() or ["(no output)"])[-1], flush=True)
    return fits


def environment(root: pathlib.Path) -> dict[str, str]:
    """The tools' environment: one persistent JAX compilation cache for the whole study (the
    same programs recur across seeds), unless the caller chose one."""
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / "jax_cache"))
    return env


def pretrain(run: Pretraining, root: pathlib.Path, data: StudyData, log: Log) -> float:
    """Run (or resume) one pretraining; its wall seconds, recorded in its study.json once
    its last step is saved (not when a signal stopped it: the rerun resumes it)."""
    from bertjax.training.workdir import latest_checkpoint

    workdir = root / run.workdir
    done = workdir / DONE
    if done.is_file():
        return json.loads(done.read_text(encoding="utf-8"))["seconds"]
    command = train_command(run, root, data)
    log(f"pretrain {run.workdir} ({run.steps} steps)")
    start = time.perf_counter()
    process = interrupts.start(command, cwd=REPO, env=environment(root),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate()
    finally:
        interrupts.finished(process)
    seconds = time.perf_counter() - start
    interrupts.check()  # the study was stopped: the run saved where it was
    tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
    if process.returncode != 0:
        raise RuntimeError(f"pretraining {run.workdir} failed (exit {process.returncode}): "
                           f"{tail}")
    saved = latest_checkpoint(workdir)
    if saved != run.steps:  # a signal to the run alone stopped it
        raise RuntimeError(f"pretraining {run.workdir} stopped at step {saved} of {run.steps} "
                           f"({tail}): rerun the study to resume it")
    workdir.mkdir(parents=True, exist_ok=True)
    record = {"command": command[1:], "seconds": round(seconds, 1), "steps": run.steps}
    (workdir / DONE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return seconds


def score_held_out(run: Pretraining, study: Study, root: pathlib.Path, data: StudyData,
                   log: Log) -> dict:
    """heldout.json of a pretraining run: its held-out score and the unigram model's."""
    from bertjax.analysis.heldout import held_out

    path = root / run.workdir / "heldout.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    record = json.loads((root / run.workdir / "model.json").read_text(encoding="utf-8"))
    start = time.perf_counter()
    if record.get("objective") == "bert_ltr_pretraining":  # no masked-LM head to score
        score = {"family": run.family, "target": "none (left-to-right BERT)", "targets": 0}
    else:
        log(f"held-out score {run.workdir}")
        score = held_out(str(root / run.workdir), run.family, str(data.heldout),
                         str(data.pretrain), study.heldout_batches).as_dict()
    score["seconds"] = round(time.perf_counter() - start, 1)
    path.write_text(json.dumps(score, indent=1) + "\n", encoding="utf-8")
    return score


def use_compilation_cache(root: pathlib.Path) -> None:
    """This process's JAX compilation cache: the one the tools get (`environment`)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", environment(root)["JAX_COMPILATION_CACHE_DIR"])


def execute(plan: Plan, study: Study, root: pathlib.Path, data: StudyData, log: Log,
            jobs: int = 1) -> None:
    """Every run of the plan, in order: pretraining (`jobs` processes at a time), held-out
    scores, downstream, senses."""
    from families_study.senses import run_senses

    use_compilation_cache(root)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for future in [pool.submit(pretrain, run, root, data, log) for run in plan.pretraining]:
            future.result()  # the first failure or signal stops the study, with its message
    finally:  # no run waiting its turn starts; the runs under way end (saved, on a signal)
        pool.shutdown(wait=True, cancel_futures=True)
    for run in plan.pretraining:
        score_held_out(run, study, root, data, log)
    for n, job in enumerate(plan.downstream, 1):
        if not (root / job.workdir / DONE).is_file():
            log(f"downstream {n}/{len(plan.downstream)}: {job.workdir}")
        run_downstream(job, study, root, data)
        interrupts.check()  # a signal its run took after its last step
    if not study.polysemy:
        return
    for seed in range(study.seeds):
        for family in ("bert", "gpt", "elmo"):
            source = next(p for p in plan.pretraining
                          if p.model == family and p.seed == seed % study.seeds_of(family))
            for init in ("pretrained", "random"):
                out = root / "senses" / f"{family}-{init}" / f"seed={seed}"
                if not (out / "senses.json").is_file():
                    log(f"senses {family}-{init} seed={seed}")
                run_senses(family, init, seed, root / source.workdir, out)

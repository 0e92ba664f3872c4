"""Running the plan: pretraining as bertjax-train processes, held-out scores, the learning
curve's points (frozen features once per model, then the bag-of-words baselines and probes
in this process, then the fine-tuned points in `jobs` worker processes), and the polysemy
view. Every step is skipped when its files say it finished, so re-running the study resumes
it; each step's wall time goes into its record.

bertjax-train gets the experiment's gin file, the model's bindings, its budget
(`NUM_STEPS`), its seed (`SEED`) and the study's corpus (`CORPUS`); the study's experiment
files bind those macros.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

from families_study import curve, interrupts
from families_study.config import REPO, Study
from families_study.data import StudyData, read_texts
from families_study.draws import make_draw
from families_study.plan import Baseline, Plan, Point, Pretraining

Log = Callable[[str], None]
DONE = "study.json"


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
    """bertjax-compile for each pretraining model of the study: prints each report; True when
    every model's step fits its target."""
    fits = True
    for run in plan.pretraining:
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
    same programs recur across points), unless the caller chose one."""
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


def _draw(study: Study, data: StudyData, labels: int, draw: int):
    return make_draw(read_texts(data.agnews_train)[1], labels, draw)


def run_point(point: Point, study: Study, root: pathlib.Path, data: StudyData) -> dict:
    """One learning-curve point (curve.py), unless its record says it finished."""
    path = root / point.workdir / DONE
    if (finished := curve.done(path)) is not None:
        return finished
    start = time.perf_counter()
    draw = _draw(study, data, point.labels, point.draw)
    pretrained = root / point.pretraining.workdir
    if point.approach == "finetuned":
        value = curve.fine_tuned(point.family, study.finetune.get(point.family, {}),
                                 study.learning_rates[point.family], point.init, pretrained,
                                 draw, data.agnews_train, data.agnews_test,
                                 root / point.workdir, study.min_steps, study.min_epochs)
    else:
        features = curve.cached_features(root, point.model, point.family, point.init,
                                         point.draw, pretrained, data.agnews_train,
                                         data.agnews_test, study.probe_max_length)
        value = curve.probed(features, draw, data.agnews_train, data.agnews_test)
    return curve.record(path, value, time.perf_counter() - start)


def run_baseline(baseline: Baseline, study: Study, root: pathlib.Path,
                 data: StudyData) -> dict:
    """One bag-of-words point, unless its record says it finished."""
    path = root / baseline.workdir / DONE
    if (finished := curve.done(path)) is not None:
        return finished
    start = time.perf_counter()
    draw = _draw(study, data, baseline.labels, baseline.draw)
    value = curve.bag_of_words(baseline.kind, draw, data.agnews_train, data.agnews_test)
    return curve.record(path, value, time.perf_counter() - start)


def _worker_setup(scripts: str, cache: str) -> None:
    """A worker process: the study's modules importable, the study's compilation cache."""
    sys.path.insert(0, scripts)
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)


def _run_points(points: list[Point], study: Study, root: pathlib.Path, data: StudyData,
                log: Log, jobs: int) -> None:
    """The fine-tuned points, in this process (jobs=1) or in `jobs` fresh worker processes
    (each compiles once, then reuses its programs from the study's cache)."""
    todo = [p for p in points if not (root / p.workdir / DONE).is_file()]
    if jobs <= 1:
        for n, point in enumerate(todo, 1):
            log(f"fine-tune {n}/{len(todo)}: {point.workdir}")
            run_point(point, study, root, data)
            interrupts.check()  # a signal its run took after its last step
        return
    context = multiprocessing.get_context("spawn")
    cache = environment(root)["JAX_COMPILATION_CACHE_DIR"]
    pool = concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_setup,
        initargs=(str(REPO / "scripts"), cache))
    try:  # a signal reaches the workers too: each run under way saves and stops
        futures = {pool.submit(run_point, p, study, root, data): p for p in todo}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            future.result()  # the first failure or signal stops the study, with its message
            log(f"fine-tuned {n}/{len(todo)}: {futures[future].workdir}")
            interrupts.check()
    finally:  # no point waiting its turn starts
        pool.shutdown(wait=True, cancel_futures=True)


def execute(plan: Plan, study: Study, root: pathlib.Path, data: StudyData, log: Log,
            jobs: int = 1) -> None:
    """Every run of the plan, in order (module docstring)."""
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
    log(f"bag-of-words: {len(plan.baselines)} points")
    for baseline in plan.baselines:
        run_baseline(baseline, study, root, data)
    probes = [p for p in plan.points if p.approach == "features"]
    for n, point in enumerate(probes, 1):
        if not (root / point.workdir / DONE).is_file():
            log(f"probe {n}/{len(probes)}: {point.workdir}")
        run_point(point, study, root, data)
        interrupts.check()
    _run_points([p for p in plan.points if p.approach == "finetuned"], study, root, data,
                log, jobs)
    if not study.polysemy:
        return
    for run in plan.pretraining:
        if run.model not in ("bert", "gpt", "elmo"):
            continue
        for init in ("pretrained", "random"):
            out = root / "senses" / f"{run.model}-{init}"
            if not (out / "senses.json").is_file():
                log(f"senses {run.model}-{init}")
            run_senses(run.family, init, 0, root / run.workdir, out)

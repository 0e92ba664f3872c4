"""bertjax-report: the runs of a sweep side by side: each run's swept settings and final
metrics in a markdown table and a CSV, and their loss / accuracy curves in a PNG.

    bertjax-report workdir/table5/finetune/* --out=workdir/table5/report

RUN_DIRS are bertjax-train or bertjax-finetune workdirs. The settings are those in the workdir
names (`NAME=VALUE,...`, as scripts/sweep.py names them), else the gin bindings (config.gin)
that differ between the runs; a fine-tuning run also shows the pretraining run it started from
(WORKDIR/init.txt) as pretrain_* columns. Training metrics are the mean of the last --last
logged steps; dev_ / best_ metrics come from the last evaluation and eval_results.json.
Writes OUT/report.md, OUT/report.csv and OUT/curves.png (needs matplotlib) and prints the table.

    bertjax-report workdir/study/agnews/*/seed=* --over_seeds --out=workdir/study/report

--over_seeds puts runs that differ only by their seed in one row (workdirs `CELL/seed=N` or
`NAME=VALUE,...,seed=N`): each metric's mean ± standard deviation over the seeds, and their
number; the CSV has METRIC_mean and METRIC_std columns.
"""

import contextlib
from collections.abc import Iterator

from absl import flags

from bertjax import files
from bertjax.analysis.report import csv_text, markdown, plot_curves, table
from bertjax.analysis.runs import load_run
from bertjax.analysis.seeds import seed_csv_table, seed_summary, seed_table
from bertjax.cli import runner

PROGRAM = "bertjax-report"
FLAGS = flags.FLAGS


def define_flags() -> None:
    """This tool's flags (defined when it runs: other tools define some of the same names)."""
    runner.define_once(flags.DEFINE_string, "out", None,
                       "Directory for report.md, report.csv and curves.png (default: only print "
                       "the table).")
    runner.define_once(flags.DEFINE_integer, "last", 5,
                       "Training metrics are averaged over this many last logged steps.",
                       lower_bound=1)
    runner.define_once(flags.DEFINE_bool, "plot", True, "Draw curves.png (needs matplotlib).")
    runner.define_once(flags.DEFINE_bool, "over_seeds", False,
                       "One row per group of runs that differ only by seed (CELL/seed=N): "
                       "mean ± std of each metric.")


def report(run_dirs: list[str], out: str | None, last: int = 5, plot: bool = True,
           over_seeds: bool = False) -> str:
    """Read the runs, write the report files into `out` (if given); the markdown table."""
    if not run_dirs:
        raise ValueError(f"no run directories given: {PROGRAM} WORKDIR... [--out=DIR]")
    if out:
        _check_out(files.as_path(out))
    runs = [load_run(path) for path in run_dirs]
    if over_seeds:
        summary = seed_summary(runs, last=last)
        header, rows = seed_table(summary)
        csv_header, csv_rows = seed_csv_table(summary)
    else:
        header, rows = table(runs, last)
        csv_header, csv_rows = header, rows
    text = markdown(header, rows)
    if out:
        with _made_or_nothing(files.as_path(out)) as directory:  # local or gs://
            files.write_text(directory / "report.md", text)
            files.write_text(directory / "report.csv", csv_text(csv_header, csv_rows))
            if plot:
                try:
                    plot_curves(runs, directory / "curves.png")
                except ImportError as err:  # the table stands without the picture
                    print(f"{PROGRAM}: no curves.png: {err}")
    return text


def _check_out(directory: files.Path) -> None:
    """One line when --out, or the nearest of its parents that exists, is not a directory."""
    for folder in (directory, *directory.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "is" if folder == directory else f"lies under {folder}, which is"
                raise ValueError(f"--out={directory} {where} a file: pass a directory to write "
                                 "report.md, report.csv and curves.png into")
            return


@contextlib.contextmanager
def _made_or_nothing(directory: files.Path) -> Iterator[files.Path]:
    """`directory`, created with its missing parents; if the block fails (a full disk), the
    folders this call created are removed again, so a failed report leaves no empty --out.
    A folder that existed keeps whatever it held."""
    first_made = None
    for folder in (directory, *directory.parents):
        if folder.exists():
            break
        first_made = folder
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield directory
    except BaseException:
        if first_made is not None:
            first_made.rmtree(missing_ok=True)
        raise


def main(run_dirs: list[str]) -> None:
    print(report(run_dirs, FLAGS.out, FLAGS.last, FLAGS.plot, FLAGS.over_seeds), end="")
    if FLAGS.out:
        print(f"written: {FLAGS.out}/report.md, report.csv"
              + (", curves.png" if FLAGS.plot else ""))


def run() -> None:
    """Console-script entry point."""
    define_flags()
    runner.run(PROGRAM, __doc__, main, [__name__], positional=True, runs_steps=False)


if __name__ == "__main__":
    run()

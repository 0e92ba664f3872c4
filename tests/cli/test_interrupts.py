"""Ctrl-C ends a tool at once even while its main thread is inside a long C call, as it is
while XLA compiles a paper-size model for a TPU topology (bertjax-compile used to go on for
35 to 47 s after Ctrl-C, until the compile ended). A matrix product in BLAS stands in for the
compile: it holds the main thread in C for many seconds and never looks at signals."""

import signal
import subprocess
import sys
import time

from tests.process_env import process_env
from tests.training.test_faults import REPO

BLOCKED_TOOL = """
import sys
sys.argv = ["bertjax-blocked"]  # a tool's own process, as a console script names it
import numpy as np
from bertjax.cli import runner
a = np.ones((8000, 8000), np.float32)
def main():
    print("in C", flush=True)
    a @ a
    a @ a  # about 16 s on a 2-core host
runner.guarded("bertjax-blocked", main)(["bertjax-blocked"])
"""


def test_ctrl_c_ends_a_tool_whose_main_thread_is_in_a_long_c_call():
    tool = subprocess.Popen([sys.executable, "-c", BLOCKED_TOOL], cwd=REPO, env=process_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert tool.stdout.readline().strip() == "in C"
    time.sleep(0.5)
    signalled = time.time()
    tool.send_signal(signal.SIGINT)
    _, err = tool.communicate(timeout=120)
    assert tool.returncode == 130 and err.strip() == "bertjax-blocked: interrupted", err
    assert time.time() - signalled < 8  # the grace of 3 s, not the rest of the C call

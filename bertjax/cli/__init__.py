"""Command-line entry points.

Before anything imports TensorFlow or JAX: quiet TensorFlow's C++ logging, and on a host with
no TPU attached use the CPU backend directly (with libtpu installed for ahead-of-time
compilation, JAX would otherwise probe for a TPU at start-up and log failures).
"""

import glob
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

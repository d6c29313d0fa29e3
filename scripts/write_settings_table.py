"""Write docs/settings.md: every run setting's flag, range, default and help, read from its one declaration.

    .venv/bin/python scripts/write_settings_table.py        (tests/test_settings.py fails when it is stale)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import stackenv  # noqa: E402,F401

from pipeline import families  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.settings import settings_table  # noqa: E402

TARGET = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
HEADER = """# Run settings

Every setting of `run`, `prepare`, `compile`, `tfjob` and `deploy`, generated from its one declaration
(`pipeline/config.py`, the model families' registrations in `pipeline/families/`, the pods' in
`pipeline/kubeflow/platform.py`, compile's own in `pipeline/kubeflow/compile_settings.py`, the TFJob's in
`pipeline/kubeflow/training/tfjob.py` and deploy's in `pipeline/kubeflow/deploy_settings.py`) by
`scripts/write_settings_table.py`; a test fails when this page is stale. The CLI's `--help` shows the
same text. Settings marked "Kubeflow runtime parameter" can be changed when a Kubeflow run is created.

Any of them can live in a YAML file passed with `--config FILE`: each key a flag without its dashes,
each value as it would be typed; flags on the command line override the file
(`pipeline/config_file.py`):

```yaml
# team.yaml: python -m pipeline compile --config team.yaml --epochs 3
model: seq2seq
data: gs://team-bucket/docs
image: registry.example.com/team/tfx-project@sha256:<64 hex>
pipeline-root: gs://team-bucket/tfx
epochs: 8
vocab-size: 8000
beam-arg: [--direct_num_workers=2]
```

"""


def document() -> str:
    from pipeline.kubeflow.compile_settings import CompileTarget
    from pipeline.kubeflow.deploy_settings import DeploySettings, LoginSettings
    from pipeline.kubeflow.platform import StepSettings
    from pipeline.kubeflow.training.tfjob import TFJobSettings

    sources = [("", PipelineConfig)] + [(f"{family.name}", family.settings_type)
                                        for family in families.FAMILIES.values()] + [
        ("", StepSettings), ("", CompileTarget), ("", TFJobSettings), ("", DeploySettings), ("", LoginSettings)]
    return HEADER + settings_table(sources)


if __name__ == "__main__":
    TARGET.write_text(document())
    print(f"wrote {TARGET}")

"""The data's facts are properties of the Examples artifact (components/data_facts.py): read back by name
locally, and after a KFP launcher handed them from one step to the next."""
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from support.kfp_contract import _from_mlmd_value, _to_mlmd_value
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as tfx_kfp
from tfx.types import standard_artifacts

from components.data_facts import facts_of, publish, with_facts

FACTS = {"kind": "image", "classes": ["cat", "dog"], "class_counts": {"cat": 3, "dog": 4}, "image_shape": [8, 8, 1],
         "split_counts": {"train": 6, "eval": 1}, "num_examples": 7}


def _through_a_kfp_launcher(artifact) -> standard_artifacts.Examples:
    """What the next step's TFX entrypoint builds from ``artifact``: TFX writes its properties as the output's
    metadata (to_runtime_artifact), the launcher records them in MLMD and hands them on as the next task's
    input metadata (backend/src/v2/metadata/converter.go, as tests/support/kfp_contract.py emulates it),
    and TFX's entrypoint reads them back (parse_raw_artifact_dict)."""
    written = json_format.MessageToDict(tfx_kfp.to_runtime_artifact(artifact, {}))["metadata"]
    handed_on = {key: _from_mlmd_value(_to_mlmd_value(key, value)) for key, value in written.items()}
    runtime = pipeline_spec_pb2.RuntimeArtifact(uri=artifact.uri)
    runtime.type.schema_title = "tfx.Examples"
    runtime.metadata.update(handed_on)
    artifacts = pipeline_spec_pb2.ArtifactList(artifacts=[runtime])
    return tfx_kfp.parse_raw_artifact_dict({"examples": artifacts})["examples"][0]


def test_facts_are_read_back_by_name_with_their_types():
    examples = standard_artifacts.Examples()
    assert facts_of(examples) is None  # ImportExampleGen's output: no facts
    publish(examples, {**FACTS, "not_a_fact": 1})
    assert facts_of(examples) == FACTS
    assert facts_of(examples.mlmd_artifact) == FACTS  # as ML Metadata stores it
    assert examples.get_string_custom_property("image_shape") == "[8, 8, 1]"  # what MLMD and the KFP UI show


def test_facts_survive_a_kfp_launcher_between_two_steps():
    examples = standard_artifacts.Examples()
    examples.uri = "s3://mlpipeline/v2/run/ImportExampleGen/examples"
    publish(examples, FACTS)
    assert facts_of(_through_a_kfp_launcher(examples)) == FACTS
    # Transform records them again on its outputs: a second hop changes nothing either.
    graph = standard_artifacts.Examples()
    graph.uri = "s3://mlpipeline/v2/run/Transform/transformed_examples"
    publish(graph, facts_of(_through_a_kfp_launcher(examples)))
    assert facts_of(_through_a_kfp_launcher(graph)) == FACTS


def test_json_properties_would_not_survive_the_launcher():
    """Why the facts are JSON text: TFX's own JSON properties come back wrapped after one KFP hop
    ({"list": [...]}, {"struct": {...}}), which would turn the image shape into a dict."""
    examples = standard_artifacts.Examples()
    examples.set_json_value_custom_property("image_shape", [8, 8, 1])
    received = _through_a_kfp_launcher(examples)
    assert received.get_json_value_custom_property("image_shape") == {"list": [8.0, 8.0, 1.0]}


def test_the_facts_the_graph_knew_are_kept():
    assert with_facts({"a": 1}, FACTS) == {"a": 1, "data_facts": FACTS}
    assert with_facts({"data_facts": {"kind": "text"}}, FACTS) == {"data_facts": {"kind": "text"}}
    assert with_facts({"a": 1}, None) == {"a": 1}

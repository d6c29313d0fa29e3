"""The grammars of strings that land in a Kubernetes manifest or KFP package (issue 30): examples
accepted and refused as the upstream parsers do (distribution/reference's tests, apimachinery's
validation and quantity tests), each refusal one paragraph naming the flag and the value."""
from decimal import Decimal

import pytest

from pipeline.kubeflow.k8s_grammar import (
    check_dns_label,
    check_dns_subdomain,
    check_image,
    check_kfp_pipeline_name,
    check_label_key,
    check_label_value,
    check_request_within_limit,
    parse_quantity,
)
from pipeline.kubeflow.storage import KubeflowConfigError

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("image", [
    "tfx", "tfx:1.0", "library/ubuntu:22.04", "registry.example.com/team/tfx-project:v1",
    "localhost:5000/a/b:Tag_1", "Registry.Example.COM/team/x", "[::1]:5000/x", "a__b/c-d.e--f:latest",
    f"r.example.com/t/x@{DIGEST}", f"r.example.com/t/x:v1@{DIGEST}",
])
def test_image_references_the_registries_accept(image):
    assert check_image(image) == image


@pytest.mark.parametrize("image, phrase", [
    ("", "is empty"), ("  ", "is empty"), ("reg.io/x:1 ", "white space"), ("reg io/x", "white space"),
    ("reg.io/Team/X:1", "upper-case letters in its repository path"), ("reg.io/x:.hidden", "NAME[:TAG][@DIGEST]"),
    ("reg.io/x:" + "a" * 129, "NAME[:TAG][@DIGEST]"), ("reg.io//x", "NAME[:TAG][@DIGEST]"),
    ("reg.io/x-/y", "NAME[:TAG][@DIGEST]"), ("x@sha256:123", "64 hex digits"),
    ("x@sha256:" + "A" * 64, "64 lower-case hex"), ("x@md5:" + "a" * 32, "sha256:"),
    ("a" * 256, "longer than 255"), ("reg.io/x:1:2", "NAME[:TAG][@DIGEST]"),
])
def test_image_references_refused(image, phrase):
    with pytest.raises(KubeflowConfigError) as error:
        check_image(image)
    assert str(error.value).startswith(f"--image {image!r}") and phrase in str(error.value)
    assert "\n" not in str(error.value) and "distribution/reference" in str(error.value)


@pytest.mark.parametrize("text, amount", [
    ("2", "2"), ("500m", "0.5"), ("0.5", "0.5"), (".5", "0.5"), ("5.", "5"), ("+1", "1"), ("4k", "4000"),
    ("1.5Gi", str(3 * 2**29)), ("512Mi", str(512 * 2**20)), ("1e3", "1000"), ("1E", str(10**18)),
    ("2Ei", str(2 * 2**60)), ("0", "0"),
])
def test_quantities_as_apimachinery_reads_them(text, amount):
    assert parse_quantity(text, "--memory-request") == Decimal(amount)


@pytest.mark.parametrize("text, phrase", [
    ("", "not a Kubernetes quantity"), ("4K", "kilo is a lower-case k"), ("2gi", "not a Kubernetes quantity"),
    ("1 Gi", "not a Kubernetes quantity"), ("2GB", "not a Kubernetes quantity"), ("-1", "is negative"),
    ("1Gi ", "not a Kubernetes quantity"), ("abc", "not a Kubernetes quantity"), ("1e", "not a Kubernetes quantity"),
])
def test_quantities_refused(text, phrase):
    with pytest.raises(KubeflowConfigError) as error:
        parse_quantity(text, "--memory-request")
    assert str(error.value).startswith(f"--memory-request {text!r}") and phrase in str(error.value)


def test_a_limit_below_its_request_is_refused():
    check_request_within_limit("1Gi", "1024Mi", "--memory-request", "--memory-limit")  # equal: fine
    with pytest.raises(KubeflowConfigError, match="--memory-limit 1000Mi is below --memory-request 1Gi"):
        check_request_within_limit("1Gi", "1000Mi", "--memory-request", "--memory-limit")


@pytest.mark.parametrize("name, ok", [
    ("kubeflow-user-example-com", True), ("a", True), ("0ns", True), ("a" * 63, True), ("a" * 64, False),
    ("Kubeflow", False), ("team_a", False), ("-a", False), ("a-", False), ("a.b", False), ("", False),
])
def test_namespaces_are_dns_labels(name, ok):
    if ok:
        assert check_dns_label(name, "--namespace", "namespace") == name
    else:
        with pytest.raises(KubeflowConfigError, match="RFC 1123 DNS label"):
            check_dns_label(name, "--namespace", "namespace")


@pytest.mark.parametrize("name, ok", [
    ("db-credentials", True), ("mlpipeline-minio-artifact", True), ("a.b-c.d", True), ("a" * 253, True),
    ("a" * 254, False), ("a..b", False), ("a.-b", False), ("Db", False), ("db_creds", False), (".a", False),
])
def test_secret_names_are_dns_subdomains(name, ok):
    if ok:
        assert check_dns_subdomain(name, "--s3-secret", "secret") == name
    else:
        with pytest.raises(KubeflowConfigError, match="RFC 1123 DNS subdomain"):
            check_dns_subdomain(name, "--s3-secret", "secret")


@pytest.mark.parametrize("key, value, ok", [
    ("cloud.google.com/gke-nodepool", "highmem", True), ("pool", "", True), ("nvidia.com/gpu", "present", True),
    ("Pool_A", "x.y_z-1", True), ("a/b/c", "x", False), ("-pool", "x", False), ("pool", "-x", False),
    ("Cloud.com/pool", "x", False), ("pool", "a" * 64, False), ("a" * 64, "x", False), ("pool", "a b", False),
])
def test_label_keys_and_values(key, value, ok):
    def check():
        check_label_key(key, "--node-selector", f"{key}={value}")
        check_label_value(value, "--node-selector", f"{key}={value}")

    if ok:
        check()
    else:
        with pytest.raises(KubeflowConfigError, match="not a valid Kubernetes label"):
            check()


@pytest.mark.parametrize("name, ok", [
    ("cnn-pipeline", True), ("0a", True), ("a" * 63, True), ("a" * 64, False), ("My_Pipeline", False),
    ("-a", False), ("a.b", False), ("", False),
])
def test_kfp_pipeline_names(name, ok):
    if ok:
        assert check_kfp_pipeline_name(name) == name
    else:
        with pytest.raises(KubeflowConfigError, match="not a valid Kubeflow pipeline name"):
            check_kfp_pipeline_name(name)

"""The grammars of the strings that land in a Kubernetes manifest or a KFP package, checked before
anything is compiled, written or uploaded: the cluster would reject them only when a run starts.

Each check raises :class:`KubeflowConfigError` with one paragraph naming the flag, the value, the rule
and an example that fits. The rules are the upstream ones, cited where they are defined:

- image references: ``github.com/distribution/reference`` v0.6.0, ``regexp.go`` (``referencePat``) and
  ``reference.go`` (``NameTotalLengthMax = 255``); a digest is checked as the OCI digest it must be
  (``sha256:`` and 64 lower-case hex, ``github.com/opencontainers/go-digest``), which the registries require;
- object names: ``k8s.io/apimachinery/pkg/util/validation/validation.go``: ``IsDNS1123Label`` (namespaces,
  at most 63), ``IsDNS1123Subdomain`` (secrets, service accounts, at most 253), ``IsQualifiedName`` (label
  and toleration keys) and ``IsValidLabelValue``;
- resource quantities: ``k8s.io/apimachinery/pkg/api/resource/quantity.go``, the grammar in the comment of
  ``Quantity`` (signed decimal number, then a binary-SI, decimal-SI or ``e``-exponent suffix); requests
  and limits must not be negative and a limit not below its request
  (``k8s.io/kubernetes/pkg/apis/core/validation`` ``ValidateResourceRequirements``);
- KFP pipeline names: ``kfp.dsl.utils.validate_pipeline_name`` (kfp 2.5) and TFX's 63-character cap
  (``tfx/orchestration/pipeline.py`` ``_MAX_PIPELINE_NAME_LENGTH``).
"""
import re
from decimal import Decimal, InvalidOperation

from pipeline.kubeflow.storage import KubeflowConfigError

# distribution/reference v0.6.0 regexp.go, built the same way (the Go names in comments).
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"  # domainNameComponent
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|{_IPV6})"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_REMOTE_NAME}"  # namePat
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")
NAME_TOTAL_LENGTH_MAX = 255
_OCI_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")

# apimachinery validation.go
_DNS1123_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_DNS1123_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME_PART = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # also a label value

# apimachinery quantity.go: <signedNumber><suffix>
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
QUANTITY = re.compile(rf"(?P<number>{_NUMBER})(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?")
_SCALES: dict[str, int | str] = {"": 1, "m": "0.001", "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                                 "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                                 "Ei": 2**60}
_SUFFIX_SCALE = {suffix: Decimal(scale) for suffix, scale in _SCALES.items()}

KFP_PIPELINE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
TFX_PIPELINE_NAME_MAX = 63


def _suggest_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label close to ``text``: lower case, other characters as '-', trimmed."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.strip().lower()).strip("-")[:limit].strip("-")
    return name or "my-name"


def _name_and_rest(text: str) -> tuple[str, str]:
    """``registry/Path:tag@digest`` -> (``registry/Path``, ``:tag@digest``): the part that must be lower case."""
    name, at, digest = text.partition("@")
    head, slash, last = name.rpartition("/")
    last, colon, tag = last.partition(":")
    return head + slash + last, colon + tag + at + digest


def check_image(image: str, flag: str = "--image") -> str:
    """``image`` when it is a Docker/OCI image reference a kubelet can pull (white space anywhere is refused:
    the package would carry it and the kubelet fail to parse it when the first step starts)."""
    text = image
    match = IMAGE_REFERENCE.fullmatch(text)
    why = None
    if not text.strip():
        why = "is empty"
    elif any(c.isspace() for c in text):
        why = "contains white space"
    elif not match:
        name, rest = _name_and_rest(text)
        if name != name.lower() and IMAGE_REFERENCE.fullmatch(name.lower() + rest):
            why = "has upper-case letters in its repository path, which must be lower case"
        else:
            why = ("is not NAME[:TAG][@DIGEST]: NAME is [REGISTRY[:PORT]/]path/components of lower-case letters, "
                   "digits and single '.', '_', '__' or '-' between them; TAG is up to 128 letters, digits, '_', "
                   "'.', '-' (not starting with '.' or '-'); DIGEST is sha256: and 64 hex digits")
    elif len(match.group("name")) > NAME_TOTAL_LENGTH_MAX:
        why = f"has a name longer than {NAME_TOTAL_LENGTH_MAX} characters"
    elif match.group("digest") and not _OCI_SHA256.fullmatch(match.group("digest")):
        why = f"has digest {match.group('digest')!r}; a registry digest is sha256: and 64 lower-case hex digits"
    if why:
        raise KubeflowConfigError(
            f"{flag} {image!r} {why} (the image reference grammar of distribution/reference, which the kubelet "
            "and every registry use). Pass the pipeline image built from kubeflow/Dockerfile as pushed, e.g. "
            "registry.example.com/team/tfx-project:1.0 or registry.example.com/team/tfx-project@sha256:<64 hex>; "
            "`docker inspect --format '{{index .RepoDigests 0}}' IMAGE` prints it after a push.")
    return text


def check_dns_label(value: str, flag: str, what: str = "name") -> str:
    """A namespace or other object name that must be an RFC 1123 DNS label."""
    if not DNS1123_LABEL.fullmatch(value) or len(value) > 63:
        raise KubeflowConfigError(
            f"{flag} {value!r} is not a valid Kubernetes {what}: it must be an RFC 1123 DNS label, at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or digit (apimachinery "
            f"IsDNS1123Label), e.g. {_suggest_name(value)}.")
    return value


def check_dns_subdomain(value: str, flag: str, what: str = "name", text: str | None = None) -> str:
    """A secret or service-account name: an RFC 1123 DNS subdomain (labels joined by '.')."""
    shown = f"{flag} {text!r}: {value!r}" if text is not None and text != value else f"{flag} {value!r}"
    if not value:
        raise KubeflowConfigError(f"{shown} names no {what}: give the name of a Kubernetes {what} in the "
                                  "namespace the pipeline runs in (e.g. `kubectl get secrets -n NAMESPACE`).")
    if not DNS1123_SUBDOMAIN.fullmatch(value) or len(value) > 253:
        raise KubeflowConfigError(
            f"{shown} is not a valid Kubernetes {what}: it must be an RFC 1123 DNS subdomain, at most 253 "
            "lower-case letters, digits, '-' and '.', each '.'-separated part starting and ending with a letter or "
            f"digit (apimachinery IsDNS1123Subdomain), e.g. {_suggest_name(value, 253)}.")
    return value


#: A Secret's data key (apimachinery validation.IsConfigMapKey: ``[-._a-zA-Z0-9]+``, at most 253, not "." or "..").
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def check_secret_key(key: str, flag: str, text: str) -> str:
    """The key of a Kubernetes Secret a step reads (a ``secretKeyRef``'s ``key``)."""
    if not SECRET_KEY.fullmatch(key) or len(key) > 253 or key in (".", ".."):
        raise KubeflowConfigError(
            f"{flag} {text!r}: {key!r} is not a valid key of a Kubernetes secret: at most 253 letters, digits, "
            "'-', '_' and '.', not '.' or '..' (apimachinery IsConfigMapKey), so the pod could never start. Name "
            "a key the secret holds (`kubectl get secret NAME -o jsonpath='{.data}'`), e.g. "
            "DB_PASSWORD=db-credentials:password.")
    return key


def check_label_key(key: str, flag: str, text: str) -> str:
    """A label or toleration key: ``[PREFIX/]NAME``, PREFIX a DNS subdomain, NAME at most 63 (IsQualifiedName)."""
    prefix, slash, name = key.rpartition("/")
    if (not _QUALIFIED_NAME_PART.fullmatch(name) or len(name) > 63
            or (slash and (not DNS1123_SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253))):
        raise KubeflowConfigError(
            f"{flag} {text!r}: {key!r} is not a valid Kubernetes label key: [PREFIX/]NAME with NAME at most 63 "
            "letters, digits, '-', '_' and '.' starting and ending with a letter or digit, and PREFIX a lower-case "
            "DNS subdomain (apimachinery IsQualifiedName), e.g. cloud.google.com/gke-nodepool.")
    return key


def check_label_value(value: str, flag: str, text: str) -> str:
    """A label (or toleration) value: empty, or at most 63 characters of the qualified-name part."""
    if value and (not _QUALIFIED_NAME_PART.fullmatch(value) or len(value) > 63):
        raise KubeflowConfigError(
            f"{flag} {text!r}: {value!r} is not a valid Kubernetes label value: at most 63 letters, digits, '-', "
            "'_' and '.', starting and ending with a letter or digit, or empty (apimachinery IsValidLabelValue), "
            "e.g. highmem.")
    return value


def parse_quantity(value: str, flag: str) -> Decimal:
    """The amount a Kubernetes quantity stands for (cores or bytes), or the paragraph why it is not one."""
    match = QUANTITY.fullmatch(value.strip()) if value.strip() == value else None
    amount = None
    if match:
        suffix = match.group("suffix") or ""
        try:
            number = Decimal(match.group("number"))
            if suffix not in _SUFFIX_SCALE:  # an exponent, e3 (a lone E is exa, Ei exbi)
                amount = number.scaleb(int(suffix[1:]))
            else:
                amount = number * _SUFFIX_SCALE[suffix]
        except (InvalidOperation, ValueError):
            amount = None
    if amount is None:
        raise KubeflowConfigError(
            f"{flag} {value!r} is not a Kubernetes quantity: a number (e.g. 2, 0.5, 1.5e3) with an optional suffix, "
            "binary (Ki, Mi, Gi, Ti, Pi, Ei), decimal (m, k, M, G, T, P, E; kilo is a lower-case k) or an exponent "
            "(e3), as apimachinery's resource.Quantity reads it; e.g. 500m or 2 for CPU, 512Mi or 4Gi for memory.")
    if amount < 0:
        raise KubeflowConfigError(f"{flag} {value!r} is negative; a Kubernetes request or limit is 0 or more, "
                                  "e.g. 500m or 2 for CPU, 512Mi or 4Gi for memory.")
    return amount


def check_request_within_limit(request: str | None, limit: str | None, request_flag: str, limit_flag: str) -> None:
    """The API server refuses a pod whose limit is below its request; say so before compiling."""
    if request and limit and parse_quantity(limit, limit_flag) < parse_quantity(request, request_flag):
        raise KubeflowConfigError(
            f"{limit_flag} {limit} is below {request_flag} {request}; Kubernetes refuses a pod whose limit is less "
            f"than its request (ValidateResourceRequirements). Raise {limit_flag} to at least {request}, or lower "
            f"{request_flag}.")


def check_kfp_pipeline_name(name: str, flag: str = "--pipeline-name") -> str:
    """A pipeline name a KFP backend and TFX's compiler both accept."""
    if not KFP_PIPELINE_NAME.fullmatch(name) or len(name) > TFX_PIPELINE_NAME_MAX:
        raise KubeflowConfigError(
            f"{flag} {name!r} is not a valid Kubeflow pipeline name: at most {TFX_PIPELINE_NAME_MAX} lower-case "
            "letters, digits and '-', starting with a letter or digit (KFP's validate_pipeline_name, TFX's length "
            f"cap), e.g. {_suggest_name(name, TFX_PIPELINE_NAME_MAX)}.")
    return name

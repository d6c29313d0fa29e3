"""An object-store URI's bucket, checked against the store's own naming rules.

Why: ``minio:///tfx`` (three slashes: no bucket) or ``gs://My_Bucket/x`` compile into a package whose
every step fails in its pod, and models would be pushed to ``s3:///tfx/serving/...``. The rules are
the stores' published ones, so a name refused here is one the store refuses too:

- S3 (and MinIO, which follows them; KFP's bundled store is MinIO or SeaweedFS's S3 gateway):
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html: 3-63 characters,
  lowercase letters, digits, '.' and '-', beginning and ending with a letter or digit, no '..', not
  an IPv4 address, not starting with ``xn--``/``sthree-`` nor ending with ``-s3alias``/``--ol-s3``.
- GCS: https://cloud.google.com/storage/docs/buckets#naming: lowercase letters, digits, '-', '_'
  and '.', beginning and ending with a letter or digit, 3-63 characters (up to 222 with dots, each
  dot-separated part at most 63), not an IPv4 address, not starting with ``goog`` nor holding
  ``google`` or a close misspelling.
"""
from __future__ import annotations

import re

_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_S3_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_GCS_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
#: Schemes whose URIs name a bucket first; s3 rules for the S3 family.
S3_SCHEMES = ("s3", "minio")


def bucket_of(uri: str) -> str:
    """``bucket`` of ``scheme://bucket/path`` ("" when the URI names none)."""
    return uri.split("://", 1)[1].split("/", 1)[0] if "://" in uri else ""


def bucket_problem(uri: str) -> str:
    """What is wrong with ``uri``'s bucket for its store (``s3://ab/x: the bucket 'ab' has ...``), or "" (also
    for a scheme without buckets)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme not in (*S3_SCHEMES, "gs"):
        return ""
    bucket = bucket_of(uri)
    if not bucket:
        return f"{uri} names no bucket (the part right after {scheme}:// is empty)"
    rules = _s3_problem(bucket) if scheme in S3_SCHEMES else _gcs_problem(bucket)
    return f"{uri}: the bucket '{bucket}' {rules}" if rules else ""


def _s3_problem(bucket: str) -> str:
    if not 3 <= len(bucket) <= 63:
        return f"has {len(bucket)} characters, and S3 bucket names have 3 to 63"
    if not _S3_NAME.fullmatch(bucket):
        return ("is not a valid S3 bucket name: lowercase letters, digits, '.' and '-' only, beginning and "
                "ending with a letter or digit")
    if ".." in bucket or _IPV4.fullmatch(bucket):
        return "is not a valid S3 bucket name: no '..' and not an IP address"
    if bucket.startswith(("xn--", "sthree-")) or bucket.endswith(("-s3alias", "--ol-s3")):
        return "uses a prefix or suffix S3 reserves (xn--, sthree-, -s3alias, --ol-s3)"
    return ""


def _gcs_problem(bucket: str) -> str:
    limit = 222 if "." in bucket else 63
    if not 3 <= len(bucket) <= limit or any(len(part) > 63 for part in bucket.split(".")):
        return ("has the wrong length for Cloud Storage: 3 to 63 characters (up to 222 with dots, each "
                "dot-separated part at most 63)")
    if not _GCS_NAME.fullmatch(bucket):
        return ("is not a valid Cloud Storage bucket name: lowercase letters, digits, '-', '_' and '.' only, "
                "beginning and ending with a letter or digit")
    if _IPV4.fullmatch(bucket) or bucket.startswith("goog") or "google" in bucket or "g00gle" in bucket:
        return "is not allowed by Cloud Storage (an IP address, a 'goog' prefix or 'google' in the name)"
    return ""

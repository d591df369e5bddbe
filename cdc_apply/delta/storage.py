"""Object storage for delta-rs: which paths it opens, the storage options it is given, and secrets kept out of text.

delta-rs (``deltalake``, over the ``object_store`` crate) reads the standard environment itself: for
``s3://`` the ``AWS_*`` variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, web identity) and then AWS's credential chain; for
``abfss://``/``az://`` the ``AZURE_STORAGE_*``/``AZURE_CLIENT_*`` variables; for ``gs://``
``GOOGLE_SERVICE_ACCOUNT``/``GOOGLE_APPLICATION_CREDENTIALS``. :func:`storage_options` therefore passes only
what is not secret and what delta-rs would not derive on its own (an ``http://`` endpoint allowed, a region
from ``AWS_DEFAULT_REGION``): no credential is ever held in a dict of ours, so none can reach a log line,
a bronze row, an error or a commit. :func:`redact` masks the secret variables' values in any text shown.

Which engine reads or writes a path on object storage (:func:`rs_reachable`): delta-rs when the
environment configures it for that store, Spark otherwise (credentials that live only in Spark's
configuration, as ``spark.hadoop.fs.s3a.*``). ``CDC_APPLY_OBJECT_STORE`` overrides the choice:
``delta-rs`` (an instance role or another part of the credential chain the variables do not show) or
``spark``.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from cdc_apply.errors import ConfigError

ENGINE_VARIABLE = "CDC_APPLY_OBJECT_STORE"
# Schemes delta-rs opens here, and the one it is given (Hadoop's s3a is S3 to delta-rs).
SCHEMES = {"s3": "s3", "s3a": "s3", "abfss": "abfss", "abfs": "abfs", "az": "az", "adl": "adl", "gs": "gs"}
# Variables whose presence says the environment configures delta-rs for a store (credentials or a profile).
CONFIGURING = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
           "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
    "azure": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_TOKEN", "AZURE_CLIENT_ID",
              "AZURE_FEDERATED_TOKEN_FILE", "AZURE_USE_AZURE_CLI", "AZURE_STORAGE_USE_EMULATOR"),
    "gs": ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
           "GOOGLE_APPLICATION_CREDENTIALS"),
}
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "AZURE_STORAGE_ACCOUNT_KEY",
                    "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_TOKEN", "AZURE_CLIENT_SECRET", "GOOGLE_SERVICE_ACCOUNT_KEY")
# Settings that make delta-rs's commits non-exclusive on S3: refused by name (see check_exclusive_settings).
CONDITIONAL_PUT_VARIABLES = ("AWS_CONDITIONAL_PUT", "AWS_S3_CONDITIONAL_PUT")


def store_kind(uri: str) -> str:
    """``s3``, ``azure`` or ``gs`` for a URI :func:`object_uri` gave."""
    scheme = uri.split("://", 1)[0]
    return "s3" if scheme == "s3" else "gs" if scheme == "gs" else "azure"


def object_uri(path: str) -> str | None:
    """The URI delta-rs opens for a path on object storage (``s3a://b/p`` → ``s3://b/p``), None for a path
    of another kind (local, ``dbfs:``, ``hdfs://``). A path carrying credentials is refused: they belong in
    the environment."""
    if "://" not in path:
        return None
    scheme, rest = path.split("://", 1)
    target = SCHEMES.get(scheme.lower())
    if target is None:
        return None
    if "@" in urlsplit(path).netloc and (":" in urlsplit(path).netloc.split("@", 1)[0]):
        raise ConfigError("a path on object storage must not carry credentials: give them by the environment "
                          "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_ACCOUNT_KEY, ...)",
                          path=f"{scheme}://***@{urlsplit(path).netloc.split('@', 1)[1]}")
    return f"{target}://{rest}"


def rs_reachable(uri: str) -> bool:
    """Whether delta-rs is to open ``uri`` (an object store URI): ``CDC_APPLY_OBJECT_STORE`` says so, or the
    environment holds credentials or a profile for its store."""
    chosen = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
    if chosen in ("delta-rs", "deltars", "rs"):
        return True
    if chosen == "spark":
        return False
    if chosen:
        raise ConfigError(f"{ENGINE_VARIABLE} must be 'delta-rs' or 'spark', not {chosen!r}", key=ENGINE_VARIABLE)
    return any(os.environ.get(name) for name in CONFIGURING[store_kind(uri)])


def storage_options(uri: str) -> dict[str, str]:
    """delta-rs's storage options for ``uri`` beyond what it reads from the environment itself; never a
    credential (see the module)."""
    if store_kind(uri) != "s3":
        return {}
    options: dict[str, str] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://") and "AWS_ALLOW_HTTP" not in os.environ:
            options["AWS_ALLOW_HTTP"] = "true"
    if not os.environ.get("AWS_REGION") and os.environ.get("AWS_DEFAULT_REGION"):
        options["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
    return options


def check_exclusive_settings(uri: str) -> None:
    """Refuse settings under which a commit at version N+1 could overwrite another writer's: on S3 delta-rs
    writes a commit with a conditional put (``If-None-Match``), and turning that off leaves nothing that
    makes it exclusive (deltalake 1.x has no DynamoDB locking provider any more)."""
    if store_kind(uri) != "s3":
        return
    for name in CONDITIONAL_PUT_VARIABLES:
        value = os.environ.get(name, "").strip().lower()
        if value in ("disabled", "false", "none", "off"):
            raise ConfigError(f"{name}={value!r} turns off the conditional put that makes each Delta commit on S3 "
                              f"exclusive: unset it (or set {name}=etag) so that two writers cannot both commit "
                              "one version", key=name, table=uri)


def redact(text: str) -> str:
    """``text`` with the values of the secret environment variables replaced by ``***``."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text

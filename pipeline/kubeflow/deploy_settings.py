"""``deploy``'s flags, declared once (pipeline/settings.py) like the run settings: what to upload and run, and how
to log in.

Declared here, apart from deploy.py and login.py, because the parser of every command is built at start-up and
those modules import kfp and its API client: this one imports neither, so ``--help`` stays instant. The commands
read them as typed values (``settings.from_args``), with their ranges checked before any connection is opened.
"""
from __future__ import annotations

import dataclasses

from pipeline.settings import setting

_DEPLOY = frozenset({"deploy"})
_LOGIN = "login (multi-user Kubeflow)"


@dataclasses.dataclass(frozen=True)
class LoginSettings:
    """How ``deploy`` logs in to a Kubeflow behind Dex, IAP or a token check (pipeline/kubeflow/login.py): one of
    the first five, plus the TLS check."""

    token_file: str | None = setting(
        None, flag="--token-file", metavar="PATH", commands=_DEPLOY, group=_LOGIN,
        help="a file holding a bearer token, e.g. `kubectl -n NS create token default-editor "
        "--audience=pipelines.kubeflow.org`", default_text=lambda: "the file $KF_PIPELINES_SA_TOKEN_PATH names, if set")
    token_env: str | None = setting(None, flag="--token-env", metavar="NAME", commands=_DEPLOY, group=_LOGIN,
                                    help="an environment variable holding the bearer token")
    dex_user: str | None = setting(
        None, flag="--dex-user", metavar="EMAIL", commands=_DEPLOY, group=_LOGIN,
        help="log in through Dex as this user (the password from --dex-password-env, default $KFP_DEX_PASSWORD, or "
        "--dex-password-file)")
    dex_password_env: str | None = setting(
        None, flag="--dex-password-env", metavar="NAME", commands=_DEPLOY, group=_LOGIN,
        help="environment variable holding the Dex password", default_text=lambda: "KFP_DEX_PASSWORD")
    dex_password_file: str | None = setting(None, flag="--dex-password-file", metavar="PATH", commands=_DEPLOY,
                                            group=_LOGIN, help="a file holding the Dex password")
    session_cookie_file: str | None = setting(
        None, flag="--session-cookie-file", metavar="PATH", commands=_DEPLOY, group=_LOGIN,
        help="a file holding a logged-in browser's session cookie, NAME=VALUE (authservice_session=..., "
        "oauth2_proxy_kubeflow=...)")
    iap_client_id: str | None = setting(
        None, flag="--iap-client-id", metavar="ID", commands=_DEPLOY, group=_LOGIN,
        help="IAP on GKE: the OAuth client id of the IAP in front of Kubeflow; the identity token comes from "
        "Google's default credentials")
    ca_bundle: str | None = setting(None, flag="--ca-bundle", metavar="PATH", commands=_DEPLOY, group=_LOGIN,
                                    help="PEM file of the CA that signed the endpoint's TLS certificate (a private CA)")
    verify_tls: bool = setting(True, flag="--no-verify-tls", negate=True, commands=_DEPLOY, group=_LOGIN,
                               help="do not check the endpoint's TLS certificate (trusted networks only)")


@dataclasses.dataclass(frozen=True)
class DeploySettings:
    """What ``deploy`` uploads, runs, schedules or lists (pipeline/kubeflow/deploy.py, schedule.py)."""

    host: str = setting(flag="--host", required=True, commands=_DEPLOY,
                        help="KFP UI/API URL, e.g. http://localhost:8080 after `kubectl port-forward -n kubeflow "
                        "svc/ml-pipeline-ui 8080:80`")
    package: str | None = setting(None, flag="--package", commands=_DEPLOY,
                                  help="compiled pipeline YAML (needed unless --list-schedules or --delete-schedule)")
    pipeline_name: str | None = setting(None, flag="--pipeline-name", commands=_DEPLOY,
                                        help="pipeline name", default_text=lambda: "the package's pipelineInfo.name")
    experiment: str = setting("Default", flag="--experiment", commands=_DEPLOY,
                              help="experiment for --run, created if missing")
    run: bool = setting(False, flag="--run", commands=_DEPLOY, help="start a run of the uploaded version")
    namespace: str | None = setting(None, flag="--namespace", commands=_DEPLOY,
                                    help="Kubeflow profile namespace (needed with --run on multi-user Kubeflow)")
    run_name: str | None = setting(None, flag="--run-name", commands=_DEPLOY, help="the run's name",
                                   default_text=lambda: "'<pipeline name> <UTC time>'")
    pipeline_root: str | None = setting(
        None, flag="--pipeline-root", commands=_DEPLOY, help="artifact root of the run",
        default_text=lambda: "the package's defaultPipelineRoot, set by `compile --pipeline-root`")
    cache: str | None = setting(None, flag="--cache", choices=("on", "off"), commands=_DEPLOY,
                                help="override every step's KFP caching in the uploaded version",
                                default_text=lambda: "as compiled")
    service_account: str | None = setting(None, flag="--service-account", commands=_DEPLOY,
                                          help="Kubernetes service account of the run's pods")
    param: list[str] = setting(
        flag="--param", default_factory=list, repeatable=True, metavar="NAME=VALUE", commands=_DEPLOY,
        help="a runtime parameter of the run (and schedule), e.g. epochs=3 or data=gs://bucket/new-data; the "
        "package lists them (repeatable)")
    wait: bool = setting(False, flag="--wait", commands=_DEPLOY,
                         help="with --run: follow the run, print each step's state, exit non-zero unless it succeeds")
    api_timeout: float = setting(300.0, flag="--api-timeout", low=1, high=3600, metavar="SECONDS", commands=_DEPLOY,
                                 help="seconds each call to the KFP API may take in all, its answer read whole (a "
                                 "server that answers slowly or never ends is cut off and named)")
    wait_timeout: float = setting(3600.0, flag="--wait-timeout", low=1, high=30 * 24 * 3600, commands=_DEPLOY,
                                  help="seconds --wait follows the run at most")
    schedule: str | None = setting(
        None, flag="--schedule", metavar="CRON", commands=_DEPLOY,
        help="also create a recurring run of the uploaded version (continuous training), in --experiment: six cron "
        "fields, seconds first, e.g. '0 0 2 * * *' (02:00 daily), or @daily")
    list_schedules: bool = setting(False, flag="--list-schedules", commands=_DEPLOY,
                                   help="list the recurring runs and exit")
    delete_schedule: str | None = setting(None, flag="--delete-schedule", metavar="ID", commands=_DEPLOY,
                                          help="delete a recurring run and exit")
    skip_cluster_checks: bool = setting(
        False, flag="--skip-cluster-checks", commands=_DEPLOY,
        help="do not read the run namespace's secrets, kfp-launcher ConfigMap and training-job resources through "
        "this machine's kubeconfig before a run or schedule (e.g. when its current context is another cluster)")

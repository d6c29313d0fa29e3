"""Credentials for a Kubeflow Pipelines API behind the usual front doors, from the command line.

What each install expects (kfp 2.5's ``kfp.Client`` accepts the results as ``existing_token`` /
``cookies``, kfp/client/client.py ``_load_config``; the API server reads the identity that the
front door puts into the ``kubeflow-userid`` header, or a bearer token through a Kubernetes
TokenReview, backend src/apiserver/auth):

- **bearer token** (``--token-file``, ``--token-env``, or kfp's ``KF_PIPELINES_SA_TOKEN_PATH``):
  a ServiceAccount token with audience ``pipelines.kubeflow.org``, or any token the front door
  accepts (``gcloud auth print-identity-token``);
- **Dex** (``--dex-user`` with the password in ``--dex-password-env``/``--dex-password-file``):
  the browser's login done over HTTP. The front door (oidc-authservice up to Kubeflow 1.7,
  oauth2-proxy from 1.8) redirects an unauthenticated request to Dex; Dex (one connector: straight
  to ``/dex/auth/local``) shows its password form, whose POST (``login``, ``password``) redirects
  through ``/dex/approval`` back to the front door's callback, which sets the session cookie
  (``authservice_session`` or ``oauth2_proxy_kubeflow``). Every cookie the flow set is sent on;
  a form shown again means the credentials were wrong;
- **a session cookie** (``--session-cookie-file``: ``NAME=VALUE`` as a browser shows it, or a bare
  value taken as ``authservice_session``);
- **IAP on GKE** (``--iap-client-id``): an OpenID Connect identity token whose audience is the
  IAP OAuth client id, from Google's default credentials (google-auth ``fetch_id_token``: a
  service-account key in ``GOOGLE_APPLICATION_CREDENTIALS`` or the metadata server), sent as the
  bearer token IAP checks.

``--ca-bundle`` (a private CA's certificate) and ``--no-verify-tls`` apply to every request, the
login's included. Every request is bounded by ``timeout``; a failure is one paragraph.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from stackenv import user_files

from pipeline.kubeflow.connection import TOKEN_PATH_ENV, DeployError, resolve_token
from pipeline.kubeflow.deploy_settings import LoginSettings
from pipeline.kubeflow.http_limits import deadline

DEFAULT_COOKIE = "authservice_session"
_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"', re.IGNORECASE)


@dataclasses.dataclass
class Credentials:
    """What every request to the API carries, and how TLS is checked (``verify``: True, False or a CA file)."""

    token: str | None = None
    cookies: str | None = None
    verify: bool | str = True
    how: str = "no credentials"

    @property
    def ca_bundle(self) -> str | None:
        return self.verify if isinstance(self.verify, str) else None


def tls_setting(ca_bundle: str | None, verify_tls: bool) -> bool | str:
    """``requests``' ``verify``: the CA file, False with --no-verify-tls, else the system's CAs."""
    if ca_bundle:
        if not verify_tls:
            raise DeployError("--ca-bundle and --no-verify-tls contradict each other: pass the CA to check the "
                              "server's certificate against, or skip the check, not both.")
        what = ("the PEM file of the CA that signed the Kubeflow endpoint's certificate (e.g. `kubectl -n "
                "istio-system get secret kubeflow-ingressgateway-certs -o jsonpath='{.data.ca\\.crt}' | base64 -d > "
                "ca.crt`)")
        try:  # the same checks as every file a flag names; requests reads the file itself later
            os.close(user_files.open_user_file(ca_bundle, flag="--ca-bundle", what=what,
                                               max_bytes=user_files.CA_BUNDLE_MAX_BYTES))
        except user_files.UserFileError as error:
            raise DeployError(error.paragraph) from None
        return ca_bundle
    return verify_tls


def _read_secret_file(path: str, flag: str, what: str) -> str:
    try:
        value = user_files.read_user_file(path, flag=flag, what=what, max_bytes=user_files.SECRET_MAX_BYTES).strip()
    except user_files.UserFileError as error:
        raise DeployError(error.paragraph) from None
    if not value:
        raise DeployError(f"{flag} {path} is empty: write {what} into it.")
    return value


def _from_env(name: str, flag: str, what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise DeployError(f"{flag} names the environment variable {name}, which is not set or empty: export it "
                          f"with {what}.")
    return value


def dex_login(host: str, user: str, password: str, verify: bool | str, timeout: float) -> str:
    """Log in through Dex as a browser would; returns the ``Cookie`` header of the session."""
    import requests

    session = requests.Session()
    session.verify = verify
    where = f"logging in to {host} through Dex as {user!r}"
    with deadline(LOGIN_ROUNDS * timeout, lambda: DeployError(
            f"The Dex login at {host} did not finish within {LOGIN_ROUNDS * timeout:g} s while {where}: a page "
            "answered slowly or never ended. Check the login in a browser, or pass --session-cookie-file.")):
        return _dex_login(session, host, user, password, timeout, where)


#: The requests a Dex login makes at most (start, connector, form, approval): its overall deadline in timeouts.
LOGIN_ROUNDS = 4


def _dex_login(session: Any, host: str, user: str, password: str, timeout: float, where: str) -> str:
    import requests

    try:
        page = session.get(host + "/", timeout=timeout, allow_redirects=True)
        if "/dex/" not in page.url:
            raise DeployError(
                f"{host} did not send the login to Dex (the first request ended at {page.url}, HTTP "
                f"{page.status_code}), so --dex-user cannot log in there: use the credentials that front door "
                "takes (--token-file, --session-cookie-file, --iap-client-id), or none on a standalone KFP.")
        if urlsplit(page.url).path.rstrip("/").endswith("/dex/auth"):  # several connectors: the password one
            page = session.get(urljoin(page.url, "/dex/auth/local" + ("?" + urlsplit(page.url).query)),
                               timeout=timeout, allow_redirects=True)
        action = _FORM_ACTION.search(page.text or "")
        if not action:
            raise DeployError(f"Dex at {page.url} showed no login form (HTTP {page.status_code}) while {where}; "
                              "log in once in a browser to check the account, or pass --session-cookie-file.")
        login_url = urljoin(page.url, action.group(1).replace("&amp;", "&"))
        answer = session.post(login_url, data={"login": user, "password": password}, timeout=timeout,
                              allow_redirects=True)
        if "/dex/approval" in answer.url:  # an approval screen that is not skipped
            approval = _FORM_ACTION.search(answer.text or "")
            target = urljoin(answer.url, approval.group(1).replace("&amp;", "&")) if approval else answer.url
            answer = session.post(target, data={"approval": "approve", "req": _query(answer.url, "req")},
                                  timeout=timeout, allow_redirects=True)
    except requests.exceptions.SSLError as error:
        raise DeployError(f"TLS failed while {where} ({_short(error)}): pass the CA of the endpoint's certificate "
                          "with --ca-bundle PATH (or, on a trusted network only, --no-verify-tls).") from None
    except requests.exceptions.RequestException as error:
        raise DeployError(f"Cannot reach {host} while {where} ({type(error).__name__}: {_short(error)}).") from None
    if "/dex/auth" in answer.url and _FORM_ACTION.search(answer.text or ""):
        raise DeployError(f"Dex at {host} refused the login of {user!r}: the user name or password is wrong (Dex "
                          "showed its login form again). Check them by logging in once in a browser; the password "
                          "comes from --dex-password-env/--dex-password-file.")
    cookies = "; ".join(f"{c.name}={c.value}" for c in session.cookies if not c.name.startswith("_"))
    if not cookies:
        raise DeployError(f"The Dex login at {host} ended at {answer.url} (HTTP {answer.status_code}) without a "
                          "session cookie; log in once in a browser and pass its cookie with --session-cookie-file.")
    return cookies


def _query(url: str, key: str) -> str:
    from urllib.parse import parse_qs

    return (parse_qs(urlsplit(url).query).get(key) or [""])[0]


def _short(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def iap_token(client_id: str, timeout: float) -> str:
    """An identity token for IAP's OAuth client ``client_id`` from Google's default credentials."""
    import google.auth.exceptions
    import google.auth.transport.requests
    import google.oauth2.id_token
    import requests

    session = requests.Session()
    try:
        request = google.auth.transport.requests.Request(session)
        with deadline(LOGIN_ROUNDS * timeout, lambda: DeployError(
                f"Getting an identity token for the IAP client {client_id} did not finish within "
                f"{LOGIN_ROUNDS * timeout:g} s (the metadata server or Google's token endpoint is slow or "
                "unreachable); pass a token from `gcloud auth print-identity-token` with --token-file.")):
            return google.oauth2.id_token.fetch_id_token(request, client_id)
    except (google.auth.exceptions.GoogleAuthError, requests.exceptions.RequestException, ValueError) as error:
        raise DeployError(
            f"Cannot get an identity token for the IAP client {client_id} ({type(error).__name__}: {_short(error)}). "
            "Point GOOGLE_APPLICATION_CREDENTIALS at a service-account key that IAP lets in (role IAP-secured "
            "Web App User), or run where the metadata server gives one; or pass a token from `gcloud auth "
            f"print-identity-token --audiences={client_id}` with --token-file.") from None


def credentials(host: str, options: LoginSettings | None = None, *, existing_token: str | None = None,
                cookies: str | None = None, timeout: float = 10.0) -> Credentials:
    """The credentials ``options`` (deploy's login flags) ask for (at most one kind), else ``existing_token`` or
    kfp's token file, else none."""
    options = options or LoginSettings()
    token_file, token_env, dex_user = options.token_file, options.token_env, options.dex_user
    session_cookie_file, iap_client_id = options.session_cookie_file, options.iap_client_id
    dex_password_env, dex_password_file = options.dex_password_env, options.dex_password_file
    verify = tls_setting(options.ca_bundle, options.verify_tls)
    kinds = [name for name, given in (("--token-file", token_file), ("--token-env", token_env),
                                      ("--session-cookie-file", session_cookie_file), ("--dex-user", dex_user),
                                      ("--iap-client-id", iap_client_id)) if given]
    if len(kinds) > 1:
        raise DeployError(f"{' and '.join(kinds)} are different ways to log in: pass one of them.")
    if dex_password_env and dex_password_file:
        raise DeployError("--dex-password-env and --dex-password-file both give the Dex password: pass one.")
    if (dex_password_env or dex_password_file) and not dex_user:
        raise DeployError("A Dex password was given without --dex-user: pass the user (e.g. user@example.com).")
    if token_file:
        return Credentials(token=_read_secret_file(token_file, "--token-file", "a bearer token"), cookies=cookies,
                           verify=verify, how=f"the bearer token in {token_file}")
    if token_env:
        return Credentials(token=_from_env(token_env, "--token-env", "a bearer token"), cookies=cookies,
                           verify=verify, how=f"the bearer token in ${token_env}")
    if session_cookie_file:
        value = _read_secret_file(session_cookie_file, "--session-cookie-file", "the session cookie (NAME=VALUE)")
        cookie = value if "=" in value else f"{DEFAULT_COOKIE}={value}"
        return Credentials(cookies=cookie, verify=verify, how=f"the session cookie in {session_cookie_file}")
    if dex_user:
        if dex_password_file:
            password = _read_secret_file(dex_password_file, "--dex-password-file", "the Dex password")
        else:
            password = _from_env(dex_password_env or "KFP_DEX_PASSWORD", "--dex-password-env", "the Dex password")
        return Credentials(cookies=dex_login(host, dex_user, password, verify, timeout), verify=verify,
                           how=f"a Dex login as {dex_user}")
    if iap_client_id:
        return Credentials(token=iap_token(iap_client_id, timeout), verify=verify,
                           how=f"an identity token for the IAP client {iap_client_id}")
    token = resolve_token(existing_token)
    how = ("the given token" if existing_token else f"the token in ${TOKEN_PATH_ENV}" if token else
           "the given cookies" if cookies else "no credentials")
    return Credentials(token=token, cookies=cookies, verify=verify, how=how)

"""Continuous training on Kubeflow: recurring runs (``deploy --schedule CRON``), listed and deleted.

A recurring run is KFP's scheduled job: the API server stores it and its ScheduledWorkflow
controller starts a run of the pinned pipeline version at every tick of the cron schedule.
kfp 2.5.0's ``Client.create_recurring_run`` sends ``POST /apis/v2beta1/recurringruns``
(kfp/client/client.py), and the API server checks the cron with robfig/cron v1's ``Parse``
(backend src/apiserver/server/api_converter.go, toModelJob: "Schedule cron is not a supported
format"). That parser reads **six** fields, seconds first, the day of week optional, so
the usual five-field ``0 2 * * *`` is accepted there but means "every hour at minute 2",
not "02:00 daily". :func:`check_cron` therefore takes six fields (or a ``@daily``-style
descriptor) and explains a five-field one, before anything is uploaded.
"""
import re
from typing import Any

from stackenv.errors import ConfigError

from pipeline.kubeflow.connection import api_errors

#: (name, lowest, highest, names) of robfig/cron's six fields, seconds first (parser.go).
FIELDS = (("second", 0, 59, None), ("minute", 0, 59, None), ("hour", 0, 23, None),
          ("day of month", 1, 31, None),
          ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
          ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_EVERY = re.compile(r"^@every (\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
EXAMPLES = "'0 0 2 * * *' (02:00 every day), '0 30 6 * * 1-5' (06:30 Monday to Friday), '@daily'"


def _bad(cron: str, problem: str) -> ConfigError:
    return ConfigError("--schedule", f"{cron!r} is not a schedule Kubeflow Pipelines can run: {problem}. KFP reads "
                       "cron with six space-separated fields, seconds first (second minute hour day-of-month "
                       f"month day-of-week), or a descriptor such as @daily or '@every 6h'; e.g. {EXAMPLES}. "
                       "Times are in the KFP API server's time zone (usually UTC).")


def _value(text: str, low: int, names: tuple[str, ...] | None) -> int:
    if names and text.upper() in names:
        return names.index(text.upper()) + (low if low == 1 else 0)
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _check_field(text: str, name: str, low: int, high: int, names: tuple[str, ...] | None) -> None:
    """One field as robfig/cron's getRange reads it: lists of ``*``/``?``/``a``/``a-b``, each ``/step``."""
    for part in text.split(","):
        span, _, step = part.partition("/")
        if step and (not step.isdigit() or int(step) < 1):
            raise ValueError(f"the {name} step {step!r} must be a whole number >= 1")
        if span in ("*", "?"):
            continue
        start, _, end = span.partition("-")
        try:
            first = _value(start, low, names)
            last = _value(end, low, names) if end else first
        except ValueError as error:
            raise ValueError(f"the {name} field {text!r}: {error}") from None
        if not low <= first <= last <= high:
            raise ValueError(f"the {name} field {text!r} is outside {low}-{high} (or its range is reversed)")


def check_cron(cron: str) -> str:
    """The schedule, stripped, when robfig/cron's default parser accepts it with the meaning a user
    expects; else a :class:`ConfigError` paragraph naming ``--schedule``."""
    text = " ".join((cron or "").split())
    if not text:
        raise _bad(cron, "it is empty")
    if text.startswith("@"):
        if text in DESCRIPTORS or _EVERY.match(text):
            return text
        raise _bad(cron, f"unknown descriptor (known: {', '.join(DESCRIPTORS)}, '@every <duration>')")
    fields = text.split(" ")
    if len(fields) == 5:
        raise _bad(cron, "it has five fields; KFP would read the first as seconds, so "
                         f"{text!r} would run every hour, not once a day. Put the seconds first: "
                         f"'0 {text}'")
    if len(fields) != 6:
        raise _bad(cron, f"it has {len(fields)} fields, not six")
    try:
        for value, (name, low, high, names) in zip(fields, FIELDS):
            _check_field(value, name, low, high, names)
    except ValueError as error:
        raise _bad(cron, str(error)) from None
    return text


def create_schedule(client: Any, host: str, *, experiment_id: str, name: str, pipeline_id: str, version_id: str,
                    cron: str, pipeline_root: str | None, service_account: str | None,
                    enable_caching: bool | None = None, params: dict | None = None) -> str:
    """A recurring run of exactly ``version_id``; returns its id. One run at a time, no backfill:
    a cluster that was down does not start every missed run at once when it comes back."""
    with api_errors(host, f"creating recurring run {name!r} ({cron})"):
        created = client.create_recurring_run(
            experiment_id, name, cron_expression=cron, pipeline_id=pipeline_id, version_id=version_id,
            max_concurrency=1, no_catchup=True, pipeline_root=pipeline_root, enable_caching=enable_caching,
            service_account=service_account, params=params or None)
    return created.recurring_run_id


def describe(recurring_run: Any) -> str:
    """One line per recurring run for ``deploy --list-schedules``."""
    trigger = getattr(recurring_run, "trigger", None)
    cron = getattr(getattr(trigger, "cron_schedule", None), "cron", None)
    interval = getattr(getattr(trigger, "periodic_schedule", None), "interval_second", None)
    when = cron or (f"every {interval} s" if interval else "no trigger")
    reference = getattr(recurring_run, "pipeline_version_reference", None)
    version = getattr(reference, "pipeline_version_id", None) or "-"
    return (f"{recurring_run.recurring_run_id}  {recurring_run.display_name!r}  {when}  "
            f"{getattr(recurring_run, 'status', None) or '-'}  version {version}")


def list_schedules(client: Any, host: str, namespace: str | None = None) -> list[str]:
    """Every recurring run the API lists (in ``namespace`` on multi-user Kubeflow), newest first."""
    lines: list[str] = []
    token = ""
    while True:
        with api_errors(host, "listing recurring runs"):
            page = client.list_recurring_runs(page_token=token, page_size=100, sort_by="created_at desc",
                                              namespace=namespace)
        lines.extend(describe(run) for run in (page.recurring_runs or []))
        token = page.next_page_token or ""
        if not token:
            return lines or ["No recurring runs."]


def delete_schedule(client: Any, host: str, recurring_run_id: str) -> str:
    with api_errors(host, f"deleting recurring run {recurring_run_id}"):
        client.delete_recurring_run(recurring_run_id)
    return f"Deleted recurring run {recurring_run_id}"

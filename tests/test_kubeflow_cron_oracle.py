"""``deploy --schedule`` crons against an independent parser: croniter (PyPI), which reads six fields
seconds first (``second_at_beginning``) as robfig/cron v1, KFP's parser, does. What ``check_cron``
accepts fires when its description says; what it refuses croniter refuses too (or, for five fields,
would run at another time than the user meant)."""
from datetime import datetime, timedelta

from stackenv.errors import ConfigError

import pytest
from croniter import croniter

from pipeline.kubeflow.schedule import check_cron

START = datetime(2026, 11, 27, 12, 0, 0)  # a Friday


def _fires(cron: str, count: int = 4, **kwargs) -> list[datetime]:
    times = croniter(cron, START, **kwargs)
    return [times.get_next(datetime) for _ in range(count)]


@pytest.mark.parametrize("cron, expected", [
    ("0 0 2 * * *", [datetime(2026, 11, 28, 2), datetime(2026, 11, 29, 2), datetime(2026, 11, 30, 2),
                     datetime(2026, 12, 1, 2)]),                                   # 02:00 every day
    ("0 30 6 * * 1-5", [datetime(2026, 11, 30, 6, 30), datetime(2026, 12, 1, 6, 30),
                        datetime(2026, 12, 2, 6, 30), datetime(2026, 12, 3, 6, 30)]),  # 06:30 Monday to Friday
    ("0 0 */6 * * ?", [datetime(2026, 11, 27, 18), datetime(2026, 11, 28, 0), datetime(2026, 11, 28, 6),
                       datetime(2026, 11, 28, 12)]),                               # every six hours
    ("0 0 0 1 JAN,JUL *", [datetime(2027, 1, 1), datetime(2027, 7, 1), datetime(2028, 1, 1),
                           datetime(2028, 7, 1)]),
    ("@daily", [datetime(2026, 11, 28), datetime(2026, 11, 29), datetime(2026, 11, 30), datetime(2026, 12, 1)]),
])
def test_accepted_crons_fire_when_their_examples_say(cron, expected):
    assert check_cron(cron) == cron
    assert _fires(cron, second_at_beginning=True) == expected


@pytest.mark.parametrize("cron", ["0 0 25 * * *", "0 */0 * * * *", "0 0 2 * * MON-XYZ", "60 0 2 * * *",
                                  "0 0 2 0 * *", "0 0 2 * 13 *", "", "@fortnightly", "every day"])
def test_what_check_cron_refuses_croniter_refuses(cron):
    with pytest.raises(ConfigError):
        check_cron(cron)
    assert not croniter.is_valid(cron, second_at_beginning=True)


def test_a_five_field_cron_is_refused_because_kfp_would_run_it_every_hour():
    """'0 2 * * *' means 02:00 daily to a crontab reader, but seconds first (KFP) it is minute 2 of
    every hour: the refusal's reason, confirmed by croniter reading it both ways."""
    with pytest.raises(ConfigError) as caught:
        check_cron("0 2 * * *")
    assert "would run every hour" in str(caught.value) and "'0 0 2 * * *'" in str(caught.value)
    crontab = _fires("0 2 * * *")
    seconds_first = _fires("0 2 * * * *", second_at_beginning=True)  # robfig: day of week optional
    assert {b - a for a, b in zip(crontab, crontab[1:])} == {timedelta(days=1)}
    assert {b - a for a, b in zip(seconds_first, seconds_first[1:])} == {timedelta(hours=1)}
    assert all(t.minute == 2 for t in seconds_first)
    assert _fires("0 0 2 * * *", second_at_beginning=True) == crontab  # the fix the message suggests

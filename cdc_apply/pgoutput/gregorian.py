"""Day numbers of the proleptic Gregorian calendar, PostgreSQL's, in plain integers.

Python's :mod:`datetime` stops at year 1 and 9999; PostgreSQL's dates run from 4713 BC to
5874897 AD. Years are astronomical (1 BC is year 0, 2 BC is year -1). The arithmetic is
Howard Hinnant's ``days_from_civil`` and its inverse.
"""

from __future__ import annotations


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year: 1 BC is year 0)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01: :func:`days_from_civil` backwards."""
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_from_march = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_from_march + 2) // 5 + 1
    month = month_from_march + (3 if month_from_march < 10 else -9)
    return year_of_era + era * 400 + (month <= 2), month, day

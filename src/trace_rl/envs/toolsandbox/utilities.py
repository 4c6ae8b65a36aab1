"""ToolSandbox's stateless tools (time arithmetic, holidays, units, distances) and the five RapidAPI tools.

Time is ToolSandbox's frozen instant in UTC (data package README §1): naive datetimes are UTC. Holidays come from
the `holidays` package (US), fuzzy holiday names from rapidfuzz's partial_ratio (> 90), units from `pint`,
distances from `geopy` (geodesic, km). The RapidAPI tools (`search_lat_lon`, `search_location_around_lat_lon`,
`search_weather_around_lat_lon`, `search_stock`, `convert_currency`) fail as they do without `RAPID_API_KEY`:
ConnectionError when wifi is off, else PermissionError, after their argument checks. Departure: `convert_currency`
does not validate ISO 4217 codes (upstream's `ccy` check runs before the key check; no data case reaches it).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from trace_rl.envs.toolsandbox.tools import (
    ToolContext,
    get_current_location,
    get_location_service_status,
    get_wifi_status,
    validate_latitude,
    validate_longitude,
    validate_timestamp,
)

UTC = dt.UTC
RAPID_API_MESSAGE = (
    "Please provide 'RAPID_API_KEY' in environment variable. "
    "You can find your API key by following https://docs.rapidapi.com/v1.0/docs/keys"
)


def _datetime(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=UTC).replace(tzinfo=None)


def _timestamp(value: dt.datetime) -> float:
    return value.replace(tzinfo=UTC).timestamp()


def get_current_timestamp(ctx: ToolContext) -> float:
    return ctx.now


def timestamp_to_datetime_info(ctx: ToolContext, timestamp: float) -> dict[str, int]:
    validate_timestamp(timestamp, "timestamp")
    d = _datetime(timestamp)
    return {
        "year": d.year,
        "month": d.month,
        "day": d.day,
        "hour": d.hour,
        "minute": d.minute,
        "second": d.second,
        "isoweekday": d.isoweekday(),
    }


def datetime_info_to_timestamp(
    ctx: ToolContext, year: int, month: int, day: int, hour: int, minute: int, second: int
) -> float:
    return _timestamp(dt.datetime(year=year, month=month, day=day, hour=hour, minute=minute, second=second))


def shift_timestamp(
    ctx: ToolContext,
    timestamp: float,
    weeks: int = 0,
    days: int = 0,
    hours: int = 0,
    minutes: int = 0,
    seconds: int = 0,
) -> float:
    validate_timestamp(timestamp, "timestamp")
    delta = dt.timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    return _timestamp(_datetime(timestamp) + delta)


def timestamp_diff(ctx: ToolContext, timestamp_0: float, timestamp_1: float) -> dict[str, int]:
    validate_timestamp(timestamp_0, "timestamp_0")
    validate_timestamp(timestamp_1, "timestamp_1")
    delta = _datetime(timestamp_1) - _datetime(timestamp_0)
    return {"days": delta.days, "seconds": delta.seconds}


def seconds_to_hours_minutes_seconds(ctx: ToolContext, seconds: float) -> dict[str, int]:
    d = _datetime(seconds)
    return {"hour": d.hour, "minute": d.minute, "second": d.second}


def unit_conversion(ctx: ToolContext, amount: float, from_unit: str, to_unit: str) -> float:
    import pint

    try:
        return float(pint.Quantity(amount, from_unit).to(to_unit).magnitude)
    except pint.UndefinedUnitError:
        return float(pint.Quantity(amount, from_unit.lower()).to(to_unit.lower()).magnitude)


def calculate_lat_lon_distance(
    ctx: ToolContext, latitude_0: float, longitude_0: float, latitude_1: float, longitude_1: float
) -> float:
    import geopy.distance

    validate_latitude(latitude_0, "latitude_0")
    validate_latitude(latitude_1, "latitude_1")
    validate_longitude(longitude_0, "longitude_0")
    validate_longitude(longitude_1, "longitude_1")
    return float(geopy.distance.distance((latitude_0, longitude_0), (latitude_1, longitude_1)).kilometers)


def search_holiday(ctx: ToolContext, holiday_name: str, year: int | None = None) -> float | None:
    import holidays
    from rapidfuzz import fuzz, utils

    if not get_wifi_status(ctx):
        raise ConnectionError("Wifi is not enabled")
    if year is None:
        year = _datetime(ctx.now).year
    matches = sorted(
        (
            (fuzz.partial_ratio(holiday_name, name, processor=utils.default_process), date, name)
            for date, name in holidays.country_holidays(country="US", years=year).items()
        ),
        reverse=True,
    )
    if matches and matches[0][0] > 90:
        return _timestamp(dt.datetime.combine(matches[0][1], dt.time.min))
    return None


# -- RapidAPI (no key in this environment) ---------------------------------------------------------------------
def _rapid_api_request(ctx: ToolContext) -> Any:
    if not get_wifi_status(ctx):
        raise ConnectionError("Wifi is not enabled")
    raise PermissionError(RAPID_API_MESSAGE)


def _current_lat_lon(ctx: ToolContext, latitude: float | None, longitude: float | None) -> tuple[float, float]:
    validate_latitude(latitude, "latitude")
    validate_longitude(longitude, "longitude")
    if (latitude is None) ^ (longitude is None):
        raise ValueError("Latitude and Longitude must be either both provided, or both not provided")
    if latitude is None or longitude is None:
        if not get_location_service_status(ctx):
            raise PermissionError("Location service is not enabled.")
        here = get_current_location(ctx)
        return here["latitude"], here["longitude"]
    return latitude, longitude


def search_lat_lon(ctx: ToolContext, latitude: float, longitude: float) -> str | None:
    validate_latitude(latitude, "latitude")
    validate_longitude(longitude, "longitude")
    return _rapid_api_request(ctx)


def search_location_around_lat_lon(
    ctx: ToolContext, location: str, latitude: float | None = None, longitude: float | None = None
) -> list[dict[str, Any]]:
    _current_lat_lon(ctx, latitude, longitude)
    return _rapid_api_request(ctx)


def search_weather_around_lat_lon(
    ctx: ToolContext, days: int = 0, latitude: float | None = None, longitude: float | None = None
) -> dict[str, Any] | None:
    _current_lat_lon(ctx, latitude, longitude)
    if days < 0:
        raise ValueError(f"Days must be positive integer, found {days=}.")
    return _rapid_api_request(ctx)


def search_stock(ctx: ToolContext, query: str) -> dict[str, Any] | None:
    return _rapid_api_request(ctx)


def convert_currency(ctx: ToolContext, amount: float, from_currency_code: str, to_currency_code: str) -> float:
    return _rapid_api_request(ctx)


__all__ = ["RAPID_API_MESSAGE"]

"""τ² `airline`: reservations for a small airline (300 flights × 30 dates, 500 users, 2,000 reservations)."""

from trace_rl.envs.tau2.airline.data_model import FlightDB
from trace_rl.envs.tau2.airline.tools import AirlineTools

__all__ = ["AirlineTools", "FlightDB"]
